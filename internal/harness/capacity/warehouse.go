package capacity

import (
	"context"
	"fmt"
	"io"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
)

// warehouseBucket is the local store's bucket when the sink is on.
const warehouseBucket = "capacity-warehouse"

// WarehouseCost is ours on one event with the warehouse sink off and on:
// the processing and the dispatch of every intent, the record's included.
type WarehouseCost struct {
	Event   DesignEvent
	Off, On DesignRow
	// Records is how many change records the store holds after On.
	Records int
}

// MeasureWarehouse processes ev with our design twice, each on its own
// emulators: with the sink off, then on (a local S3 as the store), and
// meters both, so the difference is what the sink costs per applied
// revision.
func MeasureWarehouse(ctx context.Context, ev DesignEvent) (WarehouseCost, error) {
	c := WarehouseCost{Event: ev}
	for _, on := range []bool{false, true} {
		rg, err := newDesignRig(ctx)
		if err != nil {
			return c, err
		}
		if on {
			rg.s3 = localaws.NewS3(warehouseBucket)
		}
		row := DesignRow{Design: DesignOurs}
		err = rg.accept(ctx, ev)
		if err == nil {
			err = rg.ours(ctx, ev, false, &row)
		}
		if on && err == nil {
			c.On, c.Records = row, len(rg.s3.Keys(warehouseBucket, "changes/"))
		} else {
			c.Off = row
		}
		if rg.s3 != nil {
			rg.s3.Close()
		}
		rg.close()
		if err != nil {
			return c, fmt.Errorf("warehouse %v: %w", on, err)
		}
	}
	return c, nil
}

// WriteWarehouseTable renders costs as Markdown: requests and write units
// of the processing and of the dispatch, off and on.
func WriteWarehouseTable(w io.Writer, costs []WarehouseCost) {
	fmt.Fprintf(w, "| event | sink | processing: requests | processing: write units | dispatch: requests | dispatch: write units | records |\n|---|---|---|---|---|---|---|\n")
	for _, c := range costs {
		for _, r := range []struct {
			name string
			row  DesignRow
			recs string
		}{{"off", c.Off, "–"}, {"on", c.On, fmt.Sprint(c.Records)}} {
			fmt.Fprintf(w, "| %s | %s | %d (%s) | %d | %d (%s) | %d | %s |\n", c.Event.Name, r.name,
				r.row.ProcessCalls.Total, r.row.ProcessCalls.Detail, r.row.Process.Units(),
				r.row.EffectsCalls.Total, r.row.EffectsCalls.Detail, r.row.Effects.Units(), r.recs)
		}
	}
}
