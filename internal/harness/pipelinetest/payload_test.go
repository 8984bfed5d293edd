package pipelinetest_test

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/reconciler"
	"github.com/effectively-once/webhooks/pkg/builtin"
)

// chunkedEvent is a subscription event large enough that its payload is
// stored in chunk items, not inline in the event's row.
func chunkedEvent(id string) []byte {
	b := subEvent(id, "customer.subscription.created", "active", created)
	pad := make([]byte, 16<<10)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range pad {
		pad[i] = "abcdefghijklmnopqrstuvwxyz0123456789"[r.IntN(36)]
	}
	return []byte(strings.Replace(string(b), `"livemode":false`, `"livemode":false,"padding":"`+string(pad)+`"`, 1))
}

// payloadLost delivers body through an intake that dies after the event's
// row and before its payload's first chunk: the provider is answered 5xx
// and its retry is left to the test. The row must be RECEIVED with no
// chunk.
func payloadLost(t *testing.T, h *pt.Harness, id string, body []byte) {
	t.Helper()
	h.IntakeRec.Arm(awstrace.Crash{Op: "DynamoDB.PutItem", Nth: 1, When: awstrace.Before})
	if r := h.Deliver(body, h.Sign(body, pt.SecretPrimary)); r.Status < 500 || !h.IntakeRec.Crashed() {
		t.Fatalf("setup: intake answered %d (crashed %v); want a 5xx after a crash between the row and its chunks", r.Status, h.IntakeRec.Crashed())
	}
	h.IntakeRec.Reset()
	ev := h.Event(id)
	if ev.Status != ledger.StatusReceived || ev.PayloadChunks == 0 {
		t.Fatalf("setup: event %s with %d chunks; want RECEIVED with a chunked payload", ev.Status, ev.PayloadChunks)
	}
	if _, err := h.Ledger.Payload(context.Background(), ev); err == nil {
		t.Fatal("setup: the payload is readable; want its chunks missing")
	}
}

