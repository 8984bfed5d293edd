package pipelinetest_test

// The order workflow's processing cases, end to end: the order O-42
// signed with Standard Webhooks, through the intake, the processor
// (announcing on the effects queue), the dispatcher and an HTTP
// downstream that deduplicates by Idempotency-Key. Every test asserts
// business facts: the order's state and revision, one intent per
// operation_id, the downstream's effective calls per key, the ledger status
// and audit of events and intents.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	"github.com/effectively-once/webhooks/internal/harness/downstream"
	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

const o42 = "O-42"

// The operation ids of the O-42 cancellation at revision 12.
var refund12, notify12 = pt.OrderOps(o42, 12)

// drainTimeout bounds one DrainAll in real time; the manual clock advances
// 2 s per idle round, so leases (30 s) expire after about 15 idle rounds.
const drainTimeout, idle = 20 * time.Second, 2 * time.Second

// deliver posts an order event and checks the intake's status.
func deliver(t *testing.T, h *pt.Harness, msgID string, body []byte, want int) {
	t.Helper()
	if r := h.DeliverOrder(msgID, body); r.Status != want {
		t.Fatalf("delivery %s answered %d (%s), want %d", msgID, r.Status, r.Body, want)
	}
}

// settle delivers one order event (202) and runs both stages until the
// queues are empty.
func settle(t *testing.T, h *pt.Harness, w *pt.Worker, d *pt.Dispatcher, msgID string, body []byte) {
	t.Helper()
	deliver(t, h, msgID, body, 202)
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
}

// requireOrder asserts the order's projected status and revision.
func requireOrder(t *testing.T, h *pt.Harness, status string, revision int64) ledger.Projection {
	t.Helper()
	p, err := h.Ledger.GetProjection(context.Background(), projection.ScopedName("orders", builtin.OrderProjection), o42)
	if err != nil {
		t.Fatalf("order projection: %v", err)
	}
	if p.State["status"] != status || p.Version != revision {
		t.Fatalf("order %s = %v at revision %d; want %s at %d", o42, p.State["status"], p.Version, status, revision)
	}
	return p
}

// requireEvent asserts an event's ledger status and, when processed, its outcome.
func requireEvent(t *testing.T, h *pt.Harness, msgID string, status ledger.Status, outcome ledger.Outcome) ledger.Event {
	t.Helper()
	ev := h.EventOf("orders", msgID)
	if ev.Status != status {
		t.Fatalf("event %s is %s (%s), want %s; audit %v", msgID, ev.Status, ev.ErrorCode, status, pt.Actions(ev))
	}
	if outcome != "" && (ev.Result == nil || ev.Result.Outcome != outcome) {
		t.Fatalf("event %s outcome %+v, want %s", msgID, ev.Result, outcome)
	}
	return ev
}

// requireNoIntentFrom asserts an event was processed with outcome and
// created no intent.
func requireNoIntentFrom(t *testing.T, h *pt.Harness, msgID string, outcome ledger.Outcome) ledger.Event {
	t.Helper()
	ev := requireEvent(t, h, msgID, ledger.StatusProcessed, outcome)
	if ev.Result.Intents != 0 {
		t.Fatalf("event %s (%s) created %d intents", msgID, outcome, ev.Result.Intents)
	}
	return ev
}

// requireCancellationIntents asserts the outbox holds exactly the refund and
// the notification of one cancellation, caused by causation.
func requireCancellationIntents(t *testing.T, h *pt.Harness, revision int, causation string) {
	t.Helper()
	refund, notify := pt.OrderOps(o42, revision)
	got := map[string]string{}
	for _, in := range requireIntents(t, h, 2) {
		got[in.OperationID] = in.Kind
		if in.Causation != "orders/"+causation || in.Subject != o42 {
			t.Fatalf("intent %s caused by %s for %s, want orders/%s for %s", in.OperationID, in.Causation, in.Subject, causation, o42)
		}
	}
	if !maps.Equal(got, map[string]string{refund: "refund", notify: "notify_cancellation"}) {
		t.Fatalf("intents %v, want refund %s and notify_cancellation %s", got, refund, notify)
	}
}

// requireEffective asserts the downstream's effective calls per key: want
// lists every key that must have been applied and how often; any other
// key must never have been applied.
func requireEffective(t *testing.T, o *pt.Outbox, want map[string]int) {
	t.Helper()
	if got := o.Down.EffectiveByKey(); !maps.Equal(got, want) {
		t.Fatalf("effective calls per key %v, want %v", got, want)
	}
}

