package ledger_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// ListProjectionsChanged says when a bound left projections out (capped):
// with five projections changed, a limit of two returns two and is
// capped, though the scan read the whole table in one page; a limit at or
// above five returns all five, not capped; a read bound below the table's
// size is capped; and only the projections changed since the time asked
// are returned.
func TestListProjectionsChangedSaysWhenABoundLeftSomeOut(t *testing.T) {
	ctx := context.Background()
	f, _ := fixtureWithClient(t)
	for i := range 5 {
		c := claimed(t, f, fmt.Sprintf("evt_%d", i))
		w := &ledger.ProjectionWrite{Name: "orders/order", Subject: fmt.Sprintf("S-%d", i), Version: 1, Fingerprint: "fp", State: map[string]any{"status": "created"}}
		if _, err := f.L.Commit(ctx, c, w, nil); err != nil {
			t.Fatal(err)
		}
		f.Clock.Advance(time.Minute)
	}
	since := t0.Add(-time.Hour)
	for _, c := range []struct {
		limit, maxRead int
		since          time.Time
		n              int
		capped         bool
	}{
		{limit: 2, maxRead: 10000, since: since, n: 2, capped: true},
		{limit: 5, maxRead: 10000, since: since, n: 5, capped: false},
		{limit: 10, maxRead: 10000, since: since, n: 5, capped: false},
		{limit: 10, maxRead: 3, since: since, n: -1, capped: true},
		{limit: 10, maxRead: 10000, since: t0.Add(4 * time.Minute), n: 1, capped: false},
	} {
		ps, capped, err := f.L.ListProjectionsChanged(ctx, c.since, c.limit, c.maxRead)
		if err != nil || capped != c.capped || (c.n >= 0 && len(ps) != c.n) || len(ps) > c.limit {
			t.Fatalf("limit %d, read %d, since %s: %d projections, capped %v, %v; want %d, capped %v",
				c.limit, c.maxRead, c.since.Format(time.TimeOnly), len(ps), capped, err, c.n, c.capped)
		}
	}
}
