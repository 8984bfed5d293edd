package pipelinetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	"github.com/effectively-once/webhooks/internal/harness/downstream"
	"github.com/effectively-once/webhooks/internal/harness/httpstatus"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/metrics"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/queue"
)

// OutboxOptions tune the effects stage; zero values are sensible.
type OutboxOptions struct {
	// Lookup gives both effects the downstream's status endpoint, so an
	// uncertain outcome is looked up; without it the dispatcher retries
	// with the same key inside Window, and quarantines after it.
	Lookup bool
	// Window is how long the downstream remembers a key (and what the
	// effects tell the dispatcher). Default 24h.
	Window time.Duration
	// Lease is the dispatchers' lease on an intent. Default 30 s.
	Lease time.Duration
	// CallTimeout is the HTTP effects' timeout in real time (a hang ends
	// there). Default 300 ms.
	CallTimeout time.Duration
	// MaxReceiveCount of the effects queue. Default queue.Effects' (10).
	MaxReceiveCount int
	// Latency is how long (real time) each effect call takes before the
	// downstream handles it, so concurrent dispatchers overlap.
	Latency time.Duration
	// Scopes sets the scopes an effect kind allows (outbox.HTTPEffect's
	// Scopes). A kind not named allows the scope of the source that emits
	// it in the harness's configurations, as scripts/devstack.json
	// declares: "orders" for the order effects, "stripe" for the
	// entitlement effects.
	Scopes map[string][]string
	// Kinds are more effect kinds the downstream performs, next to the
	// order effects (a test projection's); each allows the scopes
	// Scopes names for it, none otherwise.
	Kinds []string
	// RefuseOlder makes the downstream refuse a call whose subject
	// version is older than the last it applied for the subject in the
	// call's scope (downstream.Fake.RefuseOlder).
	RefuseOlder bool
}

// defaultScopes are the scopes each harness effect kind allows unless
// OutboxOptions.Scopes says otherwise.
var defaultScopes = map[string][]string{
	"refund": {"orders"}, "notify_cancellation": {"orders"}, "notify_reinstatement": {"orders"},
	"entitlement.grant": {"stripe"}, "entitlement.revoke": {"stripe"},
}

// scopes is the scopes kind allows.
func (o OutboxOptions) scopes(kind string) []string {
	if s, ok := o.Scopes[kind]; ok {
		return s
	}
	return defaultScopes[kind]
}

// Arrival is one request the downstream received, on the manual clock.
type Arrival struct {
	Method string
	Key    string
	At     time.Time
	Status int // 0 when the client gave up before an answer
	// Seq orders the arrival among everything else that took a number
	// from Outbox.Tick (the chaos executor's projection samples): taken
	// when the request arrives, before the downstream handles it.
	Seq int64
	// Kind is the effect endpoint's last path segment (the intent kind).
	Kind string
	// Subject is the body's "subject"; Version the X-Subject-Version
	// header as sent; BodyVersion the body's "subject_version" as sent
	// (raw JSON: a string when the dispatcher sent one, never parsed).
	Subject     string
	Version     string
	BodyVersion json.RawMessage
	// Scope and Source are the X-Effect-Scope and X-Effect-Source
	// headers; BodyScope and BodySource the body's "scope" and "source".
	Scope, Source         string
	BodyScope, BodySource string
	// Payload is the body's "payload" as sent (raw JSON; nil without
	// one): what the downstream was asked to apply.
	Payload json.RawMessage
	// Applied: the downstream applied this call (an effective call, not a
	// replay of a remembered key), whether or not the client saw the
	// answer. Exact when calls with one key do not overlap (the chaos
	// executor dispatches one message at a time).
	Applied bool
}

// Hold is one ChangeMessageVisibility a dispatcher asked for: the message
// of OperationID hidden For, asked At (manual clock).
type Hold struct {
	OperationID string
	At          time.Time
	For         time.Duration
}

// Outbox is the effects stage of a Harness: the effects queue and its DLQ,
// a downstream.Fake on the manual clock served over HTTP, the "refund" and
// "notify_cancellation" HTTP effects, and dispatcher instances.
type Outbox struct {
	h       *Harness
	Queues  queue.URLs
	Down    *downstream.Fake
	URL     string
	Effects map[string]outbox.Effect
	opts    OutboxOptions
	// targets are the effect kinds an AWS target performs (UseTarget).
	targets map[string]*AWSTarget

	seq      atomic.Int64
	mu       sync.Mutex
	arrivals []Arrival
	holds    []Hold
	receipts map[string]string // receipt handle -> operation id
	emf      bytes.Buffer      // the dispatchers' metrics records
}

