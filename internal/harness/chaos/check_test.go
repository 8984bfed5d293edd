package chaos

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// The checker on hand-made final states: each case breaks one invariant,
// and the checker must say which.
func TestCheckFindsEachInvariant(t *testing.T) {
	s := Schedule{Events: []Event{
		{ID: "a", Subject: "O-1", Revision: 1, Status: "created"},
		{ID: "b", Subject: "O-1", Revision: 2, Status: "cancelled"},
	}}
	accepted := []bool{true, true}
	rf, nt := Ops("O-1", 2)
	audit := func(actions ...string) []ledger.AuditEntry {
		out := []ledger.AuditEntry{{Action: "accept", To: ledger.StatusReceived, Actor: "intake"}}
		for _, a := range actions {
			switch a {
			case "claim":
				out = append(out, ledger.AuditEntry{Action: a, From: ledger.StatusReceived, To: ledger.StatusProcessing, Actor: "w1"})
			case "takeover":
				out = append(out, ledger.AuditEntry{Action: a, From: ledger.StatusProcessing, To: ledger.StatusProcessing, Actor: "w2"})
			case "complete-w1":
				out = append(out, ledger.AuditEntry{Action: "complete", From: ledger.StatusProcessing, To: ledger.StatusProcessed, Actor: "w1"})
			case "complete":
				out = append(out, ledger.AuditEntry{Action: a, From: ledger.StatusProcessing, To: ledger.StatusProcessed, Actor: "w2"})
			}
		}
		return out
	}
	good := func() observed {
		return observed{
			events: map[string]ledger.Event{
				"a": {EventID: "a", Status: ledger.StatusProcessed, Result: &ledger.Result{Outcome: ledger.OutcomeApplied}, Audit: audit("claim", "complete-w1")},
				"b": {EventID: "b", Status: ledger.StatusProcessed, Result: &ledger.Result{Outcome: ledger.OutcomeApplied}, Audit: audit("claim", "complete-w1")},
			},
			projections: map[string]ledger.Projection{"O-1": {Subject: "O-1", Version: 2, State: map[string]any{"status": "cancelled"}}},
			effects:     map[string]int{rf: 1, nt: 1},
		}
	}
	if v := check(s, accepted, good(), true); len(v) != 0 {
		t.Fatalf("the right final state was judged wrong: %v", v)
	}
	cases := []struct {
		name, want string
		breakIt    func(o *observed)
	}{
		{"refund applied twice", I2, func(o *observed) { o.effects[rf] = 2 }},
		{"notification lost", I2, func(o *observed) { delete(o.effects, nt) }},
		{"older revision won", I3, func(o *observed) {
			o.projections["O-1"] = ledger.Projection{Subject: "O-1", Version: 1, State: map[string]any{"status": "created"}}
		}},
		{"event left PROCESSING", I1, func(o *observed) {
			ev := o.events["a"]
			ev.Status = ledger.StatusProcessing
			o.events["a"] = ev
		}},
		{"accepted event missing", I1, func(o *observed) { delete(o.events, "a") }},
		{"audit without its accept", I6, func(o *observed) {
			ev := o.events["a"]
			ev.Audit = ev.Audit[1:]
			o.events["a"] = ev
		}},
		{"completed by a fenced-out worker", I5, func(o *observed) {
			ev := o.events["a"]
			ev.Audit = audit("claim", "takeover", "complete-w1")
			o.events["a"] = ev
		}},
		{"completed twice", I5, func(o *observed) {
			ev := o.events["a"]
			ev.Audit = append(audit("claim", "complete-w1"), ledger.AuditEntry{Action: "complete", From: ledger.StatusReceived, To: ledger.StatusProcessed, Actor: "w3"})
			o.events["a"] = ev
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := good()
			tc.breakIt(&o)
			wantViolation(t, tc.want, check(s, accepted, o, true))
		})
	}
	if v := check(s, accepted, good(), false); len(v) == 0 || !strings.HasPrefix(v[0].Invariant, "I1") {
		t.Fatalf("a run that did not settle: %v", v)
	}
}

