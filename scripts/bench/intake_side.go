package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/effectively-once/webhooks/internal/harness/capacity"
)

// intakeSideSection compares the product's intake with a bare handler:
// first the CPU each function process spends per delivery, with the
// emulators in another process (what Lambda bills and what limits a
// function's throughput), then the in-process latency comparison.
func intakeSideSection(ctx context.Context, w io.Writer, o options) error {
	if err := intakeCPUSection(ctx, w, o); err != nil {
		return err
	}
	return intakeLatencySection(ctx, w, o)
}

// intakeCPUSection measures both contenders' own CPU per delivery, each in
// its own function process (capacity.MeasureIntakeCPU).
func intakeCPUSection(ctx context.Context, w io.Writer, o options) error {
	co := capacity.CPUOptions{ProfileDir: filepath.Join(os.TempDir(), "intake-cpu")}
	if o.quick {
		co.Reps, co.PerBlock, co.ProfileN = 3, 100, 500
	}
	rep, err := capacity.MeasureIntakeCPU(ctx, co)
	if err != nil {
		return err
	}
	c := rep.Options
	procs := make([]string, len(c.Procs))
	for i, p := range c.Procs {
		procs[i] = strconv.Itoa(p)
	}
	fmt.Fprintf(w, "\n## Intake side by side with a bare handler\n\n"+
		"Our intake (`intake.Handler`: verify, record the delivery in the ledger, enqueue a pointer) against a bare handler that verifies the same Stripe signature with stripe-go, reads the event id, puts the raw body under it with `attribute_not_exists` and sends the id to a queue (`capacity.BareIntake`: no timestamp tolerance, no status, no duplicate bookkeeping, and a crash between its put and its send loses the event). "+
		"A third contender, bare-payload, is the same bare handler making our intake's three requests for a body kept out of line (a conditional put of a small item with the id, a put of the raw body in its own item, the send): it prices the payload item's request apart from the rest of our work. "+
		"A fourth, ours-inline, is our intake with the ledger keeping payloads up to 64 KiB inside the event item (`ledger.Options.InlinePayloadMax`): two requests, as the bare handler, and the design we did not choose (see the trade below).\n\n"+
		"### The function process's own CPU per delivery\n\n"+
		"Primary measure: the function process's own CPU per delivery, user+sys from `getrusage(RUSAGE_SELF)`, with the emulators (minidyn, goaws) in the bench's process, not the function's. "+
		"Each contender runs in its own worker process (`internal/harness/capacity/cpuworker`), built as a Lambda bootstrap is (`%s`, for this host's GOOS/GOARCH; %s) and configured by environment as the local stack configures an intake function (emulator endpoints, table, queue, one Stripe source, the function role's fake credentials). "+
		"Ours is built as the intake's composition root builds it (`config.LoadIntake`, `Start`, `intake.Handler` with the runtime's ledger, secrets, JSON logger and EMF metrics); the bare handler gets SDK clients from `config.LoadDefaultConfig`. "+
		"The worker includes what the function pays per delivery in Lambda: the Lambda JSON path (an API Gateway HTTP API 2.0 event through `lambda.NewHandler(h).Invoke`), the handler, the SDK calls over loopback HTTP, the garbage collector, and the logs and EMF metrics written to its stdout (as in Lambda; here to /dev/null). "+
		"It excludes the Lambda runtime API loop (polling /next and posting the response), which both contenders would pay alike. "+
		"For each GOMAXPROCS (%s), one worker per contender; a warm-up of %d deliveries per size each, not measured; then %d repetitions, in each per payload size one block of %d new deliveries (realistic Stripe events, unique ids) to each contender, each contender leading a repetition in turn. "+
		"A worker builds and signs a block's requests, runs a full GC, then reads getrusage, the Go allocator's counters and the clock around the block's Invokes alone. "+
		"CPU per delivery is the block's (user+sys)/n; the ratios are between two contenders' CPU within each repetition, shown as the median and range over the repetitions, as are the CPU columns. "+
		"Wall p50/p99 are the medians over the repetitions of each block's Invoke times (they include waiting for the emulators); allocations and bytes are per delivery over all blocks. "+
		"A new event answered 200 is an SDK retry of a conditional put whose first attempt had succeeded (the loopback drops a response now and then); the retry's CPU is counted in its contender's. "+
		"`internal/harness/capacity/intake_cpu.go`.\n\n",
		rep.BuildCommand, rep.GoVersion, strings.Join(procs, " and "), c.Warmup, c.Reps, c.PerBlock)
	capacity.WriteCPUTable(w, rep)
	const ours, bare, barePayload, oursInline = capacity.ContenderOurs, capacity.ContenderBare, capacity.ContenderBarePayload, capacity.ContenderOursInline
	worst := 0.0
	for _, r := range rep.Rows {
		worst = max(worst, r.Ratio(ours, bare).Median)
	}
	verdict := "met"
	if worst > 1.3 {
		verdict = "**not met**"
	}
	fmt.Fprintf(w, "\nTarget: our CPU per delivery at most 1.3× the bare handler's. Worst median ratio in this run: %.2f×, target %s.\n", worst, verdict)
	fmt.Fprintf(w, "\nThe gap, per delivery (medians of the repetitions): ours less bare, of which the payload item's request (bare-payload less bare: the same handler making our three requests) and the rest (ours less bare-payload: our own work beyond those requests).\n\n"+
		"| GOMAXPROCS | payload | ours − bare | bare-payload − bare | ours − bare-payload | ours/bare-payload |\n|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rep.Rows {
		o, b, bp := r.CPUOf(ours).Median, r.CPUOf(bare).Median, r.CPUOf(barePayload).Median
		rp := r.Ratio(ours, barePayload)
		fmt.Fprintf(w, "| %d | %d B | %+.0f µs | %+.0f µs | %+.0f µs | %.2f× (%.2f–%.2f) |\n", r.Procs, r.PayloadBytes, o-b, bp-b, o-bp, rp.Median, rp.Min, rp.Max)
	}
	if err := writeInlineTrade(ctx, w, rep); err != nil {
		return err
	}
	if len(rep.Profile) > 0 {
		fmt.Fprintf(w, "\nWhere our CPU goes: a CPU profile of one more block of ours (%d deliveries of %d B at GOMAXPROCS 1, after the measured repetitions), the top 25 functions by own time, then by cumulative time (which names the handler's own functions). "+
			"Samples outside the handler's stack are the same process's garbage collector and HTTP connection goroutines. "+
			"The profile and the worker binary are kept; reproduce with `%s` (add `-cum` for the second list):\n\n", c.ProfileN, rep.ProfileBytes, rep.ProfileCommand)
		fmt.Fprintf(w, "Our CPU per delivery in that block, by part of the work: each sample of the profile goes to the first part whose rule it meets, so the parts add up to the whole. Go's CPU profiler keeps a stack's innermost 64 frames and the SDK's middleware nests deeper, so requests are told apart by the service client's frames, not by the handler's frames above them.\n\n| part | rule | µs per delivery |\n|---|---|---:|\n")
		for _, it := range rep.Items {
			fmt.Fprintf(w, "| %s | %s | %.0f |\n", it.Part, it.Rule, it.Micros)
		}
		fmt.Fprintln(w)
		cum := strings.Replace(rep.ProfileCommand, "-top", "-top -cum", 1)
		fmt.Fprintf(w, "```\n$ %s\n%s\n\n$ %s\n%s\n```\n", rep.ProfileCommand, strings.Join(rep.Profile, "\n"), cum, strings.Join(rep.ProfileCum, "\n"))
	}
	return nil
}

