package pipelinetest

// Helpers for internal/harness/chaos: instances with extra SDK middleware (a Gate that
// pauses a call), queue cycles whose redelivery follows the manual clock
// instead of real time, and ledgers over any client. Nothing here changes
// what the rest of the harness does.

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/warehouse"
)

// APIOption is SDK client middleware, such as awstrace.Recorder.APIOption.
type APIOption = func(*middleware.Stack) error

// Gate pauses one AWS call of an instance: armed with an operation and
// its nth call (counted by the gate), the call blocks right before it is
// sent until Release. A test runs the instance in a goroutine, waits on
// Paused, lets the world move on (leases expire, another worker takes
// over), then releases it: the paused call then meets the world as it is.
type Gate struct {
	mu       sync.Mutex
	counts   map[string]int
	op       string
	nth      int
	paused   chan struct{}
	release  chan struct{}
	fired    bool
	released bool
	aborted  bool
}

// Arm pauses the nth call (1-based, counted from the gate's creation) of op.
func (g *Gate) Arm(op string, nth int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.op, g.nth, g.fired, g.released, g.aborted = op, nth, false, false, false
	g.paused, g.release = make(chan struct{}), make(chan struct{})
}

// Count returns how many calls of op the gate has seen.
func (g *Gate) Count(op string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.counts[op]
}

// Paused is closed once the armed call is blocked (nil when not armed).
func (g *Gate) Paused() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paused
}

// Release lets a paused (or not yet reached) call go. Safe to call twice.
func (g *Gate) Release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.release != nil && !g.released {
		close(g.release)
		g.released = true
	}
}

// Abort lets a paused (or not yet reached) call go as a dead instance's:
// an AWS call goes on to the instance's crash recorder (arm it first), a
// gated downstream call returns ErrAborted without being sent. The chaos
// executor aborts a dispatcher paused past its lease, which a Lambda
// whose timeout is below the lease cannot outlive.
func (g *Gate) Abort() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.release != nil && !g.released {
		g.aborted = true
		close(g.release)
		g.released = true
	}
}

// ErrAborted is what a gated downstream call returns after Abort.
var ErrAborted = errors.New("pipelinetest: the instance was stopped before its downstream call")

// APIOption installs the gate on a client.
func (g *Gate) APIOption(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("chaosgate",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			g.Wait(awsmiddleware.GetServiceID(ctx) + "." + awsmiddleware.GetOperationName(ctx))
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
}

// EffectCall is the gate's name for a dispatcher's call to the downstream
// (an Effect's Do), which is no AWS call: a dispatcher paused there has
// checked its intent against the truth and not yet called.
const EffectCall = "Effect.Call"

// Wait counts one call of op and, when it is the armed one, blocks until
// Release or Abort; aborted reports the latter. The middleware calls it
// for every AWS call; gated effects (ChaosDispatcherOptions.Gate) for
// every downstream call (EffectCall).
func (g *Gate) Wait(op string) (aborted bool) {
	g.mu.Lock()
	if g.counts == nil {
		g.counts = map[string]int{}
	}
	g.counts[op]++
	var wait chan struct{}
	if g.paused != nil && !g.fired && op == g.op && g.counts[op] == g.nth {
		g.fired = true
		close(g.paused)
		wait = g.release
	}
	g.mu.Unlock()
	if wait == nil {
		return false
	}
	<-wait
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.aborted
}

// Virtual makes redelivery follow the manual clock. Every message is
// received with a long visibility timeout; a message its handler did not
// acknowledge (a batch item failure, a failed or crashed invocation) is
// remembered with the manual time it is due back, and Release makes it
// visible again (ChangeMessageVisibility 0, which also counts a receive
// toward the queue's maxReceiveCount, as SQS's own timeout does) once the
// manual clock has passed that time. Runs then do not depend on how
// fast the machine is, and cost no real waiting.
type Virtual struct {
	h *Harness
	// Redeliver is how long (manual clock) an unacknowledged message stays
	// invisible. Default 2 s.
	Redeliver time.Duration

	mu       sync.Mutex
	inflight map[string]virtualMsg // receipt handle -> where and when due
}

type virtualMsg struct {
	url string
	due time.Time
}

// NewVirtual returns the virtual-visibility cycles of h.
func (h *Harness) NewVirtual() *Virtual {
	return &Virtual{h: h, Redeliver: 2 * time.Second, inflight: map[string]virtualMsg{}}
}

// Cycle is one event source mapping cycle on url with the manual clock's
// visibility: receive up to batch messages, invoke handler (a Lambda SQS
// handler) through the Lambda JSON path, delete the acknowledged ones
// unless the invocation failed or rec crashed. It returns how many it
// received.
func (v *Virtual) Cycle(ctx context.Context, url string, batch int32, rec *awstrace.Recorder, handler any) int {
	h := v.h
	out, err := h.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: batch, VisibilityTimeout: 3600,
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
	})
	if err != nil {
		h.T.Fatalf("receive: %v", err)
	}
	if len(out.Messages) == 0 {
		return 0
	}
	due := h.Clock.Now().Add(v.Redeliver)
	v.mu.Lock()
	for _, m := range out.Messages {
		v.inflight[aws.ToString(m.ReceiptHandle)] = virtualMsg{url: url, due: due}
	}
	v.mu.Unlock()
	acked, crashed := h.invokeBatch(ctx, handler, "chaos", rec, out.Messages)
	if crashed {
		return len(out.Messages)
	}
	v.mu.Lock()
	for _, m := range acked {
		delete(v.inflight, aws.ToString(m.ReceiptHandle))
	}
	v.mu.Unlock()
	h.deleteBatch(ctx, url, acked)
	return len(out.Messages)
}