// wantViolation fails t unless v holds a violation of invariant want.
func wantViolation(t *testing.T, want string, v []Violation) {
	t.Helper()
	for _, x := range v {
		if x.Invariant == want {
			return
		}
	}
	t.Fatalf("want a %s violation, got %v", want, v)
}

// processed is a PROCESSED event with outcome and a clean audit.
func processed(id string, outcome ledger.Outcome) ledger.Event {
	return ledger.Event{EventID: id, Status: ledger.StatusProcessed, Result: &ledger.Result{Outcome: outcome}, Audit: []ledger.AuditEntry{
		{Action: "accept", To: ledger.StatusReceived, Actor: "intake"},
		{Action: "claim", From: ledger.StatusReceived, To: ledger.StatusProcessing, Actor: "w1"},
		{Action: "complete", From: ledger.StatusProcessing, To: ledger.StatusProcessed, Actor: "w1"},
	}}
}

// call is an effect call as the downstream recorded it: the version it
// carried in the header and the body, at seq.
func call(op, kind string, version int64, seq int64, applied bool) pt.Arrival {
	v := strconv.FormatInt(version, 10)
	return pt.Arrival{Method: "POST", Key: op, Kind: kind, Seq: seq, Version: v, BodyVersion: json.RawMessage(strconv.Quote(v)), Applied: applied, Status: 200}
}

// wantDetail fails t unless v holds a violation of invariant want whose
// detail contains substr.
func wantDetail(t *testing.T, want, substr string, v []Violation) {
	t.Helper()
	for _, x := range v {
		if x.Invariant == want && strings.Contains(x.Detail, substr) {
			return
		}
	}
	t.Fatalf("want a %s violation saying %q, got %v", want, substr, v)
}

