package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// A subject cursor serializes the dispatch of latest-policy intents per
// (projection subject, kind family): the downstream must
// never receive an older state after a newer one, even with two
// dispatchers and retries in flight.
//
// The cursor belongs to one scope: its key names the projection by its
// ledger name, "<scope>/<name>", so another scope's revisions of the same
// subject id (a vendor's order O-42 at revision 999) never hold, or
// supersede, this scope's latest intents. Only unscoped sources, which
// share their projections by configuration, share cursors.
//
// The cursor item holds the intent that last took it: its operation id,
// the claim token it took it with, its version and its claim's lease end.
// LockSubject takes it with one conditional UpdateItem:
//
//   - a cursor never taken, or taken by this same intent: taken;
//   - taken by an older version whose holder is done (its lease ended, or
//     its intent is no longer DISPATCHING under the token it took the
//     cursor with): taken over (one consistent read of the holder's intent
//     and a second write, only on this path);
//   - taken by an older version still in flight: *SubjectBusyError, the
//     caller waits until the holder's lease ends;
//   - taken by the same or a newer version: *SubjectBusyError with Newer
//     set: this intent's state has been overtaken and must not be sent.
//
// There is no release: a holder is done when its intent is recorded, and
// the next intent finds that out. The common path costs one write of a
// small item. The window a lock cannot close (a request the downstream
// processes after our client gave up on it) is what the reconciler's drift
// check finds afterwards (ListSyncDue).
//
// Cursor items also sit on the due index under the sync shards (syncPrefix)
// from the moment a dispatch takes them until the reconciler has seen the
// downstream at the projection's version (MarkSynced).

// SubjectCursor is one cursor item.
type SubjectCursor struct {
	Projection  string // the projection the intents came from
	Scope       string // the scope that owns it (ScopeOf(Projection))
	ProjSubject string // its subject
	Family      string // the kind family, e.g. "entitlement"
	// Kind and Subject are the last holder's intent kind and subject (the
	// subject the downstream knows).
	Kind, Subject string
	HolderOp      string
	HolderVersion int64
	HolderUntil   time.Time
	DueAt         time.Time
}

// SubjectBusyError says a cursor is held by another intent.
type SubjectBusyError struct {
	Cursor SubjectCursor
	// Newer: the holder carries the same or a newer version; the caller's
	// intent is overtaken and must end SUPERSEDED without a call.
	Newer bool
}

func (e *SubjectBusyError) Error() string {
	if e.Newer {
		return fmt.Sprintf("%s/%s %s: version %d was dispatched by %s",
			e.Cursor.Projection, e.Cursor.ProjSubject, e.Cursor.Family, e.Cursor.HolderVersion, e.Cursor.HolderOp)
	}
	return fmt.Sprintf("%s/%s %s: version %d is being dispatched by %s until %s",
		e.Cursor.Projection, e.Cursor.ProjSubject, e.Cursor.Family, e.Cursor.HolderVersion, e.Cursor.HolderOp, e.Cursor.HolderUntil.Format(time.RFC3339Nano))
}

type cursorItem struct {
	Projection    string `dynamodbav:"projection"`
	ProjSubject   string `dynamodbav:"proj_subject"`
	Family        string `dynamodbav:"family"`
	Kind          string `dynamodbav:"kind"`
	Subject       string `dynamodbav:"subject"`
	HolderOp      string `dynamodbav:"holder_op"`
	HolderToken   string `dynamodbav:"holder_token"`
	HolderVersion int64  `dynamodbav:"holder_version"`
	HolderUntil   int64  `dynamodbav:"holder_until"`
	DueAt         int64  `dynamodbav:"due_at"`
}

