package capacity_test

import (
	"context"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/internal/harness/capacity"
)

// TestMeasureIntakeCPUTiny runs the out-of-process CPU comparison on a few
// deliveries: both function processes report CPU and allocations for every
// block, and the profile is of our handler.
func TestMeasureIntakeCPUTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the worker and runs two function processes")
	}
	// 400 profiled deliveries: at pprof's 100 Hz, fewer leave a handful
	// of samples, which may all fall outside the handler (the GC).
	rep, err := capacity.MeasureIntakeCPU(context.Background(), capacity.CPUOptions{Procs: []int{1}, Reps: 2, PerBlock: 10, Warmup: 5, ProfileN: 400})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 2 {
		t.Fatalf("%d rows, want one per default size (2)", len(rep.Rows))
	}
	for _, r := range rep.Rows {
		for _, c := range capacity.CPUContenders {
			if cpu := r.CPUOf(c); cpu.Min <= 0 || capacity.Of(r.Allocs, c) <= 0 {
				t.Errorf("%d B, %s: CPU %+v, allocations %.0f per delivery: want > 0", r.PayloadBytes, c, cpu, capacity.Of(r.Allocs, c))
			}
			if c != capacity.ContenderBare && r.Ratio(c, capacity.ContenderBare).Min <= 0 {
				t.Errorf("%d B: %s/bare %+v", r.PayloadBytes, c, r.Ratio(c, capacity.ContenderBare))
			}
		}
		if r.Deliveries != 20 {
			t.Errorf("%d B: %d deliveries each, want 20", r.PayloadBytes, r.Deliveries)
		}
	}
	ours := false
	for _, l := range append(rep.Profile, rep.ProfileCum...) {
		if strings.Contains(l, "/internal/intake.") || strings.Contains(l, "/internal/ledger.") {
			ours = true
		}
	}
	if !ours {
		t.Errorf("the profile names no function of package intake or ledger:\n%s", strings.Join(rep.Profile, "\n"))
	}
	// The profile is split into the parts of our work, each priced.
	parts := map[string]float64{}
	for _, it := range rep.Items {
		parts[it.Part] = it.Micros
	}
	total := rep.Items[len(rep.Items)-1].Micros
	sum := 0.0
	for _, it := range rep.Items[:len(rep.Items)-1] {
		sum += it.Micros
	}
	if len(rep.Items) < 10 || total <= 0 || sum < total*0.999 || sum > total*1.001 {
		t.Errorf("the parts (%.0f µs) do not add up to the profile (%.0f µs): %+v", sum, total, rep.Items)
	}
	if parts["DynamoDB requests: the event item's UpdateItem and the payload item's PutItem (SDK: serialization, signing, response)"] <= 0 {
		t.Errorf("no DynamoDB request in the profile: %+v", rep.Items)
	}
	var b strings.Builder
	capacity.WriteCPUTable(&b, rep)
	t.Logf("\n%s\n%s\n%s\n\n%s", b.String(), rep.ProfileCommand, strings.Join(rep.Profile, "\n"), strings.Join(rep.ProfileCum, "\n"))
}
