package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Committed is the outcome of Commit.
type Committed struct {
	Result Result
	// Conflict is set when the projection already holds the same version with a
	// contradictory state; the event was quarantined, not processed.
	Conflict bool
	// Intents are the operation ids this commit wrote (PENDING). An intent
	// whose operation id already existed (another event carried the same
	// business intent) is not among them. The caller announces these to the
	// dispatcher; the reconciler finds any whose announcement was lost.
	Intents []string
	// Contradicted are the watched intents this revision contradicted
	// (see watch.go): marked, made CONTRADICTED, or compensated (the
	// compensation intents are among Intents).
	Contradicted []string
	// Reused is set when one of the intents reuses an operation id that
	// another intent holds (see reuse.go): nothing of the commit was
	// written, and the event was quarantined
	// projection.CodeOperationIDReused.
	Reused *Reuse
}

// Commit completes a claimed event in one TransactWriteItems: the event moves
// to PROCESSED only if the claim's lease token is still current (fencing), the
// projection is written under its version guard, and each intent is put under
// attribute_not_exists. A failed version guard is not an error: the event is
// recorded as stale or noop (or quarantined on a same-version conflict) with a
// second, fenced write.
//
// write == nil means no projection handles the event: it is processed with
// outcome ignored.
func (l *Ledger) Commit(ctx context.Context, c Claim, write *ProjectionWrite, intents []Intent) (Committed, error) {
	if write == nil {
		res := Result{Outcome: OutcomeIgnored}
		return Committed{Result: res}, l.finish(ctx, c, res, "no projection for "+c.Event.EventType)
	}
	if err := validID("projection subject", write.Subject, MaxIDLength); err != nil {
		return Committed{}, err
	}
	// prev is the projection as read once a refused guard showed that the
	// plan's assumption about it (no watch list) was wrong: nil until then,
	// and never read on the common path.
	var prev *Projection
	// dedup are the once intents found held (see reuse.go), recorded by
	// the commit that drops them.
	var dedup []Deduplication
	for range 5 {
		watch, err := l.planWatch(ctx, write, intents, prev)
		if err != nil {
			return Committed{}, fmt.Errorf("commit %s/%s: %w", c.Event.Source, c.Event.EventID, err)
		}
		if known := heldByWatch(intents, watch); known != nil {
			var done bool
			var out Committed
			if intents, dedup, out, done, err = l.settleHeld(ctx, c, write, intents, dedup, nil, known); done || err != nil {
				return out, err
			}
			continue
		}
		tx, err := l.commitTx(c, write, intents, prev, watch, dedup)
		if err != nil {
			return Committed{}, err
		}
		// What DynamoDB would refuse is refused here, named, before the
		// transaction (see validate.go): no retry could store it.
		if err := checkTransaction(tx.items); err != nil {
			return l.refuseUnstorable(ctx, c, write, err)
		}
		_, err = l.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx.items})
		if err == nil {
			return tx.committed(), nil
		}
		var tce *types.TransactionCanceledException
		if !errors.As(err, &tce) {
			return Committed{}, fmt.Errorf("commit %s/%s: %w", c.Event.Source, c.Event.EventID, translate(err))
		}
		switch d := tx.decide(tce); d.verdict {
		case cancelLeaseLost:
			return Committed{}, fmt.Errorf("commit %s/%s by %s: %w", c.Event.Source, c.Event.EventID, c.Owner, ErrLeaseLost)
		case cancelUnstorable:
			return l.refuseUnstorable(ctx, c, write, d.unstorable)
		case cancelRetryable:
			return Committed{}, fmt.Errorf("commit %s/%s: %w", c.Event.Source, c.Event.EventID, translate(err))
		case cancelGuard:
			cur, err := l.projectionAt(ctx, write, d.projection)
			if err != nil {
				return Committed{}, err
			}
			if !guardAdmits(cur, write) {
				return l.resolveGuard(ctx, c, write, cur, intents)
			}
			// The write is allowed; what the guard assumed about the item
			// (no watch list, or the version read) was not so. Plan again
			// knowing it.
			prev = &cur
		case cancelPlanAgain:
			// An intent with the same operation id exists: the same
			// intent or a once intent's deduplication is dropped, a reuse
			// refuses the commit (see reuse.go). (A watched intent that a
			// dispatcher moved since it was read is read again.)
			var done bool
			var out Committed
			if intents, dedup, out, done, err = l.settleHeld(ctx, c, write, intents, dedup, d.existing, nil); done || err != nil {
				return out, err
			}
		}
	}
	return Committed{}, fmt.Errorf("commit %s/%s: %w", c.Event.Source, c.Event.EventID, ErrConflict)
}