func decodeCursor(av map[string]types.AttributeValue) (SubjectCursor, string, error) {
	var it cursorItem
	if err := attributevalue.UnmarshalMap(av, &it); err != nil {
		return SubjectCursor{}, "", fmt.Errorf("decode cursor: %w", err)
	}
	return SubjectCursor{
		Projection: it.Projection, Scope: ScopeOf(it.Projection), ProjSubject: it.ProjSubject, Family: it.Family, Kind: it.Kind, Subject: it.Subject,
		HolderOp: it.HolderOp, HolderVersion: it.HolderVersion, HolderUntil: fromMS(it.HolderUntil), DueAt: fromMS(it.DueAt),
	}, it.HolderToken, nil
}

// LockSubject takes the subject cursor of a claimed latest-policy intent
// for the claim's lease (see the cursor doc above). An intent of another
// policy, or one that names no projection, needs no cursor: nil without a
// request.
func (l *Ledger) LockSubject(ctx context.Context, c IntentClaim) error {
	in := c.Intent
	if in.Policy != PolicyLatest || in.Projection == "" {
		return nil
	}
	fam := Family(in.Kind)
	key := cursorKey(in.Projection, in.ProjectionSubject, fam)
	now := l.now()
	vals := map[string]types.AttributeValue{
		":item": sv("cursor"), ":proj": sv(in.Projection), ":psub": sv(in.ProjectionSubject), ":fam": sv(fam),
		":kind": sv(in.Kind), ":subj": sv(in.Subject), ":op": sv(in.OperationID), ":tok": sv(c.Token),
		":v": nv(in.Version), ":until": nv(ms(c.Expires)),
		":shard": sv(syncPrefix + l.dueShard(in.Projection, in.ProjectionSubject)),
		// Compare the downstream with the projection once this dispatch
		// should be over.
		":due": nv(ms(c.Expires)),
	}
	// Every name through ExpressionAttributeNames: PROJECTION is among
	// DynamoDB's reserved words.
	names := map[string]string{"#item": "item", "#proj": "projection", "#psub": "proj_subject", "#fam": "family", "#kind": "kind", "#subj": "subject"}
	set := "SET #item = :item, #proj = :proj, #psub = :psub, #fam = :fam, #kind = :kind, #subj = :subj, " +
		"holder_op = :op, holder_token = :tok, holder_version = :v, holder_until = :until, due_shard = :shard, due_at = :due"
	cond := "attribute_not_exists(pk) OR holder_op = :op"
	for range 3 {
		_, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                           aws.String(l.opts.Table),
			Key:                                 key,
			UpdateExpression:                    aws.String(set),
			ConditionExpression:                 aws.String(cond),
			ExpressionAttributeNames:            names,
			ExpressionAttributeValues:           vals,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return nil
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return fmt.Errorf("lock subject %s/%s %s: %w", in.Projection, in.ProjectionSubject, fam, translate(err))
		}
		old := ccf.Item
		if len(old) == 0 {
			// The refusal returned no item (see the package doc): the
			// condition only fails on an existing cursor, so read it.
			if old, err = l.getItem(ctx, key, "cursor"); err != nil {
				return fmt.Errorf("lock subject %s/%s %s: %w", in.Projection, in.ProjectionSubject, fam, err)
			}
		}
		cur, tok, derr := decodeCursor(old)
		if derr != nil {
			return derr
		}
		if cur.HolderOp == in.OperationID && tok == c.Token {
			// This very takeover was applied by an earlier attempt whose
			// answer was lost, and the SDK sent it again: the cursor is
			// ours. Judged by its version alone, it would look held by a
			// version as new as this one, and the intent would end without
			// being sent.
			return nil
		}
		if cur.HolderVersion >= in.Version {
			return &SubjectBusyError{Cursor: cur, Newer: true}
		}
		if !cur.HolderUntil.Before(now) {
			// An older version's dispatch may still be in flight: done only
			// if its intent was recorded since it took the cursor.
			holder, err := l.GetIntentState(ctx, cur.HolderOp)
			switch {
			case errors.Is(err, ErrNotFound):
			case err != nil:
				return fmt.Errorf("lock subject %s/%s %s: read holder: %w", in.Projection, in.ProjectionSubject, fam, err)
			case holder.Status == IntentStatusDispatching && holder.LeaseToken == tok:
				return &SubjectBusyError{Cursor: cur}
			}
		}
		// Take it over from exactly the holder we judged done.
		cond = "holder_op = :oldop AND holder_token = :oldtok AND holder_version < :v"
		vals[":oldop"] = sv(cur.HolderOp)
		vals[":oldtok"] = sv(tok)
	}
	return fmt.Errorf("lock subject %s/%s %s: the cursor kept changing: %w", in.Projection, in.ProjectionSubject, fam, ErrConflict)
}

