package pipelinetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

const sub = "sub_test_1"

var created = pt.Start.Unix() - 60

func subEvent(id, typ, status string, createdAt int64) []byte {
	return pt.SubscriptionEvent(id, typ, sub, status, createdAt, "acct_42")
}

// requireSubscription asserts the projection's business state and version.
func requireSubscription(t *testing.T, h *pt.Harness, status string, entitled bool, version int64) ledger.Projection {
	t.Helper()
	p, err := h.Ledger.GetProjection(context.Background(), projection.ScopedName("stripe", builtin.StripeSubscriptionProjection), sub)
	if err != nil {
		t.Fatalf("projection: %v", err)
	}
	if p.State["status"] != status || p.State["entitled"] != entitled || p.Version != version {
		t.Fatalf("projection = status %v entitled %v version %d; want %s %v %d", p.State["status"], p.State["entitled"], p.Version, status, entitled, version)
	}
	return p
}

func requireIntents(t *testing.T, h *pt.Harness, want int) []ledger.StoredIntent {
	t.Helper()
	in := h.Intents()
	if len(in) != want {
		t.Fatalf("outbox holds %d intents, want %d: %+v", len(in), want, in)
	}
	seen := map[string]bool{}
	for _, i := range in {
		if seen[i.OperationID] {
			t.Fatalf("operation %s recorded twice", i.OperationID)
		}
		seen[i.OperationID] = true
	}
	return in
}

func count(actions []string, a string) int {
	n := 0
	for _, x := range actions {
		if x == a {
			n++
		}
	}
	return n
}

func version(createdAt int64, rank int64) int64 { return createdAt*4 + rank }

// 1. Invalid signature → 401, no ledger row, no message.
func TestFailureMatrix01_InvalidSignatureTouchesNothing(t *testing.T) {
	h := pt.New(t, pt.Options{})
	body := subEvent("evt_bad_1", "customer.subscription.created", "active", created)
	cases := map[string]string{
		"wrong secret":   h.Sign(body, pt.SecretUnknown),
		"missing header": "",
		"garbage header": "t=abc,v1=zz",
		"tampered body":  h.Sign(append([]byte(" "), body...), pt.SecretPrimary),
		"stale timestamp": func() string {
			h.Clock.Advance(-301 * time.Second)
			defer h.Clock.Advance(301 * time.Second)
			return h.Sign(body, pt.SecretPrimary)
		}(),
	}
	for name, sig := range cases {
		t.Run(name, func(t *testing.T) {
			h.IntakeRec.Reset()
			resp := h.Deliver(body, sig)
			if resp.Status != 401 {
				t.Fatalf("status %d, want 401 (%s)", resp.Status, resp.Body)
			}
			if n := h.IntakeRec.Total(""); n != 0 {
				t.Fatalf("unverified request made %d AWS calls (%s)", n, h.IntakeRec)
			}
		})
	}
	if _, err := h.Ledger.Get(context.Background(), "stripe", "evt_bad_1"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("ledger row exists after unverified deliveries: %v", err)
	}
	if d := h.Depth(h.Queues.Queue); d != 0 {
		t.Fatalf("queue depth %d after unverified deliveries", d)
	}
	if resp := h.DeliverTo("nope", body, map[string]string{"stripe-signature": h.Sign(body, pt.SecretPrimary)}); resp.Status != 404 {
		t.Fatalf("unknown source: %d", resp.Status)
	}
}