// Hold sets when an in-flight message is due back (manual clock).
func (v *Virtual) Hold(receipt string, due time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if m, ok := v.inflight[receipt]; ok {
		m.due = due
		v.inflight[receipt] = m
	}
}

// Release makes every in-flight message whose due time has passed visible
// again and returns how many it released.
func (v *Virtual) Release(ctx context.Context) int {
	now := v.h.Clock.Now()
	v.mu.Lock()
	var due []string
	for r, m := range v.inflight {
		if !m.due.After(now) {
			due = append(due, r)
		}
	}
	v.mu.Unlock()
	n := 0
	for _, r := range due {
		v.mu.Lock()
		m := v.inflight[r]
		delete(v.inflight, r)
		v.mu.Unlock()
		if _, err := v.h.SQS.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(m.url), ReceiptHandle: aws.String(r), VisibilityTimeout: 0,
		}); err == nil {
			n++
		}
	}
	return n
}

// InFlight counts the messages received and neither acknowledged nor released.
func (v *Virtual) InFlight() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.inflight)
}

// NextDue is the earliest due time of an in-flight message (zero if none).
func (v *Virtual) NextDue() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	var first time.Time
	for _, m := range v.inflight {
		if first.IsZero() || m.due.Before(first) {
			first = m.due
		}
	}
	return first
}

// Visible counts the visible messages of a queue.
func (h *Harness) Visible(url string) int { return h.Depth(url) }

// NewLedgerWith returns a ledger over db acting as actor, with the
// harness's table, clock and lease tokens.
func (h *Harness) NewLedgerWith(db ledger.DynamoDB, actor string) *ledger.Ledger {
	return h.newLedger(db, actor)
}

// DynamoClient returns a DynamoDB client of the harness's emulator with
// extra middleware.
func (h *Harness) DynamoClient(opts ...APIOption) *dynamodb.Client { return h.Dynamo.Client(opts...) }

// SQSClient returns an SQS client of the harness's emulator with extra middleware.
func (h *Harness) SQSClient(opts ...APIOption) *sqs.Client { return h.sqsSrv.Client(opts...) }

