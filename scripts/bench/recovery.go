package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/harness/loadgen"
	"github.com/effectively-once/webhooks/internal/harness/recovery"
	"github.com/effectively-once/webhooks/internal/queue"
)

// recoverySection measures how long the local stack takes to recover from
// SIGKILLs of real bootstraps under load: processor, dispatcher
// and intake runtimes killed during a 15/s load, on the fast profile and
// on the deployed timings, each kill's time to every event PROCESSED and
// every effect settled, against the bound the queues' visibility timeouts
// set. It also runs the crash matrix test of the path that bounds it (a
// processor dead between its commits and its announcement).
func recoverySection(ctx context.Context, w io.Writer, o options) error {
	args := []string{"test", "-count=1", "-run", "TestCrashMatrix_BeforeAnnouncement", "-v", "./internal/harness/pipelinetest"}
	out, err := command(ctx, "go", args...)
	if err != nil {
		return err
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "intents dispatched once each") {
			_, l, _ = strings.Cut(l, ": ")
			lines = append(lines, strings.TrimSpace(l))
		}
	}

	type profile struct {
		name string
		cfg  devstack.Config
		plan recovery.Plan
	}
	base := devstack.Config{Root: ".", BuildDir: filepath.Join(os.TempDir(), "bench-recovery-devstack"), AutoPorts: true}
	// Each stack its own queues: goaws is one per process, and a queue an
	// earlier stack created (the load section's, the other profile's)
	// would keep its visibility timeout and its leftover messages.
	fast := base
	fast.FastProfile()
	fast.Prefix = "recovery-fast-"
	deployed := base
	deployed.Prefix = "recovery-deployed-"
	// The deployed values the local stack does not take by default: the
	// reconciler every 5 minutes (infra ReconcileEvery, locally 60 s) and
	// the processor mapping's 1 s batching window (locally 500 ms).
	deployed.ScheduleRate, deployed.BatchWindow = 5*time.Minute, time.Second
	profiles := []profile{
		{"fast profile", fast, recovery.Plan{KillsEach: 3, Warmup: 5 * time.Second, Spacing: 6 * time.Second, Tail: 5 * time.Second, Drain: 2 * time.Minute}},
		{"deployed", deployed, recovery.Plan{KillsEach: 2, Warmup: 10 * time.Second, Spacing: 20 * time.Second, Tail: 10 * time.Second, Drain: 8 * time.Minute}},
	}
	if o.quick {
		profiles = profiles[:1]
		profiles[0].plan.KillsEach = 1
	}
	logs0 := devstack.NewLogs(io.Discard)
	if err := devstack.Build(ctx, base, logs0); err != nil {
		return err
	}
	file, _, err := devstack.LoadFile("scripts/devstack.json")
	if err != nil {
		return err
	}
	secrets := loadgen.LocalSecrets(file.Secrets)
	type run struct {
		profile
		rep           recovery.Report
		before, after string
		took          time.Duration
		logPath       string
	}
	var runs []run
	for _, p := range profiles {
		r := run{profile: p, before: loadAvg()}
		logFile, err := os.CreateTemp("", "bench-recovery-*.log")
		if err != nil {
			return err
		}
		r.logPath = logFile.Name()
		stack, err := devstack.Start(ctx, p.cfg, devstack.NewLogs(logFile))
		if err != nil {
			logFile.Close()
			return fmt.Errorf("start the local stack (log: %s): %w", logFile.Name(), err)
		}
		p.plan.LogFile, p.plan.Progress = logFile.Name(), os.Stderr
		fmt.Fprintf(os.Stderr, "bench | recovery: %s timings, log %s\n", p.name, logFile.Name())
		start := time.Now()
		r.rep, err = recovery.Run(ctx, stack, secrets, p.plan)
		r.took = time.Since(start)
		stack.Close()
		logFile.Close()
		if err != nil {
			return fmt.Errorf("%s: %w (log: %s)", p.name, err, r.logPath)
		}
		r.after = loadAvg()
		runs = append(runs, r)
	}

	var fastT devstack.Config
	fastT.FastProfile()
	fmt.Fprintf(w, "\n## Recovery after a crash: SIGKILL of real bootstraps under load\n\n"+
		"The local stack started in process (`make dev`'s real bootstraps under aws-lambda-rie: 2 intake, 2 processor, 1 dispatcher; minidyn, goaws, the fake downstream), driven by `internal/harness/loadgen` at 15 deliveries/s (20%% re-sends, half Stripe subscriptions, half orders), and during the send phase a SIGKILL to the runtime of a processor, a dispatcher or an intake instance in turn (`devstack.KillRuntimeInvoked`: once an invocation has run 0–40 ms, alternating with `KillRuntime` at the scheduled moment, busy or idle). "+
		"An independent proxy in front of the HTTP API records when each event was first answered 2xx; after the run the ledger is read once (each event's `processed_at`, each intent's `finished_at`), so nothing polls the stack while it recovers (`internal/harness/recovery`). "+
		"**kill → all PROCESSED**: from the kill until every event answered 2xx before it is PROCESSED. **kill → all SUCCEEDED**: until every intent that existed before it, or that those events created, is settled (SUCCEEDED, or SUPERSEDED/OBSOLETE: a newer state made the call unnecessary). Lost, doubled and missing are loadgen's checks of the whole run against the fake downstream (one effective call per operation id). "+
		"A kill interrupts an invocation or, idle, fails the emulator's next one (aws-lambda-rie reports the dead runtime then): either way an event source mapping deletes nothing and the batch comes back after its queue's visibility timeout; an intake request gets a 500 and the provider retries it. So a kill that interrupted nothing (idle, or its invocation answered before the signal landed) takes effect at its instance's next invocation, and its times count from the start of that invocation (`RuntimeKill.HitAt`).\n\n")
	fmt.Fprintf(w, "| timings | function killed | kills (that interrupted an invocation) | kill → all PROCESSED, median / max | kill → all SUCCEEDED, median / max | own, max: PROCESSED / SUCCEEDED | bound | lost / doubled / missing (run) |\n|---|---|---:|---:|---:|---:|---|---:|\n")
	for _, r := range runs {
		t := r.rep.Timings
		for _, ks := range r.rep.ByFunction() {
			fn := ks[0].Function
			invoked := 0
			for _, k := range ks {
				if k.Interrupted {
					invoked++
				}
			}
			fmt.Fprintf(w, "| %s | %s | %d (%d) | %s / %s | %s / %s | %s / %s | %s | %d / %d / %d |\n", r.name, fn, len(ks), invoked,
				recSecs(recovery.Median(ks, recStrictP)), recSecs(recovery.Max(ks, recStrictP)), recSecs(recovery.Median(ks, recStrictS)), recSecs(recovery.Max(ks, recStrictS)),
				recSecs(recovery.Max(ks, recOwnP)), recSecs(recovery.Max(ks, recOwnS)),
				recBound(fn, t), r.rep.Load.Lost, r.rep.Load.Effects.Doubled, r.rep.Load.Effects.Missing)
		}
	}
	fmt.Fprintf(w, "\nBounds: a processor's batch comes back after the events queue's visibility timeout, its leases (2 × the function timeout) have expired by then, and a pointer that finds its event PROCESSED announces the intents still PENDING (`Processor.recover`); add one processing round and one dispatch. A dispatcher's batch comes back after the effects queue's visibility timeout, its intents' leases (2 × its timeout) expired. The intake answers 2xx only after the pointer is sent, so an intake kill delays no accepted event.\n\n")
	for _, r := range runs {
		t := r.rep.Timings
		dispatcherTimeout := r.cfg.DispatcherTimeout
		if dispatcherTimeout == 0 {
			dispatcherTimeout = queue.DispatcherTimeout
		}
		fmt.Fprintf(w, "**%s** timings: events queue visibility %s, processor timeout %s and lease %s, batching window %s; effects queue visibility %s, dispatcher timeout %s and lease %s; reconciler every %s, grace %s. "+
			"Load: %d deliveries of %d events in %.0f s (%.1f/s accepted), %d effects applied; %d kills; the run took %s with its drain. Load average (1, 5, 15 min; 2 CPUs shared with other work) before: %s, after: %s.\n\n",
			r.name, recSecs(recSec(t.VisibilitySeconds)), recSecs(recSec(t.FunctionTimeoutSeconds)), recSecs(recSec(t.LeaseSeconds)), recSecs(recSec(t.BatchWindowSeconds)),
			recSecs(recSec(t.EffectsVisibilitySeconds)), recSecs(dispatcherTimeout), recSecs(recSec(t.DispatchLeaseSeconds)), recSecs(recSec(t.ScheduleSeconds)), recSecs(recSec(t.ReconcileStuckSeconds)),
			r.rep.Load.Sent, r.rep.Load.NewEvents, r.rep.Load.SendSeconds, r.rep.Load.Throughput, r.rep.Load.Effects.Applied, len(r.rep.Kills), r.took.Round(time.Second), r.before, r.after)
		if len(r.rep.Kills) > 0 {
			last := r.rep.Kills[len(r.rep.Kills)-1]
			fmt.Fprintf(w, "From the last kill (%s) to every event accepted before it PROCESSED: %s, every effect SUCCEEDED: %s; to the last event of the run PROCESSED: %s and its last effect settled: %s (the load ran %s after that kill).",
				last.Instance, recSecs(last.Strict.ToProcessed), recSecs(last.Strict.ToSettled), recSecs(r.rep.AfterLast.ToProcessed), recSecs(r.rep.AfterLast.ToSettled), r.plan.Tail)
		}
		fmt.Fprintf(w, " Intents by final status: %s.", recCounts(r.rep.IntentsByStatus))
		if len(r.rep.Unanswered) > 0 {
			fmt.Fprintf(w, " Events stored but never answered 2xx (a kill between the intake's write and its answer; the provider retries them): %s.", recCounts(r.rep.Unanswered))
		}
		if len(r.rep.Reconciler) == 0 {
			fmt.Fprintf(w, " The reconciler re-drove nothing during the run.")
		} else {
			for _, rr := range r.rep.Reconciler {
				fmt.Fprintf(w, " Reconciler at %+.0f s: %d events re-enqueued, %d stuck leases, %d intents re-announced, %d re-announced after a downstream check.",
					rr.At.Sub(r.rep.Started).Seconds(), rr.Reenqueued, rr.StuckLeases, rr.IntentsReannounced, rr.DownstreamReannounced)
			}
		}
		for _, e := range r.rep.KillErrors {
			fmt.Fprintf(w, " Kill not made: %s.", e)
		}
		var answers []string
		for code, n := range r.rep.Load.StatusCodes {
			if code != "200" && code != "202" {
				answers = append(answers, fmt.Sprintf("%s ×%d", code, n))
			}
		}
		if len(answers) > 0 {
			slices.Sort(answers)
			fmt.Fprintf(w, " Sends not answered 2xx: %s (the intake requests a kill interrupted, or the first request after an idle intake kill; a provider retries them).", strings.Join(answers, ", "))
		}
		for _, v := range r.rep.Load.Violations {
			if strings.HasPrefix(v, "I") {
				fmt.Fprintf(w, "\n\n**violation:** %s", v)
			}
		}
		fmt.Fprintf(w, " Against the bound (own waits): %s.", recOverBound(r.rep))
		fmt.Fprintf(w, "\n\nEach kill (times from the start of the load; *own* counts only what no earlier kill had already found in flight, so a kill that lands during an earlier one's recovery is not charged with its wait; the slowest event and intent of *own* with their audit trails, times relative to the kill):\n\n```\n")
		for _, k := range r.rep.Kills {
			how := "idle"
			if k.Invoked {
				how = fmt.Sprintf("%s into an invocation", k.Into.Round(time.Millisecond))
				if !k.Interrupted {
					how += " that answered before the signal landed"
				}
			}
			if k.Effective().After(k.At) {
				how += fmt.Sprintf("; took effect %s later, when its next invocation failed (times below from then)", recSecs(k.Effective().Sub(k.At)))
			}
			fmt.Fprintf(w, "%+6.1fs %-12s %-9s %s\n", k.At.Sub(r.rep.Started).Seconds(), k.Instance, k.Mode, how)
			fmt.Fprintf(w, "        strict: %3d events in flight, all PROCESSED %s; %3d intents, all settled %s%s\n", k.Strict.Events, recSecs(k.Strict.ToProcessed), k.Strict.Intents, recSecs(k.Strict.ToSettled), recUnfinished(k.Strict))
			fmt.Fprintf(w, "        own:    %3d events in flight, all PROCESSED %s; %3d intents, all settled %s%s\n", k.Own.Events, recSecs(k.Own.ToProcessed), k.Own.Intents, recSecs(k.Own.ToSettled), recUnfinished(k.Own))
			if k.Own.SlowestEvent != "" {
				fmt.Fprintf(w, "        slowest event:  %s\n", k.Own.SlowestEvent)
			}
			if k.Own.SlowestIntent != "" {
				fmt.Fprintf(w, "        slowest intent: %s\n", k.Own.SlowestIntent)
			}
		}
		fmt.Fprintf(w, "```\n\n")
	}

	fmt.Fprintf(w, "How to read it. The strict times include what earlier kills still held: with the deployed timings the kills are 20 s apart and each processor or dispatcher kill takes 180 s to recover, so the strict times of the kills that follow one are its remaining wait; *own* isolates each kill. "+
		"A processor kill holds its batch until the events queue's visibility timeout: the redelivered pointers find the held events RECEIVED (or PROCESSING under an expired lease: a takeover) and claim them, and a pointer of an event the killed runtime had committed announces its intents still PENDING (`recover`); held that long, an event often comes back stale (a newer event of its subject was applied meanwhile) and creates no intent. "+
		"A dispatcher kill holds its batch's intents until the effects queue's visibility timeout; the dispatch lease (2 × the dispatcher's timeout) has expired by then and the next dispatcher takes them over, and one the killed runtime had already sent is looked up at the downstream (`lookup_applied`), not sent twice. A newer intent of the same subject waits meanwhile in RETRY_WAIT (`subject_busy`) until the killed dispatcher's lease expires, inside the same bound; created after the dispatcher kill, such an intent falls in the next kill's *own* window, so an intake kill's own SUCCEEDED time can show that lease rather than anything the intake did (its trail says `subject_busy`). "+
		"An intake kill costs the request it interrupts (a 500; an event the intake had stored but not answered waits for the provider's retry, which re-enqueues its pointer) and delays nothing accepted.\n\n")

	deployedVis := queue.Events("").VisibilityTimeout
	fmt.Fprintf(w, "### The path that bounds a processor crash's effects\n\n"+
		"A processor announces its batch's intents once, after the batch's commits. When it dies in between, the invocation deletes nothing: every pointer of the batch comes back after the events queue's visibility timeout, and a pointer that finds its event PROCESSED reads the intents the event's stored result names (one GetItem each, only on that path) and announces those still PENDING with its batch (`Processor.recover`, reason `recover`; the dispatcher's claim makes a second announcement harmless). Without that path those intents would wait for the reconciler's grace plus its schedule (deployed: up to 300 s + 5 min; fast profile: %s + 60 s). "+
		"`go %s` crashes the processor after the first, second or third of three commits and before the effects SendMessageBatch, then lets a fresh worker and a dispatcher run with no reconciler and the manual clock standing still: every intent must be SUCCEEDED with one effective call per key. Events queue visibility in the test: 1 s (deployed: %s).\n\n```\n%s\n```\n",
		recSecs(fastT.ReconcileStuck), strings.Join(args, " "), recSecs(deployedVis), strings.Join(lines, "\n"))
	return nil
}

