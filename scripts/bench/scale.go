package main

import (
	"context"
	_ "embed"
	"fmt"
	"io"

	"github.com/effectively-once/webhooks/internal/harness/capacity"
)

// scaleText is the section's prose and its tables of AWS limits:
// their figures come from the measurements above and AWS's documented
// quotas, cited per row; edit it when a limit or a default changes.
//
//go:embed scale.md
var scaleText string

// scaleSection writes the scale section and regenerates its simulation:
// the due index's cap per shard count, from the index write units one
// realistic 4 KB event with its effect costs (measured) and 100,000
// generated ids hashed as the ledger hashes them.
func scaleSection(ctx context.Context, w io.Writer, _ options) error {
	rows, err := capacity.MeasurePipeline(ctx, []int{4 << 10}, capacity.Realistic)
	if err != nil {
		return err
	}
	r := rows[0]
	perEvent := r.Intake.IndexUnits() + r.Process.IndexUnits() + r.Effect.IndexUnits()
	fmt.Fprintf(w, "\n## Scale: what binds first, from 10 to 5,000 events per second\n\n%s", scaleText)
	fmt.Fprintf(w, "\n**The due index's cap, simulated in this run** (`capacity.DueIndexCap`; test `TestDueIndexCapMovesWithTheShards`): %d index write units per event (measured), %d write units per second per partition key (AWS), 100,000 generated event ids placed by `ledger.DueShard`.\n\n", perEvent, capacity.PartitionWriteLimit)
	fmt.Fprintln(w, "| shards | busiest shard's share of the events | cap (events/s) |")
	fmt.Fprintln(w, "|---:|---:|---:|")
	for _, shards := range []int{4, 8, 16, 32, 64} {
		fmt.Fprintln(w, capacity.DueIndexCap(shards, 100_000, float64(perEvent), 1))
	}
	return nil
}