// 2. Twenty concurrent deliveries of one event → one row, one claim, one
// projection change, one intent.
func TestFailureMatrix02_ConcurrentDeliveriesApplyOnce(t *testing.T) {
	h := pt.New(t, pt.Options{})
	body := subEvent("evt_conc_1", "customer.subscription.created", "active", created)
	var wg sync.WaitGroup
	statuses := make([]int, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = h.Deliver(body, h.Sign(body, pt.SecretPrimary)).Status
		}()
	}
	wg.Wait()
	for i, s := range statuses {
		if s != 202 {
			t.Fatalf("delivery %d: status %d", i, s)
		}
	}
	a, b := h.NewWorker("w-a"), h.NewWorker("w-b")
	var pw sync.WaitGroup
	for _, w := range []*pt.Worker{a, b} {
		pw.Add(1)
		go func() { defer pw.Done(); h.Drain(20*time.Second, time.Second, w) }()
	}
	pw.Wait()

	ev := h.Event("evt_conc_1")
	if ev.Status != ledger.StatusProcessed || ev.Result.Outcome != ledger.OutcomeApplied {
		t.Fatalf("event %s/%v", ev.Status, ev.Result)
	}
	if ev.DeliveryCount < 1 || ev.DeliveryCount > 20 {
		t.Fatalf("delivery count %d", ev.DeliveryCount)
	}
	acts := pt.Actions(ev)
	if count(acts, "accept") != 1 || count(acts, "claim") != 1 || count(acts, "complete") != 1 || len(acts) != 3 {
		t.Fatalf("audit %v: want one accept, one claim, one complete", acts)
	}
	requireSubscription(t, h, "active", true, version(created, 1))
	in := requireIntents(t, h, 1)
	if in[0].Kind != "entitlement.grant" || in[0].Subject != "acct_42" {
		t.Fatalf("intent %+v", in[0])
	}
	if h.Projections() != 1 {
		t.Fatalf("projections %d", h.Projections())
	}
}

// 3. Duplicate after processing → 200 with its status and outcome, nothing
// re-applied, one DynamoDB request and no SQS request.
// "Duplicate delivery/event → store audit evidence; no-op". Each duplicate
// of a processed event, through intake's Lambda JSON path, costs one
// DynamoDB request and no message, is answered 200 with the event id and
// its outcome (never the operation ids the stored result keeps), and
// leaves evidence on the row (the delivery count, the last delivery's
// time) without changing its status, result or audit, or putting it back
// on the work list.
func TestFailureMatrix03_DuplicateAfterProcessingReturnsItsOutcome(t *testing.T) {
	h := pt.New(t, pt.Options{})
	body := subEvent("evt_dup_1", "customer.subscription.created", "active", created)
	if r := h.Deliver(body, h.Sign(body, pt.SecretPrimary)); r.Status != 202 {
		t.Fatalf("first delivery %d", r.Status)
	}
	h.Drain(10*time.Second, time.Second, h.NewWorker("w"))
	before := h.Event("evt_dup_1")
	intents := requireIntents(t, h, 1)

	for n := 2; n <= 3; n++ {
		h.Clock.Advance(time.Minute)
		h.IntakeRec.Reset()
		r := h.Deliver(body, h.Sign(body, pt.SecretPrimary))
		if r.Status != 200 {
			t.Fatalf("duplicate status %d, want 200", r.Status)
		}
		var answer struct {
			EventID string         `json:"event_id"`
			Status  string         `json:"status"`
			Outcome ledger.Outcome `json:"outcome"`
		}
		if err := json.Unmarshal(r.Body, &answer); err != nil {
			t.Fatal(err)
		}
		if answer.EventID != "evt_dup_1" || answer.Status != "duplicate" || answer.Outcome != ledger.OutcomeApplied ||
			strings.Contains(string(r.Body), intents[0].OperationID) {
			t.Fatalf("duplicate's answer %s", r.Body)
		}
		if ev := h.Event("evt_dup_1"); ev.DeliveryCount != n || ev.Result == nil || ev.Result.Subject != sub || ev.Result.Version != version(created, 1) ||
			len(ev.Result.Operations) != 1 || ev.Result.Operations[0].ID != intents[0].OperationID || ev.Result.Operations[0].Kind != intents[0].Kind {
			t.Fatalf("the row after delivery %d: %d deliveries, result %+v; the outbox holds %s (%s)", n, ev.DeliveryCount, ev.Result, intents[0].OperationID, intents[0].Kind)
		}
		if got := h.IntakeRec.Counts(); got["DynamoDB.UpdateItem"] != 1 || h.IntakeRec.Total("") != 1 {
			t.Fatalf("duplicate of a processed event cost %s; want exactly 1 DynamoDB request", h.IntakeRec)
		}
	}
	after := h.Event("evt_dup_1")
	if after.DeliveryCount != 3 || !after.LastDeliveryAt.Equal(h.Clock.Now()) || len(after.RecentDeliveries) == 0 {
		t.Fatalf("no evidence of the duplicates: %d deliveries, last at %s, history %+v", after.DeliveryCount, after.LastDeliveryAt, after.RecentDeliveries)
	}
	if after.Status != ledger.StatusProcessed || !slices.Equal(pt.Actions(after), pt.Actions(before)) || !after.ProcessedAt.Equal(before.ProcessedAt) ||
		after.Result.Outcome != before.Result.Outcome || after.Result.Version != before.Result.Version {
		t.Fatalf("a duplicate changed the event: %s %v %+v", after.Status, pt.Actions(after), after.Result)
	}
	if d := h.Depth(h.Queues.Queue); d != 0 {
		t.Fatalf("duplicates enqueued %d messages", d)
	}
	if due, err := h.Ledger.ListDue(context.Background(), h.Clock.Now().Add(time.Hour), 10); err != nil || len(due) != 0 {
		t.Fatalf("a processed event is listed due: %+v %v", due, err)
	}
	requireIntents(t, h, 1)
}