// recOverBound says, per function killed, how far the slowest own wait
// went past the visibility timeout that bounds it: the events queue's for a
// processor kill, the effects queue's for a dispatcher kill's effects; an
// intake kill, and a dispatcher kill's events, have no redelivery to wait
// for, so their whole own wait is given.
func recOverBound(rep recovery.Report) string {
	t := rep.Timings
	var parts []string
	for _, ks := range rep.ByFunction() {
		p, st := recovery.Max(ks, recOwnP), recovery.Max(ks, recOwnS)
		switch fn := ks[0].Function; fn {
		case "processor":
			v := recSec(t.VisibilitySeconds)
			parts = append(parts, fmt.Sprintf("processor kills, all PROCESSED at most %s and all SUCCEEDED at most %s after the events queue's visibility timeout", recSecs(max(p-v, 0)), recSecs(max(st-v, 0))))
		case "dispatcher":
			v := recSec(t.EffectsVisibilitySeconds)
			parts = append(parts, fmt.Sprintf("dispatcher kills, all SUCCEEDED at most %s after the effects queue's visibility timeout (their events, not held, PROCESSED within %s)", recSecs(max(st-v, 0)), recSecs(p)))
		default:
			parts = append(parts, fmt.Sprintf("%s kills, all PROCESSED within %s and all SUCCEEDED within %s of the kill", fn, recSecs(p), recSecs(st)))
		}
	}
	return strings.Join(parts, "; ")
}