// requireIntentStatus asserts an intent's dispatch status and code.
func requireIntentStatus(t *testing.T, o *pt.Outbox, op string, status ledger.IntentStatus, code string) ledger.IntentState {
	t.Helper()
	in := o.Intent(op)
	if in.Status != status || (code != "" && in.ErrorCode != code) {
		t.Fatalf("intent %s (%s) is %s %q, want %s %q; audit %v", op, in.Kind, in.Status, in.ErrorCode, status, code, pt.IntentActions(in))
	}
	return in
}

// requireDoneOnce is the happy ending of a cancellation at revision 12:
// both intents SUCCEEDED, each applied once downstream.
func requireDoneOnce(t *testing.T, o *pt.Outbox) {
	t.Helper()
	requireIntentStatus(t, o, refund12, ledger.IntentStatusSucceeded, "")
	requireIntentStatus(t, o, notify12, ledger.IntentStatusSucceeded, "")
	requireEffective(t, o, map[string]int{refund12: 1, notify12: 1})
}

// requireCancelledOnce is the business outcome of the O-42 cancellation
// at revision 12 caused by the event causation: the order cancelled at 12,
// one refund and one notification, each SUCCEEDED and applied once.
func requireCancelledOnce(t *testing.T, h *pt.Harness, causation string) {
	t.Helper()
	requireOrder(t, h, "cancelled", 12)
	requireCancellationIntents(t, h, 12, causation)
	requireDoneOnce(t, h.Outbox)
}

// requireSameKeys asserts every effect call carried one of the intents'
// own operation ids: a retry never minted a new key.
func requireSameKeys(t *testing.T, o *pt.Outbox, ops ...string) {
	t.Helper()
	for _, a := range o.Arrivals("") {
		if !slices.Contains(ops, a.Key) {
			t.Fatalf("an effect call used key %q, not one of the intents' %v", a.Key, ops)
		}
	}
}

func orderPipeline(t *testing.T, oo pt.OutboxOptions) (*pt.Harness, *pt.Outbox, *pt.Worker, *pt.Dispatcher) {
	h := pt.NewOrders(t, pt.Options{}, oo)
	return h, h.Outbox, h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1")
}

// Same delivery twice: one ledger row, one claim, one state change, one
// refund and one notification, each applied once; the duplicate after
// processing gets 200 with its outcome (not the operation ids: the stored
// result keeps both for operators), and is counted on the row with the
// others.
func TestSeed003_SameDeliveryTwice(t *testing.T) {
	h, o, w, d := orderPipeline(t, pt.OutboxOptions{})
	body := pt.OrderEvent("order.updated", o42, 12, "cancelled", "")
	deliver(t, h, "msg_o42_12", body, 202)
	deliver(t, h, "msg_o42_12", body, 202) // before processing: same row, re-enqueued
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
	r := h.DeliverOrder("msg_o42_12", body) // after processing: its outcome
	var answer struct {
		Status  string         `json:"status"`
		Outcome ledger.Outcome `json:"outcome"`
	}
	if err := json.Unmarshal(r.Body, &answer); err != nil || r.Status != 200 || answer.Status != "duplicate" || answer.Outcome != ledger.OutcomeApplied ||
		strings.Contains(string(r.Body), refund12) || strings.Contains(string(r.Body), notify12) {
		t.Fatalf("duplicate after processing: %d %s (%v)", r.Status, r.Body, err)
	}

	ev := requireEvent(t, h, "msg_o42_12", ledger.StatusProcessed, ledger.OutcomeApplied)
	want := ledger.Operations{{ID: refund12, Kind: "refund"}, {ID: notify12, Kind: "notify_cancellation"}}
	if got := ev.Result.Operations; ev.Result.Version != 12 || ev.Result.Intents != 2 || len(got) != 2 || !slices.Contains(got, want[0]) || !slices.Contains(got, want[1]) {
		t.Fatalf("the stored result %+v names the operations %+v, want %+v", ev.Result, got, want)
	}
	acts := pt.Actions(ev)
	if ev.DeliveryCount != 3 || count(acts, "accept") != 1 || count(acts, "claim") != 1 || count(acts, "complete") != 1 {
		t.Fatalf("deliveries %d, audit %v: want 3 deliveries, one accept, claim and complete", ev.DeliveryCount, acts)
	}
	requireCancelledOnce(t, h, "msg_o42_12")
	for _, op := range []string{refund12, notify12} {
		if n := len(o.Arrivals(op)); n != 1 {
			t.Fatalf("%d effect calls for %s, want 1", n, op)
		}
	}
}

