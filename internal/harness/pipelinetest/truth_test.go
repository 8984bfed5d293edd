package pipelinetest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	"github.com/effectively-once/webhooks/internal/harness/downstream"
	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/reconciler"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Effects follow the current truth (I7; see docs/architecture.md): an
// intent is checked against its projection when the dispatcher claims it.

// The O-42 override: the cancellation's refund and notice wait on a 503
// when the operator's revision 13 (the customer kept the order) arrives.
// When the downstream recovers, neither is performed: both end OBSOLETE,
// with the newer version in their audit, and the downstream saw only the
// refused attempts.
func TestOverrideWhileRefundWaitsMakesItObsolete(t *testing.T) {
	h, o, w, d := orderPipeline(t, pt.OutboxOptions{})
	ctx := context.Background()
	o.Down.Then(downstream.Behavior{Mode: downstream.Unavailable503, RetryAfter: 20 * time.Second},
		downstream.Behavior{Mode: downstream.Unavailable503, RetryAfter: 20 * time.Second})
	deliver(t, h, "msg_o42_12", pt.OrderEvent("order.cancelled", o42, 12, "", ""), 202)
	w.PollOnce(ctx)
	d.PollOnce(ctx)
	for _, op := range []string{refund12, notify12} {
		if in := o.Intent(op); in.Status != ledger.IntentStatusRetryWait || in.Policy != ledger.PolicyWhileCurrent || in.Version != 12 {
			t.Fatalf("%s after the 503: %s policy %q version %d", op, in.Status, in.Policy, in.Version)
		}
	}
	// The operator's override while both wait.
	deliver(t, h, "msg_o42_13", pt.OrderEvent("order.confirmed", o42, 13, "confirmed", ""), 202)
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)

	requireOrder(t, h, "confirmed", 13)
	for _, op := range []string{refund12, notify12} {
		in := o.Intent(op)
		if in.Status != ledger.IntentStatusObsolete || in.ErrorCode != "obsolete" {
			t.Fatalf("%s ended %s (%s: %s); the order is confirmed, want OBSOLETE", op, in.Status, in.ErrorCode, in.Detail)
		}
		if got := o.Down.Effective(op); got != 0 {
			t.Fatalf("%s took effect %d times at the downstream; want 0", op, got)
		}
		if calls := o.Arrivals(op); len(calls) != 1 || calls[0].Status != http.StatusServiceUnavailable {
			t.Fatalf("%s calls %+v; want only the refused one", op, calls)
		}
		last := in.Audit[len(in.Audit)-1]
		if last.To != ledger.Status(ledger.IntentStatusObsolete) || !strings.Contains(last.Reason, "version 13") || !strings.Contains(last.Reason, "status=confirmed") {
			t.Fatalf("%s audit %+v", op, last)
		}
	}
}

// Without an override the policy costs nothing: the refund and notice of
// a cancellation that still holds are performed once.
func TestWhileCurrentStillHoldingIsPerformed(t *testing.T) {
	h, o, w, d := orderPipeline(t, pt.OutboxOptions{})
	settle(t, h, w, d, "msg_o42_12", pt.OrderEvent("order.cancelled", o42, 12, "", ""))
	for _, op := range []string{refund12, notify12} {
		if in := o.Intent(op); in.Status != ledger.IntentStatusSucceeded || o.Down.Effective(op) != 1 {
			t.Fatalf("%s %s, effective %d", op, in.Status, o.Down.Effective(op))
		}
	}
}

