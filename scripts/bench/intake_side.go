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
		"A third contender, bare-payload, is the same bare handler making our intake's three requests for a body kept out of line (a conditional put of a small item with the id, a put of the raw body in its own item, the send): it prices the payload item's request apart from the rest of our work.\n\n"+
		"### The function process's own CPU per delivery\n\n"+
		"Primary measure: the function process's own CPU per delivery, user+sys from `getrusage(RUSAGE_SELF)`, with the emulators (minidyn, goaws) in the bench's process, not the function's. "+
		"Each contender runs in its own worker process (`internal/harness/capacity/cpuworker`), built as a Lambda bootstrap is (`%s`, for this host's GOOS/GOARCH; %s) and configured by environment as the local stack configures an intake function (emulator endpoints, table, queue, one Stripe source, the function role's fake credentials). "+
		"Ours is built as the intake's composition root builds it (`config.LoadIntake`, `Start`, `intake.Handler` with the runtime's ledger, secrets, JSON logger and EMF metrics); the bare handler gets SDK clients from `config.LoadDefaultConfig`. "+
		"The worker includes what the function pays per delivery in Lambda: the Lambda JSON path (an API Gateway HTTP API 2.0 event through `lambda.NewHandler(h).Invoke`), the handler, the SDK calls over loopback HTTP, the garbage collector, and the logs and EMF metrics written to its stdout (as in Lambda; here to /dev/null). "+
		"It excludes the Lambda runtime API loop (polling /next and posting the response), which both contenders would pay alike. "+
		"For each GOMAXPROCS (%s), one worker per contender; a warm-up of %d deliveries per size each, not measured; then %d repetitions, in each per payload size one block of %d new deliveries (realistic Stripe events, unique ids) to each contender, each contender leading a repetition in turn. "+
		"A worker builds and signs a block's requests, runs a full GC, then reads getrusage, the Go allocator's counters and the clock around the block's Invokes alone. "+
		"CPU per delivery is the block's (user+sys)/n; the ratios are ours/bare and ours/bare-payload within each repetition, shown as the median and range over the repetitions, as are the CPU columns. "+
		"Wall p50/p99 are the medians over the repetitions of each block's Invoke times (they include waiting for the emulators); allocations and bytes are per delivery over all blocks. "+
		"A new event answered 200 is an SDK retry of a conditional put whose first attempt had succeeded (the loopback drops a response now and then); the retry's CPU is counted in its contender's. "+
		"`internal/harness/capacity/intake_cpu.go`.\n\n",
		rep.BuildCommand, rep.GoVersion, strings.Join(procs, " and "), c.Warmup, c.Reps, c.PerBlock)
	capacity.WriteCPUTable(w, rep)
	worst := 0.0
	for _, r := range rep.Rows {
		worst = max(worst, r.Ratio.Median)
	}
	verdict := "met"
	if worst > 1.3 {
		verdict = "**not met**"
	}
	fmt.Fprintf(w, "\nTarget: our CPU per delivery at most 1.3× the bare handler's. Worst median ratio in this run: %.2f×, target %s.\n", worst, verdict)
	fmt.Fprintf(w, "\nThe gap, per delivery (medians of the repetitions): ours less bare, of which the payload item's request (bare-payload less bare: the same handler making our three requests) and the rest (ours less bare-payload: our own work beyond those requests).\n\n"+
		"| GOMAXPROCS | payload | ours − bare | bare-payload − bare | ours − bare-payload | ours/bare-payload |\n|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rep.Rows {
		fmt.Fprintf(w, "| %d | %d B | %+.0f µs | %+.0f µs | %+.0f µs | %.2f× (%.2f–%.2f) |\n", r.Procs, r.PayloadBytes,
			r.OursCPU.Median-r.BareCPU.Median, r.BarePayloadCPU.Median-r.BareCPU.Median, r.OursCPU.Median-r.BarePayloadCPU.Median,
			r.RatioPayload.Median, r.RatioPayload.Min, r.RatioPayload.Max)
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