// Same event under a new delivery id. Standard Webhooks uses webhook-id as
// both the delivery and the event id, so a re-send under a new id is a new
// ledger row; the business identity (order, revision, state) makes it a
// noop that creates no intent (same revision, same state).
func TestSeed003_SameEventNewDeliveryID(t *testing.T) {
	h, _, w, d := orderPipeline(t, pt.OutboxOptions{})
	body := pt.OrderEvent("order.updated", o42, 12, "cancelled", "")
	settle(t, h, w, d, "msg_o42_12_d2", body)
	settle(t, h, w, d, "msg_o42_12_d4", body)

	requireEvent(t, h, "msg_o42_12_d2", ledger.StatusProcessed, ledger.OutcomeApplied)
	requireNoIntentFrom(t, h, "msg_o42_12_d4", ledger.OutcomeNoop)
	requireCancelledOnce(t, h, "msg_o42_12_d2")
}

// Two different events carrying one business intent: order.cancelled
// (status implied by the type) and order.updated saying "canceled", same
// revision, queued together. One applies, the other is a noop; one refund
// and one notification, each applied once.
func TestSeed003_TwoEventsOneBusinessIntent(t *testing.T) {
	h, _, w, d := orderPipeline(t, pt.OutboxOptions{})
	deliver(t, h, "msg_cancelled", pt.OrderEvent("order.cancelled", o42, 12, "", ""), 202)
	deliver(t, h, "msg_updated", pt.OrderEvent("order.updated", o42, 12, "canceled", ""), 202)
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w, h.NewWorker("proc-2")}, d)

	a, b := h.EventOf("orders", "msg_cancelled"), h.EventOf("orders", "msg_updated")
	outcomes := []ledger.Outcome{a.Result.Outcome, b.Result.Outcome}
	slices.Sort(outcomes)
	if a.Status != ledger.StatusProcessed || b.Status != ledger.StatusProcessed || !slices.Equal(outcomes, []ledger.Outcome{ledger.OutcomeApplied, ledger.OutcomeNoop}) {
		t.Fatalf("events %s %v / %s %v: want one applied and one noop", a.Status, a.Result, b.Status, b.Result)
	}
	winner := "msg_cancelled"
	if b.Result.Outcome == ledger.OutcomeApplied {
		winner = "msg_updated"
	}
	requireCancelledOnce(t, h, winner)
}

// Newer cancellation, then an older confirmation: the late r11 is stored
// stale and never resurrects the r12 cancellation: r10 applied, r12
// applied with its intents, r11 stale.
func TestSeed003_NewerCancellationThenOlderConfirmation(t *testing.T) {
	h, _, w, d := orderPipeline(t, pt.OutboxOptions{})
	for _, e := range []struct {
		id, typ string
		rev     int
	}{{"d1_evt10", "order.confirmed", 10}, {"d2_evt12", "order.cancelled", 12}, {"d3_evt11", "order.confirmed", 11}} {
		settle(t, h, w, d, e.id, pt.OrderEvent(e.typ, o42, e.rev, "", ""))
	}
	requireEvent(t, h, "d1_evt10", ledger.StatusProcessed, ledger.OutcomeApplied)
	requireEvent(t, h, "d2_evt12", ledger.StatusProcessed, ledger.OutcomeApplied)
	requireNoIntentFrom(t, h, "d3_evt11", ledger.OutcomeStale)
	requireCancelledOnce(t, h, "d2_evt12")
}

// Same revision with a contradictory payload: r12 confirmed is applied, a
// second r12 saying cancelled is QUARANTINED (version_conflict) for an
// operator, the order stays confirmed, and the quarantined cancellation
// creates no refund and no notification.
func TestSeed003_SameRevisionContradictoryPayload(t *testing.T) {
	h, o, w, d := orderPipeline(t, pt.OutboxOptions{})
	settle(t, h, w, d, "msg_r12_confirmed", pt.OrderEvent("order.confirmed", o42, 12, "", ""))
	settle(t, h, w, d, "msg_r12_cancelled", pt.OrderEvent("order.cancelled", o42, 12, "", ""))

	requireEvent(t, h, "msg_r12_confirmed", ledger.StatusProcessed, ledger.OutcomeApplied)
	ev := requireEvent(t, h, "msg_r12_cancelled", ledger.StatusQuarantined, "")
	if ev.ErrorCode != "version_conflict" || ev.TotalAttempts != 1 || pt.Actions(ev)[len(ev.Audit)-1] != "quarantine" {
		t.Fatalf("contradiction: code %q attempts %d audit %v", ev.ErrorCode, ev.TotalAttempts, pt.Actions(ev))
	}
	requireOrder(t, h, "confirmed", 12)
	requireIntents(t, h, 0)
	requireEffective(t, o, map[string]int{})
	if n := len(o.Arrivals("")); n != 0 {
		t.Fatalf("%d effect calls from a quarantined event", n)
	}
	if h.Depth(h.Queues.DLQ) != 0 {
		t.Fatal("the conflict went to the DLQ instead of quarantine")
	}
}

