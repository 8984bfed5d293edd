package capacity_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/effectively-once/webhooks/internal/harness/capacity"
)

// TestDesignCosts processes the same realistic 4 KB events in every design
// and checks what was performed and the ordering of the costs: ours pays
// more than every design that fails chaos schedules, and than the
// powertools-style one, on both events.
func TestDesignCosts(t *testing.T) {
	events := []capacity.DesignEvent{capacity.OrderCancellation(4 << 10), capacity.SubscriptionCreated(4 << 10)}
	var all [][]capacity.DesignRow
	for _, ev := range events {
		rows, err := capacity.MeasureDesigns(context.Background(), ev)
		if err != nil {
			t.Fatalf("%s: %v", ev.Name, err)
		}
		all = append(all, rows)
		by := map[string]capacity.DesignRow{}
		for _, r := range rows {
			by[r.Design] = r
			if r.Skipped {
				continue
			}
			t.Logf("%s | %-20s requests %2d  WU %2d  process %s | dispatch %s  performed %d", ev.Name, r.Design, r.Requests(), r.Units(), r.Process, r.Effects, r.Performed)
			if r.Performed != ev.Effects {
				t.Errorf("%s: %s performed %d effects, want %d", ev.Name, r.Design, r.Performed, ev.Effects)
			}
		}
		ours := by[capacity.DesignOurs]
		for _, name := range capacity.DesignNames[1:] {
			o := by[name]
			if o.Skipped {
				continue
			}
			if ours.Units() < o.Units() {
				t.Errorf("%s: ours (%d WU) is cheaper than %s (%d WU)", ev.Name, ours.Units(), name, o.Units())
			}
		}
		if pt := by[capacity.DesignPowertools]; ours.Requests() < pt.Requests() {
			t.Errorf("%s: ours (%d requests) makes fewer than powertools-style (%d)", ev.Name, ours.Requests(), pt.Requests())
		}
	}
	var table bytes.Buffer
	capacity.WriteDesignTable(&table, events, all)
	t.Logf("\n%s", table.String())
}