// I7 for while_current effects on hand-made runs: O-1 is cancelled at r2
// and an operator confirms it at r3 (the override); O-2 is cancelled at
// r1 and stays so. Each broken rule is found, and the runs the rules
// allow pass.
func TestCheckTruthWhileCurrent(t *testing.T) {
	s := Schedule{Events: []Event{
		{ID: "a", Subject: "O-1", Revision: 1, Status: "created"},
		{ID: "b", Subject: "O-1", Revision: 2, Status: "cancelled"},
		{ID: "c", Subject: "O-1", Revision: 3, Status: "confirmed"},
		{ID: "d", Subject: "O-2", Revision: 1, Status: "cancelled"},
	}}
	accepted := []bool{true, true, true, true}
	rf, nt := Ops("O-1", 2)
	rf2, nt2 := Ops("O-2", 1)
	comp, comp2 := ledger.CompensationID(nt), ledger.CompensationID(nt2)
	intent := func(op, kind, subject string, st ledger.IntentStatus) ledger.IntentState {
		return ledger.IntentState{OperationID: op, Kind: kind, Subject: subject, Status: st}
	}
	// The sequence: O-2 r1 (seq 1), O-1 r1 (2), r2 (3), O-2's calls (4,
	// 5), the override r3 sampled at 10.
	base := func() observed {
		return observed{
			outbox: true,
			events: map[string]ledger.Event{"a": processed("a", ledger.OutcomeApplied), "b": processed("b", ledger.OutcomeApplied),
				"c": processed("c", ledger.OutcomeApplied), "d": processed("d", ledger.OutcomeApplied)},
			projections: map[string]ledger.Projection{
				"O-1": {Subject: "O-1", Version: 3, State: map[string]any{"status": "confirmed"}},
				"O-2": {Subject: "O-2", Version: 1, State: map[string]any{"status": "cancelled"}},
			},
			history: map[string][]sample{
				"O-2": {{seq: 1, version: 1, status: "cancelled"}},
				"O-1": {{seq: 2, version: 1, status: "created"}, {seq: 3, version: 2, status: "cancelled"}, {seq: 10, version: 3, status: "confirmed"}},
			},
			effects:  map[string]int{rf2: 1, nt2: 1},
			arrivals: []pt.Arrival{call(rf2, "refund", 1, 4, true), call(nt2, "notify_cancellation", 1, 5, true)},
			intents: []ledger.IntentState{
				intent(rf2, "refund", "O-2", ledger.IntentStatusSucceeded), intent(nt2, "notify_cancellation", "O-2", ledger.IntentStatusSucceeded),
			},
		}
	}
	// The override while both effects were queued: OBSOLETE, no call.
	queued := func() observed {
		o := base()
		o.intents = append(o.intents, intent(rf, "refund", "O-1", ledger.IntentStatusObsolete), intent(nt, "notify_cancellation", "O-1", ledger.IntentStatusObsolete))
		return o
	}
	// The override after both were performed: the refund is an attention
	// item (CONTRADICTED by r3), the notice is compensated.
	performed := func() observed {
		o := base()
		in := intent(rf, "refund", "O-1", ledger.IntentStatusContradicted)
		in.ContradictedBy = 3
		n := intent(nt, "notify_cancellation", "O-1", ledger.IntentStatusSucceeded)
		n.ContradictedBy, n.CompensatedBy = 3, comp
		o.intents = append(o.intents, in, n, intent(comp, "notify_reinstatement", "O-1", ledger.IntentStatusSucceeded))
		o.effects[rf], o.effects[nt], o.effects[comp] = 1, 1, 1
		o.arrivals = append(o.arrivals, call(rf, "refund", 2, 6, true), call(nt, "notify_cancellation", 2, 7, true), call(comp, "notify_reinstatement", 3, 11, true))
		return o
	}
	// The refund's dispatcher checked at seq 8 (before the override) and
	// was held until 12: its call at 13 falls in the window no local
	// transaction closes, and is recorded.
	held := func() observed {
		o := queued()
		o.intents[2].Status, o.intents[2].ContradictedBy = ledger.IntentStatusContradicted, 3
		o.effects[rf] = 1
		o.arrivals = append(o.arrivals, call(rf, "refund", 2, 13, true))
		o.windows = []window{{from: 8, to: 12}}
		return o
	}
	for name, o := range map[string]observed{"queued": queued(), "performed": performed(), "in the window": held()} {
		if v := check(s, accepted, o, true); len(v) != 0 {
			t.Fatalf("%s: the right run was judged wrong: %v", name, v)
		}
	}
	cases := []struct {
		name, want, says string
		base             func() observed
		breakIt          func(o *observed)
	}{
		{"refund performed before the override and not recorded", I7, "records neither CONTRADICTED nor a compensation", performed, func(o *observed) {
			o.intents[2].Status = ledger.IntentStatusSucceeded
		}},
		{"notice compensated but the compensation never effective", I7, "want exactly once", performed, func(o *observed) {
			delete(o.effects, comp)
			o.arrivals = o.arrivals[:len(o.arrivals)-1]
		}},
		{"refund performed after the override (the O-42 story), though recorded", I7, "should have ended OBSOLETE", held, func(o *observed) {
			o.windows = nil
		}},
		{"refund performed after the override by a dispatcher held since after it", I7, "should have ended OBSOLETE", held, func(o *observed) {
			o.windows = []window{{from: 11, to: 12}}
		}},
		{"CONTRADICTED but never performed", I7, "never effective", queued, func(o *observed) {
			o.intents[2].Status, o.intents[2].ContradictedBy = ledger.IntentStatusContradicted, 3
		}},
		{"a compensation of a notice never sent", I7, "was never effective, yet its compensation", queued, func(o *observed) {
			o.effects[comp] = 1
			o.arrivals = append(o.arrivals, call(comp, "notify_reinstatement", 3, 11, true))
			o.intents = append(o.intents, intent(comp, "notify_reinstatement", "O-1", ledger.IntentStatusSucceeded))
		}},
		{"a compensation though the order stayed cancelled", I7, "stayed cancelled", queued, func(o *observed) {
			o.effects[comp2] = 1
			o.arrivals = append(o.arrivals, call(comp2, "notify_reinstatement", 1, 11, true))
			o.intents = append(o.intents, intent(comp2, "notify_reinstatement", "O-2", ledger.IntentStatusSucceeded))
		}},
		{"CONTRADICTED by a revision that took nothing back", I7, "which is no applied revision", performed, func(o *observed) {
			o.intents[2].ContradictedBy = 2
		}},
		{"the held cancellation's refund lost", I2, "never effective", queued, func(o *observed) {
			delete(o.effects, rf2)
			o.arrivals = o.arrivals[1:]
		}},
		{"the call carries another version", I7, "X-Subject-Version", performed, func(o *observed) {
			o.arrivals[2].Version = "3"
		}},
		{"the call's body carries the version as a number", I7, "subject_version 2", performed, func(o *observed) {
			o.arrivals[2].BodyVersion = json.RawMessage("2")
		}},
		{"the arrivals disagree with the downstream's count", Harness, "arrivals record", queued, func(o *observed) {
			o.arrivals[0].Applied = false
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.base()
			tc.breakIt(&o)
			wantDetail(t, tc.want, tc.says, check(s, accepted, o, true))
		})
	}
}

