package ledger

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// fencedUpdate runs an update whose condition includes the claim's lease
// token; a failed condition means the lease was lost.
func (l *Ledger) fencedUpdate(ctx context.Context, c Claim, u *types.Update) error {
	_, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 u.TableName,
		Key:                       u.Key,
		UpdateExpression:          u.UpdateExpression,
		ConditionExpression:       u.ConditionExpression,
		ExpressionAttributeNames:  u.ExpressionAttributeNames,
		ExpressionAttributeValues: u.ExpressionAttributeValues,
		// The item comes back with a refusal, for lastAuditIs.
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if _, own := l.appliedBefore(ctx, ccf, u.Key, u.ExpressionAttributeValues[":audit"]); own {
			// This very update, applied by an earlier attempt whose
			// answer was lost: not a lost lease.
			return nil
		}
		return fmt.Errorf("%s/%s by %s: %w", c.Event.Source, c.Event.EventID, c.Owner, ErrLeaseLost)
	}
	return fmt.Errorf("update %s/%s: %w", c.Event.Source, c.Event.EventID, translate(err))
}

func (l *Ledger) leaveProcessing(c Claim, to Status, action, code, msg string, extraSet string, extraVals map[string]types.AttributeValue, remove string) *types.Update {
	now := l.now()
	vals := map[string]types.AttributeValue{
		":to": sv(string(to)), ":proc": sv(string(StatusProcessing)), ":tok": sv(c.Token),
		":code": sv(truncate(code, MaxErrorCodeLen)), ":msg": sv(truncate(msg, MaxErrorMessageLen)),
		":audit": auditValue(now, StatusProcessing, to, c.Owner, action, truncate(code+": "+msg, MaxReasonLen)),
	}
	for k, v := range extraVals {
		vals[k] = v
	}
	set := "SET #status = :to, error_code = :code, error_message = :msg, audit = list_append(audit, :audit)"
	if extraSet != "" {
		set += ", " + extraSet
	}
	return &types.Update{
		TableName:                 aws.String(l.opts.Table),
		Key:                       eventKey(c.Event.Source, c.Event.EventID),
		UpdateExpression:          aws.String(set + " REMOVE lease_owner, lease_token, lease_expires_at" + remove),
		ConditionExpression:       aws.String("#status = :proc AND lease_token = :tok"),
		ExpressionAttributeNames:  map[string]string{"#status": "status"},
		ExpressionAttributeValues: vals,
	}
}

// RetryLater releases a claim after a transient failure: RETRY_WAIT until
// next, findable through the due index at that time.
func (l *Ledger) RetryLater(ctx context.Context, c Claim, code, msg string, next time.Time) error {
	u := l.leaveProcessing(c, StatusRetryWait, "retry_later", code, msg,
		"next_attempt_at = :next, due_at = :next", map[string]types.AttributeValue{":next": nv(ms(next))}, "")
	return l.fencedUpdate(ctx, c, u)
}

// Dead records that the attempts are exhausted. The event moves from the
// work shards of the due index to its attention shards (see ListOpen), so
// operators find it without a scan, and its message goes on to the DLQ.
// The claim's message is recorded: its pointer id as a dead letter (a
// console redrive of it may reopen the event), and its message id, which
// is received again until SQS moves it on (see ClaimOptions).
func (l *Ledger) Dead(ctx context.Context, c Claim, code, msg string) error {
	set, vals, remove := "due_shard = :ashard, due_at = :anow", l.attentionVals(c.Event.Source, c.Event.EventID), ", next_attempt_at"
	if c.Message != "" {
		set += ", " + attrDeadMessage + " = :dmsg"
		vals[":dmsg"] = sv(truncate(c.Message, MaxIDLength))
	} else {
		remove += ", " + attrDeadMessage
	}
	u := l.leaveProcessing(c, StatusDead, "dead", code, msg, set, vals, remove)
	if c.Letter != "" {
		u.UpdateExpression = aws.String(aws.ToString(u.UpdateExpression) + " ADD " + attrDeadLetters + " :dletter")
		u.ExpressionAttributeValues[":dletter"] = &types.AttributeValueMemberSS{Value: []string{c.Letter}}
	}
	return l.fencedUpdate(ctx, c, u)
}

