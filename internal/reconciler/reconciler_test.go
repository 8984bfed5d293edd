package reconciler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/reconciler"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// The put→send gap: an event accepted whose pointer never reached the
// queue is re-enqueued once it has waited StuckAfter, not before, and is
// then processed once.
func TestStuckReceivedIsReenqueuedAfterGrace(t *testing.T) {
	f := newFixture(t)
	f.accept("orders", "evt_1", "order.created", orderBody("order.created", "O-1", 1, "created"))
	r := f.reconciler(nil)
	f.Clock.Advance(4 * time.Minute)
	if rep := f.run(r); rep.Reenqueued != 0 || rep.EventsByStatus["RECEIVED"] != 1 || rep.OldestUnfinished != 4*time.Minute {
		t.Fatalf("inside the grace period: %+v", rep)
	}
	f.Clock.Advance(time.Minute)
	if rep := f.run(r); rep.Reenqueued != 1 {
		t.Fatalf("after the grace period: %+v", rep)
	}
	if n := f.process(); n != 1 {
		t.Fatalf("processed %d messages, want 1", n)
	}
	ev := f.event("orders", "evt_1")
	if ev.Status != ledger.StatusProcessed || ev.Result.Outcome != ledger.OutcomeApplied {
		t.Fatalf("event %s %+v", ev.Status, ev.Result)
	}
	if rep := f.run(r); rep.Reenqueued != 0 || rep.EventsByStatus["RECEIVED"] != 0 || rep.OldestUnfinished != 0 {
		t.Fatalf("after processing: %+v", rep)
	}
}

// A processed event that keeps receiving duplicates records each of them,
// and the reconciler never takes it for unfinished work: it is not
// re-enqueued, not counted open, and its effects stay as they were.
func TestProcessedEventReceivingDuplicatesIsNeverReenqueued(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	body := orderBody("order.cancelled", "O-1", 2, "cancelled")
	f.accept("orders", "evt_done", "order.cancelled", body)
	r := f.reconciler(nil)
	f.Clock.Advance(6 * time.Minute)
	if rep := f.run(r); rep.Reenqueued != 1 {
		t.Fatalf("setup: %+v", rep)
	}
	if n := f.process(); n != 1 {
		t.Fatalf("processed %d messages", n)
	}
	done := f.event("orders", "evt_done")
	if done.Status != ledger.StatusProcessed || len(done.Result.Operations) == 0 {
		t.Fatalf("setup: %s %+v", done.Status, done.Result)
	}
	for i := range 3 {
		f.Clock.Advance(10 * time.Minute)
		res, err := f.L.Accept(ctx, ledger.Delivery{Source: "orders", EventID: "evt_done", EventType: "order.cancelled", DeliveryID: fmt.Sprintf("d-again-%d", i), Payload: body})
		if err != nil || !res.Duplicate || res.Event.Status != ledger.StatusProcessed {
			t.Fatalf("duplicate %d: %+v %v", i, res, err)
		}
		rep := f.run(r)
		if rep.Reenqueued != 0 || rep.EventsByStatus["RECEIVED"]+rep.EventsByStatus["PROCESSING"]+rep.EventsByStatus["RETRY_WAIT"] != 0 || rep.OldestUnfinished != 0 {
			t.Fatalf("after duplicate %d the reconciler saw work: %+v", i, rep)
		}
	}
	if got := f.receive(f.Q.Events); len(got) != 0 {
		t.Fatalf("re-enqueued: %v", got)
	}
	ev := f.event("orders", "evt_done")
	if ev.DeliveryCount != 4 || ev.LastDeliveryID != "d-again-2" || !ev.LastDeliveryAt.Equal(f.Clock.Now()) ||
		ev.Status != ledger.StatusProcessed || len(ev.Audit) != len(done.Audit) || !ev.ProcessedAt.Equal(done.ProcessedAt) {
		t.Fatalf("evidence: %d deliveries, last %q at %s; %s, %d audit entries", ev.DeliveryCount, ev.LastDeliveryID, ev.LastDeliveryAt, ev.Status, len(ev.Audit))
	}
	if due, err := f.L.ListDue(ctx, f.Clock.Now().Add(time.Hour), 10); err != nil || len(due) != 0 {
		t.Fatalf("listed due: %+v %v", due, err)
	}
}

