package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
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
	// prev is the projection as read when the first attempt learned that
	// it watches intents (see watch.go): nil until then, and never read on
	// the common path.
	var prev *Projection
	for attempt := 0; attempt < 5; attempt++ {
		res := Result{Outcome: OutcomeApplied, Projection: write.Name, Subject: write.Subject, Version: write.Version, Intents: len(intents)}
		for _, in := range intents {
			res.Operations = append(res.Operations, Operation{ID: in.OperationID, Kind: in.Kind})
		}
		plan, err := l.planWatch(ctx, write, intents, prev)
		if err != nil {
			return Committed{}, fmt.Errorf("commit %s/%s: %w", c.Event.Source, c.Event.EventID, err)
		}
		// The compensations this revision writes are its operations too:
		// the stored result names them, so a redelivered pointer of a
		// crashed batch announces them like the others.
		for _, k := range plan.contra {
			if k.intent.Status == IntentStatusSucceeded && k.entry.Compensation != "" {
				res.Operations = append(res.Operations, Operation{ID: CompensationID(k.intent.OperationID), Kind: k.entry.Compensation})
				res.Intents++
			}
		}
		items, comps, err := l.commitItems(c, write, intents, res, prev, plan)
		if err != nil {
			return Committed{}, err
		}
		// What DynamoDB would refuse is refused here, named, before the
		// transaction (see validate.go): no retry could store it.
		if err := checkTransaction(items); err != nil {
			return l.refuseUnstorable(ctx, c, write, err)
		}
		_, err = l.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if err == nil {
			ops := make([]string, 0, len(intents)+len(comps))
			for _, in := range intents {
				ops = append(ops, in.OperationID)
			}
			ops = append(ops, comps...)
			done := Committed{Result: res, Intents: ops}
			for _, k := range plan.contra {
				done.Contradicted = append(done.Contradicted, k.intent.OperationID)
			}
			return done, nil
		}
		var tce *types.TransactionCanceledException
		if !errors.As(err, &tce) {
			return Committed{}, fmt.Errorf("commit %s/%s: %w", c.Event.Source, c.Event.EventID, translate(err))
		}
		failed := conditionFailures(tce)
		if _, ok := failed[0]; ok {
			return Committed{}, fmt.Errorf("commit %s/%s by %s: %w", c.Event.Source, c.Event.EventID, c.Owner, ErrLeaseLost)
		}
		// DynamoDB refused an item (a ValidationError reason): permanent,
		// named by the item it concerns.
		if cl := classifyCancellation(tce); cl.kind == ErrInvalid {
			name := fmt.Sprintf("transaction item %d", cl.index)
			if cl.index >= 0 && cl.index < len(items) {
				name = transactItemName(items[cl.index])
			}
			return l.refuseUnstorable(ctx, c, write, cl.unstorable(name))
		}
		if len(failed) == 0 {
			// Throttled (ErrUnavailable) or a concurrent transaction
			// (ErrConflict): both retryable.
			return Committed{}, fmt.Errorf("commit %s/%s: %w", c.Event.Source, c.Event.EventID, translate(err))
		}
		if old, ok := failed[1]; ok {
			cur, err := l.projectionAt(ctx, write, old)
			if err != nil {
				return Committed{}, err
			}
			if cur.Version < write.Version && !cur.Terminal && cur.Fingerprint != write.Fingerprint {
				// The write is allowed; what the guard assumed about the
				// item (no watch list, or the version read) was not so.
				// Plan again knowing it.
				prev = &cur
				continue
			}
			return l.resolveGuard(ctx, c, write, cur)
		}
		// An intent with the same operation id exists: another event already
		// carried this business intent. Keep the one effect; drop ours.
		kept := intents[:0:0]
		for i, in := range intents {
			if _, dup := failed[2+i]; !dup {
				kept = append(kept, in)
			}
		}
		// A failure among the contradiction items (after the intents) means
		// a dispatcher moved a watched intent since it was read: the next
		// attempt reads it again.
		intents = kept
	}
	return Committed{}, fmt.Errorf("commit %s/%s: %w", c.Event.Source, c.Event.EventID, ErrConflict)
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
		if !(cur.Version < w.Version && !cur.Terminal && cur.Fingerprint != w.Fingerprint) {
			return l.resolveGuard(ctx, c, w, cur)
		}
	}
	return Committed{}, fmt.Errorf("commit %s/%s: %w", c.Event.Source, c.Event.EventID, verr)
}

// conditionFailures returns, by transaction index, the items whose condition
// failed, with the old item when DynamoDB returned it.
func conditionFailures(tce *types.TransactionCanceledException) map[int]map[string]types.AttributeValue {
	out := map[int]map[string]types.AttributeValue{}
	for i, r := range tce.CancellationReasons {
		if r.Code != nil && *r.Code == "ConditionalCheckFailed" {
			out[i] = r.Item
		}
	}
	return out
}

