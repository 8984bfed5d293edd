package chaos

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	"github.com/effectively-once/webhooks/internal/harness/downstream"
	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/intake"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/reconciler"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Design is a processing core the executor can run: ours (the real
// processor and the outbox's dispatchers) or a naive one.
type Design struct {
	Name string
	// NewProcessor starts one processor instance whose clients carry gate
	// (and its own recorder, returned); handler is a Lambda SQS handler.
	NewProcessor func(h *pt.Harness, name string, gate *pt.Gate) (rec *awstrace.Recorder, handler any)
	// Outbox: the design announces intents that dispatchers perform.
	Outbox bool
	// Effects returns the effective downstream calls per operation id.
	Effects func(h *pt.Harness) map[string]int
	// OrdersOnly: the design knows only the orders source; a schedule's
	// Stripe events are not delivered (nor forged or replayed), so they
	// are not accepted and the checker expects nothing of them.
	OrdersOnly bool
	// DispatcherLedger, when set, wraps each dispatcher's ledger (an
	// Outbox design whose dispatcher is told something else than ours).
	DispatcherLedger func(outbox.Ledger) outbox.Ledger
	// WarehouseWriter, when set, replaces each dispatcher's warehouse
	// writer (a naive one, given ours to reuse its client and
	// configuration), and turns the warehouse sink on in every schedule
	// (RunBatch generates them all with Schedule.Warehouse).
	WarehouseWriter func(*outbox.WarehouseEffect) outbox.Effect
	// WarehouseHead, when set, wraps the S3 client of the reconciler's
	// warehouse check (a naive sink's notion of a record being there).
	WarehouseHead func(reconciler.S3Header) reconciler.S3Header
	// ProcessorLedger, when set, wraps each of our processors' ledger (a
	// design whose commit is told something else than ours).
	ProcessorLedger func(processor.Ledger) processor.Ledger
	// ReuseIDs runs every schedule under the rule that reuses an
	// operation id (RunBatch generates them all with Schedule.ReuseIDs).
	ReuseIDs bool
}

// DispatcherLease is the chaos dispatchers' lease on an intent (manual
// clock). A dispatcher paused longer than that before a call is stopped
// instead of resumed: a Lambda whose timeout is below its lease cannot
// outlive it, and nothing fences a call made after it.
const DispatcherLease = 30 * time.Second

// Ours is the product: the processor Lambda's handler and the dispatcher
// Lambda's handler against an idempotent downstream.
var Ours = Design{
	Name: "ours",
	NewProcessor: func(h *pt.Harness, name string, gate *pt.Gate) (*awstrace.Recorder, any) {
		w := h.NewChaosWorker(name, gate.APIOption)
		return w.Rec, w.P.HandleSQS
	},
	Outbox:  true,
	Effects: func(h *pt.Harness) map[string]int { return h.Outbox.Down.EffectiveByKey() },
}

// Result is what one schedule did and which invariants it broke.
type Result struct {
	Design     string      `json:"design"`
	Seed       uint64      `json:"seed"`
	Violations []Violation `json:"violations,omitempty"`
	Stats      Stats       `json:"stats"`
	Took       time.Duration
}

// Stats count what a run exercised.
type Stats struct {
	Steps, Crashes, Pauses, Takeovers, Redrives, Replays, Dead, Quarantined, Effects, Intents int
	// Lost counts answers lost after their call was applied, and retried
	// by the SDK (Config.LostPercent).
	Lost int
	// Stripe subscription events accepted, their outcomes, and the
	// subscriptions that ended deleted (terminal).
	Stripe, StripeApplied, StripeNoop, StripeStale, Deleted int
	// StripeFetched counts facts projected from what a thin event's fetch
	// returned; StripeFetches the Stripe API requests made.
	StripeFetched, StripeFetches int
	// What the I7 schedules exercised: dispatcher pauses, and of them the
	// ones stopped past their lease (Kills). The rest count schedules
	// (see exercised): Waited, an effect's call failed and a newer
	// revision of its subject was committed before it was performed;
	// OverrideQueued, an order's cancellation was overridden while its
	// refund or notice was not performed yet; OverridePerformed, after it
	// was; CheckWindow, a dispatcher paused between its check and its call
	// while a newer revision of the intent's subject was committed;
	// TwoDispatchers, intents of one subject claimed by two dispatchers.
	DispatcherPauses, Kills                                                int
	Waited, OverrideQueued, OverridePerformed, CheckWindow, TwoDispatchers int
	// StepFunctions counts the schedules whose effects a Step Functions
	// target performed (Schedule.EffectTarget).
	StepFunctions int
	// ReuseIDs counts the schedules whose orders ran under the rule that
	// reuses an operation id (Schedule.ReuseIDs); ReuseTold the events an
	// operator was told about (QUARANTINED operation_id_reused).
	ReuseIDs, ReuseTold int
	// The warehouse sink (I9): Warehouse counts the schedules that ran
	// with it on; Records the records their warehouses held at the end;
	// StoreOutages and StoreHangs the store's scripted failures (down for
	// a stretch; a PutObject held past its timeout); RecordsWaited the
	// record intents that waited (RETRY_WAIT or UNCERTAIN) and
	// RecordsFailed those that ended FAILED (attempts spent while the
	// store was down); RecordsRecreated, RecordsRepaired and
	// RecordsReannounced what the reconciler's warehouse check did;
	// LateOlder the schedules in which a subject's older record was
	// written after a newer one.
	Warehouse, Records, StoreOutages, StoreHangs, RecordsWaited, RecordsFailed int
	RecordsRecreated, RecordsRepaired, RecordsReannounced, LateOlder           int
	// PayloadWaits counts the events a worker found without their
	// payload (an intake died between the row and its chunks) and that
	// waited for the provider's retry (audit await_payload).
	PayloadWaits int
}

// Failed reports whether any invariant broke.
func (r Result) Failed() bool { return len(r.Violations) > 0 }

type proc struct {
	name    string
	rec     *awstrace.Recorder
	gate    *pt.Gate
	handler any
	busy    chan struct{} // a paused poll is running until this closes
}

// disp is one dispatcher instance of a run, which may be paused.
type disp struct {
	*pt.Dispatcher
	gate     *pt.Gate
	busy     chan struct{} // a paused dispatch is running until this closes
	pausedAt time.Time     // manual clock
	window   *window       // a pause right before a downstream call
}

// window is a dispatcher's pause between its check of the truth and its
// downstream call, in the run's sequence (pipelinetest.Outbox.Tick).
type window struct{ from, to int64 }

type run struct {
	lost     atomic.Int64 // answers lost, every recorder of the run
	ctx      context.Context
	s        Schedule
	d        Design
	h        *pt.Harness
	v        *pt.Virtual
	procs    []*proc
	disps    []*disp
	gen      int
	accepted []bool
	last     map[string]ledger.Projection // last sampled projection per subject
	hist     map[string][]sample          // every sampled change per subject, in sequence
	windows  []window
	viol     []Violation
	stats    Stats
	errs     chan string // harness failures inside paused polls
	forged   []string    // ids of forged deliveries
	// owed are the deliveries an intake crash answered 5xx, by event
	// index: the provider retries them ProviderRetryAfter later (manual
	// clock), at a delivery step or while settling, so the row an intake
	// left without its payload meets the reconciler and the workers
	// first.
	owed map[int]owedRetry
	// target performs every effect when the schedule names one
	// (Schedule.EffectTarget); nil: the HTTP downstream does.
	target *pt.AWSTarget
	// wh is the warehouse sink when it is on (Schedule.Warehouse); its
	// store is down until storeUntil (manual clock) while storeDown.
	wh         *pt.Warehouse
	storeDown  bool
	storeUntil time.Time
}

// Run plays one schedule against a design and checks it.
func Run(s Schedule, d Design) (res Result) {
	start := time.Now()
	res = Result{Design: d.Name, Seed: s.Seed}
	tb := pt.NewRunTB(fmt.Sprintf("chaos/%s/%d", d.Name, s.Seed))
	r := &run{ctx: context.Background(), s: s, d: d, accepted: make([]bool, len(s.Events)), last: map[string]ledger.Projection{}, hist: map[string][]sample{}, errs: make(chan string, 16)}
	defer func() {
		if p := recover(); p != nil {
			msg := fmt.Sprint(p)
			if f, ok := p.(pt.RunFatal); ok {
				msg = f.Msg
			} else {
				msg += "\n" + string(debug.Stack())
			}
			r.viol = append(r.viol, Violation{Invariant: Harness, Detail: msg})
		}
		r.shutdown()
		tb.RunCleanups()
		r.stats.Lost = int(r.lost.Load())
		res.Violations, res.Stats, res.Took = r.viol, r.stats, time.Since(start)
	}()
	po, oo := pt.Options{MaxReceiveCount: 4}, pt.OutboxOptions{Lease: DispatcherLease}
	if s.ReuseIDs {
		po.Registry = reuseRegistry()
		oo.Kinds, oo.Scopes = []string{SyncKind}, map[string][]string{SyncKind: {"orders"}}
		r.stats.ReuseIDs++
	}
	r.h = pt.NewChaos(tb, po, oo)
	r.h.ProcessorLedger = d.ProcessorLedger
	if s.EffectTarget == TargetStepFunctions && d.Outbox {
		// Every kind's effect starts an execution; its workflow performs
		// the call on the downstream the checker reads.
		r.target = r.h.Outbox.UseTarget(outbox.TargetStepFunctions, slices.Sorted(maps.Keys(r.h.Outbox.Effects))...)
		r.target.PerformOnDownstream()
		r.stats.StepFunctions++
	}
	if (s.Warehouse || d.WarehouseWriter != nil) && d.Outbox {
		// After the target: the sink's kind is never a target's. Each
		// dispatcher writes with its own S3 client, so its crash steps
		// can hit the PutObject.
		r.wh = r.h.EnableWarehouse(0)
		r.wh.PerDispatcher, r.wh.Wrap = true, d.WarehouseWriter
		r.wh.Effect.Timeout = StoreTimeout
		r.stats.Warehouse++
	}
	r.v = r.h.NewVirtual()
	r.h.IntakeRec.LostTotal = &r.lost
	tb.Cleanup(r.deleteQueues)
	r.putStripeTruth()
	for i := range max(s.Workers, 1) {
		r.procs = append(r.procs, r.newProc(i))
	}
	if d.Outbox {
		for i := range max(s.Dispatchers, 1) {
			r.disps = append(r.disps, r.newDispatcher(i))
		}
	}
	for i, st := range s.Steps {
		if r.skipped(st) {
			continue
		}
		r.step(st)
		r.storeTick()
		r.v.Release(r.ctx)
		r.sample(fmt.Sprintf("after step %d (%s)", i, st))
		r.drainErrs()
	}
	r.stats.Steps = len(s.Steps)
	settled := r.quiesce()
	r.drainErrs()
	obs := r.observe()
	for _, id := range r.forged {
		if _, ok := obs.events[id]; ok {
			r.viol = append(r.viol, Violation{Invariant: I4, Detail: "a forged delivery " + id + " has a ledger row"})
		}
	}
	r.viol = append(r.viol, check(r.s, r.accepted, obs, settled)...)
	r.stripeStats(obs)
	for _, ev := range obs.events {
		if slices.ContainsFunc(ev.Audit, func(a ledger.AuditEntry) bool { return a.Action == "await_payload" }) {
			r.stats.PayloadWaits++
		}
	}
	r.stats.add(exercised(r.s, r.accepted, obs))
	return res
}

// skipped: a step on a Stripe event, for a design that knows only orders.
func (r *run) skipped(st Step) bool {
	switch st.Op {
	case OpDeliver, OpForge, OpReplay:
		return r.d.OrdersOnly && st.Event >= 0 && st.Event < len(r.s.Events) && r.s.Events[st.Event].Stripe()
	}
	return false
}

func (r *run) newProc(i int) *proc {
	r.gen++
	p := &proc{name: fmt.Sprintf("proc-%d.%d", i, r.gen), gate: &pt.Gate{}}
	p.rec, p.handler = r.d.NewProcessor(r.h, p.name, p.gate)
	p.rec.LostTotal = &r.lost
	return p
}

func (r *run) newDispatcher(i int) *disp {
	r.gen++
	gate := &pt.Gate{}
	d := r.h.Outbox.NewChaosDispatcherWith(fmt.Sprintf("disp-%d.%d", i, r.gen), r.v, pt.ChaosDispatcherOptions{Gate: gate, Ledger: r.d.DispatcherLedger})
	d.Rec.LostTotal = &r.lost
	return &disp{Dispatcher: d, gate: gate}
}

func (r *run) drainErrs() {
	for {
		select {
		case e := <-r.errs:
			r.viol = append(r.viol, Violation{Invariant: Harness, Detail: e})
		default:
			return
		}
	}
}

// poll runs one cycle of processor i unless it is paused; a crashed
// instance is replaced by a fresh one (the restart).
func (r *run) poll(i int) int {
	p := r.procs[i%len(r.procs)]
	if p.busy != nil {
		return 0
	}
	n := r.v.Cycle(r.ctx, r.h.Queues.Queue, 10, p.rec, p.handler)
	r.afterCrash(i % len(r.procs))
	return n
}

func (r *run) afterCrash(i int) {
	if p := r.procs[i]; p.busy == nil && p.rec.Crashed() {
		r.stats.Crashes++
		r.procs[i] = r.newProc(i)
	}
}

func (r *run) dispatch(i int) int {
	if len(r.disps) == 0 {
		return 0
	}
	i %= len(r.disps)
	d := r.disps[i]
	if d.busy != nil {
		return 0
	}
	n := r.v.Cycle(r.ctx, r.h.Outbox.Queues.Queue, d.Batch, d.Rec, d.C.HandleSQS)
	if d.Rec.Crashed() {
		r.stats.Crashes++
		r.disps[i] = r.newDispatcher(i)
	}
	return n
}

// pauseDispatcher starts a dispatch cycle of dispatcher st.Who that stops
// right before its st.Ahead-th next st.Call (pt.EffectCall: its
// downstream call, after the claim and the check of the truth), and
// returns once it is stopped there (or the cycle ended without it).
func (r *run) pauseDispatcher(st Step) {
	if len(r.disps) == 0 {
		return
	}
	i := st.Who % len(r.disps)
	d := r.disps[i]
	if d.busy != nil {
		return
	}
	d.gate.Arm(st.Call, d.gate.Count(st.Call)+max(st.Ahead, 1))
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if x := recover(); x != nil {
				r.errs <- fmt.Sprintf("paused dispatch of %s: %v", d.Name, x)
			}
		}()
		r.v.Cycle(r.ctx, r.h.Outbox.Queues.Queue, d.Batch, d.Rec, d.C.HandleSQS)
	}()
	select {
	case <-d.gate.Paused():
		d.busy, d.pausedAt = done, r.h.Clock.Now()
		if st.Call == pt.EffectCall {
			d.window = &window{from: r.h.Outbox.Tick()}
		}
		r.stats.DispatcherPauses++
	case <-done:
		d.gate.Release()
		if d.Rec.Crashed() {
			r.stats.Crashes++
			r.disps[i] = r.newDispatcher(i)
		}
	case <-time.After(10 * time.Second):
		d.gate.Release()
		<-done
		panic(pt.RunFatal{Msg: "a paused dispatch neither paused nor finished in 10 s"})
	}
}

