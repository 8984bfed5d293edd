package chaos

import (
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/pkg/ledger"
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