// A state sync: the grant of v5 meets a 503; the revoke of v9 is
// performed; when the grant is retried the subscription's state is no
// longer the one it carries, so it ends SUPERSEDED and the downstream ends
// revoked. The calls carry the subject's version exactly.
func TestGrantRetriedAfterRevokeIsSuperseded(t *testing.T) {
	h := pt.NewChaos(t, pt.Options{}, pt.OutboxOptions{})
	w, d := h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1")
	ctx := context.Background()
	const subID, acct = "sub_truth_1", "acct_truth_1"
	send := subscriptionSender(t, h, w, subID, acct)
	h.Outbox.Down.Then(downstream.Behavior{Mode: downstream.Unavailable503, RetryAfter: 20 * time.Second})
	send("evt_grant_v5", "customer.subscription.created", "active", created)
	d.PollOnce(ctx)
	grant := onlyIntent(t, h, "entitlement.grant")
	if in := h.Outbox.Intent(grant); in.Status != ledger.IntentStatusRetryWait || in.Policy != ledger.PolicyLatest {
		t.Fatalf("grant after the 503: %s %q", in.Status, in.Policy)
	}
	send("evt_revoke_v9", "customer.subscription.updated", "unpaid", created+1)
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)

	revoke := onlyIntent(t, h, "entitlement.revoke")
	if in := h.Outbox.Intent(revoke); in.Status != ledger.IntentStatusSucceeded || h.Outbox.Down.Effective(revoke) != 1 {
		t.Fatalf("revoke %s (%s: %s), effective %d", in.Status, in.ErrorCode, in.Detail, h.Outbox.Down.Effective(revoke))
	}
	in := h.Outbox.Intent(grant)
	if in.Status != ledger.IntentStatusSuperseded || h.Outbox.Down.Effective(grant) != 0 {
		t.Fatalf("grant ended %s (%s), effective %d; want SUPERSEDED and never applied", in.Status, in.Detail, h.Outbox.Down.Effective(grant))
	}
	// The downstream's last applied call for the account is the revoke,
	// and each call said which version of the subscription it carries.
	var last downstream.Call
	for _, c := range h.Outbox.Down.Calls() {
		if c.Mode == downstream.Apply {
			last = c
		}
	}
	if last.Key != revoke {
		t.Fatalf("the downstream's last applied call is %s, want the revoke %s", last.Key, revoke)
	}
	p, err := h.Ledger.GetProjection(ctx, projection.ScopedName("stripe", builtin.StripeSubscriptionProjection), subID)
	if err != nil || p.State["entitled"] != false {
		t.Fatalf("projection %+v %v", p, err)
	}
	if got := h.Outbox.Intent(revoke).Version; got != p.Version {
		t.Fatalf("revoke carries version %d, the projection is at %d", got, p.Version)
	}
	if want := fmt.Sprintf(`"subject_version":"%d"`, p.Version); !strings.Contains(string(last.Body), want) {
		t.Fatalf("the revoke's body %s does not carry %s", last.Body, want)
	}
}

func onlyIntent(t *testing.T, h *pt.Harness, kind string) string {
	t.Helper()
	var ops []string
	for _, in := range h.Intents() {
		if in.Kind == kind {
			ops = append(ops, in.OperationID)
		}
	}
	if len(ops) != 1 {
		t.Fatalf("%d %s intents, want 1", len(ops), kind)
	}
	return ops[0]
}