// Quarantine records a permanent failure (malformed payload, unknown subject,
// same-version conflict): no retry helps; an operator must look. Like Dead,
// the event stays findable on the attention shards.
func (l *Ledger) Quarantine(ctx context.Context, c Claim, code, msg string) error {
	u := l.leaveProcessing(c, StatusQuarantined, "quarantine", code, msg, "due_shard = :ashard, due_at = :anow",
		l.attentionVals(c.Event.Source, c.Event.EventID), ", next_attempt_at")
	return l.fencedUpdate(ctx, c, u)
}

// attentionVals are the due-index keys of an item that waits for an
// operator: its attention shard, and the time it started waiting.
func (l *Ledger) attentionVals(a, b string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{":ashard": sv(attentionPrefix + l.dueShard(a, b)), ":anow": nv(ms(l.now()))}
}

// Replay moves a DEAD or QUARANTINED event back to RECEIVED with the same
// identity, resetting the round's attempts and recording who asked and why.
// The caller then enqueues it.
func (l *Ledger) Replay(ctx context.Context, source, eventID, actor, reason string) (Event, error) {
	return l.reopen(ctx, source, eventID, actor, reason, "replay", StatusDead, StatusQuarantined)
}

// Release is Replay for a QUARANTINED event only (an operator's hold, or a
// permanent failure whose cause was fixed), audited as "release". A DEAD
// event is refused with ErrNotReplayable: that is what Replay is for.
func (l *Ledger) Release(ctx context.Context, source, eventID, actor, reason string) (Event, error) {
	return l.reopen(ctx, source, eventID, actor, reason, "release", StatusQuarantined)
}

// reopen moves an event in one of from back to RECEIVED, audited as action
// with the status it left. The write is conditioned on one status at a
// time, so the audit names it truthfully: the first try assumes from[0];
// when the row is in another of the allowed statuses, the refused write
// returned it (ALL_OLD) and a second write is conditioned on that status.
func (l *Ledger) reopen(ctx context.Context, source, eventID, actor, reason, action string, from ...Status) (Event, error) {
	if actor == "" || reason == "" {
		return Event{}, fmt.Errorf("%w: %s needs an actor and a reason", ErrInvalid, action)
	}
	try := from[0]
	for range len(from) + 1 {
		now := l.now()
		audit := auditValue(now, try, StatusReceived, actor, action, reason)
		out, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(l.opts.Table),
			Key:       eventKey(source, eventID),
			UpdateExpression: aws.String("SET #status = :recv, attempts = :zero, due_shard = :shard, due_at = :now, " +
				"audit = list_append(audit, :audit) REMOVE next_attempt_at, expires_at"),
			ConditionExpression:      aws.String("#status = :from"),
			ExpressionAttributeNames: map[string]string{"#status": "status"},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":recv": sv(string(StatusReceived)), ":from": sv(string(try)),
				":zero": nv(0), ":shard": sv(l.dueShard(source, eventID)), ":now": nv(ms(now)),
				":audit": audit,
			},
			ReturnValues:                        types.ReturnValueAllNew,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return decodeEvent(out.Attributes)
		}
		if ccf := (*types.ConditionalCheckFailedException)(nil); errors.As(err, &ccf) {
			if item, own := l.appliedBefore(ctx, ccf, eventKey(source, eventID), audit); own {
				// This very request, applied by an earlier attempt whose
				// answer was lost: done, not "not replayable in RECEIVED".
				return decodeEvent(item)
			}
		}
		cur, failed := conditionFailed(err)
		if failed && cur == nil {
			// DynamoDB returns the item with the refusal; an emulator that
			// does not (dynalite) is asked.
			got, gerr := l.Get(ctx, source, eventID)
			if errors.Is(gerr, ErrNotFound) {
				return Event{}, fmt.Errorf("%s %s/%s: %w", action, source, eventID, ErrNotFound)
			}
			if gerr != nil {
				return Event{}, fmt.Errorf("%s %s/%s: %w", action, source, eventID, gerr)
			}
			cur = &got
		}
		switch {
		case failed && slices.Contains(from, cur.Status) && cur.Status != try:
			try = cur.Status // it is in another allowed state: reopen from that one
			continue
		case failed:
			return *cur, fmt.Errorf("%s %s/%s in %s: %w", action, source, eventID, cur.Status, ErrNotReplayable)
		}
		return Event{}, fmt.Errorf("%s %s/%s: %w", action, source, eventID, translate(err))
	}
	return Event{}, fmt.Errorf("%s %s/%s: state kept changing: %w", action, source, eventID, ErrConflict)
}