// killOps are the calls a dispatcher stopped past its lease may still try:
// each crashes (awstrace), so nothing it would do afterwards lands.
var killOps = []string{"DynamoDB.UpdateItem", "DynamoDB.GetItem", "DynamoDB.PutItem", "DynamoDB.TransactWriteItems", "SQS.ChangeMessageVisibility", "SQS.SendMessage", "SQS.SendMessageBatch"}

// resumeDispatcher lets paused dispatcher i go on, or, once the manual
// clock has passed its lease, stops it (see DispatcherLease): its pending
// AWS call and every later one crash, its downstream call is never sent.
func (r *run) resumeDispatcher(i int) {
	d := r.disps[i]
	if d.busy == nil {
		return
	}
	killed := !r.h.Clock.Now().Before(d.pausedAt.Add(DispatcherLease))
	if d.window != nil {
		d.window.to = r.h.Outbox.Tick()
	}
	if killed {
		for _, op := range killOps {
			d.Rec.Arm(awstrace.Crash{Op: op, Nth: d.Rec.Count(op) + 1, When: awstrace.Before})
		}
		d.gate.Abort()
		r.stats.Kills++
	} else {
		d.gate.Release()
	}
	select {
	case <-d.busy:
	case <-time.After(20 * time.Second):
		panic(pt.RunFatal{Msg: "a resumed dispatch did not finish in 20 s"})
	}
	d.busy = nil
	if d.window != nil && !killed {
		r.windows = append(r.windows, *d.window)
	}
	d.window = nil
	if killed || d.Rec.Crashed() {
		r.stats.Crashes++
		r.disps[i] = r.newDispatcher(i)
	}
}