// flaky wraps a projection and fails transiently while fail() says so.
type flaky struct {
	projection.Projection
	mu    sync.Mutex
	fails int // remaining failures; -1 forever
	calls int
}

func (f *flaky) Project(ev projection.Event) (projection.Result, error) {
	f.mu.Lock()
	f.calls++
	fail := f.fails != 0
	if f.fails > 0 {
		f.fails--
	}
	f.mu.Unlock()
	if fail {
		return projection.Result{}, errors.New("downstream lookup timed out")
	}
	return f.Projection.Project(ev)
}

func (f *flaky) set(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails = n
}

func flakyRegistry(fails int) (*projection.Registry, *flaky) {
	base := builtin.NewStripeSubscriptions(builtin.StripeOptions{})
	f := &flaky{Projection: base, fails: fails}
	r := projection.NewRegistry()
	r.Register("stripe", base.EventTypes(), f)
	return r, f
}

// 4. Failure after the claim → the event stays retryable and is then
// processed once.
func TestFailureMatrix04_FailureAfterClaimIsRetriedThenAppliedOnce(t *testing.T) {
	reg, f := flakyRegistry(1)
	h := pt.New(t, pt.Options{Registry: reg})
	body := subEvent("evt_fail_1", "customer.subscription.created", "active", created)
	h.Deliver(body, h.Sign(body, pt.SecretPrimary))
	w := h.NewWorker("w")
	if n := w.PollOnce(context.Background()); n != 1 {
		t.Fatalf("received %d", n)
	}
	ev := h.Event("evt_fail_1")
	if ev.Status != ledger.StatusRetryWait || ev.ErrorCode != "projection_failed" || ev.Attempts != 1 {
		t.Fatalf("after transient failure: %s code %q attempts %d", ev.Status, ev.ErrorCode, ev.Attempts)
	}
	if _, err := h.Ledger.GetProjection(context.Background(), projection.ScopedName("stripe", builtin.StripeSubscriptionProjection), sub); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("projection written by a failed attempt: %v", err)
	}
	h.Drain(10*time.Second, time.Second, w)
	ev = h.Event("evt_fail_1")
	if ev.Status != ledger.StatusProcessed || ev.Attempts != 2 || f.calls != 2 {
		t.Fatalf("after retry: %s attempts %d projection calls %d", ev.Status, ev.Attempts, f.calls)
	}
	if got := pt.Actions(ev); !slices.Equal(got, []string{"accept", "claim", "retry_later", "retry", "complete"}) {
		t.Fatalf("audit %v", got)
	}
	requireSubscription(t, h, "active", true, version(created, 1))
	requireIntents(t, h, 1)
}

