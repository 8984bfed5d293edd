package capacity_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/effectively-once/webhooks/internal/harness/capacity"
)

// TestWarehouseCost meters ours on the same realistic events with the
// warehouse sink off and on: with it on, each applied revision is one
// record in the store and one more intent performed; the processing makes
// no more requests (the record's intent rides in the commit's
// transaction, its pointer in the same SQS batch) and the dispatch makes
// one PutObject more.
func TestWarehouseCost(t *testing.T) {
	var costs []capacity.WarehouseCost
	for _, ev := range []capacity.DesignEvent{capacity.OrderCancellation(4 << 10), capacity.SubscriptionCreated(4 << 10)} {
		c, err := capacity.MeasureWarehouse(context.Background(), ev)
		if err != nil {
			t.Fatalf("%s: %v", ev.Name, err)
		}
		costs = append(costs, c)
		if c.Records != 1 {
			t.Errorf("%s: %d records, want 1 (one applied revision)", ev.Name, c.Records)
		}
		if c.Off.Performed != ev.Effects || c.On.Performed != ev.Effects+1 {
			t.Errorf("%s: performed off %d, on %d; want %d and %d", ev.Name, c.Off.Performed, c.On.Performed, ev.Effects, ev.Effects+1)
		}
		if c.On.ProcessCalls.Total != c.Off.ProcessCalls.Total {
			t.Errorf("%s: processing requests off %d (%s), on %d (%s): the record must ride in the same requests", ev.Name,
				c.Off.ProcessCalls.Total, c.Off.ProcessCalls.Detail, c.On.ProcessCalls.Total, c.On.ProcessCalls.Detail)
		}
		if c.On.Process.Units() <= c.Off.Process.Units() {
			t.Errorf("%s: processing write units off %d, on %d: the record's intent is an item of the commit", ev.Name, c.Off.Process.Units(), c.On.Process.Units())
		}
	}
	var table bytes.Buffer
	capacity.WriteWarehouseTable(&table, costs)
	t.Logf("\n%s", table.String())
}