func (r *run) step(st Step) {
	h := r.h
	switch st.Op {
	case OpDeliver:
		r.deliver(st.Event, st.Thin)
	case OpPoll:
		r.poll(st.Who)
	case OpDispatch:
		r.dispatch(st.Who)
	case OpCrash:
		c := awstrace.Crash{Op: st.Call, When: awstrace.Before}
		switch st.When {
		case "after":
			c.When = awstrace.After
		case "lost":
			c.When = awstrace.Lost
		}
		var rec *awstrace.Recorder
		switch st.Target {
		case TargetIntake:
			rec = h.IntakeRec
		case TargetDispatcher:
			if len(r.disps) == 0 {
				return
			}
			rec = r.disps[st.Who%len(r.disps)].Rec
		default:
			rec = r.procs[st.Who%len(r.procs)].rec
		}
		c.Nth = rec.Count(st.Call) + max(st.Ahead, 1)
		rec.Arm(c)
	case OpPause:
		if st.Target == TargetDispatcher {
			r.pauseDispatcher(st)
			return
		}
		r.pause(st)
	case OpResume:
		if st.Target == TargetDispatcher {
			if len(r.disps) > 0 {
				r.resumeDispatcher(st.Who % len(r.disps))
			}
			return
		}
		r.resume(st.Who % len(r.procs))
	case OpAdvance:
		h.Clock.Advance(time.Duration(st.Seconds) * time.Second)
	case OpReconcile:
		r.reconcile()
	case OpDownstream:
		if !r.d.Outbox {
			return
		}
		if r.target != nil {
			r.targetFails(st.Mode)
			return
		}
		h.Outbox.Down.Then(map[string]downstream.Behavior{
			Mode429: {Mode: downstream.Throttle429, RetryAfter: 40 * time.Second}, Mode500: {Mode: downstream.Fail500},
			Mode503:       {Mode: downstream.Unavailable503, RetryAfter: 20 * time.Second},
			ModeHangAfter: {Mode: downstream.HangAfterApply}, ModeHangBefore: {Mode: downstream.HangBeforeApply},
		}[st.Mode])
	case OpReplay:
		r.replay(st.Event)
	case OpForge:
		r.forge(st.Event)
	case OpStore:
		r.store(st)
	}
}

