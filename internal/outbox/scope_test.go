package outbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/effectively-once/webhooks/internal/harness/downstream"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/metrics"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/queue"
)

// Two sources of one kind: the operator's own order system ("orders")
// and a vendor's Standard Webhooks sender with its own secret ("vendor").
// Each owns its O-42; both emit the same intent kinds for it.
const (
	vendorRefund = "op_vendor_refund_999"
	ordersRefund = "op_orders_refund_12"
)

// scopedLedger is a ledger holding, for each commit, the revision of
// O-42 a source delivered, in that source's scope, with one intent.
type scopedCommit struct {
	source  string
	version int64
	op      string
	kind    string
	policy  ledger.Policy
}

func scopedLedger(t *testing.T, commits ...scopedCommit) (*ledger.Ledger, *ledger.ManualClock) {
	t.Helper()
	l, clock, commit := scopedLedgerLater(t)
	for _, sc := range commits {
		commit(sc)
	}
	return l, clock
}

// scopedLedgerLater is scopedLedger, committing when the test says.
func scopedLedgerLater(t *testing.T) (*ledger.Ledger, *ledger.ManualClock, func(scopedCommit)) {
	t.Helper()
	ctx := context.Background()
	d := localaws.NewDynamo()
	t.Cleanup(d.Close)
	db := d.Client()
	if err := ledger.CreateTable(ctx, db, "ledger"); err != nil {
		t.Fatal(err)
	}
	clock := ledger.NewManualClock(t0)
	l, err := ledger.New(db, ledger.Options{Table: "ledger", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	commit := func(sc scopedCommit) {
		t.Helper()
		id := "msg_" + sc.op
		if _, err := l.Accept(ctx, ledger.Delivery{Source: sc.source, EventID: id, EventType: "order.cancelled", DeliveryID: "d-" + id, Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		c, err := l.Claim(ctx, sc.source, id, ledger.ClaimOptions{Owner: "proc", Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		// The processor scopes the projection: "<scope>/order".
		w := &ledger.ProjectionWrite{Name: sc.source + "/order", Subject: "O-42", Version: sc.version, Fingerprint: "f" + sc.op,
			State: map[string]any{"status": "cancelled", "rev": sc.version}}
		in := ledger.Intent{OperationID: sc.op, Kind: sc.kind, Subject: "O-42", Policy: sc.policy,
			Payload: map[string]any{"order_id": "O-42", "amount_minor": 12900}}
		if sc.policy == ledger.PolicyWhileCurrent {
			in.Condition = map[string]string{"status": "cancelled"}
		}
		if _, err := l.Commit(ctx, c, w, []ledger.Intent{in}); err != nil {
			t.Fatal(err)
		}
	}
	return l, clock, commit
}

func scopedDispatcher(l *ledger.Ledger, clock *ledger.ManualClock, effs ...*outbox.HTTPEffect) *outbox.Dispatcher {
	d := &outbox.Dispatcher{Ledger: l, Effects: map[string]outbox.Effect{}, Clock: clock, Rand: func() float64 { return 0.5 },
		Owner: "dispatcher-a", Lease: 30 * time.Second, MaxAttempts: 5, Base: time.Second, Cap: time.Minute}
	for _, e := range effs {
		d.Effects[e.Name] = e
	}
	return d
}

// The vendor's signed order.cancelled for its own O-42 at revision 999
// yields a refund intent of kind "refund", the kind the operator's refund
// endpoint performs. The endpoint is for the operator's scope only: the
// vendor's intent ends QUARANTINED (scope_not_allowed, naming the scope and
// the kind), no request reaches the endpoint, the refusal is counted
// (EffectsScopeRefused), and the operator's own cancellation is refunded
// once.
func TestAVendorsCancellationNeverReachesTheOperatorsRefundEndpoint(t *testing.T) {
	ctx := context.Background()
	l, clock := scopedLedger(t,
		scopedCommit{source: "vendor", version: 999, op: vendorRefund, kind: "refund", policy: ledger.PolicyWhileCurrent},
		scopedCommit{source: "orders", version: 12, op: ordersRefund, kind: "refund", policy: ledger.PolicyWhileCurrent})
	down := &downstream.Fake{Window: time.Hour, Now: clock.Now, Secret: "tok_test_FAKE_payments"}
	srv := httptest.NewServer(down)
	t.Cleanup(srv.Close)
	refund := &outbox.HTTPEffect{Name: "refund", URL: srv.URL, Secret: "tok_test_FAKE_payments", Scopes: []string{"orders"},
		Client: &http.Client{Timeout: time.Second}}
	var emf bytes.Buffer
	c := &outbox.Consumer{Dispatcher: scopedDispatcher(l, clock, refund), Log: slog.New(slog.DiscardHandler),
		Metrics: metrics.New(&emf, "EffectivelyOnce/test", clock.Now)}

	resp, err := c.HandleSQS(ctx, events.SQSEvent{Records: []events.SQSMessage{
		record("m-vendor", queue.IntentPointer{OperationID: vendorRefund, Reason: "commit"}.Encode())}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("the refused intent's message is not acknowledged: %+v %v", resp, err)
	}
	in, err := l.GetIntentState(ctx, vendorRefund)
	if err != nil {
		t.Fatal(err)
	}
	if in.Status != ledger.IntentStatusQuarantined || in.ErrorCode != outbox.CodeScopeNotAllowed ||
		!strings.Contains(in.Detail, `scope "vendor"`) || !strings.Contains(in.Detail, `effect "refund"`) {
		t.Fatalf("vendor's refund: %s %s %q; want QUARANTINED scope_not_allowed naming scope and kind", in.Status, in.ErrorCode, in.Detail)
	}
	last := in.Audit[len(in.Audit)-1]
	if last.To != ledger.Status(ledger.IntentStatusQuarantined) || !strings.Contains(last.Reason, outbox.CodeScopeNotAllowed) || !strings.Contains(last.Reason, `scope "vendor"`) {
		t.Fatalf("audit %+v", last)
	}
	if calls := down.Calls(); len(calls) != 0 {
		t.Fatalf("the refund endpoint received %d requests: %+v", len(calls), calls)
	}
	rec := onlyRecord(t, &emf)
	if rec["EffectsScopeRefused"] != 1.0 || rec["EffectsQuarantined"] != 1.0 || rec["scope"] != "vendor" || rec["source"] != "vendor" || rec["kind"] != "refund" || rec["called"] != false {
		t.Fatalf("metrics record %v", rec)
	}

	// The operator's genuine cancellation is refunded, once.
	emf.Reset()
	if resp, err := c.HandleSQS(ctx, events.SQSEvent{Records: []events.SQSMessage{
		record("m-orders", queue.IntentPointer{OperationID: ordersRefund, Reason: "commit"}.Encode())}}); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("operator's refund: %+v %v", resp, err)
	}
	if in, err := l.GetIntentState(ctx, ordersRefund); err != nil || in.Status != ledger.IntentStatusSucceeded || down.Effective(ordersRefund) != 1 {
		t.Fatalf("operator's refund: %s (%s), effective %d, %v", in.Status, in.Detail, down.Effective(ordersRefund), err)
	}
	if rec := onlyRecord(t, &emf); rec["EffectsScopeRefused"] != 0.0 || rec["EffectsSucceeded"] != 1.0 || rec["scope"] != "orders" {
		t.Fatalf("metrics record %v", rec)
	}
	if len(down.Calls()) != 1 || down.Effective(vendorRefund) != 0 {
		t.Fatalf("requests at the endpoint: %+v", down.Calls())
	}
}

// Both scopes may use a state sync ("order.sync", policy latest) at a
// downstream that refuses older versions of a subject. The vendor's O-42
// at revision 999 is synced first; the operator's genuine revisions 12
// and 13 of its own O-42 are still applied, because the call names its
// scope and the downstream orders versions per (scope, subject): its view
// of the operator's O-42 ends at 13, of the vendor's at 999. The subject
// cursors are per scope too: the vendor's 999 does not supersede them.
func TestAVendorsVersionCannotMakeTheOperatorsLaterVersionsLookOld(t *testing.T) {
	ctx := context.Background()
	l, clock, commit := scopedLedgerLater(t)
	down := &downstream.Fake{Window: time.Hour, Now: clock.Now, RefuseOlder: true}
	srv := httptest.NewServer(down)
	t.Cleanup(srv.Close)
	sync := &outbox.HTTPEffect{Name: "order.sync", URL: srv.URL, StatusURL: srv.URL + "/status", Scopes: []string{"orders", "vendor"},
		Client: &http.Client{Timeout: time.Second}}
	d := scopedDispatcher(l, clock, sync)
	steps := []scopedCommit{
		{source: "vendor", version: 999, op: "op_vendor_sync_999", kind: "order.sync", policy: ledger.PolicyLatest},
		{source: "orders", version: 12, op: "op_orders_sync_12", kind: "order.sync", policy: ledger.PolicyLatest},
		{source: "orders", version: 13, op: "op_orders_sync_13", kind: "order.sync", policy: ledger.PolicyLatest},
	}
	for _, sc := range steps {
		commit(sc)
		clock.Advance(time.Second)
		o, err := d.Dispatch(ctx, sc.op)
		if err != nil {
			t.Fatal(err)
		}
		in, _ := l.GetIntentState(ctx, sc.op)
		if o.Status != ledger.IntentStatusSucceeded || in.Status != ledger.IntentStatusSucceeded || down.Effective(sc.op) != 1 {
			t.Fatalf("%s's revision %d: %s (%s: %s), effective %d; want SUCCEEDED and applied once", sc.source, sc.version, in.Status, in.ErrorCode, in.Detail, down.Effective(sc.op))
		}
	}
	ops, _ := down.Subject("orders", "O-42")
	ven, _ := down.Subject("vendor", "O-42")
	if strings.Join(appliedVersions(ops), ",") != "12,13" || ops.Last != "13" || len(ops.Refused) != 0 || ops.Regressions != 0 {
		t.Fatalf("the downstream's view of the operator's O-42: %+v; want 12 then 13, nothing refused", ops)
	}
	if strings.Join(appliedVersions(ven), ",") != "999" || ven.Last != "999" {
		t.Fatalf("the downstream's view of the vendor's O-42: %+v", ven)
	}
	// The status endpoint answers per scope, as the reconciler asks.
	for scope, want := range map[string]string{"orders": "13", "vendor": "999"} {
		if v, known, err := sync.SubjectVersion(ctx, scope, "O-42"); err != nil || !known || v != want {
			t.Fatalf("%s's O-42 at the downstream: %q %v %v, want %s", scope, v, known, err, want)
		}
	}
}

func appliedVersions(sv downstream.SubjectView) []string {
	out := make([]string, len(sv.History))
	for i, a := range sv.History {
		out[i] = a.Version
	}
	return out
}

func onlyRecord(t *testing.T, emf *bytes.Buffer) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(emf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one metrics record, got %d: %s", len(lines), emf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// seen is what an endpoint received of one call.
type seen struct {
	header http.Header
	body   map[string]any
}

// recorder is an endpoint that answers 200 and keeps every request.
type recorder struct {
	mu    sync.Mutex
	calls []seen
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	var body map[string]any
	_ = json.Unmarshal(b, &body)
	r.mu.Lock()
	r.calls = append(r.calls, seen{header: req.Header.Clone(), body: body})
	r.mu.Unlock()
	_, _ = w.Write([]byte(`{"ok":true}`))
}

// Every call names whose fact it acts on, in the body and in headers, so
// a downstream can tell the operator's O-42 from the vendor's: the scope
// that owns it and the source that delivered it, with the subject's
// version in that scope.
func TestEveryEffectCallNamesItsScopeAndSource(t *testing.T) {
	ctx := context.Background()
	l, clock := scopedLedger(t,
		scopedCommit{source: "vendor", version: 999, op: vendorRefund, kind: "refund", policy: ledger.PolicyWhileCurrent},
		scopedCommit{source: "orders", version: 12, op: ordersRefund, kind: "refund", policy: ledger.PolicyWhileCurrent})
	end := &recorder{}
	srv := httptest.NewServer(end)
	t.Cleanup(srv.Close)
	refund := &outbox.HTTPEffect{Name: "refund", URL: srv.URL, Scopes: []string{"orders", "vendor"}, Client: &http.Client{Timeout: time.Second}}
	d := scopedDispatcher(l, clock, refund)
	for _, op := range []string{ordersRefund, vendorRefund} {
		if o, err := d.Dispatch(ctx, op); err != nil || o.Status != ledger.IntentStatusSucceeded {
			t.Fatalf("%s: %+v %v", op, o, err)
		}
	}
	if len(end.calls) != 2 {
		t.Fatalf("calls %d", len(end.calls))
	}
	for i, want := range []struct{ scope, key, version string }{{"orders", ordersRefund, "12"}, {"vendor", vendorRefund, "999"}} {
		got := end.calls[i]
		h := got.header
		if h.Get("X-Effect-Scope") != want.scope || h.Get("X-Effect-Source") != want.scope || h.Get("Idempotency-Key") != want.key || h.Get("X-Subject-Version") != want.version {
			t.Fatalf("call %d headers: scope %q source %q key %q version %q", i, h.Get("X-Effect-Scope"), h.Get("X-Effect-Source"), h.Get("Idempotency-Key"), h.Get("X-Subject-Version"))
		}
		b := got.body
		if b["scope"] != want.scope || b["source"] != want.scope || b["subject"] != "O-42" || b["subject_version"] != want.version || b["key"] != want.key {
			t.Fatalf("call %d body %v", i, b)
		}
	}
}

// The scopes an effect allows: named scopes only themselves; "*" every
// scope and intents without one; an effect that declares none, and one
// that cannot declare any (not a ScopeGuard), nothing.
func TestEffectScopes(t *testing.T) {
	tests := []struct {
		scopes []string
		scope  string
		want   bool
	}{
		{[]string{"orders"}, "orders", true},
		{[]string{"orders"}, "vendor", false},
		{[]string{"orders"}, "", false},
		{[]string{"orders", "vendor"}, "vendor", true},
		{[]string{outbox.AllScopes}, "vendor", true},
		{[]string{outbox.AllScopes}, "", true},
		{nil, "orders", false},
		{nil, "", false},
	}
	for _, tc := range tests {
		e := &outbox.HTTPEffect{Name: "refund", Scopes: tc.scopes}
		if got := e.AllowsScope(tc.scope); got != tc.want {
			t.Errorf("scopes %v, scope %q: allowed %v, want %v", tc.scopes, tc.scope, got, tc.want)
		}
	}

	ctx := context.Background()
	l, clock := scopedLedger(t, scopedCommit{source: "orders", version: 12, op: ordersRefund, kind: "refund", policy: ledger.PolicyOnce})
	end := &recorder{}
	srv := httptest.NewServer(end)
	t.Cleanup(srv.Close)
	d := scopedDispatcher(l, clock)
	d.Effects["refund"] = unguarded{&outbox.HTTPEffect{Name: "refund", URL: srv.URL}}
	o, err := d.Dispatch(ctx, ordersRefund)
	if err != nil || o.Status != ledger.IntentStatusQuarantined || o.Code != outbox.CodeScopeNotAllowed || o.Called || len(end.calls) != 0 {
		t.Fatalf("an effect that declares no scopes: %+v %v, %d calls", o, err, len(end.calls))
	}
}

// unguarded is an effect that is no ScopeGuard.
type unguarded struct{ e *outbox.HTTPEffect }

func (u unguarded) Kind() string { return u.e.Kind() }
func (u unguarded) Do(ctx context.Context, c outbox.Call) (outbox.Result, error) {
	return u.e.Do(ctx, c)
}

// An effect's scopes are required in the EFFECTS document, and checked
// where the document is read, naming the effect and the key.
func TestEffectScopesAreRequired(t *testing.T) {
	const head = `{"effects":[{"kind":"refund","url":"https://payments.example/refunds"`
	for doc, want := range map[string]string{
		head + `}]}`:                              `effect 0 ("refund"): scopes is required`,
		head + `,"scopes":[]}]}`:                  `effect 0 ("refund"): scopes is required`,
		head + `,"scopes":["*","orders"]}]}`:      `"*" allows every scope and must be alone`,
		head + `,"scopes":["Orders"]}]}`:          `scopes: "Orders" is not a scope`,
		head + `,"scopes":["orders","orders"]}]}`: `scopes: "orders" appears twice`,
		head + `,"scopes":"orders"}]}`:            `cannot unmarshal`,
	} {
		if _, err := outbox.ParseEffects([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", doc, err, want)
		}
	}
	cfgs, err := outbox.ParseEffects([]byte(head + `,"scopes":["orders"]},{"kind":"notify","url":"https://n.example","scopes":["*"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	effs, err := outbox.Build(cfgs, nil, aws.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if g := effs["refund"].(outbox.ScopeGuard); !g.AllowsScope("orders") || g.AllowsScope("vendor") {
		t.Fatal("refund's scopes were not built")
	}
	if g := effs["notify"].(outbox.ScopeGuard); !g.AllowsScope("vendor") || !g.AllowsScope("") {
		t.Fatal(`notify's "*" was not built`)
	}
}
