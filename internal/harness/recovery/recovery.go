package recovery

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/harness/loadgen"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// Plan is one measured run: a load, and kills spread over its send phase.
type Plan struct {
	Rate float64 // offered deliveries per second; default 15
	// Functions are killed in rotation (processor, dispatcher, intake by
	// default), KillsEach times each (default 2), each kill on the next
	// instance of its function.
	Functions []string
	KillsEach int
	Warmup    time.Duration // load before the first kill; default 5 s
	Spacing   time.Duration // between two kills; default 6 s
	Tail      time.Duration // load after the last kill; default 5 s
	// Drain is how long loadgen waits, after the send phase, for every
	// event and effect; default 2 minutes.
	Drain time.Duration
	Seed  uint64 // default 18
	// LogFile is the stack's log, read afterwards for the reconciler's
	// runs (optional).
	LogFile  string
	Progress io.Writer
}

func (p *Plan) defaults() {
	if p.Rate == 0 {
		p.Rate = 15
	}
	if len(p.Functions) == 0 {
		p.Functions = []string{"processor", "dispatcher", "intake"}
	}
	if p.KillsEach == 0 {
		p.KillsEach = 2
	}
	if p.Warmup == 0 {
		p.Warmup = 5 * time.Second
	}
	if p.Spacing == 0 {
		p.Spacing = 6 * time.Second
	}
	if p.Tail == 0 {
		p.Tail = 5 * time.Second
	}
	if p.Drain == 0 {
		p.Drain = 2 * time.Minute
	}
	if p.Seed == 0 {
		p.Seed = 18
	}
	if p.Progress == nil {
		p.Progress = io.Discard
	}
}

// Kill is one SIGKILL and what it cost.
type Kill struct {
	devstack.RuntimeKill
	// Mode: "invoked" waited for an invocation to have run a random few
	// milliseconds; "arbitrary" killed at the scheduled moment, busy or
	// idle.
	Mode string `json:"mode"`
	// Strict: every event accepted and every intent that existed before
	// the kill took effect (Effective). Own: only what no earlier kill had
	// found in flight.
	Strict Span `json:"strict"`
	Own    Span `json:"own"`
}

// Effective is when the kill took effect: at once when it interrupted an
// invocation; when it interrupted none (the runtime was idle, or its
// invocation answered before the signal landed), at the start of the
// instance's next invocation, which the emulator failed for it (the kill
// itself if that never happened).
func (k Kill) Effective() time.Time {
	if !k.Interrupted && k.HitAt.After(k.At) {
		return k.HitAt
	}
	return k.At
}

// ReconcilerRun is one run of the reconciler that did something.
type ReconcilerRun struct {
	At                    time.Time `json:"at"`
	Reenqueued            int       `json:"reenqueued"`
	StuckLeases           int       `json:"stuck_leases"`
	IntentsReannounced    int       `json:"intents_reannounced"`
	DownstreamReannounced int       `json:"downstream_reannounced"`
}

// Report is one run's outcome.
type Report struct {
	Timings devstack.Timings `json:"timings"`
	Plan    Plan             `json:"-"`
	Kills   []Kill           `json:"kills"`
	// KillErrors are kills that could not be made (no runtime to kill).
	KillErrors []string `json:"kill_errors,omitempty"`
	// AfterLast is from the last kill to every event PROCESSED and every
	// intent settled.
	AfterLast Span           `json:"after_last"`
	Load      loadgen.Result `json:"load"`
	// Unanswered are events the ledger holds that were never answered
	// 2xx (a kill between the intake's write and its answer), by status:
	// a provider retries them; RECEIVED without a pointer waits for that
	// retry or the reconciler.
	Unanswered map[string]int `json:"unanswered,omitempty"`
	// Intents by final status (SUCCEEDED, SUPERSEDED, …).
	IntentsByStatus map[string]int  `json:"intents_by_status"`
	Reconciler      []ReconcilerRun `json:"reconciler,omitempty"`
	Started         time.Time       `json:"started"`
}

