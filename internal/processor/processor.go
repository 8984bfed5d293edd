// Package processor provides the event processor: for each pointer message
// it claims the event with a fenced lease, runs the projection, and commits
// state, version guard and outbox intents in one transaction. It decides, in
// one place (Processor.handle), whether a failure is permanent (quarantine and
// acknowledge) or transient (RETRY_WAIT and a batch item failure), and when
// the attempts are exhausted (DEAD, and the message goes on to the DLQ).
//
// An event that names its object without carrying its state (a Stripe
// thin event, a team's "order.changed") is resolved first: the source's
// projection.Resolver fetches the object and returns the event the
// projections read in its place (see BuildResolvers; Stripe's is
// builtin.StripeResolver). The fetch runs here, after the claim, never in
// the intake; its errors are classified like a projection's (settle).
//
// A projection is a team's code. Its faults are its own, never the
// batch's: a panic is recovered (projection.CodePanic), and a result that
// projection.Validate refuses (projection.CodeInvalidResult) is not
// committed; either way the event is QUARANTINED at its first attempt
// with a message naming the projection, its message is settled, and the
// metrics record counts a ProjectionFaults. A resolver's panic is the
// same (projection.CodeResolverPanic), and so is an intent that reuses an
// operation id another intent holds (projection.CodeOperationIDReused,
// counted OperationIDsReused too: the ledger refuses the commit).
//
// A projection that does not return is bounded the same way: each call
// has a budget (Options.ProjectionTimeout, capped at a third of the time
// the invocation had when the batch started, read from the context's
// deadline), runs in its own goroutine, and when the budget passes the
// event is QUARANTINED projection_timeout naming the projection; the rest
// of the batch goes on. What the call returns later is never read (see
// ProjectWithin). An event is started only while the invocation still
// has a whole budget and Options.Reserve (its commit, the batch's answer)
// before its deadline; the others are left unclaimed for redelivery.
// Go cannot stop the abandoned goroutine, so the process is tainted
// (Stalled) and must take no other work: pkg/app/processor ends the
// Lambda instance once the runtime API has received the batch's answer.
//
// The core works on plain Messages; HandleSQS adapts it to Lambda's SQS
// event with partial batch responses, so one bad message never fails the
// batch.
package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/metrics"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/source"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Message is one received pointer message.
type Message struct {
	ID   string
	Body string
	// ReceiveCount is SQS's ApproximateReceiveCount (0 when unknown). It is
	// used only to reach DEAD sooner, never as the only count: emulators and
	// redrives reset it.
	ReceiveCount int
}

// Ledger is what the processor needs from the ledger.
type Ledger interface {
	Claim(ctx context.Context, source, eventID string, o ledger.ClaimOptions) (ledger.Claim, error)
	Payload(ctx context.Context, ev ledger.Event) ([]byte, error)
	Commit(ctx context.Context, c ledger.Claim, w *ledger.ProjectionWrite, intents []ledger.Intent) (ledger.Committed, error)
	RetryLater(ctx context.Context, c ledger.Claim, code, msg string, next time.Time) error
	AwaitPayload(ctx context.Context, c ledger.Claim, msg string, next time.Time) error
	Dead(ctx context.Context, c ledger.Claim, code, msg string) error
	Quarantine(ctx context.Context, c ledger.Claim, code, msg string) error
	// GetIntentState is read only on the recovery path (a pointer that
	// finds its event PROCESSED): see Processor.recover.
	GetIntentState(ctx context.Context, op string) (ledger.IntentState, error)
}

var _ Ledger = (*ledger.Ledger)(nil)