func recStrictP(k recovery.Kill) time.Duration { return k.Strict.ToProcessed }
func recStrictS(k recovery.Kill) time.Duration { return k.Strict.ToSettled }
func recOwnP(k recovery.Kill) time.Duration    { return k.Own.ToProcessed }
func recOwnS(k recovery.Kill) time.Duration    { return k.Own.ToSettled }

func recSec(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// recSecs prints a duration in seconds: "0.8 s", "181 s".
func recSecs(d time.Duration) string {
	switch {
	case d == 0:
		return "0 s"
	case d < 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%.0f s", d.Seconds())
}

func recBound(fn string, t devstack.Timings) string {
	switch fn {
	case "processor":
		return fmt.Sprintf("events visibility %s + a round", recSecs(recSec(t.VisibilitySeconds)))
	case "dispatcher":
		return fmt.Sprintf("effects visibility %s + a round", recSecs(recSec(t.EffectsVisibilitySeconds)))
	}
	return "a round (no redelivery)"
}

func recUnfinished(s recovery.Span) string {
	if s.EventsUnfinished+s.IntentsUnfinished == 0 {
		return ""
	}
	return fmt.Sprintf("; NEVER: %d events, %d intents", s.EventsUnfinished, s.IntentsUnfinished)
}

func recCounts(m map[string]int) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