// I7 for latest effects on hand-made runs: a subscription granted at its
// creation and revoked by a later update. Each broken rule is found.
func TestCheckTruthLatest(t *testing.T) {
	const sub = "sub_chaos_1"
	s := Schedule{Events: []Event{
		{ID: "evt_c", Source: SourceStripe, Subject: sub, Type: "created", Revision: 0, Status: "active"},
		{ID: "evt_u", Source: SourceStripe, Subject: sub, Type: "updated", Revision: 2, Status: "unpaid"},
	}}
	accepted := []bool{true, true}
	c, u := s.Events[0], s.Events[1]
	grant, revoke := StripeOp(c), StripeOp(u)
	good := func() observed {
		return observed{
			outbox:      true,
			events:      map[string]ledger.Event{"evt_c": processed("evt_c", ledger.OutcomeApplied), "evt_u": processed("evt_u", ledger.OutcomeApplied)},
			projections: map[string]ledger.Projection{sub: {Name: "stripe_subscription", Subject: sub, Version: StripeVersion(u), State: map[string]any{"status": "unpaid", "deleted": false}}},
			effects:     map[string]int{grant: 1, revoke: 1},
			arrivals:    []pt.Arrival{call(grant, "entitlement.grant", StripeVersion(c), 1, true), call(revoke, "entitlement.revoke", StripeVersion(u), 2, true)},
			intents: []ledger.IntentState{
				{OperationID: grant, Kind: "entitlement.grant", Subject: sub, Status: ledger.IntentStatusSucceeded},
				{OperationID: revoke, Kind: "entitlement.revoke", Subject: sub, Status: ledger.IntentStatusSucceeded},
			},
		}
	}
	if v := check(s, accepted, good(), true); len(v) != 0 {
		t.Fatalf("the right run was judged wrong: %v", v)
	}
	// The grant superseded before it was sent: the downstream never saw
	// it and ends revoked, which is right.
	superseded := good()
	superseded.intents[0].Status = ledger.IntentStatusSuperseded
	superseded.effects, superseded.arrivals = map[string]int{revoke: 1}, superseded.arrivals[1:]
	if v := check(s, accepted, superseded, true); len(v) != 0 {
		t.Fatalf("a superseded grant was judged wrong: %v", v)
	}
	cases := []struct {
		name, says string
		breakIt    func(o *observed)
	}{
		{"the grant retried after the revoke", "an older state after a newer one", func(o *observed) {
			o.arrivals[0].Seq, o.arrivals[1].Seq = 3, 2
		}},
		{"the downstream ends entitled though the subscription is unpaid", "ends entitled=true", func(o *observed) {
			o.arrivals[0].Seq, o.arrivals[1].Seq = 3, 2
		}},
		{"the revoke lost: the downstream stays entitled", "ends entitled=true", func(o *observed) {
			delete(o.effects, revoke)
			o.arrivals = o.arrivals[:1]
			o.intents[1].Status = ledger.IntentStatusSuperseded
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := good()
			tc.breakIt(&o)
			wantDetail(t, I7, tc.says, check(s, accepted, o, true))
		})
	}
	// The newest intent owned by an operator: the downstream may differ.
	o := good()
	delete(o.effects, revoke)
	o.arrivals = o.arrivals[:1]
	o.intents[1].Status = ledger.IntentStatusQuarantined
	for _, v := range check(s, accepted, o, true) {
		if v.Invariant == I7 {
			t.Fatalf("an operator-owned newest intent was judged: %v", v)
		}
	}
}

