package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/effectively-once/webhooks/internal/harness/capacity"
	"github.com/effectively-once/webhooks/internal/harness/plot"
	"github.com/effectively-once/webhooks/internal/queue"
)

// capacitySection measures requests and write units per event on the real
// handlers and writes the payload-size plot.
func capacitySection(ctx context.Context, w io.Writer, o options) error {
	small, err := capacity.MeasurePipeline(ctx, []int{0}, capacity.Realistic)
	if err != nil {
		return err
	}
	sizes := []int{1 << 10, 2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10}
	real, err := capacity.MeasurePipeline(ctx, sizes, capacity.Realistic)
	if err != nil {
		return err
	}
	worst, err := capacity.MeasurePipeline(ctx, sizes, capacity.Incompressible)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n## AWS requests per event\n\nCounted by SDK middleware (`internal/harness/awstrace`) around the real intake, processor and dispatcher cores, one Stripe `customer.subscription.created` event (which creates one `entitlement.grant` intent). The Lambda event source mapping's ReceiveMessage and DeleteMessageBatch are not the function's and are not counted here (the cost model counts them). Test: `go test -run TestRequestBudget -v ./internal/harness/capacity`.\n\n")
	capacity.WriteRequestTable(w, append(small, real[2]))
	fmt.Fprintf(w, "\nBudget: intake 2 requests per new event and 1 per duplicate of a processed event; processing 2 DynamoDB requests. Met for payloads stored inline (up to 256 bytes compressed). A larger payload is stored once in its own item: one more request on each side (a PutItem at intake, a GetItem in the processor), chosen because DynamoDB bills write units, not requests, and a payload inside the event item would be re-billed on every status change (see the write units below: inlining a 1 KB event costs 15 instead of 13).\n")

	fmt.Fprintf(w, "\n## DynamoDB write units per event\n\nComputed from the items actually written, read before and after each write, by DynamoDB's rules (1 KB units rounded up, the larger of the item before and after, transactions count twice, a GSI entry written when it appears, changes or disappears; `internal/harness/capacity`). Test: `go test -run TestWriteUnitsPerEvent -v ./internal/harness/capacity`. The workers carry the names deployed functions give themselves (`config.OwnerName` over a Lambda log stream name: here `%s`), because a worker's name is written in its lease and in two audit entries of every event it processes, so it is part of the billed item. *Realistic* payloads are invoice-like JSON (gzip about 4:1); *incompressible* ones carry a random string, the worst case for the compressed payload item.\n\n### Realistic payloads\n\n", capacity.ProcessorOwner)
	capacity.WriteTable(w, append(small, real...))
	fmt.Fprintf(w, "\n### Incompressible payloads\n\n")
	capacity.WriteTable(w, worst)
	r4 := real[2]
	fmt.Fprintf(w, "\nThe event item column is the size of the event's status item once processed (the payload, when not inline, is in its own item): every later write of it, a duplicate's included, is billed by it, so it is kept under 1 KB. "+
		"A duplicate of a processed event is one UpdateItem that records the delivery on the event (its count and a bounded history of recent deliveries, shown by `webhookctl events show`) and changes nothing else: "+
		"for a realistic 4 KB event **%d WU** the first time (%s: the event item, and its entry on a \"done\" shard of the due index that no query reads) and **%d WU** for each later one (%s).\n",
		r4.Duplicate.Units(), r4.Duplicate, r4.DuplicateAgain.Units(), r4.DuplicateAgain)
	fmt.Fprintf(w, "\nTarget: at most 12 write units per processed 4 KB event. Measured for a realistic 4 KB event: **%d** from delivery to processed, of which %d are its one outbox intent (a transactional put, 2, and its entry on the due index, 1): the same event without an effect costs %d (read off the breakdown above, not measured separately). The intent's write units are the price of writing the effect atomically with the state it follows from, which is what makes the effect happen once; dispatching it costs %d more (claim and record, each with its index entry, and for this `latest` entitlement its subject cursor with its entry on the sync shards of the due index).\n", r4.ProcessedUnits(), 3, r4.ProcessedUnits()-3, r4.Effect.Units())
	var x, yr, yw []float64
	for i, r := range real {
		x = append(x, float64(sizes[i])/1024)
		yr = append(yr, float64(r.ProcessedUnits()))
		yw = append(yw, float64(worst[i].ProcessedUnits()))
	}
	c := plot.Chart{Title: "Write units per processed event", XLabel: "payload (KB)", YLabel: "write units", YFromZero: true, LogX: true,
		Series: []plot.Series{{Name: "realistic JSON", X: x, Y: yr}, {Name: "incompressible", X: x, Y: yw}, {Name: "target", X: []float64{x[0], x[len(x)-1]}, Y: []float64{12, 12}}}}
	path := filepath.Join(o.plots, "write-units.png")
	if err := c.WriteFile(path); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n![write units per processed event by payload size](%s)\n", path)

	onStack := []int{0, 4 << 10}
	var stackLog bytes.Buffer
	stack, err := capacity.MeasureOnStack(ctx, ".", &stackLog, onStack)
	if err != nil {
		return fmt.Errorf("write units on the local stack: %w\n%s", err, stackLog.String())
	}
	rig := []capacity.Row{small[0], real[2]}
	fmt.Fprintf(w, "\n### The same events on the running local stack\n\n"+
		"`make dev`'s stack (the real bootstraps under aws-lambda-rie, each named from a log stream shaped as Lambda's, fast profile, the reconciler's schedule out of the way) with a meter on the wire in front of its DynamoDB (`capacity.WireMeter`: it decodes each write request of every function from its JSON, tells the functions apart by their SDK User-Agent, and bills it with the same rules from the items before and after). One signed Stripe event of each size through the HTTP API, then the same event twice more; each phase is what the functions wrote until the stack was done and quiet. Each cell: rig = stack, then the stack's detail. Test: `go test -run TestTheStackBillsWhatTheRigPublishes -v ./internal/harness/capacity`.\n\n")
	capacity.WriteStackTable(w, stack, rig)
	if d := capacity.Disagreements(stack, rig); len(d) > 0 {
		return fmt.Errorf("the stack and the rig disagree: %s", strings.Join(d, "; "))
	}
	fmt.Fprintf(w, "\nEvery phase agrees. The item sizes may differ by a byte or two: a number's stored size is its significant digits, and the stack's clock is not the rig's.\n")

	workload := capacity.Workload{
		DuplicateRatio: 0.1, IntentsPerEvent: 1, WriteUnitsEvent: float64(r4.ProcessedUnits()), WriteUnitsEffect: float64(r4.Effect.Units()), WriteUnitsDuplicate: float64(r4.Duplicate.Units()),
		ReadUnitsEvent: 1, BatchSize: 10, IntakeMs: 15, ProcessorMs: 120, DispatcherMs: 150, MemoryMB: 256, LogBytesPerEvent: 3000,
	}
	lines := capacity.CostPerMillion(workload, capacity.ListPrices)
	fmt.Fprintf(w, "\n## Cost per million events\n\nPrices: AWS list prices, %s. Free tiers ignored. Workload: realistic 4 KB events, 10%% duplicate deliveries (each counted at a first duplicate's write units), one effect per event (the measured write units above), event source mapping batches of 10, 256 MB functions billed %d ms per intake call, %d ms per processor batch and %d ms per dispatcher batch (assumptions: intake's latency under the local stack is below; AWS adds network time), about 3 KB of logs and metrics per event across the functions, one strongly consistent 4 KB read of the payload. Formula and test: `internal/harness/capacity/cost.go`.\n\n", capacity.ListPrices.AsOf, 15, 120, 150)
	capacity.WriteCostTable(w, lines)
	fmt.Fprintf(w, "\nDynamoDB writes are the largest line; the next are API Gateway and the logs. Storage is not included: a processed event's item expires after the retention (30 days by default); its compressed payload item is kept 400 days by default (`PayloadRetention`) so that an unresolved event keeps its body, at $0.25 per GB-month.\n")
	fmt.Fprintf(w, "\n**What a duplicate costs, and why not less.** Every write that touches the event item is billed at least 1 WU by its size, refused or not (\"Capacity units consumed by conditional writes\"), so 1 WU per duplicate is the floor for any first request that goes to the ledger; recording the delivery (its count and a history slot, shown by `webhookctl events show`) is free within that unit. The first duplicate's second unit is its entry on a done shard of the due index: a processed event has no due keys, and the accept's one update expression must give a new event its work shard, so a duplicate of a processed event falls back to its done shard. Avoiding it would mean keeping a processed event on the index (an index write at every completion, 1 WU for every event instead of 1 for each event ever duplicated) or a read before the write (a second request on every delivery). With 10%% duplicates it is about %.2f WU per event.\n", 0.1*float64(r4.Duplicate.Units()-r4.DuplicateAgain.Units()))
	capacity.TableBillingText(w, workload, 0.7, 100, 1000)

	idle, err := capacity.MeasureReconcilerIdle(ctx)
	if err != nil {
		return err
	}
	month := capacity.IdleMonthly(idle, capacity.ListPrices)
	fmt.Fprintf(w, "\n### Fixed cost of a stack with no traffic\n\nThe scheduled reconciler runs every 5 minutes (%.0f runs in 30 days) whatever the traffic. One idle run, counted by SDK middleware around the real reconciler core over an empty ledger at the default 4 due shards: **%s** (%d requests, %d write units). Each DLQ receive long-polls %s on an empty DLQ in AWS, so a run is billed about %.1f s. The event source mappings' empty long polls are an estimate: AWS does not publish how many pollers an idle standard queue's mapping keeps; the line assumes 5 per mapping, each polling for 20 s. Test: `go test -run TestReconcilerIdleRun -v ./internal/harness/capacity`.\n\n", month.Runs, idle.Calls.Detail, idle.Calls.Total, idle.Writes, queue.DefaultDLQWait, month.RunSeconds)
	capacity.WriteIdleTable(w, month)
	fmt.Fprintf(w, "\nSo an idle stack costs well under a dollar a month in requests (KMS keys, Secrets Manager secrets and CloudWatch alarms, billed per month whatever the traffic, are not included: see the AWS pricing pages).\n")
	return nil
}
