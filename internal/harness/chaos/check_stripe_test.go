package chaos

import (
	"testing"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// The Stripe subscription model on hand-made final states: in both orders
// a skewed update and the deletion may be processed in, the deletion is
// final; each broken rule (ordering, terminal deletion, intents) is found.
func TestCheckStripeSubscription(t *testing.T) {
	const sub = "sub_chaos_1"
	s := Schedule{Events: []Event{
		{ID: "evt_c", Source: SourceStripe, Subject: sub, Type: "created", Revision: 0, Status: "active"},
		{ID: "evt_u", Source: SourceStripe, Subject: sub, Type: "updated", Revision: 2, Status: "past_due"},
		{ID: "evt_d", Source: SourceStripe, Subject: sub, Type: "deleted", Revision: 3, Status: "canceled"},
		{ID: "evt_k", Source: SourceStripe, Subject: sub, Type: "updated", Revision: 5, Status: "active"}, // stamped after the deletion
	}}
	accepted := []bool{true, true, true, true}
	ev := func(outcome ledger.Outcome) ledger.Event {
		return ledger.Event{Status: ledger.StatusProcessed, Result: &ledger.Result{Outcome: outcome}, Audit: []ledger.AuditEntry{
			{Action: "accept", To: ledger.StatusReceived, Actor: "intake"},
			{Action: "claim", From: ledger.StatusReceived, To: ledger.StatusProcessing, Actor: "w1"},
			{Action: "complete", From: ledger.StatusProcessing, To: ledger.StatusProcessed, Actor: "w1"},
		}}
	}
	c, u, d, k := s.Events[0], s.Events[1], s.Events[2], s.Events[3]
	proj := func(e Event, terminal bool) ledger.Projection {
		return ledger.Projection{Name: "stripe_subscription", Subject: sub, Version: StripeVersion(e), Terminal: terminal,
			State: map[string]any{"status": e.Status, "deleted": terminal}}
	}
	// The deletion was processed before the skewed update: it is terminal.
	deletedFirst := func() observed {
		return observed{
			events: map[string]ledger.Event{"evt_c": ev(ledger.OutcomeApplied), "evt_u": ev(ledger.OutcomeApplied),
				"evt_d": ev(ledger.OutcomeApplied), "evt_k": ev(ledger.OutcomeStale)},
			projections: map[string]ledger.Projection{sub: proj(d, true)},
			effects:     map[string]int{StripeOp(c): 1, StripeOp(u): 1, StripeOp(d): 1},
		}
	}
	// The skewed update was processed first: it applied, and then the
	// deletion (whose version outranks every non-deletion) applied over it.
	updateFirst := func() observed {
		return observed{
			events: map[string]ledger.Event{"evt_c": ev(ledger.OutcomeApplied), "evt_u": ev(ledger.OutcomeApplied),
				"evt_d": ev(ledger.OutcomeApplied), "evt_k": ev(ledger.OutcomeApplied)},
			projections: map[string]ledger.Projection{sub: proj(d, true)},
			effects:     map[string]int{StripeOp(c): 1, StripeOp(u): 1, StripeOp(k): 1, StripeOp(d): 1},
		}
	}
	for name, o := range map[string]observed{"deleted first": deletedFirst(), "update first": updateFirst()} {
		if v := check(s, accepted, o, true); len(v) != 0 {
			t.Fatalf("%s: the right final state was judged wrong: %v", name, v)
		}
	}
	if StripeOp(c) == StripeOp(u) || StripeOp(u) == StripeOp(k) {
		t.Fatal("operation ids of different versions collide")
	}
	cases := []struct {
		name, want string
		base       func() observed
		breakIt    func(o *observed)
	}{
		{"deleted subscription revived", I3, deletedFirst, func(o *observed) {
			o.events["evt_k"] = ev(ledger.OutcomeApplied)
			o.projections[sub] = proj(k, false)
			o.effects[StripeOp(k)] = 1
		}},
		{"older version won", I3, updateFirst, func(o *observed) { o.projections[sub] = proj(u, false) }},
		{"deletion lost", I3, deletedFirst, func(o *observed) {
			o.events["evt_d"] = ev(ledger.OutcomeStale)
			o.projections[sub] = proj(u, false)
			delete(o.effects, StripeOp(d))
		}},
		{"deletion not terminal", I3, deletedFirst, func(o *observed) { o.projections[sub] = proj(d, false) }},
		{"suppressed intent took effect", I2, deletedFirst, func(o *observed) { o.effects[StripeOp(k)] = 1 }},
		{"revoke lost", I2, deletedFirst, func(o *observed) { delete(o.effects, StripeOp(d)) }},
		{"grant effective twice", I2, updateFirst, func(o *observed) { o.effects[StripeOp(k)] = 2 }},
		{"a change recorded as noop", I3, deletedFirst, func(o *observed) {
			o.events["evt_u"] = ev(ledger.OutcomeNoop)
			delete(o.effects, StripeOp(u))
		}},
		{"skewed update beat the deletion", I3, updateFirst, func(o *observed) {
			o.events["evt_d"] = ev(ledger.OutcomeStale)
			o.projections[sub] = proj(k, false)
			delete(o.effects, StripeOp(d))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.base()
			tc.breakIt(&o)
			wantViolation(t, tc.want, check(s, accepted, o, true))
		})
	}
}