// settleHeld judges the intents whose operation id is held (see
// sortHeld): it returns the intents left to write and the deduplications
// so far, or, on a reuse, quarantines the event (done).
func (l *Ledger) settleHeld(ctx context.Context, c Claim, w *ProjectionWrite, intents []Intent, dedup []Deduplication,
	held map[int]map[string]types.AttributeValue, known map[int]IntentState) ([]Intent, []Deduplication, Committed, bool, error) {
	s, err := l.sortHeld(ctx, w, intents, held, known)
	if err != nil {
		return nil, nil, Committed{}, true, fmt.Errorf("commit %s/%s: %w", c.Event.Source, c.Event.EventID, err)
	}
	if s.reuse != nil {
		res := Result{Projection: w.Name, Subject: w.Subject, Version: w.Version}
		out := Committed{Result: res, Reused: s.reuse}
		return nil, nil, out, true, l.Quarantine(ctx, c, projection.CodeOperationIDReused, truncate(s.reuse.Message(), MaxErrorMessageLen))
	}
	return withoutIntents(intents, s.drop), append(dedup, s.dedup...), Committed{}, false, nil
}

// guardAdmits reports whether the projection's version guard lets w
// replace cur: a newer version with another state, on a subject that is
// not terminal.
func guardAdmits(cur Projection, w *ProjectionWrite) bool {
	return cur.Version < w.Version && !cur.Terminal && cur.Fingerprint != w.Fingerprint
}

// withoutIntents is intents less those whose index is in drop.
func withoutIntents(intents []Intent, drop map[int]bool) []Intent {
	kept := intents[:0:0]
	for i, in := range intents {
		if !drop[i] {
			kept = append(kept, in)
		}
	}
	return kept
}

// refuseUnstorable answers a commit that DynamoDB cannot store (verr, an
// UnstorableError). When the projection's version guard would refuse the
// write anyway (the subject is at this revision or a newer one, or
// terminal), nothing of it was ever going to be written: the event is
// recorded as the guard says (stale, noop, a same-version conflict), as
// any older revision is. Otherwise verr is returned, wrapped: permanent.
// It costs one consistent read, on this path only.
func (l *Ledger) refuseUnstorable(ctx context.Context, c Claim, w *ProjectionWrite, verr error) (Committed, error) {
	out, err := l.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(l.opts.Table), Key: projectionKey(w.Name, w.Subject), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Committed{}, fmt.Errorf("read projection %s/%s: %w", w.Name, w.Subject, translate(err))
	}
	if len(out.Item) > 0 {
		cur, err := decodeProjection(out.Item)
		if err != nil {
			return Committed{}, fmt.Errorf("projection %s/%s: %w", w.Name, w.Subject, err)
		}
		if !guardAdmits(cur, w) {
			return l.resolveGuard(ctx, c, w, cur, nil)
		}
	}
	return Committed{}, fmt.Errorf("commit %s/%s: %w", c.Event.Source, c.Event.EventID, verr)
}

