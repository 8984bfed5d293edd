package main

import (
	"context"
	"fmt"
	"io"

	"github.com/effectively-once/webhooks/internal/harness/capacity"
)

// designsSection sets ours beside a powertools-style idempotency design
// and the naive ones on the same events, processing side by side:
// requests and write units measured, chaos failures from the run named in
// capacity.ChaosRun.
func designsSection(ctx context.Context, w io.Writer, _ options) error {
	events := []capacity.DesignEvent{capacity.OrderCancellation(4 << 10), capacity.SubscriptionCreated(4 << 10)}
	var rows [][]capacity.DesignRow
	for _, ev := range events {
		r, err := capacity.MeasureDesigns(ctx, ev)
		if err != nil {
			return fmt.Errorf("%s: %w", ev.Name, err)
		}
		rows = append(rows, r)
	}
	fmt.Fprintf(w, "\n## The price of correctness: processing side by side\n\n"+
		"The same events, accepted by the shared intake (not counted: every design has it), processed by each design on its own minidyn and goaws and their effects performed; requests counted by SDK middleware, write units by DynamoDB's rules from the items written (`internal/harness/capacity/designs.go`; test: `go test -run TestDesignCosts -v ./internal/harness/capacity`). "+
		"**ours**: the processor (claim, one transaction of the state, the event's status and its intents, the effects queue), then the dispatcher on each intent (claim, truth check, call, record). "+
		"**powertools-style**: AWS Lambda Powertools' idempotency pattern over the same table: a conditional PutItem of an INPROGRESS record with an expiry, the projection and one record per effect as plain PutItems, an UpdateItem to COMPLETED (it keeps no ledger status and no outbox; a crash between its writes makes its retry write them again). "+
		"**checkthen, split, nolease**: the naive cores of `internal/harness/chaos/naive`, which perform each effect inline as one counter update and implement only the orders business write. **dispatch-everything**: ours with a dispatcher blind to the truth (no truth check, no subject cursor). "+
		"The order cancellation carries the order's 4 KB state (its line items), which our order projection copies into both intents' payloads; the Stripe subscription's projected state is small.\n\n")
	capacity.WriteDesignTable(w, events, rows)
	floor, err := capacity.MeasureWriteUnitFloor(ctx, 4<<10)
	if err != nil {
		return err
	}
	defer func() {
		pf := floor.Payload
		fmt.Fprintf(w, "\n### Where the 4 KB event's %d write units go, and why not 12\n\n", floor.Row.ProcessedUnits())
		capacity.WriteWriteUnitFloor(w, floor)
		fmt.Fprintf(w, "\nThe payload item is %d B: %d B of keys and expiry leave one unit room for %d B stored, a %.1f:1 compression of this %d B event; the ledger stored %d B (%.1f:1: fast gzip, and the best level only when it could save a unit), the standard library's gzip at its best gives %d B, raw deflate without gzip's framing %d B. "+
			"Every other write is one unit, doubled in the transaction, or a due-index entry the reconciler needs to find a lost event (I1) or a lost intent (I2). "+
			"The one removable pair is the claim (1 WU and its due-index rewrite, 1 WU): an optimistic commit conditioned on the event's status should keep (reasoned, neither built nor run through the chaos harness) I1 (the event stays due from intake) and I2 (one of two concurrent commits wins; intents are keyed by operation id), "+
			"but the claim is the only write that survives a worker's crash, so without it a crash-looping event is never counted toward DEAD and concurrent workers both do the work (thin-event fetches included). We keep it: 14 WU. Test: `go test -run TestWriteUnitFloor -v ./internal/harness/capacity`.\n",
			pf.ItemBytes, pf.Overhead, pf.OneUnitLimit, float64(pf.BodyBytes)/float64(pf.OneUnitLimit), pf.BodyBytes, pf.StoredBytes, float64(pf.BodyBytes)/float64(pf.StoredBytes), pf.BestGzip, pf.RawDeflate)
	}()
	fmt.Fprintf(w, "\nChaos counts: schedules with at least one violation of I1–I7, from %s; the naive cores run only the orders part of each schedule. The powertools-style design is not in the chaos harness.\n", capacity.ChaosRun)
	return nil
}