// NewChaosWorker is NewWorker with extra middleware (after its recorder)
// on both of the worker's clients, for example a Gate.
func (h *Harness) NewChaosWorker(name string, extra ...APIOption) *Worker {
	rec := &awstrace.Recorder{}
	opts := append([]APIOption{rec.APIOption}, extra...)
	po := processor.Options{
		Owner: name, Lease: h.opts.Lease, MaxAttempts: h.opts.MaxReceiveCount, RetryBase: 100 * time.Millisecond,
		RetryCap: h.opts.RetryCap, Now: h.Clock.Now, Rand: func() float64 { return 0.5 }, Log: quietLog(),
		Resolvers: h.resolvers(),
	}
	if h.Outbox != nil {
		po.Effects = queue.Sender{Client: h.sqsSrv.Client(opts...), URL: h.Outbox.Queues.Queue}
	}
	if h.Warehouse != nil {
		po.Warehouse = &warehouse.Config{MaxState: h.Warehouse.MaxState}
	}
	var l processor.Ledger = h.newLedger(h.Dynamo.Client(opts...), name)
	if h.ProcessorLedger != nil {
		l = h.ProcessorLedger(l)
	}
	p, err := processor.New(l, h.Sources, h.opts.Registry, po)
	if err != nil {
		h.T.Fatal(err)
	}
	return &Worker{h: h, Name: name, Rec: rec, P: p}
}

// NewChaosDispatcher is NewDispatcher with extra middleware on its clients
// and the manual clock's visibility: the hold it asks for a waiting
// intent's message is recorded in v (its ChangeMessageVisibility still
// goes through the dispatcher's clients, so a crash can hit it).
func (o *Outbox) NewChaosDispatcher(name string, v *Virtual, extra ...APIOption) *Dispatcher {
	return o.NewChaosDispatcherWith(name, v, ChaosDispatcherOptions{Extra: extra})
}

// ChaosDispatcherOptions are what a chaos dispatcher adds to NewDispatcher.
// The zero value adds nothing.
type ChaosDispatcherOptions struct {
	// Extra is SDK middleware on the dispatcher's clients, after its recorder.
	Extra []APIOption
	// Gate, when set, is on the dispatcher's clients and in front of each
	// of its downstream calls (EffectCall), so the dispatcher can be paused
	// between its check of the truth and its call.
	Gate *Gate
	// Ledger, when set, wraps the dispatcher's ledger: a naive design
	// changes what the dispatcher is told (see internal/harness/chaos/naive).
	Ledger func(outbox.Ledger) outbox.Ledger
}

// NewChaosDispatcherWith is NewChaosDispatcher with options.
func (o *Outbox) NewChaosDispatcherWith(name string, v *Virtual, co ChaosDispatcherOptions) *Dispatcher {
	h := o.h
	rec := &awstrace.Recorder{}
	opts := append([]APIOption{rec.APIOption}, co.Extra...)
	if co.Gate != nil {
		opts = append(opts, co.Gate.APIOption)
	}
	effects := o.effectsFor(opts...)
	if co.Gate != nil {
		gated := make(map[string]outbox.Effect, len(effects))
		for k, e := range effects {
			gated[k] = gate(e, co.Gate)
		}
		effects = gated
	}
	var l outbox.Ledger = h.newLedger(h.Dynamo.Client(opts...), name)
	if co.Ledger != nil {
		l = co.Ledger(l)
	}
	d := &outbox.Dispatcher{
		Ledger: l, Effects: effects, Clock: h.Clock,
		Rand: func() float64 { return 0.5 }, Owner: name, Lease: o.opts.Lease, MaxAttempts: 8,
		Base: time.Second, Cap: time.Minute,
	}
	c := &outbox.Consumer{Dispatcher: d, SQS: virtualHold{v: v, next: h.sqsSrv.Client(opts...)}, QueueURL: o.Queues.Queue, Log: quietLog()}
	return &Dispatcher{o: o, Name: name, Rec: rec, C: c, Batch: 1}
}

// gatedEffect passes each downstream call through a Gate first; the
// status lookup and the idempotency window are the wrapped effect's.
type gatedEffect struct {
	outbox.Effect
	g *Gate
}

// gatedTarget is a gated AWS target's effect: its documented
// deduplication window stays visible to the dispatcher.
type gatedTarget struct {
	gatedEffect
	w outbox.DedupWindow
}