// StoreTimeout bounds the warehouse writer's requests of one call (real
// time), as CallTimeout bounds an HTTP effect's: a held PutObject ends
// there, its outcome unknown.
const StoreTimeout = 300 * time.Millisecond

// store scripts the warehouse's store: down (every request 503 SlowDown)
// until the manual clock has moved st.Seconds on, or its next PutObject
// held past the writer's timeout (after or before the write) or refused
// as a concurrent write (409).
func (r *run) store(st Step) {
	if r.wh == nil {
		return
	}
	srv := r.wh.S3
	switch st.Mode {
	case StoreDown:
		srv.SetDown(true)
		if until := r.h.Clock.Now().Add(time.Duration(st.Seconds) * time.Second); !r.storeDown || until.After(r.storeUntil) {
			r.storeUntil = until
		}
		r.storeDown = true
		r.stats.StoreOutages++
	case StoreHangAfter:
		srv.HangNext(true)
		r.stats.StoreHangs++
	case StoreHangBefore:
		srv.HangNext(false)
		r.stats.StoreHangs++
	case Store409:
		srv.FailNext(http.StatusConflict, "ConditionalRequestConflict")
	}
}

// storeTick ends a store outage once the manual clock has passed it.
func (r *run) storeTick() {
	if r.storeDown && !r.h.Clock.Now().Before(r.storeUntil) {
		r.wh.S3.SetDown(false)
		r.storeDown = false
	}
}