// intakeLatencySection compares the product's intake with a bare handler
// in one interleaved run in this process, so that both meet the same
// machine load.
func intakeLatencySection(ctx context.Context, w io.Writer, o options) error {
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
	fmt.Fprintf(w, "\n### Secondary: in-process latency (emulators in the same process; their CPU counted on both sides)\n\n"+
		"Both run through the same Lambda JSON path (an API Gateway HTTP API 2.0 event through `lambda.NewHandler(h).Invoke`), on the same minidyn and goaws in this process, with new realistic Stripe events (unique ids) signed before timing; our logger is the function's JSON logger writing to a discard sink. "+
		"%d repetitions; in each, per payload size, a block of %d deliveries to each contender, the order swapped every repetition, after a warm-up of 50 each. "+
		"p50 and p99 pool every repetition's deliveries; the ratios are ours/bare within each repetition, as the median and the range over the repetitions. "+
		"Times are `Invoke` alone and include the SDK and the emulators' loopback HTTP, which both sides pay. `internal/harness/capacity/intake_side.go`; a CPU profile of either side alone: `go test -run '^$' -bench 'IntakeSide/ours' -cpuprofile /tmp/intake.prof ./internal/harness/capacity/`.\n\n", reps, per)
	capacity.WriteSideTable(w, rows)
	worst := 0.0
	for _, r := range rows {
		worst = max(worst, r.RatioP99.Median)
	}
	fmt.Fprintf(w, "\nWorst median p99 ratio in this run: %.2f× (the 1.3× target above is on CPU; these times also count the emulators' work and waiting for it).\n", worst)
	return nil
}