// The intent kinds of the order projection (builtin.Orders), compensation
// included.
var orderEffectKinds = []string{"refund", "notify_cancellation", "notify_reinstatement"}

// EnableOutbox adds the effects stage. Processor workers started after it
// announce committed intents on the effects queue. At cleanup the test's
// intents and the downstream's effective calls go into the suite report.
func (h *Harness) EnableOutbox(o OutboxOptions) *Outbox {
	h.T.Helper()
	if o.Window == 0 {
		o.Window = 24 * time.Hour
	}
	if o.Lease == 0 {
		o.Lease = 30 * time.Second
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = 300 * time.Millisecond
	}
	spec := queue.Effects(localaws.UniqueName("t") + "-")
	spec.VisibilityTimeout = time.Second // real time: a crashed dispatcher's message comes back quickly
	spec.DLQRetention = time.Hour
	if o.MaxReceiveCount > 0 {
		spec.MaxReceiveCount = o.MaxReceiveCount
	}
	ob := &Outbox{h: h, opts: o, receipts: map[string]string{}, Effects: map[string]outbox.Effect{}}
	var err error
	if ob.Queues, err = queue.Create(context.Background(), h.SQS, spec); err != nil {
		h.T.Fatal(err)
	}
	ob.Down = &downstream.Fake{Window: o.Window, Now: h.Clock.Now, Secret: DownstreamToken, HangLimit: 5 * time.Second, RefuseOlder: o.RefuseOlder}
	srv := httptest.NewServer(ob.record(ob.Down))
	h.T.Cleanup(srv.Close)
	ob.URL = srv.URL
	client := &http.Client{Timeout: o.CallTimeout}
	for _, kind := range append(slices.Clone(orderEffectKinds), o.Kinds...) {
		e := &outbox.HTTPEffect{Name: kind, URL: srv.URL + "/" + kind, Secret: DownstreamToken, Window: o.Window, Client: client, Clock: h.Clock,
			Scopes: o.scopes(kind)}
		if o.Lookup {
			e.StatusURL = srv.URL + "/status"
		}
		ob.Effects[kind] = e
	}
	h.Outbox = ob
	h.T.Cleanup(func() { ob.report() })
	return ob
}

// DownstreamToken is the fake downstream's bearer token (visibly fake).
const DownstreamToken = "tok_test_FAKE_downstream_0000"

// Tick returns the next number of the run's shared sequence: downstream
// arrivals take one each, and so can other observations (the chaos
// executor's projection samples), so "before" and "after" compare across
// them.
func (o *Outbox) Tick() int64 { return o.seq.Add(1) }

// record wraps the downstream to note every request with its status, its
// place in the shared sequence, what it carried and whether it applied.
func (o *Outbox) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := Arrival{Method: r.Method, Key: r.Header.Get("Idempotency-Key"), At: o.h.Clock.Now(), Seq: o.Tick()}
		before := 0
		if r.Method == http.MethodGet {
			a.Key = r.URL.Query().Get("key")
		} else {
			a.Kind = r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
			a.Version = r.Header.Get("X-Subject-Version")
			a.Scope, a.Source = r.Header.Get("X-Effect-Scope"), r.Header.Get("X-Effect-Source")
			if body, err := io.ReadAll(r.Body); err == nil {
				r.Body = io.NopCloser(bytes.NewReader(body))
				var wire struct {
					Subject string          `json:"subject"`
					Version json.RawMessage `json:"subject_version"`
					Scope   string          `json:"scope"`
					Source  string          `json:"source"`
					Payload json.RawMessage `json:"payload"`
				}
				if json.Unmarshal(body, &wire) == nil {
					a.Subject, a.BodyVersion, a.BodyScope, a.BodySource = wire.Subject, wire.Version, wire.Scope, wire.Source
					a.Payload = wire.Payload
				}
			}
			before = o.Down.Effective(a.Key)
			if o.opts.Latency > 0 {
				time.Sleep(o.opts.Latency)
			}
		}
		sw := &httpstatus.Writer{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if r.Context().Err() == nil {
			a.Status = sw.Code
		}
		if r.Method == http.MethodPost {
			a.Applied = o.Down.Effective(a.Key) > before
		}
		o.mu.Lock()
		o.arrivals = append(o.arrivals, a)
		o.mu.Unlock()
	})
}