// Options configure a Processor.
type Options struct {
	Owner string // lease owner name (for example the Lambda log stream); required
	// Lease must exceed the function timeout. Default 2 × queue.ProcessorTimeout.
	Lease time.Duration
	// MaxAttempts equals the queue's maxReceiveCount. Default 5.
	MaxAttempts int
	// RetryBase and RetryCap bound the full-jitter backoff recorded in
	// next_attempt_at. The cap must not exceed the queue's visibility
	// timeout, so a message that reappears finds its retry due.
	RetryBase, RetryCap time.Duration
	// PayloadRecheck is how long an event whose payload was never stored
	// waits before the processor looks for it again (the reconciler
	// re-enqueues it then); the provider's retry, which stores it,
	// reopens the event at once. Default 15 min.
	PayloadRecheck time.Duration
	Now            func() time.Time
	Rand           func() float64 // in [0,1); default math/rand/v2
	Log            *slog.Logger
	// Metrics receives one EMF record per processed message (nil: none).
	Metrics *metrics.Emitter
	// Resolvers resolve the events of a source that name their object
	// into the events the projections read, by source name (see
	// BuildResolvers). A source without one projects its events as
	// delivered.
	Resolvers map[string]projection.Resolver
	// Effects announces the intents a commit wrote. When nil, or when the
	// send fails, the intents stay PENDING and the reconciler announces
	// them; the event is complete either way. A pointer that arrives for a
	// PROCESSED event announces those of its intents still PENDING (see
	// Processor.recover), so a crash between a batch's commits and its
	// announcement is recovered within the events queue's visibility
	// timeout, not the reconciler's threshold.
	Effects Announcer
	// Warehouse, when set, makes the commit of every applied revision also
	// write its warehouse change record's intent (warehouse.Intent): the
	// same transaction as the revision, so a revision the commit did not
	// apply (stale, a duplicate, a replay) writes none, and one it applied
	// always has one. Off (nil) by default.
	Warehouse *warehouse.Config
	// ProjectionTimeout bounds one projection call (default
	// DefaultProjectionTimeout). A call still running then is abandoned:
	// its event is QUARANTINED projection_timeout, whatever it returns
	// later is discarded, and Stalled reports it.
	ProjectionTimeout time.Duration
	// Reserve is the time an event keeps back from the invocation's
	// deadline for its commit and the batch's answer (default
	// DefaultReserve). Both are capped at a third of the time the
	// invocation had when the batch started (see batchTimes).
	Reserve time.Duration
}

// The defaults of Options.ProjectionTimeout and Options.Reserve: with the
// function's 30 s timeout (queue.ProcessorTimeout), a batch can lose a
// projection's budget to four stalled events and still commit the rest.
const (
	DefaultProjectionTimeout = 5 * time.Second
	DefaultReserve           = 5 * time.Second
)

// Announcer sends the pointers of the intents a commit wrote to the
// effects queue (queue.Sender). Declared here, where it is used, so the
// processor does not link the dispatcher's effects.
type Announcer interface {
	SendIntents(ctx context.Context, ps []queue.IntentPointer) (unsent []string, err error)
}

// Processor is the processing core.
type Processor struct {
	ledger  Ledger
	sources *source.Set
	reg     *projection.Registry
	o       Options
	// stalled is set once a projection call outlived its budget: its
	// goroutine may still be running (see Stalled).
	stalled atomic.Bool
}

// Stalled reports whether a projection call outlived its budget in this
// process. Go cannot stop a goroutine: the call may still be running,
// holding whatever it holds and racing with later calls of the same
// team's code, so a process for which Stalled is true must not take other
// work once it has answered its batch (pkg/app/processor ends the Lambda
// instance after the runtime API received the answer).
func (p *Processor) Stalled() bool { return p.stalled.Load() }