// The same override after the refund and notice were performed: nothing
// can un-send them, and that is never silent. The commit of revision 13
// makes the refund CONTRADICTED (an attention item the operator lists,
// with both versions) and compensates the notice with one
// notify_reinstatement; the refund was called once, the notice once.
// The operator then records how the refund was handled.
func TestOverrideAfterRefundPerformedIsAttention(t *testing.T) {
	h, o, w, d := orderPipeline(t, pt.OutboxOptions{})
	ctx := context.Background()
	settle(t, h, w, d, "msg_o42_12", pt.OrderEvent("order.cancelled", o42, 12, "", ""))
	for _, op := range []string{refund12, notify12} {
		if in := o.Intent(op); in.Status != ledger.IntentStatusSucceeded || o.Down.Effective(op) != 1 {
			t.Fatalf("%s before the override: %s, effective %d", op, in.Status, o.Down.Effective(op))
		}
	}
	settle(t, h, w, d, "msg_o42_13", pt.OrderEvent("order.confirmed", o42, 13, "confirmed", ""))
	requireOrder(t, h, "confirmed", 13)

	refund := o.Intent(refund12)
	if refund.Status != ledger.IntentStatusContradicted || refund.ContradictedBy != 13 || refund.ErrorCode != "contradicted" ||
		!strings.Contains(refund.Detail, "status=confirmed") || o.Down.Effective(refund12) != 1 {
		t.Fatalf("refund %s by %d (%s: %s), effective %d; want CONTRADICTED by 13, performed once", refund.Status, refund.ContradictedBy, refund.ErrorCode, refund.Detail, o.Down.Effective(refund12))
	}
	last := refund.Audit[len(refund.Audit)-1]
	if last.From != ledger.Status(ledger.IntentStatusSucceeded) || last.To != ledger.Status(ledger.IntentStatusContradicted) || last.Action != "contradict" || !strings.Contains(last.Reason, "version 13") {
		t.Fatalf("refund audit %+v", last)
	}
	open, err := h.Ledger.ListOpen(ctx, "intent", 10, ledger.Status(ledger.IntentStatusContradicted))
	if err != nil || len(open) != 1 || open[0].OperationID != refund12 {
		t.Fatalf("attention list %+v %v; want the refund", open, err)
	}

	notify := o.Intent(notify12)
	comp := ledger.CompensationID(notify12)
	if notify.Status != ledger.IntentStatusSucceeded || notify.ContradictedBy != 13 || notify.CompensatedBy != comp || o.Down.Effective(notify12) != 1 {
		t.Fatalf("notice %s by %d compensated by %q, effective %d", notify.Status, notify.ContradictedBy, notify.CompensatedBy, o.Down.Effective(notify12))
	}
	c := o.Intent(comp)
	if c.Status != ledger.IntentStatusSucceeded || c.Kind != "notify_reinstatement" || c.Version != 13 || fmt.Sprint(c.Payload["compensates"]) != notify12 || o.Down.Effective(comp) != 1 {
		t.Fatalf("compensation %s %s v%d payload %v, effective %d", c.Status, c.Kind, c.Version, c.Payload, o.Down.Effective(comp))
	}
	ev, err := h.Ledger.Get(ctx, "orders", "msg_o42_13")
	if err != nil || !strings.Contains(ev.Audit[len(ev.Audit)-1].Reason, "contradicts refund "+refund12) {
		t.Fatalf("r13's completion audit does not name the contradicted refund: %+v %v", ev.Audit, err)
	}
	// r13's result names the compensation it wrote: a redelivered pointer
	// of a crashed batch announces it like any other operation.
	if ops := ev.Result.Operations; len(ops) != 1 || ops[0] != (ledger.Operation{ID: comp, Kind: "notify_reinstatement"}) {
		t.Fatalf("r13's operations %+v, want its compensation", ops)
	}

	// The recovery owner reverses the refund by hand and says so.
	if _, err := h.Ledger.ResolveIntent(ctx, refund12, ledger.IntentStatusSucceeded, "ops@example.test", "refund reversed by hand, ticket 81"); err != nil {
		t.Fatal(err)
	}
	if open, _ := h.Ledger.ListOpen(ctx, "intent", 10, ledger.Status(ledger.IntentStatusContradicted)); len(open) != 0 {
		t.Fatalf("still listed after the resolve: %+v", open)
	}
}

// A dispatcher crashes between the downstream's answer and recording it:
// the refund was applied, the intent is still DISPATCHING. The operator's
// r13 arrives meanwhile: its commit marks the in-flight intent. When the
// lease ends, the next dispatcher finds the truth moved, asks the
// downstream (applied) and records CONTRADICTED, not SUCCEEDED and not
// OBSOLETE; the other, never-sent intent ends OBSOLETE with no call.
func TestDispatcherCrashAfterAnswerThenOverride(t *testing.T) {
	h, o, w, d1 := orderPipeline(t, pt.OutboxOptions{Lookup: true})
	ctx := context.Background()
	deliver(t, h, "msg_o42_12", pt.OrderEvent("order.cancelled", o42, 12, "", ""), 202)
	w.PollOnce(ctx)
	d1.Batch = 1
	// Claim, read the projection, call, then crash before the record.
	d1.Rec.Arm(awstrace.Crash{Op: "DynamoDB.UpdateItem", Nth: 2, When: awstrace.Before})
	d1.PollOnce(ctx)
	if !d1.Rec.Crashed() {
		t.Fatal("the dispatcher did not crash")
	}
	var sent, unsent string
	for _, op := range []string{refund12, notify12} {
		if o.Down.Effective(op) == 1 {
			sent = op
		} else {
			unsent = op
		}
	}
	if sent == "" || o.Intent(sent).Status != ledger.IntentStatusDispatching {
		t.Fatalf("want one intent applied and still DISPATCHING; refund %d, notice %d", o.Down.Effective(refund12), o.Down.Effective(notify12))
	}
	settleWith(t, h, w, h.Outbox.NewDispatcher("disp-2"), "msg_o42_13", pt.OrderEvent("order.confirmed", o42, 13, "confirmed", ""))
	requireOrder(t, h, "confirmed", 13)

	in := o.Intent(sent)
	if in.Status != ledger.IntentStatusContradicted || in.ContradictedBy != 13 || o.Down.Effective(sent) != 1 {
		t.Fatalf("the applied intent ended %s (%s: %s) by %d, effective %d; want CONTRADICTED by 13, once", in.Status, in.ErrorCode, in.Detail, in.ContradictedBy, o.Down.Effective(sent))
	}
	if acts := strings.Join(pt.IntentActions(in), ","); !strings.Contains(acts, "contradict") || !strings.Contains(acts, "takeover") {
		t.Fatalf("audit actions %s; want the commit's mark and the takeover", acts)
	}
	if u := o.Intent(unsent); u.Status != ledger.IntentStatusObsolete || o.Down.Effective(unsent) != 0 {
		t.Fatalf("the unsent intent ended %s, effective %d; want OBSOLETE, never applied", u.Status, o.Down.Effective(unsent))
	}
}