// I9 on hand-made runs: O-1 created at r1, cancelled at r3, confirmed at
// r2 too late (stale), and cancelled again at r4 (the version advanced,
// the same state: its record written by the reconciler's check); and a
// subscription created active, then deleted. The right warehouse passes,
// each broken rule is found, and an operator-owned record may be missing
// unless it is the current one's and only FAILED.
func TestCheckWarehouse(t *testing.T) {
	const sub = "sub_chaos_1"
	s := Schedule{Events: []Event{
		{ID: "a", Subject: "O-1", Revision: 1, Status: "created"},
		{ID: "b", Subject: "O-1", Revision: 3, Status: "cancelled"},
		{ID: "c", Subject: "O-1", Revision: 2, Status: "confirmed"},
		{ID: "d", Subject: "O-1", Revision: 4, Status: "cancelled"},
		{ID: "evt_c", Source: SourceStripe, Subject: sub, Type: "created", Revision: 0, Status: "active"},
		{ID: "evt_d", Source: SourceStripe, Subject: sub, Type: "deleted", Revision: 4, Status: "canceled"},
	}}
	accepted := []bool{true, true, true, true, true, true}
	rf, nt := Ops("O-1", 3)
	created, deleted := s.Events[4], s.Events[5]
	const prefix = "records"
	type rev struct {
		scope, proj, subject string
		v                    int64
		state                map[string]any
		event                string
	}
	record := func(r rev) (op, key string, body []byte, in ledger.IntentState) {
		wi := warehouse.Intent(projection.Write{Name: r.scope + "/" + r.proj, Subject: r.subject, Version: r.v, State: r.state}, r.scope, r.event, pt.Start, 0)
		rec, err := warehouse.FromPayload(wi.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if body, err = rec.Encode(); err != nil {
			t.Fatal(err)
		}
		return wi.OperationID, warehouse.Key(prefix, r.scope, r.proj, r.subject, r.v), body,
			ledger.IntentState{OperationID: wi.OperationID, Kind: warehouse.Kind, Subject: r.subject, Status: ledger.IntentStatusSucceeded, Payload: wi.Payload}
	}
	order := func(v int64, status, event string) rev {
		return rev{"orders", builtin.OrderProjection, "O-1", v, map[string]any{"status": status}, event}
	}
	subscription := func(e Event) rev {
		return rev{"stripe", builtin.StripeSubscriptionProjection, sub, StripeVersion(e),
			map[string]any{"status": e.Status, "deleted": e.Type == "deleted"}, e.ID}
	}
	revs := map[string]rev{"v1": order(1, "created", "a"), "v3": order(3, "cancelled", "b"), "v4": order(4, "cancelled", "d"),
		"created": subscription(created), "deleted": subscription(deleted)}
	ops, keys, bodies := map[string]string{}, map[string]string{}, map[string][]byte{}
	good := func() observed {
		w := &warehouseObs{prefix: prefix, objects: map[string][]byte{}, intents: map[string]ledger.IntentState{}}
		o := observed{
			events: map[string]ledger.Event{"a": processed("a", ledger.OutcomeApplied), "b": processed("b", ledger.OutcomeApplied),
				"c": processed("c", ledger.OutcomeStale), "d": processed("d", ledger.OutcomeNoop),
				"evt_c": processed("evt_c", ledger.OutcomeApplied), "evt_d": processed("evt_d", ledger.OutcomeApplied)},
			projections: map[string]ledger.Projection{
				"O-1": {Subject: "O-1", Version: 4, State: map[string]any{"status": "cancelled"}},
				sub:   {Subject: sub, Version: StripeVersion(deleted), Terminal: true, State: map[string]any{"status": "canceled", "deleted": true}},
			},
			effects:   map[string]int{rf: 1, nt: 1, StripeOp(created): 1, StripeOp(deleted): 1},
			warehouse: w,
		}
		for name, r := range revs {
			op, key, body, in := record(r)
			ops[name], keys[name], bodies[name] = op, key, body
			w.objects[key], w.intents[op] = body, in
		}
		return o
	}
	if v := check(s, accepted, good(), true); len(v) != 0 {
		t.Fatalf("the right warehouse was judged wrong: %v", v)
	}
	cases := []struct {
		name, says string
		breakIt    func(o *observed)
	}{
		{"last write wins: one object per subject, the late older revision in it", "current row is version 1", func(o *observed) {
			w := o.warehouse
			for _, n := range []string{"v1", "v3", "v4"} {
				delete(w.objects, keys[n])
			}
			w.objects[prefix+"/scope=orders/projection=order/subject=Ty0x/current.json"] = bodies["v1"]
		}},
		{"a stale revision recorded", "version 2 (confirmed, by c), which the model says was never applied", func(o *observed) {
			_, key, body, _ := record(order(2, "confirmed", "c"))
			o.warehouse.objects[key] = body
		}},
		{"a record with another state", "the record of version 3 says confirmed", func(o *observed) {
			_, _, body, _ := record(order(3, "confirmed", "b"))
			o.warehouse.objects[keys["v3"]] = body
		}},
		{"a record naming another event", "names event a", func(o *observed) {
			_, _, body, _ := record(order(3, "cancelled", "a"))
			o.warehouse.objects[keys["v3"]] = body
		}},
		{"a version twice in the change log", "version 3 appears 2 times", func(o *observed) {
			o.warehouse.objects[keys["v3"]+".copy"] = bodies["v3"]
		}},
		{"SUCCEEDED without the record in the store", "holds nothing at its key", func(o *observed) {
			delete(o.warehouse.objects, keys["v1"])
		}},
		{"an applied revision missing from the change log", "version 1 was applied (by [a])", func(o *observed) {
			delete(o.warehouse.objects, keys["v1"])
		}},
		{"the current version's record FAILED and never repaired", "current row is version 3", func(o *observed) {
			delete(o.warehouse.objects, keys["v4"])
			in := o.warehouse.intents[ops["v4"]]
			in.Status = ledger.IntentStatusFailed
			o.warehouse.intents[ops["v4"]] = in
		}},
		{"the deletion not recorded as deleted", "says canceled; the event applied there said [canceled+deleted]", func(o *observed) {
			r := revs["deleted"]
			r.state = map[string]any{"status": "canceled", "deleted": false}
			_, _, body, _ := record(r)
			o.warehouse.objects[keys["deleted"]] = body
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := good()
			tc.breakIt(&o)
			wantDetail(t, I9, tc.says, check(s, accepted, o, true))
		})
	}
	// Owned by an operator: an older revision's FAILED record, or the
	// current one's QUARANTINED record, may be missing.
	for name, owned := range map[string]struct {
		rev string
		st  ledger.IntentStatus
	}{"older FAILED": {"v1", ledger.IntentStatusFailed}, "current QUARANTINED": {"v4", ledger.IntentStatusQuarantined}} {
		o := good()
		delete(o.warehouse.objects, keys[owned.rev])
		in := o.warehouse.intents[ops[owned.rev]]
		in.Status = owned.st
		o.warehouse.intents[ops[owned.rev]] = in
		if v := check(s, accepted, o, true); len(v) != 0 {
			t.Fatalf("%s: an operator-owned record was judged: %v", name, v)
		}
	}
	// A repair that SUCCEEDED makes the FAILED original's record due again.
	o := good()
	delete(o.warehouse.objects, keys["v1"])
	in := o.warehouse.intents[ops["v1"]]
	in.Status = ledger.IntentStatusFailed
	o.warehouse.intents[ops["v1"]] = in
	rep := in
	rep.OperationID, rep.Status = warehouse.RepairID(ops["v1"], 1), ledger.IntentStatusSucceeded
	o.warehouse.intents[rep.OperationID] = rep
	wantDetail(t, I9, "version 1 was applied", check(s, accepted, o, true))
}

// I10 on hand-made runs under the rule that reuses its state sync's
// operation id: O-1 goes created (r1) → confirmed (r3). The downstream
// synced at r3, or left at r1 with r3's event quarantined
// operation_id_reused naming the id, is right (the quarantined event is
// then left out of the model: the projection stays at r1); left at r1 and
// nobody told is I10, and so is such a quarantine outside the rule.
func TestCheckReuseConvergesOrTells(t *testing.T) {
	s := Schedule{ReuseIDs: true, Events: []Event{
		{ID: "a", Subject: "O-1", Revision: 1, Status: "created"},
		{ID: "b", Subject: "O-1", Revision: 3, Status: "confirmed"},
	}}
	accepted := []bool{true, true}
	op := ReuseOp("O-1")
	audit := func(to ledger.Status, action string) []ledger.AuditEntry {
		return []ledger.AuditEntry{{Action: "accept", To: ledger.StatusReceived, Actor: "intake"},
			{Action: "claim", From: ledger.StatusReceived, To: ledger.StatusProcessing, Actor: "w1"},
			{Action: action, From: ledger.StatusProcessing, To: to, Actor: "w1", Reason: "why"}}
	}
	applied := func(id string) ledger.Event {
		return ledger.Event{EventID: id, Status: ledger.StatusProcessed, Result: &ledger.Result{Outcome: ledger.OutcomeApplied}, Audit: audit(ledger.StatusProcessed, "complete")}
	}
	sync := func(version string) []pt.Arrival {
		return []pt.Arrival{{Method: "POST", Key: op, Kind: SyncKind, Subject: "O-1", Version: version, Applied: true, Seq: 1}}
	}
	converged := observed{
		events:      map[string]ledger.Event{"a": applied("a"), "b": applied("b")},
		projections: map[string]ledger.Projection{"O-1": {Subject: "O-1", Version: 3, State: map[string]any{"status": "confirmed"}}},
		effects:     map[string]int{op: 1}, arrivals: sync("3"),
	}
	if v := check(s, accepted, converged, true); len(v) != 0 {
		t.Fatalf("a downstream synced at the truth was judged wrong: %v", v)
	}
	told := observed{
		events: map[string]ledger.Event{"a": applied("a"), "b": {EventID: "b", Status: ledger.StatusQuarantined, ErrorCode: projection.CodeOperationIDReused,
			ErrorMessage: `operation id "` + op + `" reused: ...`, Audit: audit(ledger.StatusQuarantined, "quarantine")}},
		projections: map[string]ledger.Projection{"O-1": {Subject: "O-1", Version: 1, State: map[string]any{"status": "created"}}},
		effects:     map[string]int{op: 1}, arrivals: sync("1"),
	}
	if v := check(s, accepted, told, true); len(v) != 0 {
		t.Fatalf("a reuse an operator was told about was judged wrong: %v", v)
	}
	silent := observed{
		events:      map[string]ledger.Event{"a": applied("a"), "b": applied("b")},
		projections: map[string]ledger.Projection{"O-1": {Subject: "O-1", Version: 3, State: map[string]any{"status": "confirmed"}}},
		effects:     map[string]int{op: 1}, arrivals: sync("1"),
	}
	wantDetail(t, I10, "no operator was told", check(s, accepted, silent, true))
	outside := s
	outside.ReuseIDs = false
	wantDetail(t, I10, "reuse no operation id", check(outside, accepted, told, true))
}