// targetFails scripts the target's next start as the downstream's mode
// scripts its next call: a throttle (ThrottlingException) or a 500 or 503
// answered without starting anything, or an answer held past the call's
// timeout after or before the start.
func (r *run) targetFails(mode string) {
	sf, proxy := r.target.StepFunctions, r.target.Proxy
	switch mode {
	case Mode429:
		sf.FailNext("StartExecution", http.StatusBadRequest, "ThrottlingException")
	case Mode500:
		sf.FailNext("StartExecution", http.StatusInternalServerError, "InternalFailure")
	case Mode503:
		sf.FailNext("StartExecution", http.StatusServiceUnavailable, "ServiceUnavailable")
	case ModeHangAfter:
		proxy.HangAfterApply("StartExecution")
	case ModeHangBefore:
		proxy.HangBeforeApply("StartExecution")
	}
}

// deliver posts an event as the provider does, first the retries owed
// from earlier crashes that are due. A delivery an intake crash answered
// 5xx is owed: retried (by a new intake instance) ProviderRetryAfter
// later, at a delivery step or while settling, as a provider retries
// minutes or hours later. Any other failure is retried at once, up to
// four times. twin delivers a Stripe snapshot event's thin twin instead.
func (r *run) deliver(i int, twin bool) {
	r.retryOwed()
	r.post(i, twin)
}

// owedRetry is a delivery the provider retries: the thin twin or not,
// and when the crash answered it.
type owedRetry struct {
	twin bool
	at   time.Time
}

// ProviderRetryAfter is how long after an intake crash the provider's
// retry comes (manual clock): past the reconciler's threshold for a
// RECEIVED row, so a row left without its payload is claimed first.
const ProviderRetryAfter = 10 * time.Minute

// retryOwed delivers the retries owed from intake crashes that are due.
func (r *run) retryOwed() {
	for _, j := range slices.Sorted(maps.Keys(r.owed)) {
		o := r.owed[j]
		if r.h.Clock.Now().Sub(o.at) < ProviderRetryAfter {
			continue
		}
		delete(r.owed, j)
		r.post(j, o.twin)
	}
}

func (r *run) post(i int, twin bool) {
	if i < 0 || i >= len(r.s.Events) {
		return
	}
	e := r.s.Events[i]
	for range 4 {
		var resp intake.Response
		if e.Stripe() {
			body := stripeBody(e, e.ID)
			switch {
			case e.Thin:
				body = stripeThinBody(e, e.ID, "")
			case twin:
				body = stripeThinBody(e, e.ID+"-thin", e.ID)
			}
			resp = r.h.Deliver(body, r.h.Sign(body, pt.SecretPrimary))
		} else {
			resp = r.h.DeliverOrder(e.ID, pt.OrderEvent("order.updated", e.Subject, e.Revision, e.Status, ""))
		}
		crashed := r.h.IntakeRec.Crashed()
		if crashed {
			r.stats.Crashes++
			r.h.IntakeRec.Reset()
		}
		if resp.Status >= 200 && resp.Status < 300 {
			r.accepted[i] = true
			return
		}
		if crashed {
			if r.owed == nil {
				r.owed = map[int]owedRetry{}
			}
			r.owed[i] = owedRetry{twin: twin, at: r.h.Clock.Now()}
			return
		}
	}
}

// stripeBody renders Stripe event e under event id id: a
// customer.subscription.<Type> event created Revision seconds after
// StripeEpoch, for an account named after the subscription.
func stripeBody(e Event, id string) []byte {
	return pt.SubscriptionEvent(id, "customer.subscription."+e.Type, e.Subject, e.Status, stripeCreated(e), "acct_"+e.Subject)
}

// stripeThinBody renders Stripe event e as a thin event under id, the
// twin of the snapshot event twinOf when set.
func stripeThinBody(e Event, id, twinOf string) []byte {
	return pt.ThinEvent(id, "v1.customer.subscription."+e.Type, "subscription", e.Subject, twinOf, time.Unix(stripeCreated(e), 0))
}

// stripeCreated is e's created: Revision seconds after StripeEpoch, so
// every Stripe event was created before the run starts (pipelinetest.Start)
// and so before any fetch from the Stripe API.
func stripeCreated(e Event) int64 { return StripeEpoch + int64(e.Revision) }

// StripeEpoch is second 0 of the schedules' Stripe events: an hour
// before the manual clock starts, so every snapshot version is far (more
// than minidyn's float64 rounding of deletion-tier versions) below every
// fetched one.
var StripeEpoch = pt.Start.Unix() - 3600

// putStripeTruth gives the fake Stripe API each subscription's state once
// its events have happened (StripeTruth), which every fetch returns.
func (r *run) putStripeTruth() {
	for subj, status := range StripeTruth(r.s.Events) {
		if err := r.h.Stripe.PutObject("subscription", subj, pt.SubscriptionObject(subj, status, "acct_"+subj)); err != nil {
			panic(pt.RunFatal{Msg: "stripe truth: " + err.Error()})
		}
	}
}

// forgedSecret signs forged deliveries: a well-formed Standard Webhooks
// secret that is not the orders source's (visibly fake).
var forgedSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("test_FAKE_forger_key_000000000"))