// processEvents runs the events stage only, so a test can drive the
// dispatchers step by step.
func processEvents(t *testing.T, h *pt.Harness, w *pt.Worker) {
	t.Helper()
	h.Drain(drainTimeout, idle, w)
}

// pollUntil polls d until cond holds (bounded in real time).
func pollUntil(t *testing.T, d *pt.Dispatcher, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("dispatcher %s: %s did not happen", d.Name, what)
		}
		if d.PollOnce(context.Background()) == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// Crash after the side effect but before recording its response. The
// downstream applied the refund (or the notification); the dispatcher dies
// before its RecordIntent (or the record is written and its answer lost,
// or the call times out after the downstream applied). A second dispatcher
// takes over once the lease expires and resolves the outcome by a status
// lookup or a retry with the same key; the downstream applies each key
// exactly once.
func TestSeed003_CrashAfterSideEffectBeforeRecording(t *testing.T) {
	cases := []struct {
		name   string
		lookup bool
		crash  *awstrace.Crash // the first dispatcher's crash; its claim is UpdateItem #1, its record #2
		script []downstream.Behavior
		// the first-called intent's ending: status code, audit, and POSTs for its key
		code    string
		actions []string
		posts   int
	}{
		{name: "dies before recording, lookup", lookup: true, crash: &awstrace.Crash{Op: "DynamoDB.UpdateItem", Nth: 2, When: awstrace.Before},
			code: "lookup_applied", actions: []string{"claim", "takeover", "record"}, posts: 1},
		{name: "dies before recording, same-key retry in the window", crash: &awstrace.Crash{Op: "DynamoDB.UpdateItem", Nth: 2, When: awstrace.Before},
			code: "ok_200", actions: []string{"claim", "takeover", "record"}, posts: 2},
		{name: "record written, its answer lost", crash: &awstrace.Crash{Op: "DynamoDB.UpdateItem", Nth: 2, When: awstrace.After},
			code: "ok_200", actions: []string{"claim", "record"}, posts: 1},
		{name: "timeout after the downstream applied, lookup", lookup: true, script: []downstream.Behavior{{Mode: downstream.HangAfterApply}},
			code: "lookup_applied", actions: []string{"claim", "record", "recheck", "record"}, posts: 1},
		{name: "timeout after the downstream applied, same-key retry", script: []downstream.Behavior{{Mode: downstream.HangAfterApply}},
			code: "ok_200", actions: []string{"claim", "record", "recheck", "record"}, posts: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, o, w, d1 := orderPipeline(t, pt.OutboxOptions{Lookup: tc.lookup, Window: time.Hour})
			deliver(t, h, "msg_o42_12", pt.OrderEvent("order.cancelled", o42, 12, "", ""), 202)
			processEvents(t, h, w)
			o.Down.Then(tc.script...)
			d1.Batch = 1 // one intent per invocation, so the crash point names one intent's calls
			if tc.crash != nil {
				d1.Rec.Arm(*tc.crash)
				pollUntil(t, d1, "crash", d1.Rec.Crashed)
			} else {
				pollUntil(t, d1, "first call", func() bool { return len(o.Arrivals("")) > 0 })
			}
			first := o.Arrivals("")[0].Key
			if o.Down.Effective(first) != 1 {
				t.Fatalf("setup: the first call was not applied downstream: %v", o.Down.EffectiveByKey())
			}
			if tc.crash != nil && tc.crash.When == awstrace.Before {
				// The business fact in between: applied downstream, not known to the ledger.
				requireIntentStatus(t, o, first, ledger.IntentStatusDispatching, "")
			}
			d2 := o.NewDispatcher("disp-2")
			h.DrainAll(drainTimeout, idle, nil, d2)

			requireDoneOnce(t, o)
			in := requireIntentStatus(t, o, first, ledger.IntentStatusSucceeded, tc.code)
			if got := pt.IntentActions(in); !slices.Equal(got, tc.actions) {
				t.Fatalf("intent %s audit %v, want %v", first, got, tc.actions)
			}
			if n := len(o.Arrivals(first)); n != tc.posts {
				t.Fatalf("%d effect calls for %s, want %d", n, first, tc.posts)
			}
			if tc.lookup && o.Lookups(first) == 0 {
				t.Fatalf("the uncertain outcome of %s was not looked up", first)
			}
			requireSameKeys(t, o, refund12, notify12)
			requireOrder(t, h, "cancelled", 12)
		})
	}
}

