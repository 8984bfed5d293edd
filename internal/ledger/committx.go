package ledger

import (
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// A commit's transaction, planned: its writes, and for each one what it
// is, so that a cancelled transaction is read by what failed (the event's
// lease, the projection's version guard, an intent that exists) rather
// than by where it sat.

// txKind is what one write of a commit's transaction is.
type txKind int

const (
	// txEventLease moves the event to PROCESSED, fenced on the claim's
	// lease token: it fails when another worker took the event over.
	txEventLease txKind = iota
	// txProjectionGuard writes the projection under its version guard: it
	// fails when the subject is at this revision or a newer one (or the
	// guard's assumption about its watch list was wrong).
	txProjectionGuard
	// txNewIntent puts one of the commit's intents, only if its operation
	// id is new: it fails when another event carried the same intent.
	txNewIntent
	// txWatchedIntent marks a watched intent this revision contradicts,
	// conditioned on the status the commit read: it fails when a
	// dispatcher moved the intent since.
	txWatchedIntent
	// txCompensation puts the compensation of a performed, contradicted
	// intent, only if it is new.
	txCompensation
)

// txRole is one write's kind and, for txNewIntent, the index of its
// intent among the commit's.
type txRole struct {
	kind   txKind
	intent int
}

// commitTx is one attempt at a commit: its writes and their roles (same
// index), and what it reports when it succeeds.
type commitTx struct {
	items  []types.TransactWriteItem
	roles  []txRole
	result Result
	// ops are the operation ids of the intents it writes: the commit's,
	// then the compensations. contradicted are the watched intents it
	// contradicts.
	ops, contradicted []string
}

func (tx *commitTx) add(r txRole, w types.TransactWriteItem) {
	tx.items = append(tx.items, w)
	tx.roles = append(tx.roles, r)
}

// committed is what Commit answers when tx was written.
func (tx *commitTx) committed() Committed {
	return Committed{Result: tx.result, Intents: tx.ops, Contradicted: tx.contradicted}
}

// cancelVerdict is what a cancelled commit transaction means.
type cancelVerdict int

const (
	// cancelLeaseLost: the event's lease was lost; the commit must stop.
	cancelLeaseLost cancelVerdict = iota
	// cancelUnstorable: DynamoDB refused a write's values (a
	// ValidationError): no retry can store it.
	cancelUnstorable
	// cancelRetryable: throttled, or a concurrent transaction; no
	// condition failed.
	cancelRetryable
	// cancelGuard: the projection's version guard refused the write.
	cancelGuard
	// cancelPlanAgain: some of the commit's intents exist already, or a
	// watched intent moved since it was read: plan again without them,
	// with fresh reads.
	cancelPlanAgain
)

// cancelDecision is a verdict with what the caller needs to act on it.
type cancelDecision struct {
	verdict cancelVerdict
	// unstorable (cancelUnstorable) is the permanent error, naming the write.
	unstorable error
	// projection (cancelGuard) is the projection item as the refusal
	// returned it; empty when the store returned none.
	projection map[string]types.AttributeValue
	// existing (cancelPlanAgain) holds the indexes of the commit's intents
	// whose operation id exists, with the held item when the refusal
	// returned it.
	existing map[int]map[string]types.AttributeValue
}

// decide reads a cancelled transaction's reasons by the role of the write
// each one concerns. A lost lease decides first, then a write DynamoDB
// cannot store (whatever else failed), then a cancellation without a
// failed condition (retryable), then the projection's guard; otherwise the
// intents that exist are dropped and the commit plans again.
func (tx *commitTx) decide(tce *types.TransactionCanceledException) cancelDecision {
	failed := conditionFailures(tce)
	byKind := map[txKind]bool{}
	var guard map[string]types.AttributeValue
	existing := map[int]map[string]types.AttributeValue{}
	for i, item := range failed {
		if i >= len(tx.roles) {
			continue
		}
		r := tx.roles[i]
		byKind[r.kind] = true
		switch r.kind {
		case txProjectionGuard:
			guard = item
		case txNewIntent:
			existing[r.intent] = item
		}
	}
	if byKind[txEventLease] {
		return cancelDecision{verdict: cancelLeaseLost}
	}
	if cl := classifyCancellation(tce); cl.kind == ErrInvalid {
		name := fmt.Sprintf("transaction item %d", cl.index)
		if cl.index >= 0 && cl.index < len(tx.items) {
			name = transactItemName(tx.items[cl.index])
		}
		return cancelDecision{verdict: cancelUnstorable, unstorable: cl.unstorable(name)}
	}
	switch {
	case len(failed) == 0:
		return cancelDecision{verdict: cancelRetryable}
	case byKind[txProjectionGuard]:
		return cancelDecision{verdict: cancelGuard, projection: guard}
	}
	return cancelDecision{verdict: cancelPlanAgain, existing: existing}
}

// conditionFailures returns, by transaction index, the writes whose
// condition failed, with the old item when DynamoDB returned it.
func conditionFailures(tce *types.TransactionCanceledException) map[int]map[string]types.AttributeValue {
	out := map[int]map[string]types.AttributeValue{}
	for i, r := range tce.CancellationReasons {
		if r.Code != nil && *r.Code == "ConditionalCheckFailed" {
			out[i] = r.Item
		}
	}
	return out
}

// commitTx plans one attempt: the event's completion, the projection
// under its guard, each intent, then each contradiction of a watched
// intent (its compensation first when it has one).
func (l *Ledger) commitTx(c Claim, w *ProjectionWrite, intents []Intent, prev *Projection, watch watchPlan, dedup []Deduplication) (commitTx, error) {
	tx := commitTx{result: commitResult(w, intents, watch)}
	tx.result.Deduplicated = dedup
	event, err := l.finishUpdate(c, tx.result, commitNote(w.Note, watch))
	if err != nil {
		return commitTx{}, err
	}
	tx.add(txRole{kind: txEventLease}, types.TransactWriteItem{Update: event})
	projection, err := l.projectionPut(c, w, intents, prev, watch)
	if err != nil {
		return commitTx{}, err
	}
	tx.add(txRole{kind: txProjectionGuard}, types.TransactWriteItem{Put: projection})
	for i, in := range intents {
		put, err := l.intentPut(c, w, in)
		if err != nil {
			return commitTx{}, err
		}
		tx.add(txRole{kind: txNewIntent, intent: i}, types.TransactWriteItem{Put: put})
		tx.ops = append(tx.ops, in.OperationID)
	}
	for _, k := range watch.contra {
		if k.compensates() {
			cop := CompensationID(k.intent.OperationID)
			put, err := l.compensationPut(c, w, k, cop)
			if err != nil {
				return commitTx{}, err
			}
			tx.add(txRole{kind: txCompensation}, types.TransactWriteItem{Put: put})
			tx.ops = append(tx.ops, cop)
		}
		tx.add(txRole{kind: txWatchedIntent}, types.TransactWriteItem{Update: l.contradictionUpdate(c, w, k)})
		tx.contradicted = append(tx.contradicted, k.intent.OperationID)
	}
	return tx, nil
}

// commitResult is the result an applied revision stores: the projection,
// its version, and the intents it writes, its compensations among them
// (so a redelivered pointer of a crashed batch announces them too).
func commitResult(w *ProjectionWrite, intents []Intent, watch watchPlan) Result {
	res := Result{Outcome: OutcomeApplied, Projection: w.Name, Subject: w.Subject, Version: w.Version, Intents: len(intents)}
	for _, in := range intents {
		res.Operations = append(res.Operations, Operation{ID: in.OperationID, Kind: in.Kind})
	}
	for _, k := range watch.contra {
		if k.compensates() {
			res.Operations = append(res.Operations, Operation{ID: CompensationID(k.intent.OperationID), Kind: k.entry.Compensation})
			res.Intents++
		}
	}
	return res
}

// commitNote is the projection's note, and what the watch plan did that
// the event's audit should say: the intents it contradicts, the entries
// it dropped from a full watch list.
func commitNote(note string, watch watchPlan) string {
	if len(watch.contra) > 0 {
		ops := make([]string, 0, len(watch.contra))
		for _, k := range watch.contra {
			ops = append(ops, k.intent.Kind+" "+k.intent.OperationID+" ("+string(k.intent.Status)+")")
		}
		note = withNote(note, "contradicts "+strings.Join(ops, ", "))
	}
	if watch.dropped > 0 {
		note = withNote(note, fmt.Sprintf("watch list full: the %d oldest watched intents are no longer checked", watch.dropped))
	}
	return note
}

// projectionPut writes the projection item under its version guard
// (projectionGuard), returning the item as it was when the guard refuses.
func (l *Ledger) projectionPut(c Claim, w *ProjectionWrite, intents []Intent, prev *Projection, watch watchPlan) (*types.Put, error) {
	item, err := l.projectionItem(c, w, intents, prev, watch)
	if err != nil {
		return nil, err
	}
	put := projectionGuard(w, prev).txPut(l.opts.Table, item)
	put.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	return put, nil
}

// projectionGuard admits a newer version with another state on an item
// whose watch list the plan knows: none (prev nil: the item must have no
// watch list), or the one read at prev's version (the item must still be
// at it).
func projectionGuard(w *ProjectionWrite, prev *Projection) *update {
	u := (&update{}).Value(":f", &types.AttributeValueMemberBOOL{Value: false})
	if prev != nil {
		return u.Value(":pv", nv(prev.Version)).Value(":pfp", sv(prev.Fingerprint)).
			If("version = :pv", "fingerprint = :pfp", "terminal = :f")
	}
	return u.Value(":v", nv(w.Version)).Value(":fp", sv(w.Fingerprint)).
		If("attribute_not_exists(pk) OR (version < :v AND terminal = :f AND fingerprint <> :fp AND attribute_not_exists(" + attrWatchN + "))")
}

// projectionItem is the projection as this revision writes it: its state,
// version and fingerprint, the watch list the plan keeps, and the newest
// latest intent per kind family.
func (l *Ledger) projectionItem(c Claim, w *ProjectionWrite, intents []Intent, prev *Projection, watch watchPlan) (map[string]types.AttributeValue, error) {
	state, err := attributevalue.MarshalMap(w.State)
	if err != nil {
		return nil, fmt.Errorf("%w: projection state: %v", ErrInvalid, err)
	}
	item := projectionKey(w.Name, w.Subject)
	item["item"] = sv("projection")
	item["name"] = sv(w.Name)
	item["subject"] = sv(w.Subject)
	item["version"] = nv(w.Version)
	item["fingerprint"] = sv(w.Fingerprint)
	item["terminal"] = &types.AttributeValueMemberBOOL{Value: w.Terminal}
	item["state"] = &types.AttributeValueMemberM{Value: state}
	item["updated_at"] = nv(ms(l.now()))
	item["last_event"] = sv(c.Event.Source + "/" + c.Event.EventID)
	if len(watch.keep) > 0 {
		wl, err := attributevalue.Marshal(watch.keep)
		if err != nil {
			return nil, fmt.Errorf("%w: watch list: %v", ErrInvalid, err)
		}
		item[attrWatch] = wl
		item[attrWatchN] = nv(int64(len(watch.keep)))
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
	named := map[string]bool{}
	for f, li := range latest {
		v, err := attributevalue.Marshal(li)
		if err != nil {
			return nil, fmt.Errorf("%w: latest intent: %v", ErrInvalid, err)
		}
		item[attrLatestPref+f] = v
		named[li.OperationID] = true
	}
	// The revision's other intents, so that the item names all of them
	// (pkg/state lists them without reading the event). Only those the
	// latest attributes and the watch list do not name already: most
	// revisions add nothing here.
	for _, e := range watch.keep {
		named[e.OperationID] = true
	}
	var others Operations
	for _, op := range commitResult(w, intents, watch).Operations {
		if !named[op.ID] {
			others = append(others, op)
		}
	}
	if len(others) > 0 {
		v, err := others.MarshalDynamoDBAttributeValue()
		if err != nil {
			return nil, fmt.Errorf("%w: intents: %v", ErrInvalid, err)
		}
		item[attrOthers] = v
	}
	return item, nil
}

// intentPut puts a new PENDING intent, only if its operation id is new.
func (l *Ledger) intentPut(c Claim, w *ProjectionWrite, in Intent) (*types.Put, error) {
	if err := validID("operation id", in.OperationID, MaxIDLength); err != nil {
		return nil, err
	}
	if err := validID("intent kind", in.Kind, MaxTypeLength); err != nil {
		return nil, err
	}
	payload, err := attributevalue.MarshalMap(in.Payload)
	if err != nil {
		return nil, fmt.Errorf("%w: intent payload: %v", ErrInvalid, err)
	}
	it := l.intentItem(c, w, in)
	it["payload"] = &types.AttributeValueMemberM{Value: payload}
	// What tells a reuse of the id from the same intent (see reuse.go).
	it["payload_hash"] = sv(IntentPayloadHash(in.Payload))
	if len(payload) == 0 {
		// NULL, not an empty map (see the package doc).
		it["payload"] = &types.AttributeValueMemberNULL{Value: true}
	}
	if len(in.Condition) > 0 {
		cond, err := attributevalue.MarshalMap(in.Condition)
		if err != nil {
			return nil, fmt.Errorf("%w: intent condition: %v", ErrInvalid, err)
		}
		it["condition"] = &types.AttributeValueMemberM{Value: cond}
	}
	put := newItemOnly().txPut(l.opts.Table, it)
	// A refusal returns the intent that holds the id, to judge it by.
	put.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	return put, nil
}

// newItemOnly is the condition of a put that must not replace an item.
func newItemOnly() *update { return (&update{}).If("attribute_not_exists(pk)") }
