package recovery

import (
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// TestSpan: a kill is charged with the events accepted and the intents
// existing before it that finish after it; "own" leaves out what an
// earlier kill already found in flight; what finished before the kill or
// arrived after it does not count.
func TestSpan(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	o := observed{
		accepted: map[string]time.Time{
			"stripe/old":    at(1),  // in flight at both kills (kill 1 held it)
			"stripe/done":   at(2),  // processed before kill 1
			"orders/new":    at(12), // between the kills
			"orders/after":  at(25), // after kill 2
			"stripe/never":  at(13), // never processed
			"orders/cancel": at(14),
		},
		processed: map[string]time.Time{
			"stripe/old": at(190), "stripe/done": at(3), "orders/new": at(21), "orders/after": at(26), "orders/cancel": at(15),
		},
		audits: map[string][]ledger.AuditEntry{
			"orders/new": {{At: at(12), To: ledger.StatusReceived, Action: "accept"}, {At: at(21), From: ledger.StatusProcessing, To: ledger.StatusProcessed, Actor: "$LATEST/p2"}},
		},
		intents: []intentObs{
			{op: "refund-1", kind: "refund", causation: "orders/cancel", status: ledger.IntentStatusSucceeded, created: at(15), finished: at(40)},
			{op: "grant-0", kind: "entitlement.grant", causation: "stripe/done", status: ledger.IntentStatusSucceeded, created: at(3), finished: at(4)},
			{op: "grant-old", kind: "entitlement.grant", causation: "stripe/old", status: ledger.IntentStatusSucceeded, created: at(190), finished: at(191)},
		},
	}
	kill1, kill2 := at(10), at(20)

	s := o.span(kill1, time.Time{})
	if s.Events != 1 || s.ToProcessed != 180*time.Second || s.Intents != 1 || s.ToSettled != 181*time.Second {
		t.Fatalf("kill 1: %+v", s)
	}
	s = o.span(kill2, time.Time{})
	if s.Events != 3 || s.EventsUnfinished != 1 || s.ToProcessed != 170*time.Second || s.Intents != 2 || s.ToSettled != 171*time.Second {
		t.Fatalf("kill 2 strict: %+v", s)
	}
	s = o.span(kill2, kill1)
	if s.Events != 2 || s.EventsUnfinished != 1 || s.ToProcessed != time.Second || s.Intents != 1 || s.ToSettled != 20*time.Second {
		t.Fatalf("kill 2 own: %+v", s)
	}
	if !strings.HasPrefix(s.SlowestEvent, "orders/new: -8.00s RECEIVED accept; +1.00s PROCESSING→PROCESSED by $LATEST/p2") || !strings.HasPrefix(s.SlowestIntent, "refund refund-1 (of orders/cancel)") {
		t.Fatalf("slowest: %q / %q", s.SlowestEvent, s.SlowestIntent)
	}
	if a := o.afterLast(kill2); a.ToProcessed != 170*time.Second || a.ToSettled != 171*time.Second || a.EventsUnfinished != 1 {
		t.Fatalf("after the last kill: %+v", a)
	}
}
