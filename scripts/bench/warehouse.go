package main

import (
	"context"
	"fmt"
	"io"

	"github.com/effectively-once/webhooks/internal/harness/capacity"
)

// warehouseSection meters ours with the warehouse sink off and on, on the
// same events as the designs' table.
func warehouseSection(ctx context.Context, w io.Writer, _ options) error {
	var costs []capacity.WarehouseCost
	for _, ev := range []capacity.DesignEvent{capacity.OrderCancellation(4 << 10), capacity.SubscriptionCreated(4 << 10)} {
		c, err := capacity.MeasureWarehouse(ctx, ev)
		if err != nil {
			return fmt.Errorf("%s: %w", ev.Name, err)
		}
		costs = append(costs, c)
	}
	fmt.Fprintf(w, "\n## The warehouse sink: what it adds per applied revision\n\n"+
		"Ours on the same events as above, each on its own emulators, with the sink off and on (a local S3 as the store); requests counted by SDK middleware, write units by DynamoDB's rules from the items written (`capacity.MeasureWarehouse`; test: `go test -run TestWarehouseCost -v ./internal/harness/capacity`). "+
		"With the sink on, the commit writes one more item (the record's intent, carrying the projected state), its pointer rides in the same SQS batch, and the dispatcher claims it, writes the record with one PutObject (`If-None-Match: *`) and records the outcome.\n\n")
	capacity.WriteWarehouseTable(w, costs)
	for _, c := range costs {
		fmt.Fprintf(w, "\n- %s: %+d write units (processing %+d, dispatch %+d), %+d requests, all of them at the dispatcher.",
			c.Event.Name, c.On.Units()-c.Off.Units(), c.On.Process.Units()-c.Off.Process.Units(), c.On.Effects.Units()-c.Off.Effects.Units(), c.On.Requests()-c.Off.Requests())
	}
	fmt.Fprintf(w, "\n\nThe record's intent carries the state, so its write units grow with the state: the order's 4 KB of line items are written in the commit (transactional: twice) and rewritten by the dispatcher's claim and outcome. "+
		"A retry, a redrive or a replay of a record already written costs one PutObject (412) and one GetObject (the content comparison), and writes nothing in S3. "+
		"The reconciler's warehouse check costs one HeadObject per subject updated in its lookback (at most 100 per run), plus a filtered Scan of the table bounded at 10,000 items read per run (the table has no index of projections by update time). The sink is off unless `WAREHOUSE_BUCKET` is set.\n")
	return nil
}