// Arrivals returns the POSTs (effect calls) the downstream received for
// key, in order; with key "" every POST.
func (o *Outbox) Arrivals(key string) []Arrival {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []Arrival
	for _, a := range o.arrivals {
		if a.Method == http.MethodPost && (key == "" || a.Key == key) {
			out = append(out, a)
		}
	}
	return out
}

// Lookups counts the status lookups the downstream answered for key.
func (o *Outbox) Lookups(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, a := range o.arrivals {
		if a.Method == http.MethodGet && a.Key == key {
			n++
		}
	}
	return n
}

// Holds returns the visibility holds dispatchers asked for op's messages.
func (o *Outbox) Holds(op string) []Hold {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []Hold
	for _, hd := range o.holds {
		if hd.OperationID == op {
			out = append(out, hd)
		}
	}
	return out
}

// Intent reads one intent with its dispatch bookkeeping and audit.
func (o *Outbox) Intent(op string) ledger.IntentState {
	o.h.T.Helper()
	in, err := o.h.Ledger.GetIntentState(context.Background(), op)
	if err != nil {
		o.h.T.Fatalf("intent %s: %v", op, err)
	}
	return in
}

// IntentActions lists an intent's audit actions in order.
func IntentActions(in ledger.IntentState) []string { return auditActions(in.Audit) }

// Reconcile runs the reconciler's outbox sweep: it re-announces the
// intents due at or before `before` (outbox.AnnounceDue) and returns how
// many pointers it sent.
func (o *Outbox) Reconcile(before time.Time) int {
	o.h.T.Helper()
	n, err := outbox.AnnounceDue(context.Background(), o.h.Ledger, queue.Sender{Client: o.h.SQS, URL: o.Queues.Queue}, before, 100, "reconcile")
	if err != nil {
		o.h.T.Fatalf("announce due intents: %v", err)
	}
	return n
}

// Dispatcher is one dispatcher Lambda instance with its own clients and
// recorder, so it can crash alone; discard it after a crash.
type Dispatcher struct {
	o    *Outbox
	Name string
	Rec  *awstrace.Recorder
	C    *outbox.Consumer
	// Batch is the event source mapping's batch size. Default 10.
	Batch int32
}

// NewDispatcher starts a dispatcher instance wired as functions/dispatcher
// wires it: a fenced ledger, the effects, and the effects queue for holding
// back waiting messages.
func (o *Outbox) NewDispatcher(name string) *Dispatcher {
	h := o.h
	rec := &awstrace.Recorder{}
	d := &outbox.Dispatcher{
		Ledger: h.newLedger(h.Dynamo.Client(rec.APIOption), name), Effects: o.effectsFor(rec.APIOption), Clock: h.Clock,
		Rand: func() float64 { return 0.5 }, Owner: name, Lease: o.opts.Lease, MaxAttempts: 8,
		Base: time.Second, Cap: time.Minute,
	}
	c := &outbox.Consumer{Dispatcher: d, SQS: holdVisibility{o: o, next: h.sqsSrv.Client(rec.APIOption)}, QueueURL: o.Queues.Queue, Log: quietLog(),
		Metrics: metrics.New(lockedWriter{o}, "pipelinetest", h.Clock.Now)}
	return &Dispatcher{o: o, Name: name, Rec: rec, C: c, Batch: 10}
}

// lockedWriter appends the dispatchers' metrics records under the
// outbox's lock, so Metric can read them while dispatchers run.
type lockedWriter struct{ o *Outbox }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.o.mu.Lock()
	defer w.o.mu.Unlock()
	return w.o.emf.Write(p)
}

// Metric sums metric name over the records of the dispatchers NewDispatcher
// started, and returns the properties of the records where it was not 0.
func (o *Outbox) Metric(name string) (float64, []map[string]any) {
	o.h.T.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	var sum float64
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(o.emf.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			o.h.T.Fatalf("metrics record %q: %v", line, err)
		}
		if v, _ := rec[name].(float64); v != 0 {
			sum += v
			recs = append(recs, rec)
		}
	}
	return sum, recs
}

// PollOnce is one event source mapping cycle on the effects queue through
// the dispatcher's Lambda JSON path. It returns the messages received.
func (d *Dispatcher) PollOnce(ctx context.Context) int {
	return len(d.o.h.esm(ctx, esmCycle{url: d.o.Queues.Queue, arn: "effects", batch: d.Batch, rec: d.Rec, handler: d.C.HandleSQS,
		received: d.o.noteReceipts}))
}