// projectionAt decodes the projection item a failed guard returned, or
// reads it when the store did not return it.
func (l *Ledger) projectionAt(ctx context.Context, w *ProjectionWrite, item map[string]types.AttributeValue) (Projection, error) {
	if len(item) == 0 {
		out, err := l.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(l.opts.Table), Key: projectionKey(w.Name, w.Subject), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return Projection{}, fmt.Errorf("read projection %s/%s: %w", w.Name, w.Subject, translate(err))
		}
		item = out.Item
	}
	p, err := decodeProjection(item)
	if err != nil {
		return Projection{}, fmt.Errorf("projection %s/%s: %w", w.Name, w.Subject, err)
	}
	return p, nil
}

// resolveGuard records what a refused version guard means: an older or
// terminal subject makes the event stale, the same version and state a
// noop, the same version with another state a conflict (quarantined), a
// newer version with the same state a noop that advances the version.
// Of intents, only a warehouse record is written with an advance.
func (l *Ledger) resolveGuard(ctx context.Context, c Claim, w *ProjectionWrite, old Projection, intents []Intent) (Committed, error) {
	res := Result{Projection: w.Name, Subject: w.Subject, Version: w.Version}
	switch {
	case old.Terminal || old.Version > w.Version:
		res.Outcome = OutcomeStale
		why := fmt.Sprintf("projection at version %d", old.Version)
		if old.Terminal {
			why += " is terminal"
		}
		why = withNote(why, w.Note)
		return Committed{Result: res}, l.finish(ctx, c, res, why)
	case old.Version == w.Version && old.Fingerprint == w.Fingerprint:
		res.Outcome = OutcomeNoop
		return Committed{Result: res}, l.finish(ctx, c, res, withNote("same version, same state", w.Note))
	case old.Version == w.Version:
		msg := fmt.Sprintf("version %d already applied with a different state", w.Version)
		return Committed{Conflict: true, Result: res}, l.Quarantine(ctx, c, "version_conflict", msg)
	default:
		// Newer version, same business state: advance the version (so an
		// older event can never apply later) but create no business
		// intents: nothing the business acts on changed. The warehouse's
		// record of the new version is written (the version is canonical
		// now, and the warehouse follows the canonical version).
		res.Outcome = OutcomeNoop
		var records []Intent
		done := Committed{Result: res}
		for _, in := range intents {
			if in.Kind == warehouse.Kind {
				records = append(records, in)
				done.Intents = append(done.Intents, in.OperationID)
				done.Result.Operations = append(done.Result.Operations, Operation{ID: in.OperationID, Kind: in.Kind})
			}
		}
		done.Result.Intents = len(records)
		return done, l.advance(ctx, c, w, old, done.Result, records)
	}
}

// advance records a newer revision with the projection's state: the event
// is PROCESSED and the projection's version moves up, in one transaction,
// so an older event can never apply later; records are put with them.
func (l *Ledger) advance(ctx context.Context, c Claim, w *ProjectionWrite, old Projection, res Result, records []Intent) error {
	event, err := l.finishUpdate(c, res, withNote("newer version, same state", w.Note))
	if err != nil {
		return err
	}
	var tx commitTx
	tx.add(txRole{kind: txEventLease}, types.TransactWriteItem{Update: event})
	tx.add(txRole{kind: txProjectionGuard}, types.TransactWriteItem{Update: l.advanceUpdate(c, w, old)})
	for i, in := range records {
		put, err := l.intentPut(c, w, in)
		if err != nil {
			return err
		}
		tx.add(txRole{kind: txNewIntent, intent: i}, types.TransactWriteItem{Put: put})
	}
	_, err = l.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tx.items})
	if err == nil {
		return nil
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) && tx.decide(tce).verdict == cancelLeaseLost {
		return fmt.Errorf("commit %s/%s by %s: %w", c.Event.Source, c.Event.EventID, c.Owner, ErrLeaseLost)
	}
	// The projection moved under us: retry the event from the top.
	return fmt.Errorf("advance projection %s/%s: %w", w.Name, w.Subject, translate(err))
}