// Processor crash right after the commit and before announcing: the event
// is complete, its intents stay PENDING with nothing on the effects queue.
// The pointer comes back after the events queue's visibility timeout, finds
// the event PROCESSED and announces its PENDING intents (reason "recover"),
// so each is applied once with no reconciler run; the reconciler then finds
// nothing to do. (Its sweep, AnnounceDue, stays the backstop when the
// announcement itself fails: internal/outbox's visibility tests.)
func TestSeed003_CrashAfterCommitBeforeAnnounce(t *testing.T) {
	h, o, w1, d := orderPipeline(t, pt.OutboxOptions{})
	deliver(t, h, "msg_o42_12", pt.OrderEvent("order.cancelled", o42, 12, "", ""), 202)
	w1.Rec.Arm(awstrace.Crash{Op: "SQS.SendMessageBatch", Nth: 1, When: awstrace.Before})
	w1.PollOnce(context.Background())
	if !w1.Rec.Crashed() || w1.Rec.Count("DynamoDB.TransactWriteItems") != 1 {
		t.Fatalf("crash did not fire after the commit: %s", w1.Rec)
	}
	requireIntentStatus(t, o, refund12, ledger.IntentStatusPending, "")
	requireIntentStatus(t, o, notify12, ledger.IntentStatusPending, "")
	if h.Depth(o.Queues.Queue) != 0 {
		t.Fatal("an announcement was sent before the crash")
	}
	w2 := h.NewWorker("proc-2")
	processEvents(t, h, w2)
	ev := requireEvent(t, h, "msg_o42_12", ledger.StatusProcessed, ledger.OutcomeApplied)
	if count(pt.Actions(ev), "complete") != 1 {
		t.Fatalf("audit %v", pt.Actions(ev))
	}
	if n := w2.Rec.Count("DynamoDB.GetItem"); n != 2 {
		t.Fatalf("the redelivery read %d intents, want 2 (one per operation): %s", n, w2.Rec)
	}
	if n := h.Depth(o.Queues.Queue); n != 2 {
		t.Fatalf("the redelivery announced %d intents, want 2", n)
	}
	requireEffective(t, o, map[string]int{})

	// The reconciler looks a few minutes back, leaving fresh intents to
	// the processor's own announcement.
	if n := o.Reconcile(h.Clock.Now().Add(-2 * time.Minute)); n != 0 {
		t.Fatalf("fresh intents re-announced: %d", n)
	}
	h.DrainAll(drainTimeout, idle, nil, d)
	requireDoneOnce(t, o)
	if n := o.Reconcile(h.Clock.Now().Add(time.Hour)); n != 0 {
		t.Fatalf("finished intents still due: %d", n)
	}
}

// 429 and 503 from the downstream, each with Retry-After: the intent waits
// (RETRY_WAIT, its message held by the queue for the Retry-After), is not
// called again before it, then succeeds; one effective call per key.
func TestSeed003_ThrottledAndUnavailableDownstream(t *testing.T) {
	h, o, w, d := orderPipeline(t, pt.OutboxOptions{})
	retryAfter := map[int]time.Duration{http.StatusTooManyRequests: 40 * time.Second, http.StatusServiceUnavailable: 20 * time.Second}
	o.Down.Then(downstream.Behavior{Mode: downstream.Throttle429, RetryAfter: retryAfter[429]},
		downstream.Behavior{Mode: downstream.Unavailable503, RetryAfter: retryAfter[503]})
	settle(t, h, w, d, "msg_o42_12", pt.OrderEvent("order.cancelled", o42, 12, "", ""))

	requireDoneOnce(t, o)
	seen := map[int]bool{}
	for _, op := range []string{refund12, notify12} {
		calls := o.Arrivals(op)
		if len(calls) != 2 || calls[1].Status != http.StatusOK {
			t.Fatalf("calls for %s: %+v; want a refusal, then one success", op, calls)
		}
		wait, ok := retryAfter[calls[0].Status]
		if !ok {
			t.Fatalf("first call for %s answered %d", op, calls[0].Status)
		}
		seen[calls[0].Status] = true
		if gap := calls[1].At.Sub(calls[0].At); gap < wait {
			t.Fatalf("%s called again %s after a %d with Retry-After %s", op, gap, calls[0].Status, wait)
		}
		in := o.Intent(op)
		if got := pt.IntentActions(in); !slices.Equal(got, []string{"claim", "record", "retry", "record"}) || in.Audit[1].To != ledger.Status(ledger.IntentStatusRetryWait) {
			t.Fatalf("intent %s audit %v", op, got)
		}
		if holds := o.Holds(op); len(holds) == 0 || holds[0].For != wait {
			t.Fatalf("holds of %s: %+v; want the first to be the Retry-After %s", op, holds, wait)
		}
	}
	if len(seen) != 2 {
		t.Fatalf("refusals %v: want one 429 and one 503", seen)
	}
	requireSameKeys(t, o, refund12, notify12)
}