// A worker that died holding a lease, and a retry that came due, are both
// re-driven; the stuck lease is counted.
func TestExpiredLeaseAndDueRetryAreReenqueued(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.accept("orders", "evt_lease", "order.created", orderBody("order.created", "O-1", 1, "created"))
	f.accept("orders", "evt_retry", "order.created", orderBody("order.created", "O-2", 1, "created"))
	if _, err := f.L.Claim(ctx, "orders", "evt_lease", ledger.ClaimOptions{Owner: "dead-worker", Lease: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	c, err := f.L.Claim(ctx, "orders", "evt_retry", ledger.ClaimOptions{Owner: "worker", Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.L.RetryLater(ctx, c, "commit_failed", "throttled", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	f.Clock.Advance(6 * time.Minute)
	rep := f.run(f.reconciler(nil))
	if rep.Reenqueued != 2 || rep.StuckLeases != 1 {
		t.Fatalf("report %+v", rep)
	}
	f.process()
	for _, id := range []string{"evt_lease", "evt_retry"} {
		ev := f.event("orders", id)
		if ev.Status != ledger.StatusProcessed {
			t.Fatalf("%s: %s", id, ev.Status)
		}
		if id == "evt_lease" && !slices.Contains(actions(ev), "takeover") {
			t.Fatalf("%s audit %v: want a takeover of the expired lease", id, actions(ev))
		}
	}
}

func actions(ev ledger.Event) []string {
	var out []string
	for _, a := range ev.Audit {
		out = append(out, a.Action)
	}
	return out
}

// Intents whose announcement was lost (a crash between the commit and the
// send) are announced by the reconciler; fresh ones are left alone.
func TestPendingIntentsAreReannounced(t *testing.T) {
	f := newFixture(t)
	r := f.reconciler(nil)
	f.accept("orders", "evt_c", "order.cancelled", orderBody("order.cancelled", "O-42", 12, "cancelled"))
	c, err := f.L.Claim(context.Background(), "orders", "evt_c", ledger.ClaimOptions{Owner: "p", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	proj, _ := f.Reg.Lookup("standard-webhooks", "order.cancelled")
	res, err := proj.Project(projection.Event{Source: "orders", Kind: "standard-webhooks", EventID: "evt_c", Type: "order.cancelled", Payload: orderBody("order.cancelled", "O-42", 12, "cancelled")})
	if err != nil {
		t.Fatal(err)
	}
	// Commit without announcing: the processor crashed right after.
	done, err := f.L.Commit(context.Background(), c, res.Write, res.Intents)
	if err != nil || len(done.Intents) != 2 {
		t.Fatalf("commit %+v %v", done, err)
	}
	if rep := f.run(r); rep.IntentsReannounced != 0 || rep.IntentsByStatus["PENDING"] != 2 {
		t.Fatalf("fresh intents must be left to the processor: %+v", rep)
	}
	f.Clock.Advance(5 * time.Minute)
	rep := f.run(r)
	if rep.IntentsReannounced != 2 {
		t.Fatalf("report %+v", rep)
	}
	var got []string
	for _, b := range f.receive(f.Q.Effects) {
		p, err := queue.ParseIntentPointer(b)
		if err != nil {
			t.Fatal(err)
		}
		if p.Reason != "reconcile" {
			t.Fatalf("reason %q", p.Reason)
		}
		got = append(got, p.OperationID)
	}
	slices.Sort(got)
	want := []string{done.Intents[0], done.Intents[1]}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("announced %v, want %v", got, want)
	}
}

// A message SQS moved to the DLQ while the ledger still had attempts left
// becomes a visible DEAD event; the gauges and EMF record show it.
func TestDLQSweepAndGauges(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.accept("stripe", "evt_lost", "customer.subscription.updated", []byte(`{"id":"evt_lost"}`))
	if _, err := f.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(f.Q.EventsDLQ),
		MessageBody: aws.String(queue.Pointer{Source: "stripe", EventID: "evt_lost"}.Encode())}); err != nil {
		t.Fatal(err)
	}
	rep := f.run(f.reconciler(nil))
	// Depth is visible + in flight. goaws counts an in-flight message in
	// both attributes, so one message reads as 1 in AWS and 2 here.
	if rep.DLQ.MarkedDead != 1 || rep.EventsByStatus["DEAD"] != 1 || rep.EventsDLQDepth < 1 || rep.EventsDLQDepth > 2 || rep.Reenqueued != 0 {
		t.Fatalf("report %+v", rep)
	}
	ev := f.event("stripe", "evt_lost")
	if ev.Status != ledger.StatusDead || ev.Audit[len(ev.Audit)-1].Actor != "reconciler" {
		t.Fatalf("event %s, audit %+v", ev.Status, ev.Audit)
	}
	var rec map[string]any
	lines := strings.Split(strings.TrimSpace(f.EMF.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["DeadMarked"] != 1.0 || rec["DeadEvents"] != 1.0 || rec["EventsDLQDepth"] != float64(rep.EventsDLQDepth) || rec["function"] != "reconciler" {
		t.Fatalf("EMF record %v", rec)
	}
}

// fakeOrders is the orders source's truth endpoint.
type fakeOrders struct {
	mu    sync.Mutex
	facts []map[string]any
	calls int
}

func (o *fakeOrders) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	if r.URL.Query().Get("since") == "" || r.URL.Query().Get("limit") == "" || r.Header.Get("Authorization") != "Bearer tok_test_FAKE_orders" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"facts": o.facts})
}

func (o *fakeOrders) truth(url string) *reconciler.HTTPTruth {
	return &reconciler.HTTPTruth{URL: url, Token: func(context.Context) (string, error) { return "tok_test_FAKE_orders", nil }}
}

// The source says O-42 is CANCELLED at revision 12; we only ever received
// revision 11 CONFIRMED. The reconciler feeds a reconciliation event
// through the pipeline (never writing the projection itself); the version
// guard applies it and the cancellation's two intents exist once. A second
// run finds no drift; two reconcilers at once feed one event.
func TestDriftIsRepairedThroughThePipeline(t *testing.T) {
	f := newFixture(t)
	f.accept("orders", "evt_r11", "order.confirmed", orderBody("order.confirmed", "O-42", 11, "confirmed"))
	f.Clock.Advance(6 * time.Minute)
	src := &fakeOrders{facts: []map[string]any{
		{"type": "order.updated", "body": json.RawMessage(orderBody("order.updated", "O-42", 12, "cancelled"))},
		{"type": "order.updated", "body": json.RawMessage(orderBody("order.updated", "O-7", 3, "confirmed"))},
	}}
	srv := httptest.NewServer(src)
	defer srv.Close()
	truths := map[string]reconciler.SourceOfTruth{"orders": src.truth(srv.URL)}

	// Two reconcilers at once: both see the drift, one event is fed.
	var wg sync.WaitGroup
	reps := make([]reconciler.Report, 2)
	for i := range reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i] = f.run(f.reconciler(truths))
		}()
	}
	wg.Wait()
	if found := reps[0].DriftFound + reps[1].DriftFound; found < 2 {
		t.Fatalf("drift found %d, want both facts seen: %+v", found, reps)
	}
	if fed := reps[0].DriftRepaired + reps[1].DriftRepaired; fed != 2 {
		t.Fatalf("fed %d reconciliation events, want 2 (one per subject): %+v", fed, reps)
	}
	f.process() // evt_r11 (re-enqueued) and the two reconciliation events, in any order
	f.process()
	p, err := f.L.GetProjection(context.Background(), projection.ScopedName("orders", builtin.OrderProjection), "O-42")
	if err != nil || p.Version != 12 || p.State["status"] != "cancelled" {
		t.Fatalf("O-42 projection %+v %v", p, err)
	}
	if p7, err := f.L.GetProjection(context.Background(), projection.ScopedName("orders", builtin.OrderProjection), "O-7"); err != nil || p7.Version != 3 {
		t.Fatalf("O-7 projection %+v %v", p7, err)
	}
	snap, err := ledger.TakeSnapshot(context.Background(), f.DB, "ledger")
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string]int{}
	for _, in := range snap.Intents {
		byKind[in.Kind]++
	}
	if byKind["refund"] != 1 || byKind["notify_cancellation"] != 1 || len(snap.Intents) != 2 {
		t.Fatalf("intents %+v", snap.Intents)
	}
	id := reconciler.ReconcileEventID("orders", reconciler.Fact{EventType: "order.updated", Payload: orderBody("order.updated", "O-42", 12, "cancelled")})
	ev := f.event("orders", id)
	if ev.Status != ledger.StatusProcessed || ev.Attributes["origin"] != "reconciler" {
		t.Fatalf("reconciliation event %+v", ev)
	}
	if r11 := f.event("orders", "evt_r11"); r11.Status != ledger.StatusProcessed || r11.Result.Outcome != ledger.OutcomeStale && r11.Result.Outcome != ledger.OutcomeApplied {
		t.Fatalf("r11: %s %+v", r11.Status, r11.Result)
	}
	again := f.run(f.reconciler(truths))
	if again.DriftFound != 0 || again.FactsChecked != 2 {
		t.Fatalf("second run: %+v", again)
	}
}

