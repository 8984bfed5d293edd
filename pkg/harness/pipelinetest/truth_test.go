package pipelinetest_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/pkg/harness/downstream"
	pt "github.com/effectively-once/webhooks/pkg/harness/pipelinetest"
	"github.com/effectively-once/webhooks/pkg/ledger"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Effects follow the current truth (DESIGN.md I7, issue 12): an intent is
// checked against its projection when the dispatcher claims it.

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
	send := func(id, typ, status string, at int64) {
		t.Helper()
		b := pt.SubscriptionEvent(id, typ, subID, status, at, acct)
		if r := h.Deliver(b, h.Sign(b, pt.SecretPrimary)); r.Status != 202 {
			t.Fatalf("%s: %d", id, r.Status)
		}
		w.PollOnce(ctx)
	}
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
		t.Fatalf("revoke %s, effective %d", in.Status, h.Outbox.Down.Effective(revoke))
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
	p, err := h.Ledger.GetProjection(ctx, projection.StripeSubscriptionProjection, subID)
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