// Retry after the downstream's idempotency window. The first call's
// outcome is lost (a timeout); the dispatcher cannot look it up (no status
// endpoint) and comes back only after the downstream forgot the key. It
// must not send again, neither with the old key (it could apply twice) nor
// a new one: the intent is QUARANTINED for an operator. Effective calls are
// exactly what the downstream really applied.
func TestSeed003_RetryAfterIdempotencyWindow(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mode    downstream.Mode
		applied int
	}{
		{"applied, answer lost", downstream.HangAfterApply, 1},
		{"not applied, answer lost", downstream.HangBeforeApply, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, o, w, d := orderPipeline(t, pt.OutboxOptions{Window: time.Hour})
			o.Down.Then(downstream.Behavior{Mode: tc.mode})
			deliver(t, h, "msg_o42_12", pt.OrderEvent("order.cancelled", o42, 12, "", ""), 202)
			processEvents(t, h, w)
			pollUntil(t, d, "both calls", func() bool { return len(o.Arrivals("")) == 2 })
			lost := o.Arrivals("")[0].Key
			for _, c := range o.Down.Calls() {
				if c.Mode == tc.mode {
					lost = c.Key
				}
			}
			other := refund12
			if lost == refund12 {
				other = notify12
			}
			requireIntentStatus(t, o, lost, ledger.IntentStatusUncertain, "uncertain")

			h.Clock.Advance(2 * time.Hour) // the dispatchers were down longer than the window
			h.DrainAll(drainTimeout, idle, nil, d)

			in := requireIntentStatus(t, o, lost, ledger.IntentStatusQuarantined, "idempotency_window_passed")
			if got := pt.IntentActions(in); !slices.Equal(got, []string{"claim", "record", "recheck", "record"}) {
				t.Fatalf("intent audit %v", got)
			}
			requireIntentStatus(t, o, other, ledger.IntentStatusSucceeded, "")
			if n := len(o.Arrivals(lost)); n != 1 {
				t.Fatalf("%d calls for %s after its window, want the 1 before it", n, lost)
			}
			want := map[string]int{other: 1}
			if tc.applied > 0 {
				want[lost] = tc.applied
			}
			requireEffective(t, o, want)
			requireSameKeys(t, o, refund12, notify12)
			if due, err := h.Ledger.ListDueIntents(context.Background(), h.Clock.Now().Add(time.Hour), 10); err != nil || len(due) != 0 {
				t.Fatalf("quarantined intent still in the work index: %+v %v", due, err)
			}
		})
	}
}