// GiveUp marks an unfinished event DEAD without holding its lease: the queue
// has given up on its message (it reached the dead-letter queue) while the
// ledger still counted attempts left. It never overrides a live lease.
// letter is the pointer id the dead letter carries (queue.Pointer.ID, ""
// for a pointer without one): it is recorded as one of the event's dead
// letters, so that a console redrive of that message may reopen the event
// (see ClaimOptions). On an event that is DEAD already GiveUp records the
// letter only (a second request, once per letter) and still answers with
// a NotClaimableError.
func (l *Ledger) GiveUp(ctx context.Context, source, eventID, actor, reason, letter string) (Event, error) {
	now := l.now()
	update := "SET #status = :dead, error_code = :code, error_message = :msg, audit = list_append(audit, :audit), " +
		"due_shard = :ashard, due_at = :now REMOVE lease_owner, lease_token, lease_expires_at, next_attempt_at"
	vals := map[string]types.AttributeValue{
		":dead": sv(string(StatusDead)), ":recv": sv(string(StatusReceived)), ":retry": sv(string(StatusRetryWait)),
		":proc": sv(string(StatusProcessing)), ":now": nv(ms(now)),
		":code": sv("queue_exhausted"), ":msg": sv(truncate(reason, MaxErrorMessageLen)),
		":ashard": sv(attentionPrefix + l.dueShard(source, eventID)),
		":audit":  auditValue(now, "", StatusDead, actor, "give_up", reason),
	}
	if letter != "" {
		update += " ADD " + attrDeadLetters + " :dletter"
		vals[":dletter"] = &types.AttributeValueMemberSS{Value: []string{letter}}
	}
	out, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(l.opts.Table),
		Key:                                 eventKey(source, eventID),
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String("#status IN (:recv, :retry) OR (#status = :proc AND lease_expires_at < :now)"),
		ExpressionAttributeNames:            map[string]string{"#status": "status"},
		ExpressionAttributeValues:           vals,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return decodeEvent(out.Attributes)
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return Event{}, fmt.Errorf("give up %s/%s: %w", source, eventID, translate(err))
	}
	raw := ccf.Item
	if _, ok := raw["status"]; !ok {
		// DynamoDB returns the item with the refusal; a store that does
		// not (dynalite) is asked.
		if raw, err = l.getItem(ctx, eventKey(source, eventID), "event "+source+"/"+eventID); err != nil {
			return Event{}, fmt.Errorf("give up %s/%s: %w", source, eventID, err)
		}
	}
	cur, err := decodeEvent(raw)
	if err != nil {
		return Event{}, fmt.Errorf("give up %s/%s: %w", source, eventID, err)
	}
	// GiveUp does not look for its own retried write (appliedBefore): the
	// sweep gives up on two dead letters of one event, or on one message
	// it received twice, with the same words in the same millisecond at
	// times, and told apart from a lost answer they would be miscounted.
	// A lost answer here costs only the report: the event is DEAD and
	// the letter recorded either way.
	if letters, _ := deadLetters(raw); cur.Status == StatusDead && letter != "" && !slices.Contains(letters, letter) {
		// Dead already (its own message went there, or another one did
		// first): this message is a dead letter too.
		_, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(l.opts.Table),
			Key:                       eventKey(source, eventID),
			UpdateExpression:          aws.String("ADD " + attrDeadLetters + " :dletter"),
			ConditionExpression:       aws.String("#status = :dead"),
			ExpressionAttributeNames:  map[string]string{"#status": "status"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":dead": sv(string(StatusDead)), ":dletter": vals[":dletter"]},
		})
		var again *types.ConditionalCheckFailedException
		if err != nil && !errors.As(err, &again) {
			return Event{}, fmt.Errorf("record dead letter of %s/%s: %w", source, eventID, translate(err))
		}
	}
	return cur, &NotClaimableError{Event: cur, Why: "finished or leased"}
}