// ListSyncDue returns up to limit subject cursors due for a drift check at
// or before `before`, oldest first: the sync shards of the due index
// (eventually consistent), then one consistent GetItem per cursor, since
// the index does not project the cursor's attributes.
func (l *Ledger) ListSyncDue(ctx context.Context, before time.Time, limit int) ([]SubjectCursor, error) {
	if limit <= 0 {
		limit = 1
	}
	var due []dueItem
	for shard := 0; shard < l.opts.DueShardsRead; shard++ {
		// Each shard gives its own oldest `limit` cursors (see pageShard).
		err := l.pageShard(ctx, dynamodb.QueryInput{
			TableName:                aws.String(l.opts.Table),
			IndexName:                aws.String(DueIndex),
			KeyConditionExpression:   aws.String("due_shard = :s AND due_at <= :b"),
			FilterExpression:         aws.String("#item = :cursor"),
			ExpressionAttributeNames: map[string]string{"#item": "item"},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":s": sv(syncPrefix + strconv.Itoa(shard)), ":b": nv(ms(before)), ":cursor": sv("cursor"),
			},
		}, limit, func(it map[string]types.AttributeValue) (bool, error) {
			due = append(due, dueItemOf(it))
			return true, nil
		})
		if err != nil {
			return nil, fmt.Errorf("list sync cursors, shard %d: %w", shard, err)
		}
	}
	// The oldest `limit` across the shards, and only those read in full:
	// the index projects only what the work queries need
	// (DueIndexAttributes), not the cursor's attributes.
	sortDue(due)
	if len(due) > limit {
		due = due[:limit]
	}
	out := make([]SubjectCursor, 0, len(due))
	for _, d := range due {
		full, err := l.getItem(ctx, map[string]types.AttributeValue{attrPK: d.item[attrPK], attrSK: d.item[attrSK]}, "cursor")
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list sync cursors: %w", err)
		}
		c, _, err := decodeCursor(full)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// MarkSynced records the reconciler's drift check of a cursor: next zero
// parks it (the downstream is at the projection's version; the next
// dispatch puts it back on the sync shards), otherwise it is checked again
// at next. It is conditioned on the holder the check saw, so a dispatch
// that took the cursor since is never marked synced: that case returns nil
// and leaves the cursor as the new dispatch set it.
func (l *Ledger) MarkSynced(ctx context.Context, c SubjectCursor, next time.Time) error {
	shard := l.dueShard(c.Projection, c.ProjSubject)
	vals := map[string]types.AttributeValue{":op": sv(c.HolderOp), ":v": nv(c.HolderVersion), ":shard": sv(syncedPrefix + shard), ":due": nv(ms(l.now()))}
	if !next.IsZero() {
		vals[":shard"] = sv(syncPrefix + shard)
		vals[":due"] = nv(ms(next))
	}
	_, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(l.opts.Table),
		Key:                       cursorKey(c.Projection, c.ProjSubject, c.Family),
		UpdateExpression:          aws.String("SET due_shard = :shard, due_at = :due"),
		ConditionExpression:       aws.String("holder_op = :op AND holder_version = :v"),
		ExpressionAttributeValues: vals,
	})
	var ccf *types.ConditionalCheckFailedException
	if err == nil || errors.As(err, &ccf) {
		return nil
	}
	return fmt.Errorf("mark cursor %s/%s %s: %w", c.Projection, c.ProjSubject, c.Family, translate(err))
}
