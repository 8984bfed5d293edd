package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/harness/loadgen"
)

// The soak's flags live here, beside the section that reads them.
var (
	soakCount = flag.Int("soak-count", 50_000, "deliveries of the soak section (-quick: 2,000)")
	soakRate  = flag.Float64("soak-rate", 30, "offered rate of the soak section (deliveries/s); the local stack on 2 CPUs sustains about 30/s with headroom")
)

// soakSection offers one long open-loop run to the local stack:
// at least 50,000 deliveries with duplicates and effects, the usual
// lost/doubled/missing check, and the latency of the last 1,000 deliveries
// against the first 1,000. While it runs it samples this process's heap
// (minidyn and goaws live in it) and the queues' depth, so a drift can be
// told apart: a store growing with the ledger, or a backlog.
func soakSection(ctx context.Context, w io.Writer, o options) error {
	n, rate := *soakCount, *soakRate
	if o.quick {
		n = 2_000
	}
	if n < 2*loadgen.DriftWindow {
		return fmt.Errorf("-soak-count %d: the first and last %d need at least %d", n, loadgen.DriftWindow, 2*loadgen.DriftWindow)
	}
	stack, target, logName, stop, err := startStack(ctx, "soak")
	if err != nil {
		return err
	}
	defer stop()
	samples := sampleStack(ctx, stack, 30*time.Second)
	loadBefore := loadAvg()
	start := time.Now()
	sendFor := time.Duration(float64(n)/rate*float64(time.Second)) + time.Second
	res, err := loadgen.Run(ctx, target, loadgen.Options{Rate: rate, Count: n, Duration: sendFor, DuplicateRatio: 0.2, Seed: 19,
		Drain: 5 * time.Minute, Settle: 2 * time.Second, Progress: os.Stderr})
	took := time.Since(start)
	loadAfter := loadAvg()
	points := samples()
	if err != nil {
		return fmt.Errorf("soak (stack log: %s): %w", logName, err)
	}
	res.Print(os.Stderr)
	if res.Drift == nil {
		return fmt.Errorf("the soak sent %d deliveries, fewer than twice %d (stack log: %s)", res.Sent, loadgen.DriftWindow, logName)
	}

	fmt.Fprintf(w, "\n## Soak: %d deliveries through the local stack\n\n", res.Sent)
	fmt.Fprintf(w, "`go run ./scripts/bench -skip <every other section> -soak-count %d -soak-rate %g` (against a running `make dev`: `make load LOAD_ARGS='-soak %d -rate %g -drain 5m'`): the stack of the load section (started in process, fast profile, every component on this machine's %d CPUs), one open-loop run at %g deliveries/s with 20%% duplicates, Stripe subscriptions with entitlement effects and orders with refunds and notifications, then the lost/doubled/missing check of the load section. "+
		"The run's first %d deliveries are compared with its last %d: intake latency by send time, time to PROCESSED by the event's first send. Run %s, %s; load average (1/5/15 min) %s before, %s after.\n\n",
		n, rate, n, rate, runtime.NumCPU(), rate, res.Drift.Window, res.Drift.Window, res.Run, took.Round(time.Second), loadBefore, loadAfter)
	fmt.Fprintln(w, "| sent | duplicates | skipped | accepted /s | events | PROCESSED | lost | effects applied | superseded or obsolete | doubled | missing | unexpected |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	e := res.Effects
	fmt.Fprintf(w, "| %d | %d | %d | %.1f | %d | %d | %d | %d | %d | %d | %d | %d |\n\n",
		res.Sent, res.Duplicates, res.Skipped, res.Throughput, res.Accepted, res.Processed, res.Lost, e.Applied, e.Suppressed, e.Doubled, e.Missing, e.Unexpected)
	d := res.Drift
	fmt.Fprintf(w, "| latency | first %d p50 | last %d p50 | ratio | first p99 | last p99 | ratio | whole run p50 | p99 |\n", d.Window, d.Window)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, p := range []struct {
		name        string
		first, last loadgen.Percentiles
		all         loadgen.Percentiles
	}{{"intake", d.IntakeFirst, d.IntakeLast, res.Intake}, {"to PROCESSED", d.EndToEndFirst, d.EndToEndLast, res.EndToEnd}} {
		fmt.Fprintf(w, "| %s | %.1f ms | %.1f ms | %.2f× | %.1f ms | %.1f ms | %.2f× | %.1f ms | %.1f ms |\n", p.name,
			p.first.P50, p.last.P50, loadgen.Ratio(p.first.P50, p.last.P50), p.first.P99, p.last.P99, loadgen.Ratio(p.first.P99, p.last.P99), p.all.P50, p.all.P99)
	}
	fmt.Fprintf(w, "\nWhat grew while it ran (sampled every 30 s: the Go heap of the process that holds minidyn and goaws after a GC, and the messages in the events and effects queues, visible + in flight):\n\n")
	fmt.Fprintln(w, "| elapsed | heap in use | events queue | effects queue |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|")
	for i, p := range points {
		if i%10 != 0 && i != len(points)-1 { // every 5 minutes and the last
			continue
		}
		fmt.Fprintf(w, "| %s | %d MiB | %s | %s |\n", p.at.Round(time.Second), p.heapMiB, p.events, p.effects)
	}
	if runs := reconcileDurations(logName); len(runs) > 0 {
		k := min(3, len(runs))
		fmt.Fprintf(w, "\nThe reconciler's runs (every %s on this profile; `duration_ms` of its `reconciled` log lines): %d runs, the first %d took %s, the last %d %s, the longest %s. A run that grows with the ledger holds the emulator's lock longer and longer, and every request waits behind it.\n",
			time.Duration(stack.Timings().ScheduleSeconds*float64(time.Second)), len(runs), k, durations(runs[:k]), k, durations(runs[len(runs)-k:]), slices.Max(runs))
	}
	if !res.OK() {
		for _, v := range res.Violations {
			fmt.Fprintf(w, "\n**violation:** %s\n", v)
		}
		return fmt.Errorf("the soak lost or doubled something (stack log: %s): see %s", logName, o.out)
	}
	return nil
}

// startStack builds and starts the local stack in process on free ports
// with the fast profile, as the load section does, and the target that
// drives it.
func startStack(ctx context.Context, name string) (*devstack.Stack, loadgen.Target, string, func(), error) {
	cfg := devstack.Config{Root: ".", BuildDir: filepath.Join(os.TempDir(), "bench-devstack"), AutoPorts: true}
	cfg.FastProfile()
	logFile, err := os.CreateTemp("", "bench-"+name+"-*.log")
	if err != nil {
		return nil, loadgen.Target{}, "", nil, err
	}
	logs := devstack.NewLogs(logFile)
	fail := func(err error) (*devstack.Stack, loadgen.Target, string, func(), error) {
		logFile.Close()
		return nil, loadgen.Target{}, logFile.Name(), nil, err
	}
	if err := devstack.Build(ctx, cfg, logs); err != nil {
		return fail(err)
	}
	stack, err := devstack.Start(ctx, cfg, logs)
	if err != nil {
		return fail(fmt.Errorf("start the local stack (log: %s): %w", logFile.Name(), err))
	}
	file, _, err := devstack.LoadFile("scripts/devstack.json")
	if err != nil {
		stack.Close()
		return fail(err)
	}
	target := loadgen.Target{BaseURL: stack.HTTPURL(), DB: stack.DB, Table: stack.Table(),
		Secrets: loadgen.LocalSecrets(file.Secrets)}
	return stack, target, logFile.Name(), func() { stack.Close(); logFile.Close() }, nil
}

// sample is the stack's state at one moment of a soak.
type sample struct {
	at              time.Duration
	heapMiB         uint64
	events, effects string
}

// sampleStack samples every period until the returned function is called,
// which stops the sampling and returns the samples (the last one taken then).
func sampleStack(ctx context.Context, stack *devstack.Stack, period time.Duration) func() []sample {
	start := time.Now()
	var (
		mu  sync.Mutex
		out []sample
	)
	take := func() {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		s := sample{at: time.Since(start), heapMiB: m.HeapInuse >> 20,
			events: queueDepth(ctx, stack.SQS, stack.Queues.Queue), effects: queueDepth(ctx, stack.SQS, stack.EffectsQueues.Queue)}
		mu.Lock()
		out = append(out, s)
		mu.Unlock()
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(period)
		defer t.Stop()
		take()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				take()
			}
		}
	}()
	return func() []sample {
		close(done)
		<-stopped
		take()
		mu.Lock()
		defer mu.Unlock()
		return out
	}
}

// queueDepth is a queue's visible and in-flight messages, "v + f".
func queueDepth(ctx context.Context, c *sqs.Client, url string) string {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		return "?"
	}
	v, _ := strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
	f, _ := strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	return fmt.Sprintf("%d + %d", v, f)
}

// loadAvg is the 1, 5 and 15 minute load averages, as uptime prints them.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// reconcileDurations reads the reconciler's run times from the stack log.
func reconcileDurations(logName string) []time.Duration {
	b, err := os.ReadFile(logName)
	if err != nil {
		return nil
	}
	var out []time.Duration
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, `"msg":"reconciled"`) {
			continue
		}
		_, rest, ok := strings.Cut(line, `"duration_ms":`)
		if !ok {
			continue
		}
		end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
		if end < 0 {
			end = len(rest)
		}
		if n, err := strconv.Atoi(rest[:end]); err == nil {
			out = append(out, time.Duration(n)*time.Millisecond)
		}
	}
	return out
}

func durations(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.Round(100*time.Millisecond).String())
	}
	return strings.Join(s, ", ")
}