// 5. Crash after the domain commit, before the message is acknowledged →
// the retry converges with one effect.
func TestFailureMatrix05_CrashAfterCommitBeforeAckConverges(t *testing.T) {
	h := pt.New(t, pt.Options{})
	body := subEvent("evt_crash_1", "customer.subscription.created", "active", created)
	h.Deliver(body, h.Sign(body, pt.SecretPrimary))
	w := h.NewWorker("w-1")
	w.Rec.Arm(awstrace.Crash{Op: "DynamoDB.TransactWriteItems", Nth: 1, When: awstrace.After})
	w.PollOnce(context.Background())
	if !w.Rec.Crashed() {
		t.Fatal("crash did not fire")
	}
	if h.Depth(h.Queues.Queue) != 1 {
		t.Fatal("crashed invocation's message was deleted")
	}
	h.Drain(10*time.Second, time.Second, h.NewWorker("w-2"))
	ev := h.Event("evt_crash_1")
	if ev.Status != ledger.StatusProcessed || count(pt.Actions(ev), "complete") != 1 || count(pt.Actions(ev), "claim") != 1 {
		t.Fatalf("event %s audit %v", ev.Status, pt.Actions(ev))
	}
	requireSubscription(t, h, "active", true, version(created, 1))
	requireIntents(t, h, 1)
}

// 6. Older event after newer → no regression, outcome stale; a deletion is
// never undone by an older update.
func TestFailureMatrix06_OlderEventAfterNewerIsStale(t *testing.T) {
	h := pt.New(t, pt.Options{})
	w := h.NewWorker("w")
	send := func(id, typ, status string, at int64) {
		b := subEvent(id, typ, status, at)
		if r := h.Deliver(b, h.Sign(b, pt.SecretPrimary)); r.Status != 202 {
			t.Fatalf("%s: %d", id, r.Status)
		}
		h.Drain(10*time.Second, time.Second, w)
	}
	send("evt_new", "customer.subscription.updated", "past_due", created+100)
	send("evt_old", "customer.subscription.updated", "active", created+10)
	if ev := h.Event("evt_old"); ev.Status != ledger.StatusProcessed || ev.Result.Outcome != ledger.OutcomeStale {
		t.Fatalf("older event: %s %v", ev.Status, ev.Result)
	}
	requireSubscription(t, h, "past_due", true, version(created+100, 2))
	requireIntents(t, h, 1)

	// Same second: the deletion outranks an update; a late update is stale.
	send("evt_del", "customer.subscription.deleted", "canceled", created+200)
	send("evt_late", "customer.subscription.updated", "active", created+200)
	send("evt_later_clock", "customer.subscription.updated", "active", created+500)
	for _, id := range []string{"evt_late", "evt_later_clock"} {
		if ev := h.Event(id); ev.Result == nil || ev.Result.Outcome != ledger.OutcomeStale {
			t.Fatalf("%s after deletion: %+v", id, ev.Result)
		}
	}
	p := requireSubscription(t, h, "canceled", false, builtin.DeletedVersionBase+version(created+200, 3))
	if p.State["deleted"] != true || !p.Terminal {
		t.Fatalf("deletion undone: %+v", p)
	}
	in := requireIntents(t, h, 2)
	kinds := []string{in[0].Kind, in[1].Kind}
	slices.Sort(kinds)
	if !slices.Equal(kinds, []string{"entitlement.grant", "entitlement.revoke"}) {
		t.Fatalf("intent kinds %v", kinds)
	}
}

// 7. Unknown subject → QUARANTINED, bounded, nothing else touched.
func TestFailureMatrix07_UnknownSubjectIsQuarantined(t *testing.T) {
	h := pt.New(t, pt.Options{})
	w := h.NewWorker("w")
	good := subEvent("evt_known", "customer.subscription.created", "active", created)
	h.Deliver(good, h.Sign(good, pt.SecretPrimary))
	h.Drain(10*time.Second, time.Second, w)

	orphan := pt.SubscriptionEvent("evt_orphan", "customer.subscription.updated", "sub_nobody", "canceled", created+5, "")
	if r := h.Deliver(orphan, h.Sign(orphan, pt.SecretPrimary)); r.Status != 202 {
		t.Fatalf("status %d", r.Status)
	}
	h.Drain(10*time.Second, time.Second, w)
	ev := h.Event("evt_orphan")
	if ev.Status != ledger.StatusQuarantined || ev.ErrorCode != "unknown_subject" || ev.Attempts != 1 {
		t.Fatalf("orphan: %s %q attempts %d", ev.Status, ev.ErrorCode, ev.Attempts)
	}
	// The code is said once: in error_code, and once at the head of the
	// audit reason; the message is the cause alone.
	if reason := ev.Audit[len(ev.Audit)-1].Reason; strings.HasPrefix(ev.ErrorMessage, "unknown_subject") ||
		reason != "unknown_subject: "+ev.ErrorMessage || strings.Count(reason, "unknown_subject") != 1 {
		t.Fatalf("error message %q, audit reason %q", ev.ErrorMessage, reason)
	}
	if h.Projections() != 1 {
		t.Fatalf("a projection was written for the unknown subject")
	}
	requireSubscription(t, h, "active", true, version(created, 1))
	requireIntents(t, h, 1)
	if h.Depth(h.Queues.Queue) != 0 || h.Depth(h.Queues.DLQ) != 0 {
		t.Fatal("quarantined event left messages behind")
	}
}

