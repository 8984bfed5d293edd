package localwarehouse_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
)

// The warehouse sink's cost per applied event: the AWS requests the
// processor and the dispatcher make with the sink on, less those with it
// off, for n new orders (one applied revision each, no other effect), and
// the S3 requests. Printed for BENCHMARKS.md with -v.
func TestWarehouseCostPerEvent(t *testing.T) {
	const n = 20
	run := func(on bool) (proc, disp map[string]int, s3 map[string]int) {
		h := pt.NewOrders(t, pt.Options{}, pt.OutboxOptions{})
		var wh *pt.Warehouse
		if on {
			wh = h.EnableWarehouse(0)
		}
		w := h.NewWorker("w1")
		d := h.Outbox.NewDispatcher("d1")
		for i := range n {
			h.DeliverOrder(fmt.Sprintf("msg-%d", i), pt.OrderEvent("order.created", fmt.Sprintf("O-%d", i), 1, "", ""))
		}
		h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
		if on {
			if got := len(wh.Records()); got != n {
				t.Fatalf("records %d, want %d", got, n)
			}
			s3 = wh.Rec.Counts()
		}
		return w.Rec.Counts(), d.Rec.Counts(), s3
	}
	offP, offD, _ := run(false)
	onP, onD, s3 := run(true)
	diff := func(on, off map[string]int) string {
		var parts []string
		for op, c := range on {
			if d := c - off[op]; d != 0 {
				parts = append(parts, fmt.Sprintf("%s %+.2f", op, float64(d)/n))
			}
		}
		sort.Strings(parts)
		return strings.Join(parts, ", ")
	}
	t.Logf("per applied event, sink on minus off: processor: %s", diff(onP, offP))
	t.Logf("per applied event, sink on minus off: dispatcher: %s", diff(onD, offD))
	t.Logf("per applied event: S3: %s", diff(s3, nil))
	if s3["S3.PutObject"] != n {
		t.Fatalf("S3 PutObject %d for %d records: %v", s3["S3.PutObject"], n, s3)
	}
}
