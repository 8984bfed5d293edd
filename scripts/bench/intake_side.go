package main

import (
	"context"
	"fmt"
	"io"

	"github.com/effectively-once/webhooks/internal/harness/capacity"
)

// intakeSideSection compares the product's intake with a bare handler in
// one interleaved run, so that both meet the same machine load.
func intakeSideSection(ctx context.Context, w io.Writer, o options) error {
	so := capacity.SideOptions{}
	if o.quick {
		so.Reps, so.PerBlock = 3, 100
	}
	rows, err := capacity.MeasureIntakeSide(ctx, so)
	if err != nil {
		return err
	}
	reps, per := 5, 400
	if o.quick {
		reps, per = 3, 100
	}
	fmt.Fprintf(w, "\n## Intake side by side with a bare handler\n\n"+
		"Our intake (`intake.Handler`: verify, record the delivery in the ledger, enqueue a pointer) against a bare handler that verifies the same Stripe signature with stripe-go, reads the event id, puts the raw body under it with `attribute_not_exists` and sends the id to a queue (`capacity.BareIntake`: no timestamp tolerance, no status, no duplicate bookkeeping, and a crash between its put and its send loses the event). "+
		"Both run through the same Lambda JSON path (an API Gateway HTTP API 2.0 event through `lambda.NewHandler(h).Invoke`), on the same minidyn and goaws in this process, with new realistic Stripe events (unique ids) signed before timing; our logger is the function's JSON logger writing to a discard sink. "+
		"%d repetitions; in each, per payload size, a block of %d deliveries to each contender, the order swapped every repetition, after a warm-up of 50 each. "+
		"p50 and p99 pool every repetition's deliveries; the ratios are ours/bare within each repetition, as the median and the range over the repetitions. "+
		"Times are `Invoke` alone and include the SDK and the emulators' loopback HTTP, which both sides pay. `internal/harness/capacity/intake_side.go`; a CPU profile of either side alone: `go test -run '^$' -bench 'IntakeSide/ours' -cpuprofile /tmp/intake.prof ./internal/harness/capacity/`.\n\n", reps, per)
	capacity.WriteSideTable(w, rows)
	worst := 0.0
	for _, r := range rows {
		worst = max(worst, r.RatioP99.Median)
	}
	verdict := "met"
	if worst > 1.3 {
		verdict = "**not met**"
	}
	fmt.Fprintf(w, "\nTarget: our p99 at most 1.3× the bare handler's. Worst median p99 ratio in this run: %.2f×, target %s.\n", worst, verdict)
	return nil
}