// 8. Secret rotation overlap → accepted by either active secret, and by a
// header carrying both signatures.
func TestFailureMatrix08_SecretRotationOverlap(t *testing.T) {
	h := pt.New(t, pt.Options{})
	oldBody := subEvent("evt_rot_old", "customer.subscription.created", "active", created)
	newBody := subEvent("evt_rot_new", "customer.subscription.updated", "active", created+1)
	bothBody := subEvent("evt_rot_both", "customer.subscription.updated", "past_due", created+2)
	if r := h.Deliver(oldBody, h.Sign(oldBody, pt.SecretPrimary)); r.Status != 202 {
		t.Fatalf("old secret: %d", r.Status)
	}
	if r := h.Deliver(newBody, h.Sign(newBody, pt.SecretRotated)); r.Status != 202 {
		t.Fatalf("new secret: %d", r.Status)
	}
	// Stripe signs with every active secret during a roll: t=..,v1=<unknown>,v1=<rotated>.
	unknown := h.Sign(bothBody, pt.SecretUnknown)
	rotated := h.Sign(bothBody, pt.SecretRotated)
	if r := h.Deliver(bothBody, unknown+","+rotated[len("t=0000000000,"):]); r.Status != 202 {
		t.Fatalf("two signatures, one valid: %d", r.Status)
	}
	h.Drain(10*time.Second, time.Second, h.NewWorker("w"))
	for _, id := range []string{"evt_rot_old", "evt_rot_new", "evt_rot_both"} {
		if ev := h.Event(id); ev.Status != ledger.StatusProcessed {
			t.Fatalf("%s: %s", id, ev.Status)
		}
	}
	requireSubscription(t, h, "past_due", true, version(created+2, 2))
}

// 9. Permanent malformed payload → no endless retry: quarantined on the
// first attempt, message acknowledged; a verified body without identity is
// kept quarantined under its content hash.
func TestFailureMatrix09_MalformedPayloadIsNotRetried(t *testing.T) {
	h := pt.New(t, pt.Options{})
	bad := []byte(`{"id":"evt_malformed","object":"event","type":"customer.subscription.updated","created":1764500000,"data":{"object":"not a subscription"}}`)
	if r := h.Deliver(bad, h.Sign(bad, pt.SecretPrimary)); r.Status != 202 {
		t.Fatalf("status %d", r.Status)
	}
	w := h.NewWorker("w")
	h.Drain(10*time.Second, time.Second, w)
	ev := h.Event("evt_malformed")
	if ev.Status != ledger.StatusQuarantined || ev.ErrorCode != "malformed" || ev.TotalAttempts != 1 {
		t.Fatalf("malformed: %s %q attempts %d", ev.Status, ev.ErrorCode, ev.TotalAttempts)
	}
	if h.Depth(h.Queues.DLQ) != 0 {
		t.Fatal("malformed event went to the DLQ instead of quarantine")
	}

	notJSON := []byte("this is not json but it is signed")
	r := h.Deliver(notJSON, h.Sign(notJSON, pt.SecretPrimary))
	if r.Status != 202 {
		t.Fatalf("unidentified: %d", r.Status)
	}
	kept := h.Event(ledger.ContentID(notJSON))
	if kept.Status != ledger.StatusQuarantined || kept.ErrorCode != "no_identity" {
		t.Fatalf("unidentified kept as %s %q", kept.Status, kept.ErrorCode)
	}
	raw, err := h.Ledger.Payload(context.Background(), kept)
	if err != nil || string(raw) != string(notJSON) {
		t.Fatalf("unidentified payload not kept: %q %v", raw, err)
	}
	if h.Depth(h.Queues.Queue) != 0 {
		t.Fatal("unidentified delivery was enqueued")
	}
	requireIntents(t, h, 0)
}