func (o *Outbox) noteReceipts(ms []sqstypes.Message) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, m := range ms {
		if p, err := queue.ParseIntentPointer(aws.ToString(m.Body)); err == nil {
			o.receipts[aws.ToString(m.ReceiptHandle)] = p.OperationID
		}
	}
}

// holdVisibility records the hold a dispatcher asks for (the intent's
// backoff, carried by the queue) and applies at most one real second of
// it: the manual clock, not real time, decides when the intent is due, and
// the ledger's claim refuses a message that comes back early.
type holdVisibility struct {
	o    *Outbox
	next outbox.Visibility
}

func (v holdVisibility) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	v.o.mu.Lock()
	v.o.holds = append(v.o.holds, Hold{OperationID: v.o.receipts[aws.ToString(in.ReceiptHandle)], At: v.o.h.Clock.Now(), For: time.Duration(in.VisibilityTimeout) * time.Second})
	v.o.mu.Unlock()
	short := *in
	short.VisibilityTimeout = min(in.VisibilityTimeout, 1)
	return v.next.ChangeMessageVisibility(ctx, &short, opts...)
}

// DrainAll runs both stages (processor workers on the events queue,
// dispatchers on the effects queue) until both queues are empty, advancing
// the manual clock by `advance` whenever a round receives nothing. It fails
// the test after timeout (real time).
func (h *Harness) DrainAll(timeout, advance time.Duration, workers []*Worker, dispatchers ...*Dispatcher) {
	h.T.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	depth := func() int {
		n := h.Depth(h.Queues.Queue)
		if h.Outbox != nil {
			n += h.Depth(h.Outbox.Queues.Queue)
		}
		return n
	}
	for depth() > 0 {
		if time.Now().After(deadline) {
			h.T.Fatalf("queues not drained after %s (%d messages left in the events and effects queues)", timeout, depth())
		}
		got := 0
		for _, w := range workers {
			got += w.PollOnce(ctx)
		}
		for _, d := range dispatchers {
			got += d.PollOnce(ctx)
		}
		if got == 0 {
			h.Clock.Advance(advance)
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// The suite report: every outbox-enabled test's operation ids (its
// intents, and every key its downstream applied) with the effective calls.
var suiteEffects struct {
	mu   sync.Mutex
	runs int            // harness runs reported (a test may run more than once: -count)
	keys map[string]int // test#run/operation_id -> effective calls
}

func (o *Outbox) report() {
	t := o.h.T
	counts := map[string]int{}
	if snap, err := ledger.TakeSnapshot(context.Background(), o.h.DB, o.h.Table); err == nil {
		for _, in := range snap.Intents {
			counts[in.OperationID] += 0
		}
	} else {
		t.Errorf("suite report: snapshot: %v", err)
	}
	for k, n := range o.Down.EffectiveByKey() {
		counts[k] = n
	}
	suiteEffects.mu.Lock()
	defer suiteEffects.mu.Unlock()
	if suiteEffects.keys == nil {
		suiteEffects.keys = map[string]int{}
	}
	suiteEffects.runs++
	run := fmt.Sprintf("%s#%d/", t.Name(), suiteEffects.runs)
	for k, n := range counts {
		suiteEffects.keys[run+k] += n
	}
}

// EffectsSummary counts operation ids by their effective calls downstream.
type EffectsSummary struct {
	Keys, Once, None, More int
	Over                   []string // test/operation_id applied more than once
}

// SuiteEffects summarises every outbox-enabled test run so far.
func SuiteEffects() EffectsSummary {
	suiteEffects.mu.Lock()
	defer suiteEffects.mu.Unlock()
	var s EffectsSummary
	for k, n := range suiteEffects.keys {
		s.Keys++
		switch {
		case n == 0:
			s.None++
		case n == 1:
			s.Once++
		default:
			s.More++
			s.Over = append(s.Over, k)
		}
	}
	sort.Strings(s.Over)
	return s
}

// Announce sends one more pointer per operation id to the effects queue,
// as a duplicate announcement (or a second reconciler) would.
func (o *Outbox) Announce(reason string, ops ...string) {
	o.h.T.Helper()
	ps := make([]queue.IntentPointer, len(ops))
	for i, op := range ops {
		ps[i] = queue.IntentPointer{OperationID: op, Reason: reason}
	}
	if _, err := (queue.Sender{Client: o.h.SQS, URL: o.Queues.Queue}).SendIntents(context.Background(), ps); err != nil {
		o.h.T.Fatalf("announce: %v", err)
	}
}