// DedupWindow is the wrapped target's.
func (e gatedTarget) DedupWindow() time.Duration { return e.w.DedupWindow() }

// gate wraps e in g, keeping what the dispatcher asks of it.
func gate(e outbox.Effect, g *Gate) outbox.Effect {
	if w, ok := e.(outbox.DedupWindow); ok {
		return gatedTarget{gatedEffect: gatedEffect{Effect: e, g: g}, w: w}
	}
	return gatedEffect{Effect: e, g: g}
}

var (
	_ outbox.StatusLookup = gatedEffect{}
	_ outbox.Windowed     = gatedEffect{}
	_ outbox.ScopeGuard   = gatedEffect{}
)

// AllowsScope is the wrapped effect's: the gate changes when a call is
// made, never whose calls are.
func (e gatedEffect) AllowsScope(scope string) bool {
	g, ok := e.Effect.(outbox.ScopeGuard)
	return ok && g.AllowsScope(scope)
}

func (e gatedEffect) Do(ctx context.Context, c outbox.Call) (outbox.Result, error) {
	if e.g.Wait(EffectCall) {
		return outbox.Result{}, &outbox.RetryableError{Err: ErrAborted}
	}
	return e.Effect.Do(ctx, c)
}

func (e gatedEffect) Lookup(ctx context.Context, key string) (applied, known bool, err error) {
	if lk, ok := e.Effect.(outbox.StatusLookup); ok {
		return lk.Lookup(ctx, key)
	}
	return false, false, nil
}

func (e gatedEffect) IdempotencyWindow() time.Duration {
	if w, ok := e.Effect.(outbox.Windowed); ok {
		return w.IdempotencyWindow()
	}
	return 0
}

// virtualHold records a dispatcher's hold on the manual clock and keeps the
// message invisible in real time until Virtual releases it.
type virtualHold struct {
	v    *Virtual
	next outbox.Visibility
}

func (vh virtualHold) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	vh.v.Hold(aws.ToString(in.ReceiptHandle), vh.v.h.Clock.Now().Add(time.Duration(in.VisibilityTimeout)*time.Second))
	long := *in
	long.VisibilityTimeout = 3600
	return vh.next.ChangeMessageVisibility(ctx, &long, opts...)
}

// ChaosSources configures both sources the chaos harness mixes: Stripe
// (secrets env:STRIPE_PRIMARY and env:STRIPE_ROTATED, as DefaultSources)
// and the orders source (as OrdersSources).
const ChaosSources = `{"sources":[{"name":"stripe","kind":"stripe","secrets":["env:STRIPE_PRIMARY","env:STRIPE_ROTATED"]},` +
	`{"name":"orders","kind":"standard-webhooks","secrets":["env:ORDERS_SECRET"],` +
	`"options":{"subject_path":"data.id","version_path":"data.revision"}}]}`

// entitlementEffectKinds are the intent kinds of the Stripe subscription
// projection.
var entitlementEffectKinds = []string{"entitlement.grant", "entitlement.revoke"}

// NewChaos builds a pipeline with the Stripe and the orders sources, the
// default projections (New's, unless o.Registry is set) and the effects
// stage with the order effects and the entitlement effects, all against
// the same idempotent fake downstream.
func NewChaos(t testing.TB, o Options, oo OutboxOptions) *Harness {
	t.Helper()
	o.SourcesDoc, o.Secrets = ChaosSources, map[string]string{"ORDERS_SECRET": SecretOrders}
	h := New(t, o)
	h.EnableStripeAPI(2 * time.Second)
	ob := h.EnableOutbox(oo)
	client := &http.Client{Timeout: ob.opts.CallTimeout}
	for _, kind := range entitlementEffectKinds {
		e := &outbox.HTTPEffect{Name: kind, URL: ob.URL + "/" + kind, Secret: DownstreamToken, Window: ob.opts.Window, Client: client, Clock: h.Clock,
			Scopes: ob.opts.scopes(kind)}
		if ob.opts.Lookup {
			e.StatusURL = ob.URL + "/status"
		}
		ob.Effects[kind] = e
	}
	return h
}