// Two concurrent workers on one order: two processors drain every
// revision of O-42 at once (with duplicate deliveries), then two
// dispatchers race on each intent (the processors' announcements plus a
// duplicate of each, every effect call taking 200 ms, so a claim meets a
// live lease). The newest revision wins, each event completes once, each
// intent is claimed once and applied once.
func TestSeed003_TwoConcurrentWorkersOnOneOrder(t *testing.T) {
	h, o, w1, d1 := orderPipeline(t, pt.OutboxOptions{Latency: 200 * time.Millisecond})
	w2, d2 := h.NewWorker("proc-2"), o.NewDispatcher("disp-2")
	type del struct {
		id, typ string
		rev     int
	}
	dels := []del{{"r12", "order.cancelled", 12}, {"r10", "order.created", 10}, {"r11", "order.confirmed", 11}, {"r12", "order.cancelled", 12}, {"r11", "order.confirmed", 11}}
	for _, e := range dels {
		deliver(t, h, e.id, pt.OrderEvent(e.typ, o42, e.rev, "", ""), 202)
	}
	var wg sync.WaitGroup
	for _, w := range []*pt.Worker{w1, w2} {
		wg.Add(1)
		go func() { defer wg.Done(); h.Drain(drainTimeout, idle, w) }()
	}
	wg.Wait()
	o.Announce("duplicate", refund12, notify12)
	for _, d := range []*pt.Dispatcher{d1, d2} {
		d.Batch = 2
		wg.Add(1)
		go func() { defer wg.Done(); h.DrainAll(drainTimeout, idle, nil, d) }()
	}
	wg.Wait()

	for _, id := range []string{"r10", "r11", "r12"} {
		ev := h.EventOf("orders", id)
		if acts := pt.Actions(ev); ev.Status != ledger.StatusProcessed || count(acts, "complete") != 1 || count(acts, "claim") != 1 {
			t.Fatalf("event %s: %s, audit %v", id, ev.Status, acts)
		}
	}
	requireCancelledOnce(t, h, "r12")
	refused := 0
	for _, op := range []string{refund12, notify12} {
		in := o.Intent(op)
		if acts := pt.IntentActions(in); !slices.Equal(acts, []string{"claim", "record"}) {
			t.Fatalf("intent %s audit %v: want one claim, one record", op, acts)
		}
		if n := len(o.Arrivals(op)); n != 1 {
			t.Fatalf("%d effect calls for %s, want 1", n, op)
		}
		refused += len(o.Holds(op))
	}
	t.Logf("claims refused under a live lease (message held back): %d", refused)
}

// Automation A -> B -> A loop: the source cancels O-42; automation B echoes
// the cancellation back, then A echoes it again. Each echo carries the same
// business state, so it is a noop that creates no intent (no-op suppression
// stops the loop). A runaway chain that does change state is stopped by the
// hop budget: quarantined, no state change, no intents.
func TestSeed003_AutomationLoop(t *testing.T) {
	h, o, w, d := orderPipeline(t, pt.OutboxOptions{})
	run := func(id string, body []byte) { settle(t, h, w, d, id, body) }
	run("src_r12", pt.OrderEvent("order.cancelled", o42, 12, "", ""))
	run("autoB_echo", pt.OrderEvent("order.updated", o42, 12, "cancelled", `{"automation":"B","hop":1}`))
	run("autoA_echo", pt.OrderEvent("order.updated", o42, 12, "cancelled", `{"automation":"A","hop":2}`))
	for _, id := range []string{"autoB_echo", "autoA_echo"} {
		requireNoIntentFrom(t, h, id, ledger.OutcomeNoop)
	}
	for _, in := range h.Intents() {
		if hop := in.Payload["origin"].(map[string]any)["hop"]; fmt.Sprint(hop) != "1" {
			t.Fatalf("intent %s origin hop %v, want 1 (the source's event plus our hop)", in.OperationID, hop)
		}
	}

	// A chain that changes state at every hop reaches the budget (5).
	run("autoB_hop5", pt.OrderEvent("order.updated", o42, 13, "confirmed", fmt.Sprintf(`{"automation":"B","hop":%d}`, builtin.DefaultHopBudget)))
	ev := requireEvent(t, h, "autoB_hop5", ledger.StatusQuarantined, "")
	if ev.ErrorCode != "hop_budget" || ev.TotalAttempts != 1 {
		t.Fatalf("runaway chain: code %q attempts %d", ev.ErrorCode, ev.TotalAttempts)
	}
	requireCancelledOnce(t, h, "src_r12")
	if n := len(o.Arrivals("")); n != 2 {
		t.Fatalf("%d effect calls in the loop, want 2", n)
	}
}

