package main

import (
	"context"
	"fmt"
	"io"

	"github.com/effectively-once/webhooks/pkg/harness/capacity"
)

// designsSection sets ours beside a powertools-style idempotency design
// and the naive ones on the same events (issue 17, processing side by
// side): requests and write units measured, chaos failures from the run
// named in capacity.ChaosRun.
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
		"The same events, accepted by the shared intake (not counted: every design has it), processed by each design on its own minidyn and goaws and their effects performed; requests counted by SDK middleware, write units by DynamoDB's rules from the items written (`pkg/harness/capacity/designs.go`; test: `go test -run TestDesignCosts -v ./pkg/harness/capacity`). "+
		"**ours**: the processor (claim, one transaction of the state, the event's status and its intents, the effects queue), then the dispatcher on each intent (claim, truth check, call, record). "+
		"**powertools-style**: AWS Lambda Powertools' idempotency pattern over the same table: a conditional PutItem of an INPROGRESS record with an expiry, the projection and one record per effect as plain PutItems, an UpdateItem to COMPLETED (it keeps no ledger status and no outbox; a crash between its writes makes its retry write them again). "+
		"**checkthen, split, nolease**: the naive cores of `pkg/harness/chaos/naive`, which perform each effect inline as one counter update and implement only the orders business write. **dispatch-everything**: ours with the dispatcher before issue 12. "+
		"The order cancellation carries the order's 4 KB state (its line items), which our order projection copies into both intents' payloads; the Stripe subscription's projected state is small.\n\n")
	capacity.WriteDesignTable(w, events, rows)
	fmt.Fprintf(w, "\nChaos counts: schedules with at least one violation of I1–I7, from %s; the naive cores run only the orders part of each schedule. The powertools-style design is not in the chaos harness.\n", capacity.ChaosRun)
	return nil
}