func (l *Ledger) commitItems(c Claim, w *ProjectionWrite, intents []Intent, res Result, prev *Projection, plan watchPlan) ([]types.TransactWriteItem, []string, error) {
	now := l.now()
	note := w.Note
	if len(plan.contra) > 0 {
		ops := make([]string, 0, len(plan.contra))
		for _, k := range plan.contra {
			ops = append(ops, k.intent.Kind+" "+k.intent.OperationID+" ("+string(k.intent.Status)+")")
		}
		note = withNote(note, "contradicts "+strings.Join(ops, ", "))
	}
	if plan.dropped > 0 {
		note = withNote(note, fmt.Sprintf("watch list full: the %d oldest watched intents are no longer checked", plan.dropped))
	}
	eventUpdate, err := l.finishUpdate(c, res, note)
	if err != nil {
		return nil, nil, err
	}
	state, err := attributevalue.MarshalMap(w.State)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: projection state: %v", ErrInvalid, err)
	}
	pitem := projectionKey(w.Name, w.Subject)
	pitem["item"] = sv("projection")
	pitem["name"] = sv(w.Name)
	pitem["subject"] = sv(w.Subject)
	pitem["version"] = nv(w.Version)
	pitem["fingerprint"] = sv(w.Fingerprint)
	pitem["terminal"] = &types.AttributeValueMemberBOOL{Value: w.Terminal}
	pitem["state"] = &types.AttributeValueMemberM{Value: state}
	pitem["updated_at"] = nv(ms(now))
	pitem["last_event"] = sv(c.Event.Source + "/" + c.Event.EventID)
	if len(plan.keep) > 0 {
		wl, err := attributevalue.Marshal(plan.keep)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: watch list: %v", ErrInvalid, err)
		}
		pitem[attrWatch] = wl
		pitem[attrWatchN] = nv(int64(len(plan.keep)))
	}
	// The newest latest intent per kind family: this revision's, and, when
	// the item was read (prev), the families it does not touch. A
	// projection with several latest families emits one intent of each in
	// every revision that changes state (the built-in ones have one).
	latest := map[string]LatestIntent{}
	if prev != nil {
		for f, li := range prev.Latest {
			latest[f] = li
		}
	}
	for _, in := range intents {
		if in.Policy == PolicyLatest {
			latest[Family(in.Kind)] = LatestIntent{OperationID: in.OperationID, Kind: in.Kind, Subject: in.Subject, Version: w.Version}
		}
	}
	for f, li := range latest {
		v, err := attributevalue.Marshal(li)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: latest intent: %v", ErrInvalid, err)
		}
		pitem[attrLatestPref+f] = v
	}
	// The guard: a newer version with another state, on an item whose
	// watch list the plan knows (none, or the one read at prev's version).
	cond := "attribute_not_exists(pk) OR (version < :v AND terminal = :f AND fingerprint <> :fp AND attribute_not_exists(" + attrWatchN + "))"
	vals := map[string]types.AttributeValue{":v": nv(w.Version), ":f": &types.AttributeValueMemberBOOL{Value: false}, ":fp": sv(w.Fingerprint)}
	if prev != nil {
		cond = "version = :pv AND fingerprint = :pfp AND terminal = :f"
		vals = map[string]types.AttributeValue{":pv": nv(prev.Version), ":pfp": sv(prev.Fingerprint), ":f": &types.AttributeValueMemberBOOL{Value: false}}
	}
	items := []types.TransactWriteItem{
		{Update: eventUpdate},
		{Put: &types.Put{
			TableName:                           aws.String(l.opts.Table),
			Item:                                pitem,
			ConditionExpression:                 aws.String(cond),
			ExpressionAttributeValues:           vals,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}},
	}
	for _, in := range intents {
		if err := validID("operation id", in.OperationID, MaxIDLength); err != nil {
			return nil, nil, err
		}
		if err := validID("intent kind", in.Kind, MaxTypeLength); err != nil {
			return nil, nil, err
		}
		payload, err := attributevalue.MarshalMap(in.Payload)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: intent payload: %v", ErrInvalid, err)
		}
		it := l.intentItem(c, w, in)
		it["payload"] = &types.AttributeValueMemberM{Value: payload}
		if len(payload) == 0 {
			// NULL, not an empty map (minidyn cannot rewrite an item that
			// holds one; DynamoDB can).
			it["payload"] = &types.AttributeValueMemberNULL{Value: true}
		}
		if len(in.Condition) > 0 {
			cond, err := attributevalue.MarshalMap(in.Condition)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: intent condition: %v", ErrInvalid, err)
			}
			it["condition"] = &types.AttributeValueMemberM{Value: cond}
		}
		items = append(items, types.TransactWriteItem{Put: &types.Put{
			TableName:           aws.String(l.opts.Table),
			Item:                it,
			ConditionExpression: aws.String("attribute_not_exists(pk)"),
		}})
	}
	contra, comps, err := l.contradictionItems(c, w, plan)
	if err != nil {
		return nil, nil, err
	}
	return append(items, contra...), comps, nil
}