// sweeps runs the reconciler (re-enqueue, DLQ sweep) and the processor
// rounds times, the manual clock moving step before each round.
func sweeps(t *testing.T, h *pt.Harness, rc *reconciler.Reconciler, w *pt.Worker, rounds int, step time.Duration) {
	t.Helper()
	ctx := context.Background()
	for range rounds {
		h.Clock.Advance(step)
		if _, err := rc.Run(ctx); err != nil {
			t.Fatalf("reconciler: %v", err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for h.Depth(h.Queues.Queue) > 0 && time.Now().Before(deadline) {
			if w.PollOnce(ctx) == 0 {
				time.Sleep(50 * time.Millisecond)
				h.Clock.Advance(time.Second)
			}
		}
	}
}

func payloadReconciler(h *pt.Harness) *reconciler.Reconciler {
	return &reconciler.Reconciler{Ledger: h.Ledger, SQS: h.SQS, Sources: h.Sources,
		Queues:   reconciler.Queues{Events: h.Queues.Queue, EventsDLQ: h.Queues.DLQ},
		Registry: builtin.Default(builtin.StripeOptions{}),
		Opts:     reconciler.Options{Now: h.Clock.Now, Log: slog.New(slog.DiscardHandler), MaxItems: 100, DLQWait: -1}}
}

// retried is the provider's retry of body: accepted, then the pipeline
// runs until both queues are empty. The event must end PROCESSED
// (applied), the subscription at the event's version, one intent, and
// the downstream called once with its key.
func retried(t *testing.T, h *pt.Harness, w *pt.Worker, d *pt.Dispatcher, id string, body []byte) {
	t.Helper()
	if r := h.Deliver(body, h.Sign(body, pt.SecretPrimary)); r.Status != 202 {
		t.Fatalf("the provider's retry answered %d: %s", r.Status, r.Body)
	}
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
	ev := h.Event(id)
	if ev.Status != ledger.StatusProcessed || ev.Result == nil || ev.Result.Outcome != ledger.OutcomeApplied || count(pt.Actions(ev), "complete") != 1 {
		t.Fatalf("after the provider's retry: event %s (%s), audit %v; want PROCESSED applied once", ev.Status, ev.ErrorCode, pt.Actions(ev))
	}
	requireSubscription(t, h, "active", true, version(created, 1))
	in := requireIntents(t, h, 1)
	if n := h.Outbox.Down.Effective(in[0].OperationID); n != 1 {
		t.Fatalf("downstream saw %d effective calls for %s, want 1", n, in[0].OperationID)
	}
}

// TestPayloadNeverStored_WaitsForProviderRetry: an intake killed between
// the event's row and its payload's chunks answered 5xx; the row exists
// without its payload. The reconciler re-enqueues it round after round
// and the processor finds the payload missing: the row waits for the
// provider's retry without spending its attempts and never reaches DEAD
// or the DLQ. The retry (same id, same bytes) writes the chunks and the
// event completes: applied once, the projection at its version, the
// effect performed once.
func TestPayloadNeverStored_WaitsForProviderRetry(t *testing.T) {
	h := pt.NewChaos(t, pt.Options{}, pt.OutboxOptions{})
	const id = "evt_pl_wait"
	body := chunkedEvent(id)
	payloadLost(t, h, id, body)

	w, d := h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1")
	sweeps(t, h, payloadReconciler(h), w, 12, 30*time.Minute)
	ev := h.Event(id)
	if ev.Status != ledger.StatusRetryWait || ev.ErrorCode != ledger.CodePayloadMissing || ev.Attempts != 0 || h.Depth(h.Queues.DLQ) != 0 {
		t.Fatalf("after 12 reconciler runs over 6 h: event %s (%s), attempts %d, DLQ depth %d, audit %v; want RETRY_WAIT %s, no attempt spent, nothing in the DLQ",
			ev.Status, ev.ErrorCode, ev.Attempts, h.Depth(h.Queues.DLQ), pt.Actions(ev), ledger.CodePayloadMissing)
	}
	if n := count(pt.Actions(ev), "await_payload"); n < 10 {
		t.Fatalf("the processor looked for the payload %d times, want one per round: audit %v", n, pt.Actions(ev))
	}
	retried(t, h, w, d, id, body)
}

// TestPayloadNeverStored_QuarantinedPastHorizon: a payload still missing
// past the source's retry horizon (Stripe's default, 3 days) becomes an
// attention item, QUARANTINED payload_never_arrived, without having spent
// an attempt. A retry that still comes (a resend from the provider's
// dashboard) completes it.
func TestPayloadNeverStored_QuarantinedPastHorizon(t *testing.T) {
	h := pt.NewChaos(t, pt.Options{}, pt.OutboxOptions{})
	const id = "evt_pl_horizon"
	body := chunkedEvent(id)
	payloadLost(t, h, id, body)

	w, d := h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1")
	rc := payloadReconciler(h)
	sweeps(t, h, rc, w, 11, 6*time.Hour) // 66 h: still within the horizon
	if ev := h.Event(id); ev.Status != ledger.StatusRetryWait || ev.ErrorCode != ledger.CodePayloadMissing || ev.Attempts != 0 {
		t.Fatalf("after 66 h: event %s (%s), attempts %d; want RETRY_WAIT %s", ev.Status, ev.ErrorCode, ev.Attempts, ledger.CodePayloadMissing)
	}
	sweeps(t, h, rc, w, 2, 6*time.Hour) // 78 h
	ev := h.Event(id)
	// One attempt: the look that found the horizon passed.
	if ev.Status != ledger.StatusQuarantined || ev.ErrorCode != ledger.CodePayloadNeverArrived || ev.Attempts != 1 || h.Depth(h.Queues.DLQ) != 0 {
		t.Fatalf("past the horizon: event %s (%s), attempts %d, DLQ depth %d; want QUARANTINED %s after one attempt", ev.Status, ev.ErrorCode, ev.Attempts, h.Depth(h.Queues.DLQ), ledger.CodePayloadNeverArrived)
	}
	open, err := h.Ledger.ListOpen(context.Background(), "event", 10)
	if err != nil || len(open) != 1 || open[0].Status != string(ledger.StatusQuarantined) {
		t.Fatalf("attention items %+v (%v); want the quarantined event", open, err)
	}
	retried(t, h, w, d, id, body)
}

// TestPayloadNeverStored_RetryReopensDead: a row an earlier version left
// DEAD after spending its attempts on the missing payload
// ("payload_unavailable", the incident's end state) is completed by the
// provider's retry: the retry writes the chunks and reopens it.
func TestPayloadNeverStored_RetryReopensDead(t *testing.T) {
	h := pt.NewChaos(t, pt.Options{}, pt.OutboxOptions{})
	const id = "evt_pl_dead"
	body := chunkedEvent(id)
	payloadLost(t, h, id, body)
	ctx := context.Background()
	c, err := h.Ledger.Claim(ctx, "stripe", id, ledger.ClaimOptions{Owner: "processor/old", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Ledger.Dead(ctx, c, "payload_unavailable", "payload chunk 0 of stripe/"+id+" missing: ledger: store unavailable"); err != nil {
		t.Fatal(err)
	}
	retried(t, h, h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1"), id, body)
	if ev := h.Event(id); count(pt.Actions(ev), "payload_arrived") != 1 {
		t.Fatalf("audit %v; want the reopening recorded once", pt.Actions(ev))
	}
}