// New returns a Processor.
func New(l Ledger, sources *source.Set, reg *projection.Registry, o Options) (*Processor, error) {
	if l == nil || sources == nil || reg == nil {
		return nil, errors.New("processor: ledger, sources and registry are required")
	}
	if o.Owner == "" {
		return nil, errors.New("processor: owner is required")
	}
	if o.Lease <= 0 {
		o.Lease = 2 * queue.ProcessorTimeout
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 5
	}
	if o.RetryBase <= 0 {
		o.RetryBase = 5 * time.Second
	}
	if o.RetryCap <= 0 {
		o.RetryCap = 6 * queue.ProcessorTimeout
	}
	if o.PayloadRecheck <= 0 {
		o.PayloadRecheck = 15 * time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.ProjectionTimeout <= 0 {
		o.ProjectionTimeout = DefaultProjectionTimeout
	}
	if o.Reserve <= 0 {
		o.Reserve = DefaultReserve
	}
	if err := o.Warehouse.Check(reg); err != nil {
		return nil, err
	}
	return &Processor{ledger: l, sources: sources, reg: reg, o: o}, nil
}

// Process handles a batch and returns the ids of the messages to retry.
// Messages are handled one by one; a failure of one never affects another.
// The intents the batch's commits wrote, and the PENDING intents of the
// PROCESSED events its pointers found (recovered), are announced together
// at the end (SendMessageBatch, ten per request), not one request per event.
func (p *Processor) Process(ctx context.Context, msgs []Message) []string {
	var failed []string
	b := batch{times: p.batchTimes(ctx)}
	for _, m := range msgs {
		if !p.handle(ctx, m, &b) {
			failed = append(failed, m.ID)
		}
	}
	p.announce(ctx, b.ann)
	return failed
}

// batch is what the messages of one batch share.
type batch struct {
	ann   announcements
	times times
}

// times are a batch's time bounds: a projection call's budget, the time
// an event keeps back for its commit and the batch's answer, and the
// invocation's deadline (zero: none).
type times struct {
	budget, reserve time.Duration
	deadline        time.Time
}

// batchTimes reads the invocation's deadline from ctx (the Lambda
// runtime sets it to the function's timeout). The budget and the reserve
// are the configured ones, each capped at a third of the time left when
// the batch starts, so even a short timeout leaves room for one
// projection and its commit.
func (p *Processor) batchTimes(ctx context.Context) times {
	t := times{budget: p.o.ProjectionTimeout, reserve: p.o.Reserve}
	if dl, ok := ctx.Deadline(); ok {
		t.deadline = dl
		third := time.Until(dl) / 3
		t.budget, t.reserve = max(min(t.budget, third), 0), max(min(t.reserve, third), 0)
	}
	return t
}

// affords reports whether the invocation has the time for one more event:
// a projection's whole budget and the reserve.
func (t times) affords() bool {
	return t.deadline.IsZero() || time.Until(t.deadline) >= t.budget+t.reserve
}

// announcements are the intents a batch announces: written by its commits,
// and recovered (still PENDING, of events a pointer found PROCESSED).
type announcements struct {
	written, recovered []string
}

// has reports whether op is already to be announced.
func (a *announcements) has(op string) bool {
	return slices.Contains(a.written, op) || slices.Contains(a.recovered, op)
}

// handle returns true to acknowledge (delete) the message; the operation
// ids a commit wrote, or recovered, are added to ann.
func (p *Processor) handle(ctx context.Context, m Message, b *batch) (ack bool) {
	ann := &b.ann
	start := p.o.Now()
	log := p.o.Log.With("message_id", m.ID)
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		log = log.With("request_id", lc.AwsRequestID)
	}
	defer func() {
		// Never let one message take the batch down.
		if r := recover(); r != nil {
			log.Error("panic while processing; message will be retried", "panic", fmt.Sprint(r))
			ack = false
		}
	}()
	ptr, err := queue.ParsePointer(m.Body)
	if err != nil {
		// Not a message this system wrote: retrying cannot help, and the
		// ledger (not the queue) is the record of accepted work.
		log.Error("dropping malformed message", "err", err)
		return true
	}
	log = log.With("source", ptr.Source, "event_id", ptr.EventID)
	if !b.times.affords() {
		// Earlier events of the batch took the time (stalled projections):
		// this one is not claimed, so its ledger row and attempts are
		// untouched; its message comes back after the visibility timeout.
		log.Warn("not started: the invocation has too little time left for a projection and its commit; the message will be redelivered",
			"left_ms", time.Until(b.times.deadline).Milliseconds(), "budget_ms", b.times.budget.Milliseconds(), "reserve_ms", b.times.reserve.Milliseconds())
		return false
	}

	// The message and its pointer id decide what a DEAD event does with
	// it: only a dead letter back from the DLQ (a console redrive) reopens
	// it; its own message still on the way there is left to go on; any
	// other pointer is acknowledged and changes nothing.
	c, err := p.ledger.Claim(ctx, ptr.Source, ptr.EventID, ledger.ClaimOptions{Owner: p.o.Owner, Lease: p.o.Lease, Message: m.ID, Letter: ptr.ID})
	if err != nil {
		var nc *ledger.NotClaimableError
		switch {
		case errors.As(err, &nc) && nc.InFlightToDLQ:
			log.Info("DEAD; its own message goes on to the dead-letter queue (not acknowledged)", "ledger_status", nc.Event.Status)
			return false
		case errors.As(err, &nc) && nc.Event.Status == ledger.StatusDead:
			log.Warn("DEAD; a pointer that did not come back from the dead-letter queue does not reopen it: acknowledged (a redrive of its dead letter or webhookctl replay does)",
				"ledger_status", nc.Event.Status, "reason", ptr.Reason, "pointer_id", ptr.ID)
			return true
		case errors.As(err, &nc) && nc.Event.Status.Terminal():
			log.Info("already finished; acknowledging", "ledger_status", nc.Event.Status)
			if nc.Event.Status == ledger.StatusProcessed {
				p.recover(ctx, nc.Event, ann, log)
			}
			return true
		case errors.As(err, &nc):
			log.Info("not claimable now; will retry", "why", nc.Why)
			return false
		case errors.Is(err, ledger.ErrNotFound):
			log.Error("pointer to an event the ledger does not hold; dropping", "err", err)
			return true
		default:
			log.Warn("claim failed; will retry", "err", err)
			return false
		}
	}
	log = log.With("type", c.Event.EventType, "attempt", c.Event.Attempts, "lease_owner", c.Owner)
	if c.Redrive {
		log.Info("redriven from the dead-letter queue", "pointer_id", ptr.ID)
	}
	var f fault
	outcome, ack := p.apply(ctx, c, m, b.times.budget, &ann.written, &f, log)
	took := p.o.Now().Sub(start)
	log.Info("processed", "outcome", outcome, "ack", ack, "duration_ms", took.Milliseconds())
	p.emit(c.Event, outcome, f, took)
	return ack
}