// DLQ replay after the source advanced again: r11 and r12 fail until DEAD;
// the source then moves to r13 cancelled, which applies and is refunded
// once. r11 is redriven from the DLQ, r12 replayed by an operator: both are
// stale, create no intent and cause no effect.
func TestSeed003_DLQReplayAfterSourceAdvanced(t *testing.T) {
	orders := builtin.NewOrders(builtin.OrderOptions{})
	f := &flaky{Projection: orders}
	reg := projection.NewRegistry()
	reg.Register("standard-webhooks", orders.EventTypes(), f)
	h := pt.NewOrders(t, pt.Options{Registry: reg, MaxReceiveCount: 2}, pt.OutboxOptions{})
	o, w, d := h.Outbox, h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1")
	drain := func() { h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d) }

	deliver(t, h, "r10", pt.OrderEvent("order.created", o42, 10, "", ""), 202)
	drain()
	f.set(-1) // the projection's dependency is down
	deliver(t, h, "r11", pt.OrderEvent("order.confirmed", o42, 11, "", ""), 202)
	deliver(t, h, "r12", pt.OrderEvent("order.updated", o42, 12, "confirmed", `{"automation":"A","hop":0}`), 202)
	drain()
	requireEvent(t, h, "r11", ledger.StatusDead, "")
	requireEvent(t, h, "r12", ledger.StatusDead, "")
	f.set(0)
	deliver(t, h, "r13", pt.OrderEvent("order.cancelled", o42, 13, "", ""), 202)
	drain()
	requireOrder(t, h, "cancelled", 13)
	refund13, notify13 := pt.OrderOps(o42, 13)
	requireCancellationIntents(t, h, 13, "r13")

	// The operator handles the DLQ: r11 back to the queue (console redrive),
	// r12 replayed through the ledger with a reason.
	ctx := context.Background()
	msgs := h.Receive(h.Queues.DLQ)
	if len(msgs) != 2 {
		t.Fatalf("DLQ holds %d messages, want 2", len(msgs))
	}
	sender := queue.Sender{Client: h.SQS, URL: h.Queues.Queue}
	for _, m := range msgs {
		p, err := queue.ParsePointer(*m.Body)
		if err != nil {
			t.Fatal(err)
		}
		if p.EventID == "r11" {
			if err := sender.Send(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := h.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(h.Queues.DLQ), ReceiptHandle: m.ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.Ledger.Replay(ctx, "orders", "r12", "ops:alice", "projection dependency restored (INC-9)"); err != nil {
		t.Fatal(err)
	}
	if err := sender.Send(ctx, queue.Pointer{Source: "orders", EventID: "r12", Reason: "replay"}); err != nil {
		t.Fatal(err)
	}
	drain()

	for id, action := range map[string]string{"r11": "redrive", "r12": "replay"} {
		if ev := requireNoIntentFrom(t, h, id, ledger.OutcomeStale); count(pt.Actions(ev), action) != 1 {
			t.Fatalf("%s: audit %v, want one %s", id, pt.Actions(ev), action)
		}
	}
	requireOrder(t, h, "cancelled", 13)
	requireCancellationIntents(t, h, 13, "r13")
	requireEffective(t, o, map[string]int{refund13: 1, notify13: 1})
	if n := len(o.Arrivals("")); n != 2 {
		t.Fatalf("%d effect calls, want 2", n)
	}
}

// Manual override while automated work is queued: automations A (r11, a
// hold) and B (r12, a cancellation) are queued when an operator's newer
// revision (r13, confirmed) is processed first. The operator's revision
// wins; the queued automated events are stale, so B's cancellation never
// creates a refund.
func TestSeed003_ManualOverrideWhileAutomatedWorkQueued(t *testing.T) {
	h, o, w, d := orderPipeline(t, pt.OutboxOptions{})
	settle(t, h, w, d, "src_r10", pt.OrderEvent("order.created", o42, 10, "", ""))

	deliver(t, h, "autoA_r11", pt.OrderEvent("order.updated", o42, 11, "on_hold", `{"automation":"A","hop":0}`), 202)
	deliver(t, h, "autoB_r12", pt.OrderEvent("order.cancelled", o42, 12, "", `{"automation":"B","hop":1}`), 202)
	deliver(t, h, "operator_r13", pt.OrderEvent("order.confirmed", o42, 13, "", `{"operator":"ops:alice","reason":"customer kept the order"}`), 202)
	// Standard queues keep no order: another worker happens to take the
	// operator's message before the two automated ones.
	if failed := h.NewWorker("proc-2").Handle(context.Background(), queue.Pointer{Source: "orders", EventID: "operator_r13", Reason: "accept"}); len(failed) != 0 {
		t.Fatalf("operator event failed: %v", failed)
	}
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)

	requireEvent(t, h, "operator_r13", ledger.StatusProcessed, ledger.OutcomeApplied)
	for _, id := range []string{"autoA_r11", "autoB_r12"} {
		requireNoIntentFrom(t, h, id, ledger.OutcomeStale)
	}
	requireOrder(t, h, "confirmed", 13)
	requireIntents(t, h, 0)
	requireEffective(t, o, map[string]int{})
	if n := len(o.Arrivals("")); n != 0 {
		t.Fatalf("%d effect calls after the override", n)
	}
}
