package outbox_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/downstream"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

const (
	op   = "op_refund_42"
	kind = "refund.issue"
)

type env struct {
	L     *ledger.Ledger
	Clock *ledger.ManualClock
	Down  *downstream.Fake
	Eff   *outbox.HTTPEffect
	D     *outbox.Dispatcher
}

// setup writes one PENDING intent the way production does (accept, claim,
// commit) and wires a dispatcher to a fake downstream (internal/harness/downstream) over HTTP. Only one
// event is accepted per table: minidyn v0.8.2 corrupts the due index when a
// second item is created by UpdateItem.
func setup(t *testing.T) env {
	t.Helper()
	return setupPayload(t, map[string]any{"amount": 1200, "currency": "eur"})
}

// setupPayload is setup with the intent's payload.
func setupPayload(t *testing.T, payload map[string]any) env {
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
	if _, err := l.Accept(ctx, ledger.Delivery{Source: "stripe", EventID: "evt_1", EventType: "charge.refunded", DeliveryID: "d1", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	c, err := l.Claim(ctx, "stripe", "evt_1", ledger.ClaimOptions{Owner: "proc", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	w := &ledger.ProjectionWrite{Name: "order", Subject: "O-42", Version: 12, Fingerprint: "f", State: map[string]any{"status": "cancelled"}}
	in := ledger.Intent{OperationID: op, Kind: kind, Subject: "O-42", Payload: payload}
	if _, err := l.Commit(ctx, c, w, []ledger.Intent{in}); err != nil {
		t.Fatal(err)
	}

	down := &downstream.Fake{Window: time.Hour, Now: clock.Now, Secret: "s3cret"}
	srv := httptest.NewServer(down)
	t.Cleanup(srv.Close)
	// The intent's projection is unscoped ("order"): only an effect open
	// to every scope performs it.
	eff := &outbox.HTTPEffect{Name: kind, URL: srv.URL, Secret: "s3cret", Client: &http.Client{Timeout: 300 * time.Millisecond},
		Scopes: []string{outbox.AllScopes}}
	disp := &outbox.Dispatcher{
		Ledger: l, Effects: map[string]outbox.Effect{kind: eff}, Clock: clock,
		Rand: func() float64 { return 0.5 }, Owner: "dispatcher-a", Lease: 30 * time.Second,
		MaxAttempts: 5, Base: time.Second, Cap: time.Minute, IdempotencyWindow: time.Hour,
	}
	return env{L: l, Clock: clock, Down: down, Eff: eff, D: disp}
}

func (e env) dispatch(t *testing.T, want ledger.IntentStatus) outbox.Outcome {
	t.Helper()
	o, err := e.D.Dispatch(context.Background(), op)
	if err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	if o.Status != want {
		t.Fatalf("dispatch: status %s, want %s (%+v)", o.Status, want, o)
	}
	got, err := e.L.GetIntentState(context.Background(), op)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != want {
		t.Fatalf("ledger has %s, want %s", got.Status, want)
	}
	return o
}

// assertCalls checks the downstream's own facts: effective calls for the key,
// requests received, and that every request carried the same key.
func (e env) assertCalls(t *testing.T, effective, received int) {
	t.Helper()
	if got := e.Down.Effective(op); got != effective {
		t.Fatalf("effective calls for %s: %d, want %d", op, got, effective)
	}
	calls := e.Down.Calls()
	if len(calls) != received {
		t.Fatalf("requests received: %d, want %d (%+v)", len(calls), received, calls)
	}
	for _, c := range calls {
		if c.Key != op {
			t.Fatalf("a request used key %q, want %q", c.Key, op)
		}
	}
}

func (e env) notClaimable(t *testing.T) {
	t.Helper()
	if _, err := e.D.Dispatch(context.Background(), op); !errors.Is(err, ledger.ErrNotClaimable) {
		t.Fatalf("dispatch should not be possible now: %v", err)
	}
}

func TestSuccessOnce(t *testing.T) {
	e := setup(t)
	o := e.dispatch(t, ledger.IntentStatusSucceeded)
	if !o.Called || o.Attempts != 1 {
		t.Fatalf("outcome %+v", o)
	}
	e.notClaimable(t)
	e.Clock.Advance(48 * time.Hour)
	e.notClaimable(t)
	e.assertCalls(t, 1, 1)
}

func TestTimeoutAfterApplyingIsUncertainThenSameKeyRetryReplays(t *testing.T) {
	e := setup(t)
	e.Down.Then(downstream.Behavior{Mode: downstream.HangAfterApply})
	o := e.dispatch(t, ledger.IntentStatusUncertain)
	if !errors.Is(o.Err, outbox.ErrUncertain) || !o.Next.After(t0) {
		t.Fatalf("outcome %+v", o)
	}
	e.assertCalls(t, 1, 1)
	e.notClaimable(t) // not before its check time
	e.Clock.Advance(o.Next.Sub(t0))
	o = e.dispatch(t, ledger.IntentStatusSucceeded)
	if o.Attempts != 2 {
		t.Fatalf("attempts %d", o.Attempts)
	}
	e.assertCalls(t, 1, 2)
	if calls := e.Down.Calls(); !calls[1].Replayed {
		t.Fatalf("second call was not a replay: %+v", calls[1])
	}
}

func TestTimeoutBeforeApplyingRetryAppliesOnce(t *testing.T) {
	e := setup(t)
	e.Down.Then(downstream.Behavior{Mode: downstream.HangBeforeApply})
	o := e.dispatch(t, ledger.IntentStatusUncertain)
	e.assertCalls(t, 0, 1)
	e.Clock.Advance(o.Next.Sub(t0))
	e.dispatch(t, ledger.IntentStatusSucceeded)
	e.assertCalls(t, 1, 2)
}

func TestThrottledHonoursRetryAfter(t *testing.T) {
	e := setup(t)
	e.Down.Then(downstream.Behavior{Mode: downstream.Throttle429, RetryAfter: 120 * time.Second})
	o := e.dispatch(t, ledger.IntentStatusRetryWait)
	if o.Next.Before(t0.Add(120 * time.Second)) {
		t.Fatalf("next attempt %s is before Retry-After", o.Next)
	}
	e.assertCalls(t, 0, 1)
	e.Clock.Advance(119 * time.Second)
	e.notClaimable(t)
	e.assertCalls(t, 0, 1)
	e.Clock.Advance(time.Second)
	e.dispatch(t, ledger.IntentStatusSucceeded)
	e.assertCalls(t, 1, 2)
}

func TestUnavailableThenSuccess(t *testing.T) {
	e := setup(t)
	e.Down.Then(downstream.Behavior{Mode: downstream.Unavailable503})
	o := e.dispatch(t, ledger.IntentStatusRetryWait)
	// Full jitter with Rand=0.5 and Base=1s on the first attempt.
	if want := t0.Add(500 * time.Millisecond); !o.Next.Equal(want) {
		t.Fatalf("next %s, want %s", o.Next, want)
	}
	e.Clock.Advance(time.Second)
	e.dispatch(t, ledger.IntentStatusSucceeded)
	e.assertCalls(t, 1, 2)
}

func TestPermanentRejectionFails(t *testing.T) {
	e := setup(t)
	e.Down.Then(downstream.Behavior{Mode: downstream.Reject400})
	o := e.dispatch(t, ledger.IntentStatusFailed)
	if !errors.Is(o.Err, outbox.ErrPermanent) {
		t.Fatalf("err %v", o.Err)
	}
	e.Clock.Advance(time.Hour)
	e.notClaimable(t)
	e.assertCalls(t, 0, 1)
	got, _ := e.L.GetIntentState(context.Background(), op)
	if got.ErrorCode != "permanent" || got.Detail == "" {
		t.Fatalf("recorded %q %q", got.ErrorCode, got.Detail)
	}
}

func TestUncertainPastIdempotencyWindowIsQuarantinedWithoutCalling(t *testing.T) {
	e := setup(t)
	e.Down.Then(downstream.Behavior{Mode: downstream.HangAfterApply})
	e.dispatch(t, ledger.IntentStatusUncertain)
	e.assertCalls(t, 1, 1)
	// The downstream forgets the key after an hour: a retry now would apply twice.
	e.Clock.Advance(2 * time.Hour)
	o := e.dispatch(t, ledger.IntentStatusQuarantined)
	if o.Called {
		t.Fatalf("quarantine called the downstream: %+v", o)
	}
	e.assertCalls(t, 1, 1)
	e.notClaimable(t)
	got, _ := e.L.GetIntentState(context.Background(), op)
	if got.ErrorCode != "idempotency_window_passed" {
		t.Fatalf("code %q", got.ErrorCode)
	}
}

func TestRacingDispatchersCallOnce(t *testing.T) {
	e := setup(t)
	b := *e.D
	b.Owner = "dispatcher-b"
	var wg sync.WaitGroup
	errs := make([]error, 2)
	outs := make([]outbox.Outcome, 2)
	for i, d := range []*outbox.Dispatcher{e.D, &b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = d.Dispatch(context.Background(), op)
		}()
	}
	wg.Wait()
	ok := 0
	for i := range errs {
		switch {
		case errs[i] == nil && outs[i].Status == ledger.IntentStatusSucceeded:
			ok++
		case errors.Is(errs[i], ledger.ErrNotClaimable):
		default:
			t.Fatalf("dispatcher %d: %+v %v", i, outs[i], errs[i])
		}
	}
	if ok != 1 {
		t.Fatalf("%d dispatchers succeeded, want 1", ok)
	}
	e.assertCalls(t, 1, 1)
}

// A dispatcher stalls inside the call past its lease; another takes the
// intent over and finishes it with the same key; the stale one cannot record.
func TestExpiredLeaseHolderIsFenced(t *testing.T) {
	e := setup(t)
	e.Down.Then(downstream.Behavior{Mode: downstream.HangAfterApply})
	type res struct {
		o   outbox.Outcome
		err error
	}
	done := make(chan res, 1)
	go func() {
		o, err := e.D.Dispatch(context.Background(), op)
		done <- res{o, err}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(e.Down.Calls()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("first call never arrived")
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.Clock.Advance(31 * time.Second) // dispatcher-a's lease has expired
	b := *e.D
	b.Owner = "dispatcher-b"
	o, err := b.Dispatch(context.Background(), op)
	if err != nil || o.Status != ledger.IntentStatusSucceeded || o.Attempts != 2 {
		t.Fatalf("takeover: %+v %v", o, err)
	}
	a := <-done
	if !errors.Is(a.err, ledger.ErrLeaseLost) {
		t.Fatalf("stale dispatcher recorded: %+v %v", a.o, a.err)
	}
	got, _ := e.L.GetIntentState(context.Background(), op)
	if got.Status != ledger.IntentStatusSucceeded {
		t.Fatalf("status %s", got.Status)
	}
	e.assertCalls(t, 1, 2)
}

type lookupEffect struct {
	*outbox.HTTPEffect
	down *downstream.Fake
}

func (l lookupEffect) Lookup(_ context.Context, key string) (bool, bool, error) {
	applied, known := l.down.Lookup(key)
	return applied, known, nil
}

func TestUncertainResolvedByLookupWithoutCalling(t *testing.T) {
	e := setup(t)
	e.D.Effects[kind] = lookupEffect{e.Eff, e.Down}
	e.Down.Then(downstream.Behavior{Mode: downstream.HangAfterApply})
	o := e.dispatch(t, ledger.IntentStatusUncertain)
	e.Clock.Advance(o.Next.Sub(t0))
	o = e.dispatch(t, ledger.IntentStatusSucceeded)
	if o.Called {
		t.Fatalf("lookup should have settled it: %+v", o)
	}
	e.assertCalls(t, 1, 1)
}

func TestRetryableAttemptsExhaustedFails(t *testing.T) {
	e := setup(t)
	e.D.MaxAttempts = 2
	e.Down.Then(downstream.Behavior{Mode: downstream.Fail500}, downstream.Behavior{Mode: downstream.Fail500})
	e.dispatch(t, ledger.IntentStatusRetryWait)
	e.Clock.Advance(time.Minute)
	e.dispatch(t, ledger.IntentStatusFailed)
	e.assertCalls(t, 0, 2)
}

func TestBackoffFullJitterWithRetryAfterFloor(t *testing.T) {
	d := &outbox.Dispatcher{Base: time.Second, Cap: 10 * time.Second, Rand: func() float64 { return 0.999999 }}
	for _, tc := range []struct {
		attempts   int
		retryAfter time.Duration
		atMost     time.Duration
		atLeast    time.Duration
	}{
		{1, 0, time.Second, 0},
		{3, 0, 4 * time.Second, 3 * time.Second},
		{10, 0, 10 * time.Second, 9 * time.Second},
		{1, 30 * time.Second, 30 * time.Second, 30 * time.Second},
	} {
		got := d.Backoff(tc.attempts, tc.retryAfter)
		if got > tc.atMost || got < tc.atLeast {
			t.Errorf("Backoff(%d, %s) = %s, want in [%s, %s]", tc.attempts, tc.retryAfter, got, tc.atLeast, tc.atMost)
		}
	}
}