// Run drives stack with loadgen (secrets from the stack's file), kills
// runtimes as the plan says, and measures.
func Run(ctx context.Context, stack *devstack.Stack, secrets loadgen.Secrets, p Plan) (Report, error) {
	p.defaults()
	rep := Report{Timings: stack.Timings(), Plan: p, Started: time.Now()}
	if err := checkVisibility(ctx, stack); err != nil {
		return rep, err
	}
	rec, err := newRecorder(stack.HTTPURL())
	if err != nil {
		return rep, err
	}
	defer rec.Close()
	n := len(p.Functions) * p.KillsEach
	duration := p.Warmup + time.Duration(n-1)*p.Spacing + p.Tail
	target := loadgen.Target{BaseURL: rec.url, DB: stack.DB, Table: stack.Table(), Secrets: secrets}
	opts := loadgen.Options{Rate: p.Rate, Duration: duration, DuplicateRatio: 0.2, Seed: p.Seed, Drain: p.Drain, Settle: 2 * time.Second, Progress: p.Progress}

	type loadOut struct {
		res loadgen.Result
		err error
	}
	done := make(chan loadOut, 1)
	start := time.Now()
	rep.Started = start
	go func() {
		r, err := loadgen.Run(ctx, target, opts)
		done <- loadOut{r, err}
	}()

	// The kills, on their schedule, during the send phase.
	rng := rand.New(rand.NewPCG(p.Seed, 0x6b696c6c))
	for i := range n {
		fn := p.Functions[i%len(p.Functions)]
		round := i / len(p.Functions)
		names := stack.InstanceNames(fn)
		if len(names) == 0 {
			return rep, fmt.Errorf("no %s instance to kill", fn)
		}
		name := names[round%len(names)]
		at := start.Add(p.Warmup + time.Duration(i)*p.Spacing)
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-time.After(time.Until(at)):
		}
		k := Kill{Mode: "arbitrary"}
		var err error
		if round%2 == 0 {
			k.Mode = "invoked"
			kctx, cancel := context.WithTimeout(ctx, p.Spacing/2)
			into := time.Duration(rng.IntN(40)) * time.Millisecond
			k.RuntimeKill, err = stack.KillRuntimeInvoked(kctx, name, into)
			cancel()
			if err != nil && ctx.Err() == nil && !errors.Is(err, devstack.ErrNoRuntime) {
				k.Mode = "arbitrary (no invocation within " + (p.Spacing / 2).String() + ")"
				k.RuntimeKill, err = stack.KillRuntime(name)
			}
		} else {
			k.RuntimeKill, err = stack.KillRuntime(name)
		}
		if err != nil {
			rep.KillErrors = append(rep.KillErrors, fmt.Sprintf("%s at +%.1fs: %v", name, time.Since(start).Seconds(), err))
		} else {
			rep.Kills = append(rep.Kills, k)
			fmt.Fprintf(p.Progress, "recovery | +%5.1fs killed %s (%s, invoked %v)\n", k.At.Sub(start).Seconds(), name, k.Mode, k.Invoked)
		}
	}
	out := <-done
	rep.Load = out.res
	if out.err != nil {
		return rep, fmt.Errorf("load: %w", out.err)
	}

	// Where the idle kills took effect (their instance's next invocation).
	for _, rk := range stack.RuntimeKills() {
		for i := range rep.Kills {
			if k := &rep.Kills[i]; k.Instance == rk.Instance && k.At.Equal(rk.At) {
				k.HitAt, k.Interrupted = rk.HitAt, rk.Interrupted
			}
		}
	}
	obs, err := observe(ctx, stack, rec, &rep)
	if err != nil {
		return rep, err
	}
	var prev time.Time
	for i := range rep.Kills {
		k := &rep.Kills[i]
		at := k.Effective()
		k.Strict = obs.span(at, time.Time{})
		k.Own = obs.span(at, prev)
		prev = maxTime(prev, at)
	}
	if len(rep.Kills) > 0 {
		rep.AfterLast = obs.afterLast(rep.Kills[len(rep.Kills)-1].Effective())
	}
	if p.LogFile != "" {
		rep.Reconciler, _ = reconcilerRuns(p.LogFile, start)
	}
	return rep, nil
}

// checkVisibility reads the queues' visibility timeouts from SQS: they
// must be the stack's timings. (goaws is one per process: a second stack
// with the same queue prefix gets the first one's queues, timings and
// leftover messages included.)
func checkVisibility(ctx context.Context, stack *devstack.Stack) error {
	t := stack.Timings()
	for _, q := range []struct {
		url  string
		want float64
	}{{stack.Queues.Queue, t.VisibilitySeconds}, {stack.EffectsQueues.Queue, t.EffectsVisibilitySeconds}} {
		out, err := stack.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(q.url),
			AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameVisibilityTimeout}})
		if err != nil {
			return fmt.Errorf("visibility of %s: %w", q.url, err)
		}
		if got := out.Attributes[string(sqstypes.QueueAttributeNameVisibilityTimeout)]; got != strconv.Itoa(int(q.want)) {
			return fmt.Errorf("%w: %s has a visibility timeout of %s s, the stack's timings say %.0f s (a queue an earlier stack in this process created? give each stack its own Config.Prefix)", ErrTimings, q.url, got, q.want)
		}
	}
	return nil
}

// ErrTimings is a stack whose queues do not have its timings.
var ErrTimings = errors.New("the queues do not have the stack's timings")