// apply runs the resolver, the projection and the commit for a claimed
// event. A fault of the resolver or the projection is recorded in f.
func (p *Processor) apply(ctx context.Context, c ledger.Claim, m Message, budget time.Duration, written *[]string, f *fault, log *slog.Logger) (string, bool) {
	ev := c.Event
	src, ok := p.sources.Lookup(ev.Source)
	if !ok {
		return p.quarantine(ctx, c, "unknown_source", "source "+ev.Source+" is not configured", log)
	}
	payload, err := p.ledger.Payload(ctx, ev)
	if errors.Is(err, ledger.ErrPayloadMissing) {
		return p.awaitPayload(ctx, c, src, err, f, log)
	}
	if err != nil {
		return p.transient(ctx, c, m, "payload_unavailable", err, log)
	}
	eventType, note := ev.EventType, ""
	if r := p.o.Resolvers[src.Name]; r != nil {
		out, err := resolve(ctx, r, src.Kind, projection.Event{
			Source: ev.Source, Kind: src.Kind, EventID: ev.EventID, Type: ev.EventType,
			Payload: payload, ReceivedAt: ev.ReceivedAt,
		}, log)
		switch code, _ := projection.AsPermanent(err); {
		case errors.Is(err, projection.ErrNothingToResolve):
		case code == projection.CodeResolverPanic:
			return p.fault(ctx, c, fault{code: code, resolver: src.Kind}, err, f, log)
		case err != nil:
			return p.settle(ctx, c, m, "resolve_failed", err, log)
		default:
			eventType, payload, note = out.Type, out.Payload, out.Note
			log.Info("event resolved", "resolved_type", eventType, "note", note)
		}
	}
	var (
		res  projection.Result
		name string // the projection's, scoped
	)
	if proj, ok := p.reg.Lookup(src.Kind, eventType); ok {
		name, res, err = ProjectWithin(budget, proj, src.Scope(), projection.Event{
			Source: ev.Source, Kind: src.Kind, EventID: ev.EventID, Type: eventType,
			Payload: payload, ReceivedAt: ev.ReceivedAt,
		}, log)
		if code, _ := projection.AsPermanent(err); code == projection.CodeTimeout {
			p.stalled.Store(true)
			return p.fault(ctx, c, fault{code: code, projection: name}, err, f, log)
		}
		if code, _ := projection.AsPermanent(err); code == projection.CodePanic {
			return p.fault(ctx, c, fault{code: code, projection: name}, err, f, log)
		}
		if err != nil {
			return p.settle(ctx, c, m, "projection_failed", err, log)
		}
		// A result the pipeline cannot apply is the projection's bug: the
		// event is quarantined, named, at its first attempt. Values beyond
		// DynamoDB's limits are the commit's to judge (an older revision
		// is stale whatever it carries), with the same code.
		if err := projection.Validate(name, res); err != nil {
			if code, _ := projection.AsPermanent(err); code != projection.CodeUnstorable {
				return p.fault(ctx, c, fault{code: code, projection: name}, err, f, log)
			}
		}
	}
	// The state and intents belong to the source's scope (I8): another
	// source's secret can never write them.
	res = projection.Scoped(src.Scope(), res)
	if res.Write != nil && note != "" {
		// Where the state came from, then what the projection says.
		if res.Write.Note != "" {
			note += "; " + res.Write.Note
		}
		res.Write.Note = note
	}
	if res.Write != nil && p.o.Warehouse.Includes(res.Write.Name) {
		// After scoping: the record's operation id names the scope itself.
		res.Intents = append(res.Intents, warehouse.Intent(*res.Write, ev.Source, ev.EventID, p.o.Now(), p.o.Warehouse.MaxState))
	}
	done, err := p.ledger.Commit(ctx, c, res.Write, res.Intents)
	switch {
	case err == nil && done.Conflict:
		log.Warn("same version, contradictory state: quarantined", "subject", done.Result.Subject, "version", done.Result.Version)
		return "quarantined", true
	case err == nil && done.Reused != nil:
		// One operation id names one action: the rule gave a different
		// intent an id another one holds. The ledger quarantined the
		// event, writing nothing of it; the rule must be fixed.
		r := done.Reused
		*f = fault{code: projection.CodeOperationIDReused, projection: name, kind: r.Kind, operation: r.OperationID}
		log.Warn("fault of the rules: an operation id reused for another intent; the event is quarantined", "code", f.code,
			"projection", name, "kind", r.Kind, "operation_id", r.OperationID, "held_by", r.HeldBy, "payload_hash", r.PayloadHash, "held_payload_hash", r.HeldPayloadHash)
		return "quarantined", true
	case err == nil:
		*written = append(*written, done.Intents...)
		if len(done.Contradicted) > 0 {
			// Never silent (I7): the intents say what became of each.
			log.Warn("newer revision contradicts watched effects", "subject", done.Result.Subject, "version", done.Result.Version, "operations", done.Contradicted)
		}
		return string(done.Result.Outcome), true
	case errors.Is(err, ledger.ErrLeaseLost):
		// Another worker owns the event now; it will finish it. Retry the
		// message so it is acknowledged once the event is done.
		log.Warn("lease lost before commit; not completing", "err", err)
		return "lease_lost", false
	case errors.As(err, new(*ledger.UnstorableError)):
		// A value DynamoDB cannot store (a number out of its range, an
		// item over 400 KB, too deep a nesting) in the projection's
		// result: no retry can help.
		return p.fault(ctx, c, fault{code: ledger.CodeUnstorable, projection: name}, err, f, log)
	case errors.Is(err, ledger.ErrInvalid):
		return p.fault(ctx, c, fault{code: "invalid_projection", projection: name}, err, f, log)
	default:
		return p.transient(ctx, c, m, "commit_failed", err, log)
	}
}