// advanceUpdate moves the projection from old's version to w's, guarded
// on the state being the one read.
func (l *Ledger) advanceUpdate(c Claim, w *ProjectionWrite, old Projection) *types.Update {
	u := (&update{}).Values(map[string]types.AttributeValue{
		":v": nv(w.Version), ":old": nv(old.Version), ":fp": sv(w.Fingerprint), ":f": &types.AttributeValueMemberBOOL{Value: false},
		":now": nv(ms(l.now())), ":ev": sv(c.Event.Source + "/" + c.Event.EventID),
	})
	u.Set("version = :v", "updated_at = :now", "last_event = :ev")
	u.If("version = :old", "fingerprint = :fp", "terminal = :f")
	return u.txUpdate(l.opts.Table, projectionKey(w.Name, w.Subject))
}

func withNote(reason, note string) string {
	if note == "" {
		return reason
	}
	return reason + "; " + note
}

// finishUpdate builds the fenced update that moves a claimed event to
// PROCESSED with a stored result and a retention TTL. The event leaves the
// due index (its keys are removed) and keeps done_shard, the shard a later
// duplicate falls back to (see Accept): the only path that removes a
// finished event's due keys, so the only one that sets it.
func (l *Ledger) finishUpdate(c Claim, res Result, reason string) (*types.Update, error) {
	now := l.now()
	stored := res
	if len(stored.Operations) > 0 {
		stored.Intents = 0 // their number; decodeEvent restores it
	}
	if stored.Projection != "" && stored.Subject == c.Event.Subject {
		// The event item has it already; decodeEvent restores it (a
		// projection's subject is never empty: Commit checks).
		stored.Subject = ""
	}
	rv, err := attributevalue.Marshal(stored)
	if err != nil {
		return nil, fmt.Errorf("%w: result: %v", ErrInvalid, err)
	}
	// The entry's reason is the outcome, then why (when there is more to
	// say than the outcome): "applied", "skipped: older version …".
	if reason == "" {
		reason = string(res.Outcome)
	} else {
		reason = string(res.Outcome) + ": " + reason
	}
	u := (&update{}).Name("#status", "status").Name("#result", "result").Values(map[string]types.AttributeValue{
		":done": sv(string(StatusProcessed)), ":proc": sv(string(StatusProcessing)), ":tok": sv(c.Token),
		":now": nv(ms(now)), ":res": rv, ":ttl": nv(now.Add(l.opts.Retention).Unix()),
		":dshard": sv(doneShardPrefix + l.dueShard(c.Event.Source, c.Event.EventID)),
		":audit":  completionAudit(now, c.Owner, res.Deduplicated, truncate(reason, MaxReasonLen)),
	})
	u.Set("#status = :done", "processed_at = :now", "#result = :res", TTLAttribute+" = :ttl", attrDoneShard+" = :dshard", "audit = list_append(audit, :audit)")
	u.Remove("lease_owner", "lease_token", "lease_expires_at", attrDueShard, attrDueAt, "next_attempt_at", "error_code", "error_message")
	u.If("#status = :proc", "lease_token = :tok")
	return u.txUpdate(l.opts.Table, eventKey(c.Event.Source, c.Event.EventID)), nil
}

// completionAudit is the audit a completion appends: one entry
// "intent_deduplicated" per once intent it did not write (see reuse.go),
// then "complete".
func completionAudit(now time.Time, owner string, dedup []Deduplication, reason string) types.AttributeValue {
	var entries []types.AttributeValue
	for _, d := range dedup {
		entries = append(entries, auditValue(now, StatusProcessing, StatusProcessing, owner, "intent_deduplicated", truncate(dedupReason(d), MaxReasonLen)).(*types.AttributeValueMemberL).Value...)
	}
	entries = append(entries, auditValue(now, StatusProcessing, StatusProcessed, owner, "complete", reason).(*types.AttributeValueMemberL).Value...)
	return &types.AttributeValueMemberL{Value: entries}
}

// finish moves a claimed event to PROCESSED without touching a projection.
func (l *Ledger) finish(ctx context.Context, c Claim, res Result, reason string) error {
	u, err := l.finishUpdate(c, res, reason)
	if err != nil {
		return err
	}
	return l.fencedUpdate(ctx, c, u)
}