// 10. Attempts exhausted → DEAD, visible, message in the DLQ.
func TestFailureMatrix10_AttemptsExhaustedGoDeadAndToTheDLQ(t *testing.T) {
	reg, _ := flakyRegistry(-1)
	h := pt.New(t, pt.Options{Registry: reg, MaxReceiveCount: 3})
	body := subEvent("evt_dead_1", "customer.subscription.created", "active", created)
	h.Deliver(body, h.Sign(body, pt.SecretPrimary))
	h.Drain(20*time.Second, time.Second, h.NewWorker("w"))
	ev := h.Event("evt_dead_1")
	if ev.Status != ledger.StatusDead || ev.Attempts != 3 || ev.ErrorCode != "projection_failed" {
		t.Fatalf("event %s attempts %d code %q", ev.Status, ev.Attempts, ev.ErrorCode)
	}
	if got := pt.Actions(ev); !slices.Equal(got, []string{"accept", "claim", "retry_later", "retry", "retry_later", "retry", "dead"}) {
		t.Fatalf("audit %v", got)
	}
	msgs := h.Receive(h.Queues.DLQ)
	if len(msgs) != 1 {
		t.Fatalf("DLQ holds %d messages, want 1", len(msgs))
	}
	if p, err := queue.ParsePointer(*msgs[0].Body); err != nil || p.EventID != "evt_dead_1" {
		t.Fatalf("DLQ message %v %v", p, err)
	}
	requireIntents(t, h, 0)
}

// 11. Replay after repair → same identity, a controlled new attempt, the
// reason recorded; processed once.
func TestFailureMatrix11_ReplayAfterRepair(t *testing.T) {
	reg, f := flakyRegistry(-1)
	h := pt.New(t, pt.Options{Registry: reg, MaxReceiveCount: 2})
	body := subEvent("evt_replay_1", "customer.subscription.created", "active", created)
	h.Deliver(body, h.Sign(body, pt.SecretPrimary))
	w := h.NewWorker("w")
	h.Drain(20*time.Second, time.Second, w)
	if ev := h.Event("evt_replay_1"); ev.Status != ledger.StatusDead {
		t.Fatalf("setup: %s", ev.Status)
	}
	f.set(0) // the repair: the downstream is back

	ctx := context.Background()
	if _, err := h.Ledger.Replay(ctx, "stripe", "evt_replay_1", "", "fixed"); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("replay without actor: %v", err)
	}
	ev, err := h.Ledger.Replay(ctx, "stripe", "evt_replay_1", "ops:alice", "lookup service restored (INC-7)")
	if err != nil || ev.Status != ledger.StatusReceived || ev.EventID != "evt_replay_1" {
		t.Fatalf("replay: %+v %v", ev.Status, err)
	}
	if err := (queue.Sender{Client: h.SQS, URL: h.Queues.Queue}).Send(ctx, queue.Pointer{Source: "stripe", EventID: "evt_replay_1", Reason: "replay"}); err != nil {
		t.Fatal(err)
	}
	h.Drain(10*time.Second, time.Second, w)
	ev = h.Event("evt_replay_1")
	if ev.Status != ledger.StatusProcessed || ev.Attempts != 1 || ev.TotalAttempts != 3 {
		t.Fatalf("after replay: %s attempts %d/%d", ev.Status, ev.Attempts, ev.TotalAttempts)
	}
	var replay *ledger.AuditEntry
	for i := range ev.Audit {
		if ev.Audit[i].Action == "replay" {
			replay = &ev.Audit[i]
		}
	}
	if replay == nil || replay.Actor != "ops:alice" || replay.Reason != "lookup service restored (INC-7)" || replay.To != ledger.StatusReceived {
		t.Fatalf("replay audit %+v", replay)
	}
	if _, err := h.Ledger.Replay(ctx, "stripe", "evt_replay_1", "ops:alice", "again"); !errors.Is(err, ledger.ErrNotReplayable) {
		t.Fatalf("replaying a processed event: %v", err)
	}
	requireSubscription(t, h, "active", true, version(created, 1))
	requireIntents(t, h, 1)
}