// conditionFailed reports whether err is a failed condition and returns the
// event as it stood when the store sent it back (nil when there was no item
// or it could not be decoded).
func conditionFailed(err error) (*Event, bool) {
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return nil, false
	}
	if _, ok := ccf.Item["status"]; !ok {
		return nil, true
	}
	cur, derr := decodeEvent(ccf.Item)
	if derr != nil {
		return nil, true
	}
	return &cur, true
}

// Get reads one event (strongly consistent), with its audit trail.
func (l *Ledger) Get(ctx context.Context, source, eventID string) (Event, error) {
	return l.Reader().Event(ctx, source, eventID)
}

// Reader is the ledger's read path over its own client (see Reader).
func (l *Ledger) Reader() Reader { return NewReader(l.db, l.opts.Table) }

// getItem is a strongly consistent read of one item; a missing item is
// ErrNotFound. what names the item in errors.
func (l *Ledger) getItem(ctx context.Context, key map[string]types.AttributeValue, what string) (map[string]types.AttributeValue, error) {
	return l.Reader().getItem(ctx, key, what)
}

// DueRef names an unfinished item found through the due index.
type DueRef struct {
	Source  string
	EventID string
	Status  Status
	DueAt   time.Time
}

// ListDue returns unfinished events whose due time is at or before `before`
// (RECEIVED since then, leases expired by then, retries due by then), oldest
// first, at most limit. It queries each shard of the sparse due index: no
// table scan. Index reads are eventually consistent; the claim re-checks.
func (l *Ledger) ListDue(ctx context.Context, before time.Time, limit int) ([]DueRef, error) {
	items, err := l.queryDue(ctx, before, limit, "event", StatusReceived, StatusProcessing, StatusRetryWait)
	if err != nil {
		return nil, err
	}
	refs := make([]DueRef, 0, len(items))
	for _, it := range items {
		ev, err := decodeEvent(it.item)
		if err != nil {
			return nil, err
		}
		refs = append(refs, DueRef{Source: ev.Source, EventID: ev.EventID, Status: ev.Status, DueAt: it.dueAt})
	}
	return refs, nil
}

type dueItem struct {
	item  map[string]types.AttributeValue
	dueAt time.Time
}

// dueItemOf is an index entry with its due time read.
func dueItemOf(it map[string]types.AttributeValue) dueItem {
	due := time.Time{}
	if v, ok := it[attrDueAt].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		due = fromMS(n)
	}
	return dueItem{item: it, dueAt: due}
}

func sortDue(items []dueItem) {
	sort.SliceStable(items, func(i, j int) bool { return items[i].dueAt.Before(items[j].dueAt) })
}

// queryDue reads the due index, every shard, for items of one kind in one
// of the given (unfinished) statuses, oldest first, at most limit. The
// status filter is defensive: a finished item has no due keys and so no index
// entry, but index reads lag the table (and minidyn keeps entries whose keys
// were removed).
func (l *Ledger) queryDue(ctx context.Context, before time.Time, limit int, kind string, statuses ...Status) ([]dueItem, error) {
	return l.queryShards(ctx, "", before, limit, kind, statuses...)
}

// The due index's paging (queryShards, ListSyncDue). DynamoDB applies a
// Query's Limit to the entries it evaluates, before the filter, and one
// shard holds events, intents, live leases and entries the filter drops,
// so a page can hold any number of matches, none included. Each shard is
// therefore paged until it has given its own oldest `limit` matches (the
// oldest `limit` overall are among them) or is exhausted. Pages start at
// the caller's limit and double up to dueMaxPage entries (never below the
// limit), so a shard full of matches costs one request and one mostly
// filtered costs a few; a shard gets at most DueQueryPagesPerShard pages.
const (
	// DueQueryPagesPerShard bounds the Query requests one due query makes
	// per shard: ListDue, ListDueIntents and ListSyncDue make at most
	// DueShards × DueQueryPagesPerShard (64 with the default 4 shards),
	// ListOpen twice that (work and attention shards). Each evaluates at
	// most max(limit, dueMaxPage) index entries and at most 1 MB, the
	// Query's own cap; with limit 1 the 16 pages evaluate 1+2+…+512 then
	// 6×1,000, about 7,000 entries (~2 MB of projected attributes, a few
	// hundred eventually consistent read units).
	DueQueryPagesPerShard = 16
	dueMaxPage            = 1000
)

