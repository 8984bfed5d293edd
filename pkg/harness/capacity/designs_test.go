package capacity_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/effectively-once/webhooks/pkg/harness/capacity"
)

// TestDesignCosts processes the same realistic 4 KB order cancellation in
// every design and checks what was performed and the ordering of costs.
func TestDesignCosts(t *testing.T) {
	rows, err := capacity.MeasureDesigns(context.Background(), 4<<10)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]capacity.DesignRow{}
	for _, r := range rows {
		by[r.Design] = r
		t.Logf("%-20s requests %2d  WU %2d  process %s | dispatch %s  performed %d", r.Design, r.Requests(), r.Units(), r.Process, r.Effects, r.Performed)
	}
	var table bytes.Buffer
	capacity.WriteDesignTable(&table, rows)
	t.Logf("\n%s", table.String())
	for _, name := range capacity.DesignNames {
		if by[name].Performed != 2 {
			t.Errorf("%s performed %d effects, want the refund and the notice", name, by[name].Performed)
		}
	}
	ours, pt := by[capacity.DesignOurs], by[capacity.DesignPowertools]
	if ours.Units() < pt.Units() || ours.Requests() < pt.Requests() {
		t.Errorf("ours (%d WU, %d requests) is not at least powertools-style (%d WU, %d requests)", ours.Units(), ours.Requests(), pt.Units(), pt.Requests())
	}
	for _, name := range []string{"checkthen", "split", "nolease"} {
		if n := by[name]; ours.Units() < n.Units() {
			t.Errorf("ours (%d WU) is cheaper than %s (%d WU)", ours.Units(), name, n.Units())
		}
	}
	if de := by[capacity.DesignDispatchEverything]; de.Units() > ours.Units() {
		t.Errorf("dispatch-everything (%d WU) costs more than ours (%d WU)", de.Units(), ours.Units())
	}
}