// forge posts event i under a new id, signed with a secret the source does
// not have: the intake must answer 401 and write nothing (I4, checked
// again at the end: no ledger row under that id).
func (r *run) forge(i int) {
	if i < 0 || i >= len(r.s.Events) {
		return
	}
	e := r.s.Events[i]
	id := e.ID + "-forged"
	if e.Stripe() {
		// Signed with a secret the Stripe source does not have.
		body := stripeBody(e, id)
		resp := r.h.Deliver(body, r.h.Sign(body, pt.SecretUnknown))
		if r.h.IntakeRec.Crashed() {
			r.h.IntakeRec.Reset()
		}
		if resp.Status != 401 {
			r.viol = append(r.viol, Violation{Invariant: I4, Detail: fmt.Sprintf("a forged Stripe delivery %s was answered %d, want 401", id, resp.Status)})
		}
		r.forged = append(r.forged, id)
		return
	}
	body := pt.OrderEvent("order.updated", e.Subject, e.Revision, e.Status, "")
	wh, err := standardwebhooks.NewWebhook(forgedSecret)
	if err != nil {
		panic(pt.RunFatal{Msg: "forger: " + err.Error()})
	}
	now := r.h.Clock.Now()
	sig, err := wh.Sign(id, now, body)
	if err != nil {
		panic(pt.RunFatal{Msg: "forger: " + err.Error()})
	}
	resp := r.h.DeliverTo("orders", body, map[string]string{"webhook-id": id, "webhook-timestamp": strconv.FormatInt(now.Unix(), 10), "webhook-signature": sig})
	if r.h.IntakeRec.Crashed() {
		r.h.IntakeRec.Reset()
	}
	if resp.Status != 401 {
		r.viol = append(r.viol, Violation{Invariant: I4, Detail: fmt.Sprintf("a forged delivery %s was answered %d, want 401", id, resp.Status)})
	}
	r.forged = append(r.forged, id)
}

// pause starts a poll of processor i that stops right before its
// Ahead-th next Call, and returns once it is stopped there (or the poll
// ended without making that call).
func (r *run) pause(st Step) {
	i := st.Who % len(r.procs)
	p := r.procs[i]
	if p.busy != nil {
		return
	}
	p.gate.Arm(st.Call, p.gate.Count(st.Call)+max(st.Ahead, 1))
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if x := recover(); x != nil {
				r.errs <- fmt.Sprintf("paused poll of %s: %v", p.name, x)
			}
		}()
		r.v.Cycle(r.ctx, r.h.Queues.Queue, 10, p.rec, p.handler)
	}()
	select {
	case <-p.gate.Paused():
		p.busy = done
		r.stats.Pauses++
	case <-done:
		p.gate.Release()
		r.afterCrash(i)
	case <-time.After(10 * time.Second):
		p.gate.Release()
		<-done
		panic(pt.RunFatal{Msg: "a paused poll neither paused nor finished in 10 s"})
	}
}

func (r *run) resume(i int) {
	p := r.procs[i]
	if p.busy == nil {
		return
	}
	p.gate.Release()
	select {
	case <-p.busy:
	case <-time.After(20 * time.Second):
		panic(pt.RunFatal{Msg: "a resumed poll did not finish in 20 s"})
	}
	p.busy = nil
	r.afterCrash(i)
}

// reconcile runs the reconciler Lambda's core on the manual clock, with
// the warehouse check when the sink is on.
func (r *run) reconcile() reconciler.Report {
	h := r.h
	q := reconciler.Queues{Events: h.Queues.Queue, EventsDLQ: h.Queues.DLQ}
	if h.Outbox != nil {
		q.Effects, q.EffectsDLQ = h.Outbox.Queues.Queue, h.Outbox.Queues.DLQ
	}
	rc := &reconciler.Reconciler{Ledger: h.Ledger, SQS: h.SQS, Queues: q, Sources: h.Sources,
		Registry: builtin.Default(builtin.StripeOptions{}),
		// goaws answers a short poll with every message: no long poll here.
		Opts: reconciler.Options{Now: h.Clock.Now, Log: slog.New(slog.DiscardHandler), MaxItems: 100, DLQWait: -1}}
	if r.wh != nil {
		// No SDK retries: a store that is down answers at once.
		var head reconciler.S3Header = r.wh.S3.ClientWith(func(o *s3.Options) { o.Retryer = aws.NopRetryer{} })
		if r.d.WarehouseHead != nil {
			head = r.d.WarehouseHead(head)
		}
		rc.Warehouse = &reconciler.WarehouseCheck{Ledger: h.Ledger, Bucket: r.wh.Bucket, Prefix: r.wh.Prefix, MaxState: r.wh.MaxState, S3: head}
	}
	rep, err := rc.Run(r.ctx)
	if err != nil {
		for _, e := range rep.Errors {
			if r.storeDown && strings.HasPrefix(e, "warehouse: ") {
				continue // the store is down: the check cannot read it, and says so
			}
			r.viol = append(r.viol, Violation{Invariant: Harness, Detail: "reconciler: " + e})
		}
	}
	r.stats.RecordsRecreated += rep.Warehouse.Recreated
	r.stats.RecordsRepaired += rep.Warehouse.Repaired
	r.stats.RecordsReannounced += rep.Warehouse.Reannounced
	return rep
}