// A worker whose lease expired cannot commit (fencing, I5; see
// docs/architecture.md).
func TestExpiredLeaseCannotCommit(t *testing.T) {
	h := pt.New(t, pt.Options{})
	body := subEvent("evt_fence_1", "customer.subscription.created", "active", created)
	h.Deliver(body, h.Sign(body, pt.SecretPrimary))
	ctx := context.Background()
	slow, err := h.Ledger.Claim(ctx, "stripe", "evt_fence_1", ledger.ClaimOptions{Owner: "slow", Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Ledger.Claim(ctx, "stripe", "evt_fence_1", ledger.ClaimOptions{Owner: "fast", Lease: 30 * time.Second}); !errors.Is(err, ledger.ErrNotClaimable) {
		t.Fatalf("claim under a live lease: %v", err)
	}
	h.Clock.Advance(31 * time.Second)
	fast, err := h.Ledger.Claim(ctx, "stripe", "evt_fence_1", ledger.ClaimOptions{Owner: "fast", Lease: 30 * time.Second})
	if err != nil || fast.From != ledger.StatusProcessing || fast.Token == slow.Token {
		t.Fatalf("takeover: %+v %v", fast, err)
	}
	res, err := builtin.NewStripeSubscriptions(builtin.StripeOptions{}).Project(projection.Event{Type: "customer.subscription.created", Payload: body})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Ledger.Commit(ctx, slow, res.Write, res.Intents); !errors.Is(err, ledger.ErrLeaseLost) {
		t.Fatalf("stale holder committed: %v", err)
	}
	if err := h.Ledger.RetryLater(ctx, slow, "x", "y", h.Clock.Now()); !errors.Is(err, ledger.ErrLeaseLost) {
		t.Fatalf("stale holder moved the event: %v", err)
	}
	requireIntents(t, h, 0)
	if _, err := h.Ledger.Commit(ctx, fast, res.Write, res.Intents); err != nil {
		t.Fatalf("current holder: %v", err)
	}
	ev := h.Event("evt_fence_1")
	if got := pt.Actions(ev); !slices.Equal(got, []string{"accept", "claim", "takeover", "complete"}) || ev.Audit[3].Actor != "fast" {
		t.Fatalf("audit %v", got)
	}
	requireIntents(t, h, 1)
}

// A DEAD event redriven from the DLQ is claimable (audited as a redrive) and
// processed once.
func TestRedrivenDeadEventIsProcessedOnce(t *testing.T) {
	reg, f := flakyRegistry(-1)
	h := pt.New(t, pt.Options{Registry: reg, MaxReceiveCount: 2})
	body := subEvent("evt_redrive_1", "customer.subscription.created", "active", created)
	h.Deliver(body, h.Sign(body, pt.SecretPrimary))
	w := h.NewWorker("w")
	h.Drain(20*time.Second, time.Second, w)
	if ev := h.Event("evt_redrive_1"); ev.Status != ledger.StatusDead {
		t.Fatalf("setup: %s", ev.Status)
	}
	f.set(0)
	if n := h.Redrive(); n != 1 {
		t.Fatalf("redrove %d messages", n)
	}
	h.Drain(10*time.Second, time.Second, w)
	ev := h.Event("evt_redrive_1")
	if ev.Status != ledger.StatusProcessed || count(pt.Actions(ev), "redrive") != 1 || count(pt.Actions(ev), "complete") != 1 {
		t.Fatalf("after redrive: %s %v", ev.Status, pt.Actions(ev))
	}
	requireIntents(t, h, 1)
	requireSubscription(t, h, "active", true, version(created, 1))
}

// The put→send gap: SendMessage fails after the row is written → 5xx; the
// row stays RECEIVED, findable for re-enqueue; the provider's retry
// completes it once.
func TestPutSendGapLeavesAFindableReceivedRow(t *testing.T) {
	h := pt.New(t, pt.Options{})
	body := subEvent("evt_gap_1", "customer.subscription.created", "active", created)
	h.IntakeRec.Arm(awstrace.Crash{Op: "SQS.SendMessage", Nth: 1, When: awstrace.Before})
	if r := h.Deliver(body, h.Sign(body, pt.SecretPrimary)); r.Status != 500 {
		t.Fatalf("status %d, want 500", r.Status)
	}
	if ev := h.Event("evt_gap_1"); ev.Status != ledger.StatusReceived {
		t.Fatalf("row %s", ev.Status)
	}
	if h.Depth(h.Queues.Queue) != 0 {
		t.Fatal("a message was sent")
	}
	due, err := h.Ledger.ListDue(context.Background(), h.Clock.Now(), 10)
	if err != nil || len(due) != 1 || due[0].EventID != "evt_gap_1" || due[0].Status != ledger.StatusReceived {
		t.Fatalf("due index: %+v %v", due, err)
	}
	h.IntakeRec.Reset()
	if r := h.Deliver(body, h.Sign(body, pt.SecretPrimary)); r.Status != 202 {
		t.Fatalf("provider retry: %d", r.Status)
	}
	h.Drain(10*time.Second, time.Second, h.NewWorker("w"))
	if ev := h.Event("evt_gap_1"); ev.Status != ledger.StatusProcessed || ev.DeliveryCount != 2 {
		t.Fatalf("after retry: %s deliveries %d", ev.Status, ev.DeliveryCount)
	}
	if due, _ := h.Ledger.ListDue(context.Background(), h.Clock.Now().Add(time.Hour), 10); len(due) != 0 {
		t.Fatalf("processed event still in the due index: %+v", due)
	}
	requireIntents(t, h, 1)
}

// SQS can give up on a message before the ledger's attempts are exhausted
// (here: receives that found the retry not yet due; goaws also never counts
// receives). The event must still end DEAD and visible.
func TestQueueGivingUpBeforeTheLedgerEndsDead(t *testing.T) {
	reg, _ := flakyRegistry(1)
	h := pt.New(t, pt.Options{Registry: reg, MaxReceiveCount: 3, RetryCap: time.Hour})
	body := subEvent("evt_desync_1", "customer.subscription.created", "active", created)
	h.Deliver(body, h.Sign(body, pt.SecretPrimary))
	w := h.NewWorker("w")
	// Poll on real time only: the manual clock stays put, so the retry is
	// never due and every receive fails until SQS gives up.
	deadline := time.Now().Add(15 * time.Second)
	for h.Depth(h.Queues.Queue) > 0 && time.Now().Before(deadline) {
		w.PollOnce(context.Background())
		time.Sleep(100 * time.Millisecond)
	}
	ev := h.Event("evt_desync_1")
	if ev.Status != ledger.StatusRetryWait || ev.Attempts != 1 || h.Depth(h.Queues.DLQ) != 1 {
		t.Fatalf("setup: %s attempts %d dlq %d", ev.Status, ev.Attempts, h.Depth(h.Queues.DLQ))
	}
	rep, err := processor.SweepDLQ(context.Background(), h.SQS, h.Queues.DLQ, h.Ledger, "dlq-sweep", 100, nil)
	if err != nil || rep.MarkedDead != 1 {
		t.Fatalf("sweep: %+v %v", rep, err)
	}
	ev = h.Event("evt_desync_1")
	if ev.Status != ledger.StatusDead || ev.ErrorCode != "queue_exhausted" || pt.Actions(ev)[len(ev.Audit)-1] != "give_up" {
		t.Fatalf("after sweep: %s %q %v", ev.Status, ev.ErrorCode, pt.Actions(ev))
	}
	if h.Depth(h.Queues.DLQ) != 1 {
		t.Fatal("the DLQ message must stay for the console redrive")
	}
	if due, _ := h.Ledger.ListDue(context.Background(), h.Clock.Now().Add(48*time.Hour), 10); len(due) != 0 {
		t.Fatalf("dead event still due: %+v", due)
	}
	requireIntents(t, h, 0)
}