// Project runs a projection. A panic in it is the projection's bug, not
// the event's nor the batch's: it is recovered here and returned as a
// permanent error with projection.CodePanic, naming the projection
// (scoped, as the ledger names it) and where it panicked; the stack goes
// to the log.
func Project(proj projection.Projection, scope string, ev projection.Event, log *slog.Logger) (name string, res projection.Result, err error) {
	return project(proj, scope, ev, log, nil)
}

// project is Project; named, if not nil, receives the projection's name
// before the projection runs.
func project(proj projection.Projection, scope string, ev projection.Event, log *slog.Logger, named chan<- string) (name string, res projection.Result, err error) {
	name = projection.ScopedName(scope, "(unnamed)")
	defer func() {
		if r := recover(); r != nil {
			log.Error("projection panicked", "projection", name, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			res = projection.Result{}
			err = &projection.PermanentError{Code: projection.CodePanic, Err: fmt.Errorf("projection %q panicked: %v%s", name, r, panicSite())}
		}
	}()
	name = projection.ScopedName(scope, proj.Name())
	if named != nil {
		named <- name
	}
	res, err = proj.Project(ev)
	return name, res, err
}

// ProjectWithin is Project bounded by budget. The projection runs in its
// own goroutine (a projection takes no context: Go cannot interrupt it);
// when budget passes first, ProjectWithin returns a permanent error with
// projection.CodeTimeout naming the projection, and never reads what the
// call returns later: its result goes to a buffered channel nobody
// receives from, so the abandoned goroutine can finish (or not) without
// touching the caller's state. The caller must treat the process as
// tainted (see Processor.Stalled).
func ProjectWithin(budget time.Duration, proj projection.Projection, scope string, ev projection.Event, log *slog.Logger) (string, projection.Result, error) {
	type out struct {
		name string
		res  projection.Result
		err  error
	}
	named := make(chan string, 1)
	done := make(chan out, 1)
	go func() {
		var o out
		o.name, o.res, o.err = project(proj, scope, ev, log, named)
		done <- o
	}()
	timer := time.NewTimer(budget)
	defer timer.Stop()
	select {
	case o := <-done:
		return o.name, o.res, o.err
	case <-timer.C:
	}
	name := projection.ScopedName(scope, "(unnamed)")
	select {
	case name = <-named:
	default: // its Name itself did not return
	}
	log.Error("projection did not return within its budget; its result, if any, will be discarded", "projection", name, "budget_ms", budget.Milliseconds())
	return name, projection.Result{}, &projection.PermanentError{Code: projection.CodeTimeout,
		Err: fmt.Errorf("projection %q did not return within %s; the event is not applied (whatever it returns later is discarded)", name, budget)}
}

// panicSite names the function and line that panicked (" at
// pkg.Func (file.go:12)"), read in the deferred recover: the first frame
// outside the runtime.
func panicSite() string {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	for {
		fr, more := frames.Next()
		if fr.Function != "" && !strings.HasPrefix(fr.Function, "runtime.") {
			return fmt.Sprintf(" at %s (%s:%d)", fr.Function, filepath.Base(fr.File), fr.Line)
		}
		if !more {
			return ""
		}
	}
}

// resolve runs a resolver, recovering a panic as a permanent error with
// projection.CodeResolverPanic naming the kind's resolver and where it
// panicked.
func resolve(ctx context.Context, r projection.Resolver, kind string, ev projection.Event, log *slog.Logger) (out projection.Resolved, err error) {
	defer func() {
		if x := recover(); x != nil {
			log.Error("resolver panicked", "kind", kind, "panic", fmt.Sprint(x), "stack", string(debug.Stack()))
			out = projection.Resolved{}
			err = &projection.PermanentError{Code: projection.CodeResolverPanic, Err: fmt.Errorf("the resolver of kind %q panicked: %v%s", kind, x, panicSite())}
		}
	}()
	return r.Resolve(ctx, ev)
}

// settle records a resolver's or a projection's error: a permanent one
// quarantines the event with its code; a retryable one waits with its
// code, at least its After; any other is retried with code.
func (p *Processor) settle(ctx context.Context, c ledger.Claim, m Message, code string, err error, log *slog.Logger) (string, bool) {
	if pc, perm := projection.AsPermanent(err); perm {
		return p.quarantine(ctx, c, pc, err.Error(), log)
	}
	var re *projection.RetryableError
	if errors.As(err, &re) {
		if re.Code != "" {
			code = re.Code
		}
		return p.transientAfter(ctx, c, m, code, re.Err, re.After, log)
	}
	return p.transient(ctx, c, m, code, err, log)
}

// awaitPayload handles an event whose payload was never stored: the
// intake that wrote its row died before its chunks, and answered the
// provider 5xx, so the provider retries the delivery, and the retry
// stores the payload and reopens the event (ledger.Accept). Until then
// the event waits (ledger.AwaitPayload: no attempt spent, the message
// acknowledged, so neither DEAD nor the DLQ), and is looked at again
// every PayloadRecheck. Past the source's retry horizon (counted from
// its first delivery) the provider has stopped retrying: the event is
// QUARANTINED with ledger.CodePayloadNeverArrived for an operator, who
// may ask the provider to resend it (a resend completes it too).
func (p *Processor) awaitPayload(ctx context.Context, c ledger.Claim, src source.Source, cause error, f *fault, log *slog.Logger) (string, bool) {
	now, horizon := p.o.Now(), src.RetryHorizon()
	deadline := c.Event.ReceivedAt.Add(horizon)
	if !now.Before(deadline) {
		f.attention = ledger.CodePayloadNeverArrived
		return p.quarantine(ctx, c, ledger.CodePayloadNeverArrived, fmt.Sprintf(
			"the payload was never stored (the intake died between the row and its chunks) and no retry of the delivery brought it within the source's retry horizon (%s after the first delivery): ask the provider to resend the event; %v", horizon, cause), log)
	}
	next := now.Add(min(p.o.PayloadRecheck, deadline.Sub(now)))
	msg := fmt.Sprintf("the payload was never stored; waiting for the provider's retry until %s (no attempt counted): %v", deadline.UTC().Format(time.RFC3339), cause)
	if err := p.ledger.AwaitPayload(ctx, c, msg, next); err != nil {
		log.Error("could not record the wait for the payload; will retry", "err", err)
		return "await_payload_failed", false
	}
	log.Warn("payload never stored: waiting for the provider's retry, no attempt counted", "next_look_at", next, "horizon", deadline)
	return "awaiting_payload", true
}

// fault is a team's rule failing on an event (a projection or a resolver
// that panics, a result the pipeline cannot apply): the event's code, and
// the projection, or the kind whose resolver, it names.
type fault struct {
	code, projection, resolver string
	// kind and operation are the intent kind and operation id of an
	// operation id reused (projection.CodeOperationIDReused).
	kind, operation string
	// attention is the cause code of an attention item that is not the
	// rules' fault (ledger.CodePayloadNeverArrived).
	attention string
}

// fault quarantines an event for a fault of its projection or resolver,
// and records the fault for the message's metrics record.
func (p *Processor) fault(ctx context.Context, c ledger.Claim, f fault, cause error, rec *fault, log *slog.Logger) (string, bool) {
	*rec = f
	log.Warn("fault of the rules: the event is quarantined, the rest of the batch goes on", "code", f.code, "projection", f.projection, "resolver", f.resolver, "err", cause)
	return p.quarantine(ctx, c, f.code, cause.Error(), log)
}

// emit records one processed message: Processed (it reached an outcome),
// Applied, Noop, Stale, Ignored, Retries, Quarantined, Dead,
// ProjectionFaults (a quarantine for a fault of the rules: a projection
// that panicked, did not return within its budget, or whose result cannot
// be applied or stored, a resolver that panicked; the record then names
// its code, and its projection or resolver kind), OperationIDsReused (one
// of those faults: an intent reused an operation id another intent holds;
// the record names the projection, the kind and the operation id),
// AwaitingPayload (an
// event whose payload was never stored waits for the provider's retry),
// PayloadNeverArrived (it was quarantined past the source's retry
// horizon; the record names the code) and ProcessLatencyMs.
func (p *Processor) emit(ev ledger.Event, outcome string, f fault, took time.Duration) {
	is := func(names ...string) int {
		for _, n := range names {
			if outcome == n {
				return 1
			}
		}
		return 0
	}
	props := map[string]any{"function": "processor", "source": ev.Source, "event_id": ev.EventID, "type": ev.EventType, "outcome": outcome}
	faulted := 0
	if f.attention != "" {
		props["code"] = f.attention
	}
	if f.code != "" && outcome == "quarantined" {
		faulted = 1
		props["code"] = f.code
		if f.projection != "" {
			props["projection"] = f.projection
		}
		if f.resolver != "" {
			props["resolver"] = f.resolver
		}
		if f.kind != "" {
			props["kind"], props["operation_id"] = f.kind, f.operation
		}
	}
	p.o.Metrics.Emit(props,
		metrics.N("Processed", is(string(ledger.OutcomeApplied), string(ledger.OutcomeNoop), string(ledger.OutcomeStale), string(ledger.OutcomeIgnored))),
		metrics.N("Applied", is(string(ledger.OutcomeApplied))),
		metrics.N("Noop", is(string(ledger.OutcomeNoop))),
		metrics.N("Stale", is(string(ledger.OutcomeStale))),
		metrics.N("Ignored", is(string(ledger.OutcomeIgnored))),
		metrics.N("Retries", is("retry")),
		metrics.N("Quarantined", is("quarantined")),
		metrics.N("Dead", is("dead")),
		metrics.N("ProjectionFaults", faulted),
		metrics.N("OperationIDsReused", boolN(f.code == projection.CodeOperationIDReused && outcome == "quarantined")),
		metrics.N("AwaitingPayload", is("awaiting_payload")),
		metrics.N("PayloadNeverArrived", boolN(f.attention == ledger.CodePayloadNeverArrived && outcome == "quarantined")),
		metrics.Latency("ProcessLatencyMs", took))
}

func boolN(b bool) int {
	if b {
		return 1
	}
	return 0
}

// recover is the recovery path of a crash between a batch's commits and
// its announcement: the event is PROCESSED, but the processor died before
// announcing its intents, and the redelivered pointer finds the event
// finished. Each intent the event's stored result names
// (Result.Operations) is read once, and those still PENDING are
// announced with the batch (an announcement is idempotent: the
// dispatcher's claim decides). The happy path never comes here; a pointer
// that finds a PROCESSED event costs at most one GetItem per operation.
// A read that fails is logged and skipped: the reconciler's sweep remains
// the backstop.
func (p *Processor) recover(ctx context.Context, ev ledger.Event, ann *announcements, log *slog.Logger) {
	if p.o.Effects == nil {
		return
	}
	pending := 0
	for _, op := range ev.Result.Operations {
		if ann.has(op.ID) {
			continue
		}
		in, err := p.ledger.GetIntentState(ctx, op.ID)
		if err != nil {
			log.Warn("could not read an intent of a processed event; the reconciler will announce it if it waits", "operation_id", op.ID, "err", err)
			continue
		}
		if in.Status == ledger.IntentStatusPending {
			ann.recovered = append(ann.recovered, op.ID)
			pending++
		}
	}
	if pending > 0 {
		log.Info("processed event with intents still PENDING (a crash before their announcement?); announcing them", "pending", pending, "operations", len(ev.Result.Operations))
	}
}

// announce tells the dispatcher about new intents. It is after the commits
// on purpose: an intent must exist before a dispatcher looks for it. A crash
// between the two leaves the intents PENDING, which the event's redelivered
// pointer recovers (see recover); an SQS failure (the pointers are
// acknowledged) leaves them to the reconciler's sweep (the same gap as
// intake's put→send).
func (p *Processor) announce(ctx context.Context, ann announcements) {
	log := p.o.Log
	n := len(ann.written) + len(ann.recovered)
	if n == 0 {
		return
	}
	if p.o.Effects == nil {
		log.Warn("no effects queue configured; intents wait for the reconciler", "intents", n)
		return
	}
	ps := make([]queue.IntentPointer, 0, n)
	for _, op := range ann.written {
		ps = append(ps, queue.IntentPointer{OperationID: op, Reason: "commit"})
	}
	for _, op := range ann.recovered {
		ps = append(ps, queue.IntentPointer{OperationID: op, Reason: "recover"})
	}
	if unsent, err := p.o.Effects.SendIntents(ctx, ps); err != nil {
		log.Warn("could not announce intents; the reconciler will", "unsent", unsent, "err", err)
	}
}

// quarantine records a permanent failure. The ledger keeps code and msg
// apart (and its audit reason is "code: msg"), so a message that already
// starts with its code (a projection.PermanentError's text does) loses that
// prefix here, once for every caller.
func (p *Processor) quarantine(ctx context.Context, c ledger.Claim, code, msg string, log *slog.Logger) (string, bool) {
	msg = strings.TrimPrefix(msg, code+": ")
	if err := p.ledger.Quarantine(ctx, c, code, msg); err != nil {
		log.Error("could not record quarantine; will retry", "code", code, "err", err)
		return "quarantine_failed", false
	}
	log.Warn("quarantined", "code", code, "reason", msg)
	return "quarantined", true
}

// transient records a retryable failure: RETRY_WAIT, or DEAD once the
// attempts (the ledger's own count, or SQS's receive count if higher) reach
// MaxAttempts. Either way the message is not acknowledged: a RETRY_WAIT
// message comes back after its visibility timeout, a DEAD one goes on to the
// DLQ.
func (p *Processor) transient(ctx context.Context, c ledger.Claim, m Message, code string, cause error, log *slog.Logger) (string, bool) {
	return p.transientAfter(ctx, c, m, code, cause, 0, log)
}

// transientAfter is transient with a lower bound on the wait (a server's
// Retry-After).
func (p *Processor) transientAfter(ctx context.Context, c ledger.Claim, m Message, code string, cause error, atLeast time.Duration, log *slog.Logger) (string, bool) {
	attempts := max(c.Event.Attempts, m.ReceiveCount)
	if attempts >= p.o.MaxAttempts {
		if err := p.ledger.Dead(ctx, c, code, cause.Error()); err != nil {
			log.Error("could not record DEAD", "err", err)
		} else {
			log.Error("attempts exhausted: DEAD", "code", code, "attempts", attempts, "err", cause)
		}
		return "dead", false
	}
	next := p.o.Now().Add(max(p.backoff(c.Event.Attempts), min(atLeast, p.o.RetryCap)))
	if err := p.ledger.RetryLater(ctx, c, code, cause.Error(), next); err != nil {
		log.Error("could not record RETRY_WAIT", "err", err)
	} else {
		log.Warn("transient failure: RETRY_WAIT", "code", code, "next_attempt_at", next, "err", cause)
	}
	return "retry", false
}

// backoff is full jitter: uniform in [0, min(cap, base·2^(attempt-1))].
func (p *Processor) backoff(attempt int) time.Duration {
	d := p.o.RetryBase
	for i := 1; i < attempt && d < p.o.RetryCap; i++ {
		d *= 2
	}
	d = min(d, p.o.RetryCap)
	return time.Duration(p.o.Rand() * float64(d))
}