// replay is an operator's replay of event i: only a DEAD or QUARANTINED
// event is replayed (the ledger refuses the others), then enqueued.
func (r *run) replay(i int) bool {
	if i < 0 || i >= len(r.s.Events) || !r.accepted[i] {
		return false
	}
	id, src := r.s.Events[i].ID, r.s.Events[i].SourceName()
	if _, err := r.h.Ledger.Replay(r.ctx, src, id, "ops:chaos", "chaos operator replay"); err != nil {
		return false
	}
	r.stats.Replays++
	if err := (queue.Sender{Client: r.h.SQS, URL: r.h.Queues.Queue}).Send(r.ctx, queue.Pointer{Source: src, EventID: id, Reason: "replay"}); err != nil {
		panic(pt.RunFatal{Msg: "replay send: " + err.Error()})
	}
	return true
}

// sample reads every projection and records a regression: a version that
// went down, a state that changed without a new version, or a terminal
// (deleted) subscription that changed at all. Each change is kept, with
// its number in the run's sequence (shared with the downstream's
// arrivals), for the checker's "before" and "after" (I7).
func (r *run) sample(when string) {
	seq := r.h.Outbox.Tick()
	snap, err := ledger.TakeSnapshot(r.ctx, r.h.DB, r.h.Table)
	if err != nil {
		panic(pt.RunFatal{Msg: "snapshot: " + err.Error()})
	}
	for _, p := range snap.Projections {
		old, seen := r.last[p.Subject]
		if !seen || old.Version != p.Version || old.Fingerprint != p.Fingerprint || old.Terminal != p.Terminal {
			r.hist[p.Subject] = append(r.hist[p.Subject], sample{seq: seq, version: p.Version, status: fmt.Sprint(p.State["status"]), terminal: p.Terminal})
		}
		switch {
		case seen && old.Terminal && (p.Version != old.Version || p.Fingerprint != old.Fingerprint || !p.Terminal):
			r.viol = append(r.viol, Violation{Invariant: I3, Detail: fmt.Sprintf("%s was terminal (deleted) at version %d (%v) and changed to version %d (%v, terminal %v) %s", p.Subject, old.Version, old.State["status"], p.Version, p.State["status"], p.Terminal, when)})
		case seen && p.Version < old.Version:
			r.viol = append(r.viol, Violation{Invariant: I3, Detail: fmt.Sprintf("%s went from revision %d (%v) back to %d (%v) %s", p.Subject, old.Version, old.State["status"], p.Version, p.State["status"], when)})
		case seen && p.Version == old.Version && p.Fingerprint != old.Fingerprint:
			r.viol = append(r.viol, Violation{Invariant: I3, Detail: fmt.Sprintf("%s changed from %v to %v at the same revision %d %s", p.Subject, old.State["status"], p.State["status"], p.Version, when)})
		}
		r.last[p.Subject] = p
	}
}

// settled: nothing visible or in flight in either queue, every event and
// intent finished, and the warehouse's store up.
func (r *run) settled() bool {
	if r.storeDown {
		return false
	}
	if r.v.InFlight() > 0 || r.h.Depth(r.h.Queues.Queue) > 0 {
		return false
	}
	if r.h.Outbox != nil && r.h.Depth(r.h.Outbox.Queues.Queue) > 0 {
		return false
	}
	snap, err := ledger.TakeSnapshot(r.ctx, r.h.DB, r.h.Table)
	if err != nil {
		panic(pt.RunFatal{Msg: "snapshot: " + err.Error()})
	}
	for _, ev := range snap.Events {
		if !ev.Status.Terminal() {
			return false
		}
	}
	if r.d.Outbox {
		for _, in := range snap.Intents {
			if !ledger.IntentStatus(in.Status).Terminal() {
				return false
			}
		}
	}
	return true
}

// quiesce resumes paused workers and runs everything until the system is
// settled: queues drained, time advanced past leases and backoffs (and a
// store outage), the reconciler run, and (twice at most) the DEAD events
// replayed by an operator. With the warehouse sink on, a settled run ends
// with the reconciler's warehouse check; whatever it re-drives is settled
// in turn (three checks at most). It reports whether it settled.
func (r *run) quiesce() bool {
	for i := range r.procs {
		r.resume(i)
	}
	for i := range r.disps {
		r.resumeDispatcher(i)
	}
	replays, checks := 0, 0
	for range 400 {
		r.retryOwed() // the provider keeps retrying until it gets a 2xx
		got := 0
		for i := range r.procs {
			got += r.poll(i)
		}
		if got > 0 {
			// What the workers committed, before the dispatchers act on it.
			r.sample("while settling")
		}
		for i := range r.disps {
			got += r.dispatch(i)
		}
		r.v.Release(r.ctx)
		if got > 0 {
			r.sample("while settling")
			continue
		}
		if len(r.owed) == 0 && r.settled() {
			if replays < 2 && r.replayDead() > 0 {
				replays++
				continue
			}
			if r.wh != nil {
				rep := r.reconcile()
				if w := rep.Warehouse; w.Reannounced+w.Recreated+w.Repaired > 0 {
					if checks++; checks < 3 {
						continue
					}
					return false
				}
			}
			return true
		}
		r.h.Clock.Advance(31 * time.Second)
		r.storeTick()
		r.v.Release(r.ctx)
		r.reconcile()
		r.sample("while settling")
	}
	return false
}

func (r *run) replayDead() int {
	snap, err := ledger.TakeSnapshot(r.ctx, r.h.DB, r.h.Table)
	if err != nil {
		panic(pt.RunFatal{Msg: "snapshot: " + err.Error()})
	}
	n := 0
	for _, ev := range snap.Events {
		if ev.Status != ledger.StatusDead {
			continue
		}
		for i, e := range r.s.Events {
			if e.ID == ev.EventID && e.SourceName() == ev.Source && r.replay(i) {
				n++
				break
			}
		}
	}
	return n
}