// settleWith delivers one order event and drains with the given stages.
func settleWith(t *testing.T, h *pt.Harness, w *pt.Worker, d *pt.Dispatcher, msgID string, body []byte) {
	t.Helper()
	deliver(t, h, msgID, body, 202)
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
}

// Two dispatchers, two versions of one subscription: the grant of v5 is
// in flight (the downstream applies it, then hangs) when the revoke of v9
// is committed and a second dispatcher claims it. The revoke waits for the
// subject's cursor (subject_busy, no call); the grant's outcome is then
// looked up (applied: SUCCEEDED, a newer intent carries the newer state),
// and the revoke is performed after it. The downstream applied v5 then
// v9: never an older state after a newer one, and it ends revoked.
func TestTwoDispatchersSerializeOneSubject(t *testing.T) {
	h := pt.NewChaos(t, pt.Options{}, pt.OutboxOptions{Lookup: true})
	w := h.NewWorker("proc-1")
	d1, d2 := h.Outbox.NewDispatcher("disp-1"), h.Outbox.NewDispatcher("disp-2")
	ctx := context.Background()
	const subID, acct = "sub_truth_2", "acct_truth_2"
	send := subscriptionSender(t, h, w, subID, acct)
	send("evt_grant_v5", "customer.subscription.created", "active", created)
	grant := onlyIntent(t, h, "entitlement.grant")
	h.Outbox.Down.Then(downstream.Behavior{Mode: downstream.HangAfterApply})
	done := make(chan struct{})
	go func() { defer close(done); d1.PollOnce(ctx) }()
	waitFor(t, func() bool { return h.Outbox.Down.Effective(grant) == 1 })

	send("evt_revoke_v9", "customer.subscription.updated", "unpaid", created+1)
	revoke := onlyIntent(t, h, "entitlement.revoke")
	d2.PollOnce(ctx)
	if in := h.Outbox.Intent(revoke); in.Status != ledger.IntentStatusRetryWait || in.ErrorCode != "subject_busy" || h.Outbox.Down.Effective(revoke) != 0 {
		t.Fatalf("revoke while the grant is in flight: %s (%s: %s), effective %d; want RETRY_WAIT subject_busy, no call", in.Status, in.ErrorCode, in.Detail, h.Outbox.Down.Effective(revoke))
	}
	<-done // the grant's call timed out after it was applied: UNCERTAIN
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d1, d2)

	if in := h.Outbox.Intent(grant); in.Status != ledger.IntentStatusSucceeded || in.ErrorCode != "performed_before_superseded" {
		t.Fatalf("grant ended %s (%s: %s)", in.Status, in.ErrorCode, in.Detail)
	}
	if in := h.Outbox.Intent(revoke); in.Status != ledger.IntentStatusSucceeded || h.Outbox.Down.Effective(revoke) != 1 {
		t.Fatalf("revoke ended %s (%s), effective %d", in.Status, in.Detail, h.Outbox.Down.Effective(revoke))
	}
	view, ok := h.Outbox.Down.Subject("stripe", acct)
	p, err := h.Ledger.GetProjection(ctx, projection.ScopedName("stripe", builtin.StripeSubscriptionProjection), subID)
	if !ok || err != nil || view.Regressions != 0 || len(view.History) != 2 || view.LastKind != "entitlement.revoke" || view.Last != fmt.Sprint(p.Version) {
		t.Fatalf("downstream view %+v (projection v%d, %v); want grant then revoke, ending at the projection's version", view, p.Version, err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The window no local transaction closes: the dispatcher checked the
// order (cancelled) and is calling the refund when the operator's r13 is
// committed. The commit marks the in-flight intent, so the dispatcher's
// success is recorded as CONTRADICTED (an attention item), never as a
// plain success; the notice, not yet claimed, ends OBSOLETE.
func TestOverrideWhileRefundInFlightIsContradicted(t *testing.T) {
	h, o, w, d := orderPipeline(t, pt.OutboxOptions{})
	ctx := context.Background()
	deliver(t, h, "msg_o42_12", pt.OrderEvent("order.cancelled", o42, 12, "", ""), 202)
	w.PollOnce(ctx)
	inFlight := &outbox.Dispatcher{Ledger: h.Ledger, Clock: h.Clock, Owner: "disp-inflight", Lease: 30 * time.Second,
		Effects: map[string]outbox.Effect{"refund": duringCall{Effect: o.Effects["refund"], then: func() {
			deliver(t, h, "msg_o42_13", pt.OrderEvent("order.confirmed", o42, 13, "confirmed", ""), 202)
			w.PollOnce(ctx)
		}}}}
	out, err := inFlight.Dispatch(ctx, refund12)
	if err != nil || !out.Called || out.Status != ledger.IntentStatusContradicted {
		t.Fatalf("dispatch: %+v %v; want a call recorded as CONTRADICTED", out, err)
	}
	requireOrder(t, h, "confirmed", 13)
	in := o.Intent(refund12)
	if in.ContradictedBy != 13 || in.ErrorCode != "contradicted" || o.Down.Effective(refund12) != 1 {
		t.Fatalf("refund by %d (%s: %s), effective %d", in.ContradictedBy, in.ErrorCode, in.Detail, o.Down.Effective(refund12))
	}
	if open, err := h.Ledger.ListOpen(ctx, "intent", 10, ledger.Status(ledger.IntentStatusContradicted)); err != nil || len(open) != 1 {
		t.Fatalf("attention list %+v %v", open, err)
	}
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
	if n := o.Intent(notify12); n.Status != ledger.IntentStatusObsolete || o.Down.Effective(notify12) != 0 {
		t.Fatalf("notice %s, effective %d; want OBSOLETE, never applied", n.Status, o.Down.Effective(notify12))
	}
}

// duringCall performs the effect, then runs then before answering: the
// world moves on while the dispatcher waits for the downstream.
type duringCall struct {
	outbox.Effect
	then func()
}

func (e duringCall) AllowsScope(scope string) bool {
	g, ok := e.Effect.(outbox.ScopeGuard)
	return ok && g.AllowsScope(scope)
}

func (e duringCall) Do(ctx context.Context, c outbox.Call) (outbox.Result, error) {
	res, err := e.Effect.Do(ctx, c)
	e.then()
	return res, err
}

// subscriptionSender returns a function that delivers one signed event of
// subscription subID (account acct) and lets w process it.
func subscriptionSender(t *testing.T, h *pt.Harness, w *pt.Worker, subID, acct string) func(id, typ, status string, at int64) {
	return func(id, typ, status string, at int64) {
		t.Helper()
		b := pt.SubscriptionEvent(id, typ, subID, status, at, acct)
		if r := h.Deliver(b, h.Sign(b, pt.SecretPrimary)); r.Status != 202 {
			t.Fatalf("%s: %d", id, r.Status)
		}
		w.PollOnce(context.Background())
	}
}

// A deletion's version is above 2^53. It reaches the downstream exact in
// the header, the body and the payload, on an emulator that rounds every
// number of an item it updates (the intent is claimed and recorded: two
// updates before and after the call).
func TestDeletionVersionReachesTheDownstreamExact(t *testing.T) {
	h := pt.NewChaos(t, pt.Options{}, pt.OutboxOptions{})
	w, d := h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1")
	send := subscriptionSender(t, h, w, "sub_truth_3", "acct_truth_3")
	send("evt_del", "customer.subscription.deleted", "canceled", created)
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
	want := strconv.FormatInt(builtin.DeletedVersionBase+created*4+3, 10)
	revoke := onlyIntent(t, h, "entitlement.revoke")
	calls := h.Outbox.Arrivals(revoke)
	if len(calls) != 1 || calls[0].Version != want || string(calls[0].BodyVersion) != `"`+want+`"` {
		t.Fatalf("arrivals %+v; want X-Subject-Version and subject_version %s", calls, want)
	}
	var body struct {
		Payload struct {
			Version string `json:"version"`
		} `json:"payload"`
	}
	for _, c := range h.Outbox.Down.Calls() {
		if c.Key == revoke {
			if err := json.Unmarshal(c.Body, &body); err != nil || body.Payload.Version != want {
				t.Fatalf("payload version %q (%v), want %s", body.Payload.Version, err, want)
			}
		}
	}
}

// The reconciler repairs downstream drift: the grant of v5 reached the
// downstream; the revoke of v9 was committed, and its announcement was
// lost (the effects queue dropped it: the intent stays PENDING with no
// message; a processor crash does not lose one, since the redelivered
// pointer announces it again). Long before the stuck-intent sweep would
// find it, the drift check sees the downstream at v5 while the truth is
// v9, re-announces the revoke, and the downstream ends revoked at v9; the
// next run finds the subject in sync.
func TestReconcilerRepairsDownstreamDrift(t *testing.T) {
	h := pt.NewChaos(t, pt.Options{}, pt.OutboxOptions{Lookup: true})
	ctx := context.Background()
	w, d := h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1")
	const subID, acct = "sub_truth_4", "acct_truth_4"
	send := subscriptionSender(t, h, w, subID, acct)
	send("evt_grant_v5", "customer.subscription.created", "active", created)
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)

	send("evt_revoke_v9", "customer.subscription.updated", "unpaid", created+1)
	revoke := onlyIntent(t, h, "entitlement.revoke")
	// The announcement is lost.
	if _, err := h.SQS.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(h.Outbox.Queues.Queue)}); err != nil {
		t.Fatal(err)
	}
	h.Clock.Advance(time.Minute) // past the grant's cursor lease: due for a drift check, not yet stuck
	if in := h.Outbox.Intent(revoke); in.Status != ledger.IntentStatusPending || h.Outbox.Down.Effective(revoke) != 0 {
		t.Fatalf("revoke %s, effective %d; want PENDING and never announced", in.Status, h.Outbox.Down.Effective(revoke))
	}

	rc := &reconciler.Reconciler{Ledger: h.Ledger, SQS: h.SQS, Sources: h.Sources, Effects: h.Outbox.Effects,
		Queues:   reconciler.Queues{Events: h.Queues.Queue, EventsDLQ: h.Queues.DLQ, Effects: h.Outbox.Queues.Queue, EffectsDLQ: h.Outbox.Queues.DLQ},
		Registry: builtin.Default(builtin.StripeOptions{}),
		// goaws answers a short poll with every message: no long poll here.
		Opts: reconciler.Options{Now: h.Clock.Now, Log: slog.New(slog.DiscardHandler), MaxItems: 100, DLQWait: -1}}
	rep, err := rc.Run(ctx)
	if err != nil || rep.Downstream.Drifting != 1 || rep.Downstream.Reannounced != 1 || rep.IntentsReannounced != 0 {
		t.Fatalf("reconciler: %+v %v; want one drifting subject, its revoke re-announced by the drift check", rep, err)
	}
	h.DrainAll(drainTimeout, idle, nil, d)
	p, err := h.Ledger.GetProjection(ctx, projection.ScopedName("stripe", builtin.StripeSubscriptionProjection), subID)
	view, _ := h.Outbox.Down.Subject("stripe", acct)
	if err != nil || h.Outbox.Intent(revoke).Status != ledger.IntentStatusSucceeded || view.LastKind != "entitlement.revoke" || view.Last != fmt.Sprint(p.Version) || view.Regressions != 0 {
		t.Fatalf("after the repair: revoke %s, downstream %+v, projection v%d (%v)", h.Outbox.Intent(revoke).Status, view, p.Version, err)
	}
	h.Clock.Advance(time.Minute)
	if rep, err := rc.Run(ctx); err != nil || rep.Downstream.Drifting != 0 {
		t.Fatalf("second run: %+v %v; want in sync", rep.Downstream, err)
	}
}

