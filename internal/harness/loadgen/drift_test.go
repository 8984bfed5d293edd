package loadgen

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// TestDriftComparesFirstAndLastDeliveries: a run of 2,500 deliveries,
// answered in a shuffled order, whose latency grows with the send time;
// the first 1,000 by send time and the last 1,000 are compared, for intake
// and for time to PROCESSED. A run under 2,000 deliveries has no drift.
func TestDriftComparesFirstAndLastDeliveries(t *testing.T) {
	start := time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC)
	var (
		sends  []sent
		events []*Event
		rows   = map[*Event]ledger.Event{}
	)
	for i := range 2500 {
		ev := &Event{Source: "stripe", ID: fmt.Sprintf("evt_%d", i), Subject: fmt.Sprintf("sub_%d", i), Last: true}
		at := start.Add(time.Duration(i) * 10 * time.Millisecond)
		// Intake: i/100 ms; to PROCESSED: 100 ms + i/10 ms.
		sends = append(sends, sent{ev: ev, at: at, latency: time.Duration(i) * 10 * time.Microsecond, status: 202})
		events = append(events, ev)
		rows[ev] = ledger.Event{Status: ledger.StatusProcessed, ProcessedAt: at.Add(100*time.Millisecond + time.Duration(i)*100*time.Microsecond),
			Result: &ledger.Result{Outcome: ledger.OutcomeApplied}}
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(sends), func(i, j int) { sends[i], sends[j] = sends[j], sends[i] })
	var r Result
	r.summarizeSends(sends, 25*time.Second)
	r.summarizeEvents(events, rows, firstSent(sends), firstAccepted(sends))
	d := r.Drift
	if d == nil || d.Window != 1000 {
		t.Fatalf("drift %+v", d)
	}
	// Nearest rank: the 500th of 0..999 is 499; of 1500..2499, 1999.
	for name, c := range map[string]struct{ got, want float64 }{
		"intake first p50": {d.IntakeFirst.P50, 4.99}, "intake last p50": {d.IntakeLast.P50, 19.99},
		"intake first p99": {d.IntakeFirst.P99, 9.89}, "intake last p99": {d.IntakeLast.P99, 24.89},
		"e2e first p50": {d.EndToEndFirst.P50, 149.9}, "e2e last p50": {d.EndToEndLast.P50, 299.9},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}
	if d.IntakeFirst.N != 1000 || d.EndToEndLast.N != 1000 {
		t.Errorf("windows of %d and %d", d.IntakeFirst.N, d.EndToEndLast.N)
	}
	if got := Ratio(d.IntakeFirst.P50, d.IntakeLast.P50); got < 4 || got > 4.01 {
		t.Errorf("ratio %v", got)
	}
	var short Result
	short.summarizeSends(sends[:1999], 20*time.Second)
	if short.Drift != nil {
		t.Errorf("a run of 1,999 deliveries has a drift: %+v", short.Drift)
	}
}