// afterLast measures from the last kill to the last event PROCESSED and
// the last intent settled, whenever they were accepted or created.
func (o observed) afterLast(last time.Time) Span {
	var s Span
	var lastEv, lastIn time.Time
	for k := range o.accepted {
		p, ok := o.processed[k]
		switch {
		case !ok:
			s.EventsUnfinished++
		case p.After(last):
			s.Events++
			lastEv = maxTime(lastEv, p)
		}
	}
	for _, in := range o.intents {
		switch {
		case in.finished.IsZero():
			s.IntentsUnfinished++
		case in.finished.After(last):
			s.Intents++
			lastIn = maxTime(lastIn, in.finished)
		}
	}
	if !lastEv.IsZero() {
		s.ToProcessed = lastEv.Sub(last)
	}
	if !lastIn.IsZero() {
		s.ToSettled = lastIn.Sub(last)
	}
	return s
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// observe reads the ledger once, after the run.
func observe(ctx context.Context, stack *devstack.Stack, rec *recorder, rep *Report) (observed, error) {
	acc, _ := rec.accepted()
	o := observed{accepted: acc, processed: map[string]time.Time{}, audits: map[string][]ledger.AuditEntry{}}
	snap, err := ledger.TakeSnapshot(ctx, stack.DB, stack.Table())
	if err != nil {
		return o, err
	}
	l, err := ledger.New(stack.DB, ledger.Options{Table: stack.Table()})
	if err != nil {
		return o, err
	}
	for _, ev := range snap.Events {
		k := ev.Source + "/" + ev.EventID
		o.audits[k] = ev.Audit
		if ev.Status == ledger.StatusProcessed {
			o.processed[k] = ev.ProcessedAt
		}
		if _, ok := acc[k]; !ok {
			if rep.Unanswered == nil {
				rep.Unanswered = map[string]int{}
			}
			rep.Unanswered[string(ev.Status)]++
		}
	}
	rep.IntentsByStatus = map[string]int{}
	for _, si := range snap.Intents {
		st, err := l.GetIntentState(ctx, si.OperationID)
		if err != nil {
			return o, fmt.Errorf("read intent %s: %w", si.OperationID, err)
		}
		in := intentObs{op: st.OperationID, kind: st.Kind, causation: st.Causation, status: st.Status, created: st.CreatedAt, audit: st.Audit}
		if st.Status.Terminal() {
			in.finished = st.FinishedAt
			if in.finished.IsZero() && len(st.Audit) > 0 {
				in.finished = st.Audit[len(st.Audit)-1].At
			}
		}
		rep.IntentsByStatus[string(st.Status)]++
		o.intents = append(o.intents, in)
	}
	return o, nil
}

// reconcilerRuns reads the reconciler's "reconciled" lines from the stack
// log and keeps the runs that did something.
func reconcilerRuns(path string, since time.Time) ([]ReconcilerRun, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []ReconcilerRun
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "reconciler") || !strings.Contains(line, `"msg":"reconciled"`) {
			continue
		}
		_, js, _ := strings.Cut(line, "| ")
		var r struct {
			Time                  time.Time `json:"time"`
			Reenqueued            int       `json:"reenqueued"`
			StuckLeases           int       `json:"stuck_leases"`
			IntentsReannounced    int       `json:"intents_reannounced"`
			DownstreamReannounced int       `json:"downstream_reannounced"`
		}
		if json.Unmarshal([]byte(js), &r) != nil || r.Time.Before(since) {
			continue
		}
		if r.Reenqueued+r.StuckLeases+r.IntentsReannounced+r.DownstreamReannounced > 0 {
			out = append(out, ReconcilerRun{At: r.Time, Reenqueued: r.Reenqueued, StuckLeases: r.StuckLeases, IntentsReannounced: r.IntentsReannounced, DownstreamReannounced: r.DownstreamReannounced})
		}
	}
	return out, sc.Err()
}

// ByFunction groups the kills by the function killed, in plan order.
func (r Report) ByFunction() [][]Kill {
	var out [][]Kill
	for _, fn := range r.Plan.Functions {
		var ks []Kill
		for _, k := range r.Kills {
			if k.Function == fn {
				ks = append(ks, k)
			}
		}
		if len(ks) > 0 {
			out = append(out, ks)
		}
	}
	return out
}

// Median and Max of a kill field.
func Median(ks []Kill, f func(Kill) time.Duration) time.Duration {
	ds := make([]time.Duration, 0, len(ks))
	for _, k := range ks {
		ds = append(ds, f(k))
	}
	slices.Sort(ds)
	if len(ds) == 0 {
		return 0
	}
	if len(ds)%2 == 1 {
		return ds[len(ds)/2]
	}
	return (ds[len(ds)/2-1] + ds[len(ds)/2]) / 2
}

// Max is the largest value of f over ks.
func Max(ks []Kill, f func(Kill) time.Duration) time.Duration {
	var m time.Duration
	for _, k := range ks {
		m = max(m, f(k))
	}
	return m
}