// Found by the chaos checker: cancelled at r12 (the refund waits on a
// 503), confirmed at r13, cancelled again at r14. When r12's refund is
// retried the order is cancelled again, but not by r12's reason: r13
// removed it, and r14 brought its own refund. r12's ends OBSOLETE; only
// r14's is performed.
func TestReasonRemovedThenRestoredStaysObsolete(t *testing.T) {
	h, o, w, d := orderPipeline(t, pt.OutboxOptions{})
	ctx := context.Background()
	o.Down.Then(downstream.Behavior{Mode: downstream.Unavailable503, RetryAfter: 20 * time.Second},
		downstream.Behavior{Mode: downstream.Unavailable503, RetryAfter: 20 * time.Second})
	deliver(t, h, "msg_o42_12", pt.OrderEvent("order.cancelled", o42, 12, "", ""), 202)
	w.PollOnce(ctx)
	d.PollOnce(ctx)
	deliver(t, h, "msg_o42_13", pt.OrderEvent("order.confirmed", o42, 13, "confirmed", ""), 202)
	w.PollOnce(ctx)
	settle(t, h, w, d, "msg_o42_14", pt.OrderEvent("order.cancelled", o42, 14, "", ""))
	requireOrder(t, h, "cancelled", 14)
	refund14, notify14 := pt.OrderOps(o42, 14)
	for _, op := range []string{refund12, notify12} {
		if in := o.Intent(op); in.Status != ledger.IntentStatusObsolete || in.ContradictedBy != 13 || o.Down.Effective(op) != 0 {
			t.Fatalf("%s ended %s (%s), contradicted by %d, effective %d; want OBSOLETE, never applied", op, in.Status, in.Detail, in.ContradictedBy, o.Down.Effective(op))
		}
	}
	for _, op := range []string{refund14, notify14} {
		if in := o.Intent(op); in.Status != ledger.IntentStatusSucceeded || o.Down.Effective(op) != 1 {
			t.Fatalf("%s ended %s, effective %d", op, in.Status, o.Down.Effective(op))
		}
	}
}