// intentItem is a new PENDING intent as commit writes it, without its
// payload and condition.
func (l *Ledger) intentItem(c Claim, w *ProjectionWrite, in Intent) map[string]types.AttributeValue {
	now := l.now()
	it := intentKey(in.OperationID)
	it["item"] = sv("intent")
	it["operation_id"] = sv(in.OperationID)
	it["kind"] = sv(in.Kind)
	it["subject"] = sv(in.Subject)
	it["status"] = sv(IntentPending)
	it["causation"] = sv(c.Event.Source + "/" + c.Event.EventID)
	// Whose fact the intent acts on: the scope that owns its projection and
	// the source that delivered the event. The dispatcher checks the scope
	// against the effect's allowed scopes and sends both with the call.
	if scope := ScopeOf(w.Name); scope != "" {
		it["scope"] = sv(scope)
	}
	it["source"] = sv(c.Event.Source)
	it["created_at"] = nv(ms(now))
	// The truth the intent came from: the dispatcher compares it with the
	// projection when it claims the intent (DESIGN.md §6).
	it["projection"] = sv(w.Name)
	it["proj_subject"] = sv(w.Subject)
	it["version"] = nv(w.Version)
	// The same version as text: exact whatever rewrites the item (minidyn
	// turns every number of an item it updates into a float64).
	it["version_s"] = sv(strconv.FormatInt(w.Version, 10))
	it["fingerprint"] = sv(w.Fingerprint)
	if in.Policy != "" && in.Policy != PolicyOnce {
		it["policy"] = sv(string(in.Policy))
	}
	it[attrDueShard] = sv(l.dueShard("OP", in.OperationID))
	it[attrDueAt] = nv(ms(now))
	return it
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

// resolveGuard records what a failed version guard means (DESIGN.md §6).
func (l *Ledger) resolveGuard(ctx context.Context, c Claim, w *ProjectionWrite, old Projection) (Committed, error) {
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
		// older event can never apply later) but create no intents.
		res.Outcome = OutcomeNoop
		return Committed{Result: res}, l.advance(ctx, c, w, old, res)
	}
}

func (l *Ledger) advance(ctx context.Context, c Claim, w *ProjectionWrite, old Projection, res Result) error {
	eventUpdate, err := l.finishUpdate(c, res, withNote("newer version, same state", w.Note))
	if err != nil {
		return err
	}
	_, err = l.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Update: eventUpdate},
		{Update: &types.Update{
			TableName:           aws.String(l.opts.Table),
			Key:                 projectionKey(w.Name, w.Subject),
			UpdateExpression:    aws.String("SET version = :v, updated_at = :now, last_event = :ev"),
			ConditionExpression: aws.String("version = :old AND fingerprint = :fp AND terminal = :f"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":v": nv(w.Version), ":old": nv(old.Version), ":fp": sv(w.Fingerprint), ":f": &types.AttributeValueMemberBOOL{Value: false},
				":now": nv(ms(l.now())), ":ev": sv(c.Event.Source + "/" + c.Event.EventID),
			},
		}},
	}})
	if err == nil {
		return nil
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		if _, ok := conditionFailures(tce)[0]; ok {
			return fmt.Errorf("commit %s/%s by %s: %w", c.Event.Source, c.Event.EventID, c.Owner, ErrLeaseLost)
		}
	}
	// The projection moved under us: retry the event from the top.
	return fmt.Errorf("advance projection %s/%s: %w", w.Name, w.Subject, translate(err))
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
	return &types.Update{
		TableName: aws.String(l.opts.Table),
		Key:       eventKey(c.Event.Source, c.Event.EventID),
		UpdateExpression: aws.String("SET #status = :done, processed_at = :now, #result = :res, expires_at = :ttl, " + attrDoneShard + " = :dshard, " +
			"audit = list_append(audit, :audit) REMOVE lease_owner, lease_token, lease_expires_at, due_shard, due_at, next_attempt_at, error_code, error_message"),
		ConditionExpression:      aws.String("#status = :proc AND lease_token = :tok"),
		ExpressionAttributeNames: map[string]string{"#status": "status", "#result": "result"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":done": sv(string(StatusProcessed)), ":proc": sv(string(StatusProcessing)), ":tok": sv(c.Token),
			":now": nv(ms(now)), ":res": rv, ":ttl": nv(now.Add(l.opts.Retention).Unix()),
			":dshard": sv(doneShardPrefix + l.dueShard(c.Event.Source, c.Event.EventID)),
			":audit":  auditValue(now, StatusProcessing, StatusProcessed, c.Owner, "complete", truncate(reason, MaxReasonLen)),
		},
	}, nil
}

// finish moves a claimed event to PROCESSED without touching a projection.
func (l *Ledger) finish(ctx context.Context, c Claim, res Result, reason string) error {
	u, err := l.finishUpdate(c, res, reason)
	if err != nil {
		return err
	}
	return l.fencedUpdate(ctx, c, u)
}