// writeInlineTrade publishes the choice between the payload item (ours) and
// keeping the payload in the event item (ours-inline): requests, write
// units and CPU per delivery of each, and what each costs at list prices.
func writeInlineTrade(ctx context.Context, w io.Writer, rep capacity.CPUReport) error {
	sizes := rep.Options.Sizes
	item, err := capacity.MeasurePipeline(ctx, sizes, capacity.Realistic)
	if err != nil {
		return err
	}
	inline, err := capacity.MeasurePipelineInline(ctx, sizes, capacity.Realistic, capacity.InlineContenderMax)
	if err != nil {
		return err
	}
	prices := capacity.ListPrices
	// CPU-bound work gets memory/1769 MB of a vCPU on Lambda and is billed
	// by duration × memory, so a CPU-second costs 1769/1024 GB-seconds
	// whatever the memory size.
	cpuSecondUSD := 1769.0 / 1024 * prices.LambdaArmPerGBSecond
	fmt.Fprintf(w, "\nThe trade behind the third request: a payload over %d stored bytes goes in its own item, written once, so the event item stays under 1 KB and each of its later writes (claim, commit, every duplicate) is billed one unit; kept inside the event item instead (ours-inline), the intake makes two requests, as the bare handler. "+
		"Write units from the capacity rig (`capacity.MeasurePipelineInline`, realistic Stripe events, delivery → processed and per duplicate of a processed event); CPU from the table above (medians); prices %s: write units $%.3f per million, and CPU at Lambda arm64's $%.10f per GB-second, where CPU-bound work gets memory/1769 MB of a vCPU, so a CPU-second is billed %.4f GB-seconds at any memory size.\n\n",
		256, prices.AsOf, prices.DynamoWRUPerMillion, prices.LambdaArmPerGBSecond, 1769.0/1024)
	fmt.Fprintln(w, "| payload | design | intake requests | WU delivery → processed | WU per duplicate: first, later | CPU µs/delivery, median by GOMAXPROCS | per million events: write units | per million: intake CPU as billed duration |")
	fmt.Fprintln(w, "|---:|---|---|---:|---|---|---:|---:|")
	const ours, oursInline = capacity.ContenderOurs, capacity.ContenderOursInline
	// cpu is the highest of a contender's GOMAXPROCS medians for a size.
	cpu := func(contender string, size int) (float64, []string) {
		worst, by := 0.0, []string(nil)
		for _, r := range rep.Rows {
			if r.Size == size {
				c := r.CPUOf(contender).Median
				by = append(by, fmt.Sprintf("%d: %.0f", r.Procs, c))
				worst = max(worst, c)
			}
		}
		return worst, by
	}
	var verdicts []string
	itemCheaper := true
	for si, size := range sizes {
		for _, d := range []struct {
			name, contender string
			row             capacity.Row
		}{{"payload item (chosen)", ours, item[si]}, {"inline", oursInline, inline[si]}} {
			c, by := cpu(d.contender, size)
			wu := d.row.ProcessedUnits()
			fmt.Fprintf(w, "| %d B | %s | %d (%s) | %d | %d, %d | %s | $%.3f | $%.4f |\n", d.row.PayloadBytes, d.name, d.row.IntakeCalls.Total, d.row.IntakeCalls.Detail,
				wu, d.row.Duplicate.Units(), d.row.DuplicateAgain.Units(), strings.Join(by, ", "), float64(wu)*prices.DynamoWRUPerMillion, c*cpuSecondUSD)
		}
		dWU := inline[si].ProcessedUnits() - item[si].ProcessedUnits()
		oc, _ := cpu(ours, size)
		ic, _ := cpu(oursInline, size)
		v := fmt.Sprintf("at %d B the payload item saves %d WU per event ($%.3f per million events, and %d WU per duplicate) for %+.0f µs of CPU per delivery ($%.4f per million; %.1f ms of duration at 256 MB)",
			item[si].PayloadBytes, dWU, float64(dWU)*prices.DynamoWRUPerMillion, inline[si].Duplicate.Units()-item[si].Duplicate.Units(),
			oc-ic, (oc-ic)*cpuSecondUSD, max(0, oc-ic)*1769/256/1000)
		verdicts = append(verdicts, v)
		itemCheaper = itemCheaper && float64(dWU)*prices.DynamoWRUPerMillion > (oc-ic)*cpuSecondUSD
	}
	keep := "We keep the payload item: at list prices the write units it saves cost more than the CPU it adds, at every size measured."
	if !itemCheaper {
		keep = "**At some size measured the CPU the payload item adds costs more than the write units it saves**: the choice should be revisited."
	}
	fmt.Fprintf(w, "\nIn this run, %s. %s Besides CPU, the payload item costs latency: on AWS one more sequential round trip to DynamoDB before the answer.\n", strings.Join(verdicts, "; "), keep)
	return nil
}