// The notice's call is applied and
// then times out (UNCERTAIN); the recheck, with no status endpoint to ask,
// retries with the same key and meets a 500 (RETRY_WAIT), which says
// nothing about the first attempt. The operator's r13 arrives. The intent
// must not end OBSOLETE as if never sent: it may have been performed and
// nobody can tell, so it is QUARANTINED for its owner.
func TestTimedOutThenFailedRetryIsStillMaybeSent(t *testing.T) {
	h, o, w, d := orderPipeline(t, pt.OutboxOptions{})
	ctx := context.Background()
	deliver(t, h, "msg_o42_12", pt.OrderEvent("order.cancelled", o42, 12, "", ""), 202)
	w.PollOnce(ctx)
	// The first call succeeds; the second is applied, then hangs (timeout).
	o.Down.Then(downstream.Behavior{Mode: downstream.Apply}, downstream.Behavior{Mode: downstream.HangAfterApply})
	d.Batch = 1
	for range 2 {
		d.PollOnce(ctx)
	}
	var hung string
	for _, op := range []string{refund12, notify12} {
		if o.Intent(op).Status == ledger.IntentStatusUncertain {
			hung = op
		}
	}
	if hung == "" || o.Down.Effective(hung) != 1 {
		t.Fatalf("want one intent applied and UNCERTAIN: refund %s, notice %s", o.Intent(refund12).Status, o.Intent(notify12).Status)
	}
	// The recheck retries with the same key and meets a 500.
	o.Down.Then(downstream.Behavior{Mode: downstream.Fail500})
	h.Clock.Advance(time.Minute)
	if n := o.Reconcile(h.Clock.Now()); n == 0 {
		t.Fatal("nothing re-announced")
	}
	for i := 0; i < 20 && o.Intent(hung).Status != ledger.IntentStatusRetryWait; i++ {
		d.PollOnce(ctx)
		time.Sleep(50 * time.Millisecond)
	}
	if in := o.Intent(hung); in.Status != ledger.IntentStatusRetryWait || !in.MaybeSent {
		t.Fatalf("after the 500: %s maybe_sent=%v", in.Status, in.MaybeSent)
	}
	deliver(t, h, "msg_o42_13", pt.OrderEvent("order.confirmed", o42, 13, "confirmed", ""), 202)
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
	got := o.Intent(hung)
	if got.Status != ledger.IntentStatusQuarantined || got.ErrorCode != "obsolete_maybe_performed" || o.Down.Effective(hung) != 1 {
		t.Fatalf("the applied intent ended %s (%s: %s), effective %d; want QUARANTINED obsolete_maybe_performed, never OBSOLETE", got.Status, got.ErrorCode, got.Detail, o.Down.Effective(hung))
	}
}