// observe reads the final state the checker judges.
func (r *run) observe() observed {
	snap, err := ledger.TakeSnapshot(r.ctx, r.h.DB, r.h.Table)
	if err != nil {
		panic(pt.RunFatal{Msg: "snapshot: " + err.Error()})
	}
	effects := r.d.Effects
	if r.target != nil {
		// The target's own record: executions started per operation id
		// (each ran its workflow once on the downstream).
		effects = func(*pt.Harness) map[string]int { return r.target.Applied() }
	}
	o := observed{events: map[string]ledger.Event{}, projections: map[string]ledger.Projection{}, effects: effects(r.h), outbox: r.d.Outbox,
		history: r.hist, windows: r.windows}
	if r.d.Outbox {
		o.arrivals = r.h.Outbox.Arrivals("")
	}
	for _, ev := range snap.Events {
		o.events[ev.EventID] = ev
		for _, a := range ev.Audit {
			switch a.Action {
			case "takeover":
				r.stats.Takeovers++
			case "redrive":
				r.stats.Redrives++
			}
		}
		switch ev.Status {
		case ledger.StatusDead:
			r.stats.Dead++
		case ledger.StatusQuarantined:
			r.stats.Quarantined++
		}
	}
	for _, p := range snap.Projections {
		o.projections[p.Subject] = p
	}
	// Stripe's clock at each answered fetch, per subscription: the Date
	// header the processor versioned the fetched state by.
	o.fetches = map[string][]int64{}
	for _, q := range r.h.Stripe.Requests() {
		if subj, ok := strings.CutPrefix(q.Path, "/v1/subscriptions/"); ok && q.Status == 200 {
			o.fetches[subj] = append(o.fetches[subj], q.Time.Unix())
		}
	}
	if r.d.Outbox {
		for _, in := range snap.Intents {
			st, err := r.h.Ledger.GetIntentState(r.ctx, in.OperationID)
			if err != nil {
				panic(pt.RunFatal{Msg: "intent: " + err.Error()})
			}
			o.intents = append(o.intents, st)
		}
	}
	if r.wh != nil {
		w := &warehouseObs{prefix: r.wh.Prefix, objects: map[string][]byte{}, intents: map[string]ledger.IntentState{}, writes: r.wh.S3.Writes()}
		for _, k := range r.wh.S3.Keys(r.wh.Bucket, r.wh.Prefix+"/") {
			b, err := r.wh.S3.Object(r.wh.Bucket, k)
			if err != nil {
				panic(pt.RunFatal{Msg: "warehouse object " + k + ": " + err.Error()})
			}
			w.objects[k] = b
		}
		for _, in := range o.intents {
			if in.Kind == warehouse.Kind {
				w.intents[in.OperationID] = in
			}
		}
		o.warehouse = w
		r.stats.add(warehouseStats(w))
	}
	r.stats.Intents = len(o.intents)
	for _, n := range o.effects {
		r.stats.Effects += n
	}
	return o
}

// stripeStats counts what the run did with Stripe events.
func (r *run) stripeStats(o observed) {
	seen := map[string]bool{}
	for i, e := range r.s.Events {
		if !e.Stripe() || !r.accepted[i] || seen[e.ID] {
			continue
		}
		seen[e.ID] = true
		r.stats.Stripe++
		if ev, ok := o.events[e.ID]; ok && ev.Result != nil && (e.Thin || fetchedVersion(ev.Result.Version)) {
			r.stats.StripeFetched++
		}
		if ev, ok := o.events[e.ID]; ok && ev.Result != nil {
			switch ev.Result.Outcome {
			case ledger.OutcomeApplied:
				r.stats.StripeApplied++
			case ledger.OutcomeNoop:
				r.stats.StripeNoop++
			case ledger.OutcomeStale:
				r.stats.StripeStale++
			}
		}
	}
	r.stats.StripeFetches = len(r.h.Stripe.Requests())
	for _, p := range o.projections {
		if _, base := projection.SplitScoped(p.Name); base == builtin.StripeSubscriptionProjection && p.Terminal {
			r.stats.Deleted++
		}
	}
}

// shutdown lets paused polls and dispatches go so no goroutine outlives
// the run.
func (r *run) shutdown() {
	for _, d := range r.disps {
		d.gate.Release()
		if d.busy != nil {
			select {
			case <-d.busy:
			case <-time.After(20 * time.Second):
			}
		}
	}
	for _, p := range r.procs {
		p.gate.Release()
		if p.busy != nil {
			select {
			case <-p.busy:
			case <-time.After(20 * time.Second):
			}
		}
	}
}

// deleteQueues removes the run's queues from the process-wide emulator.
func (r *run) deleteQueues() {
	urls := []string{r.h.Queues.Queue, r.h.Queues.DLQ}
	if r.h.Outbox != nil {
		urls = append(urls, r.h.Outbox.Queues.Queue, r.h.Outbox.Queues.DLQ)
	}
	for _, u := range urls {
		if strings.TrimSpace(u) != "" {
			_, _ = r.h.SQS.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(u)})
		}
	}
}