// A source of truth that fails is reported; the other steps still run.
func TestTruthFailureIsReportedNotFatal(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	f.accept("orders", "evt_1", "order.created", orderBody("order.created", "O-1", 1, "created"))
	f.Clock.Advance(10 * time.Minute)
	r := f.reconciler(map[string]reconciler.SourceOfTruth{"orders": &reconciler.HTTPTruth{URL: srv.URL}})
	rep, err := r.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "HTTP 503") || rep.Reenqueued != 1 || len(rep.Errors) != 1 {
		t.Fatalf("err %v, report %+v", err, rep)
	}
}

// The effects DLQ keeps only what still needs work: the message of a
// finished intent is deleted, that of an unfinished one kept for a console
// redrive (and the intent re-announced from the ledger), junk kept for an
// operator.
func TestEffectsDLQSweep(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.accept("orders", "evt_c", "order.cancelled", orderBody("order.cancelled", "O-9", 4, "cancelled"))
	if err := (queue.Sender{Client: f.SQS, URL: f.Q.Events}).Send(ctx, queue.Pointer{Source: "orders", EventID: "evt_c"}); err != nil {
		t.Fatal(err)
	}
	f.process()
	var ops []string
	for _, b := range f.receive(f.Q.Effects) {
		p, err := queue.ParseIntentPointer(b)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, p.OperationID)
	}
	if len(ops) != 2 {
		t.Fatalf("intents %v", ops)
	}
	c, err := f.L.ClaimIntent(ctx, ops[0], ledger.ClaimOptions{Owner: "d", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.L.RecordIntent(ctx, c, ledger.IntentOutcome{Status: ledger.IntentStatusSucceeded, Code: "ok_200"}); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{queue.IntentPointer{OperationID: ops[0]}.Encode(), queue.IntentPointer{OperationID: ops[1]}.Encode(), `{"junk":true}`} {
		if _, err := f.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(f.Q.EffectsDLQ), MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	rep := f.run(f.reconciler(nil))
	if rep.EffectsDLQ.Seen != 3 || rep.EffectsDLQ.Deleted != 1 || rep.EffectsDLQ.Kept != 1 || rep.EffectsDLQ.Unreadable != 1 {
		t.Fatalf("effects DLQ sweep %+v", rep.EffectsDLQ)
	}
	f.Clock.Advance(time.Hour) // past the grace: the unfinished intent is announced again
	if rep := f.run(f.reconciler(nil)); rep.IntentsReannounced != 1 {
		t.Fatalf("unfinished intent not re-announced: %+v", rep)
	}
}

// A source of truth answering a redirect. The token is never
// sent to the redirect target and the target's answer (facts that would
// be fed into the ledger) is never read: the truth step fails, naming the
// Location, and nothing is accepted from it.
func TestTruthNeverFollowsRedirects(t *testing.T) {
	f := newFixture(t)
	var leaked []string
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked = append(leaked, r.Header.Get("Authorization"))
		_, _ = w.Write([]byte(`{"facts":[{"id":"evt_forged","type":"order.cancelled","body":` + string(orderBody("order.cancelled", "O-1", 99, "cancelled")) + `}]}`))
	}))
	defer target.Close()
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/facts", http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	r := f.reconciler(map[string]reconciler.SourceOfTruth{"orders": (&fakeOrders{}).truth(redirector.URL)})
	rep, err := r.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "redirect") || !strings.Contains(err.Error(), target.URL+"/facts") || rep.DriftFound != 0 {
		t.Fatalf("err %v, report %+v", err, rep)
	}
	if len(leaked) != 0 {
		t.Fatalf("the redirect target was asked, with token %q", leaked)
	}
	if _, err := f.L.Get(context.Background(), "orders", "evt_forged"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the target's fact reached the ledger: %v", err)
	}
}