// queryShards reads one family of shards: "" for work, attentionPrefix for
// items waiting for an operator. It returns the oldest `limit` matches,
// oldest first: exactly those, unless a shard reached its page bound
// without giving `limit` matches (with limit 1, some 7,000 entries to skip
// ahead of them; more with a larger limit). Then its unread entries are
// not compared: the result is
// still oldest first, and exact up to the last entry that shard read, but
// it may hold newer matches of other shards in place of older ones the
// bound left unread (rather than nothing newer than that point, which
// would stall every shard behind one).
func (l *Ledger) queryShards(ctx context.Context, prefix string, before time.Time, limit int, kind string, statuses ...Status) ([]dueItem, error) {
	if limit <= 0 {
		limit = 1
	}
	// A claim does not move an item on the index (that would be a delete and
	// a put of the index entry: two write units): a leased item keeps the
	// due_at it had, and is due only once its lease has expired.
	vals := map[string]types.AttributeValue{":b": nv(ms(before)), ":kind": sv(kind),
		":leased": sv(string(StatusProcessing)), ":dispatching": sv(string(IntentStatusDispatching))}
	var in []string
	for i, st := range statuses {
		k := ":st" + strconv.Itoa(i)
		vals[k] = sv(string(st))
		in = append(in, k)
	}
	var items []dueItem
	// Once `limit` matches are known, a later shard can only contribute
	// items at least as old as the newest of them: its key condition
	// stops there (:hi), so it does not page through newer entries.
	hi := before
	for shard := 0; shard < l.opts.DueShardsRead; shard++ {
		vals[":s"] = sv(prefix + strconv.Itoa(shard))
		vals[":hi"] = nv(ms(hi))
		err := l.pageShard(ctx, dynamodb.QueryInput{
			TableName:                 aws.String(l.opts.Table),
			IndexName:                 aws.String(DueIndex),
			KeyConditionExpression:    aws.String("due_shard = :s AND due_at <= :hi"),
			FilterExpression:          aws.String("#item = :kind AND #status IN (" + join(in) + ") AND NOT (#status IN (:leased, :dispatching) AND lease_expires_at > :b)"),
			ExpressionAttributeNames:  map[string]string{"#item": "item", "#status": "status"},
			ExpressionAttributeValues: vals,
		}, limit, func(it map[string]types.AttributeValue) (bool, error) {
			items = append(items, dueItemOf(it))
			return true, nil
		})
		if err != nil {
			return nil, fmt.Errorf("list due %ss, shard %d: %w", kind, shard, err)
		}
		if len(items) >= limit {
			sortDue(items)
			items = items[:limit]
			hi = items[limit-1].dueAt
		}
	}
	sortDue(items)
	if len(items) > limit {
		items = items[:limit]
	}
	return items, nil
}

// pageShard pages one shard of the due index (q names it), oldest first,
// handing each returned item to take, which says whether it counts, until
// want items counted, the shard is exhausted, or it had
// DueQueryPagesPerShard pages. A Query error is translated; take's are
// returned as they are.
func (l *Ledger) pageShard(ctx context.Context, q dynamodb.QueryInput, want int, take func(map[string]types.AttributeValue) (bool, error)) error {
	page, maxPage := min(want, dueMaxPage), max(want, dueMaxPage)
	taken := 0
	for range DueQueryPagesPerShard {
		q.Limit = aws.Int32(int32(min(page, math.MaxInt32)))
		out, err := l.db.Query(ctx, &q)
		if err != nil {
			return translate(err)
		}
		for _, it := range out.Items {
			ok, err := take(it)
			if err != nil {
				return err
			}
			if ok {
				if taken++; taken >= want {
					return nil
				}
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		q.ExclusiveStartKey = out.LastEvaluatedKey
		page = min(2*page, maxPage)
	}
	return nil
}
