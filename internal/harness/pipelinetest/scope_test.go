package pipelinetest_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// An effect names the scope it acts for, end to end: the vendor (another
// Standard Webhooks sender with its own, lower-value secret, see
// vendorSources) and the operator's orders source both emit refund and
// notify_cancellation intents for their own O-42, and the one endpoint per
// kind serves the scopes its EFFECTS entry names.

// vendorOps are the operation ids of the vendor's cancellation of O-42 at
// revision rev: its refund and notice, in the vendor's scope.
func vendorOps(rev int) (refund, notify string) {
	r := strconv.Itoa(rev)
	return projection.ScopedOperationID("vendor", projection.OperationID(o42, "refund_due_to_cancellation", r)),
		projection.ScopedOperationID("vendor", projection.OperationID(o42, "notify_cancellation", r))
}

// The vendor signs order.cancelled for O-42 at revision 999. Only the
// vendor's O-42 changes, and its refund and notice, which the refund and
// notification endpoints (scopes ["orders"]) must never see, end
// QUARANTINED with scope_not_allowed, naming the scope and the kind; the
// endpoints receive nothing for them, and the dispatchers count both
// refusals. The operator's genuine cancellation at revision 12 is then
// refunded and noticed once each.
func TestAVendorsCancellationNeverReachesTheOperatorsRefundEndpoint(t *testing.T) {
	h := pt.NewOrders(t, pt.Options{SourcesDoc: vendorSources(""), Secrets: map[string]string{"VENDOR_SECRET": vendorSecret}},
		pt.OutboxOptions{Scopes: map[string][]string{"refund": {"orders"}, "notify_cancellation": {"orders"}}})
	w, d := h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1")
	if r := h.DeliverStandardWebhook("vendor", vendorSecret, "msg_vendor_999", pt.OrderEvent("order.cancelled", o42, 999, "", "")); r.Status != 202 {
		t.Fatalf("vendor: %d %s", r.Status, r.Body)
	}
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)

	vRefund, vNotify := vendorOps(999)
	for _, c := range []struct{ op, kind string }{{vRefund, "refund"}, {vNotify, "notify_cancellation"}} {
		in := h.Outbox.Intent(c.op)
		if in.Status != ledger.IntentStatusQuarantined || in.ErrorCode != outbox.CodeScopeNotAllowed || in.Scope != "vendor" || in.Source != "vendor" {
			t.Fatalf("vendor's %s: %s %s scope %q source %q; want QUARANTINED scope_not_allowed", c.kind, in.Status, in.ErrorCode, in.Scope, in.Source)
		}
		last := in.Audit[len(in.Audit)-1]
		if last.To != ledger.Status(ledger.IntentStatusQuarantined) || !strings.Contains(last.Reason, `scope "vendor"`) || !strings.Contains(last.Reason, `effect "`+c.kind+`"`) {
			t.Fatalf("vendor's %s audit %+v", c.kind, last)
		}
		if n := len(h.Outbox.Arrivals(c.op)); n != 0 || h.Outbox.Down.Effective(c.op) != 0 {
			t.Fatalf("vendor's %s reached the endpoint: %d calls, effective %d", c.kind, n, h.Outbox.Down.Effective(c.op))
		}
	}
	if all := h.Outbox.Arrivals(""); len(all) != 0 {
		t.Fatalf("the endpoints received %+v", all)
	}
	refused, recs := h.Outbox.Metric("EffectsScopeRefused")
	if refused != 2 || recs[0]["scope"] != "vendor" || recs[1]["scope"] != "vendor" {
		t.Fatalf("EffectsScopeRefused %v in %v", refused, recs)
	}
	// The vendor's own O-42 did change: its fact stays its own.
	if vp, err := h.Ledger.GetProjection(context.Background(), projection.ScopedName("vendor", builtin.OrderProjection), o42); err != nil || vp.Version != 999 {
		t.Fatalf("the vendor's O-42: %+v %v", vp, err)
	}

	settle(t, h, w, d, "msg_o42_12", pt.OrderEvent("order.cancelled", o42, 12, "", ""))
	requireOrder(t, h, "cancelled", 12)
	for _, op := range []string{refund12, notify12} {
		in := h.Outbox.Intent(op)
		calls := h.Outbox.Arrivals(op)
		if in.Status != ledger.IntentStatusSucceeded || h.Outbox.Down.Effective(op) != 1 || len(calls) != 1 || calls[0].Scope != "orders" {
			t.Fatalf("operator's %s: %s, effective %d, calls %+v", op, in.Status, h.Outbox.Down.Effective(op), calls)
		}
	}
	if refused, _ := h.Outbox.Metric("EffectsScopeRefused"); refused != 2 {
		t.Fatalf("EffectsScopeRefused %v after the operator's cancellation", refused)
	}
}

// With both scopes allowed, every call the endpoints receive names whose
// fact it acts on, in the headers (X-Effect-Scope, X-Effect-Source) and in
// the body (scope, source): the operator's O-42 and the vendor's are told
// apart by the downstream, not only by their keys.
func TestEveryEffectCallNamesItsScopeAndSource(t *testing.T) {
	both := []string{"orders", "vendor"}
	h := pt.NewOrders(t, pt.Options{SourcesDoc: vendorSources(""), Secrets: map[string]string{"VENDOR_SECRET": vendorSecret}},
		pt.OutboxOptions{Scopes: map[string][]string{"refund": both, "notify_cancellation": both}})
	w, d := h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1")
	if r := h.DeliverStandardWebhook("vendor", vendorSecret, "msg_vendor_999", pt.OrderEvent("order.cancelled", o42, 999, "", "")); r.Status != 202 {
		t.Fatalf("vendor: %d %s", r.Status, r.Body)
	}
	settle(t, h, w, d, "msg_o42_12", pt.OrderEvent("order.cancelled", o42, 12, "", ""))

	vRefund, vNotify := vendorOps(999)
	want := map[string]struct{ scope, version string }{
		refund12: {"orders", "12"}, notify12: {"orders", "12"}, vRefund: {"vendor", "999"}, vNotify: {"vendor", "999"},
	}
	calls := h.Outbox.Arrivals("")
	if len(calls) != len(want) {
		t.Fatalf("calls %+v", calls)
	}
	for _, a := range calls {
		wa, ok := want[a.Key]
		if !ok {
			t.Fatalf("a call with key %s", a.Key)
		}
		if a.Scope != wa.scope || a.Source != wa.scope || a.BodyScope != wa.scope || a.BodySource != wa.scope || a.Subject != o42 || a.Version != wa.version {
			t.Fatalf("%s call: header scope %q source %q, body scope %q source %q, subject %q version %q; want %s at %s",
				a.Key, a.Scope, a.Source, a.BodyScope, a.BodySource, a.Subject, a.Version, wa.scope, wa.version)
		}
		if in := h.Outbox.Intent(a.Key); in.Status != ledger.IntentStatusSucceeded || in.Scope != wa.scope || in.Source != wa.scope {
			t.Fatalf("%s: %s scope %q source %q", a.Key, in.Status, in.Scope, in.Source)
		}
	}
}

// orderSync is the order projection with one state-sync intent per
// applied revision instead of its refund and notice: "order.sync", policy
// latest, subject the order, so the downstream's versions of the order
// are what is at stake.
type orderSync struct{ *builtin.Orders }

func (p orderSync) Project(ev projection.Event) (projection.Result, error) {
	r, err := p.Orders.Project(ev)
	if err != nil || r.Write == nil {
		return r, err
	}
	v := strconv.FormatInt(r.Write.Version, 10)
	r.Intents = []ledger.Intent{{OperationID: projection.OperationID(r.Write.Subject, "order.sync", v), Kind: "order.sync",
		Subject: r.Write.Subject, Policy: ledger.PolicyLatest, Payload: map[string]any{"status": r.Write.State["status"]}}}
	return r, nil
}

// Both scopes may use a state sync at a downstream that refuses older
// versions of a subject. The vendor's O-42 at revision 999 is synced
// first; the operator's revisions 12 and 13 of its own O-42 still reach
// the downstream and are applied (not refused as older, not superseded by
// the vendor's subject cursor): the downstream's view of the operator's
// O-42 ends at 13, of the vendor's at 999.
func TestAVendorsVersionCannotMakeTheOperatorsLaterVersionsLookOld(t *testing.T) {
	reg := projection.NewRegistry()
	orders := orderSync{builtin.NewOrders(builtin.OrderOptions{})}
	reg.Register("standard-webhooks", orders.EventTypes(), orders)
	h := pt.NewOrders(t, pt.Options{SourcesDoc: vendorSources(""), Secrets: map[string]string{"VENDOR_SECRET": vendorSecret}, Registry: reg},
		pt.OutboxOptions{Kinds: []string{"order.sync"}, Scopes: map[string][]string{"order.sync": {"orders", "vendor"}}, RefuseOlder: true})
	w, d := h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1")
	if r := h.DeliverStandardWebhook("vendor", vendorSecret, "msg_vendor_999", pt.OrderEvent("order.updated", o42, 999, "shipped", "")); r.Status != 202 {
		t.Fatalf("vendor: %d %s", r.Status, r.Body)
	}
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
	settle(t, h, w, d, "msg_o42_12", pt.OrderEvent("order.created", o42, 12, "", ""))
	settle(t, h, w, d, "msg_o42_13", pt.OrderEvent("order.confirmed", o42, 13, "", ""))
	requireOrder(t, h, "confirmed", 13)

	for _, c := range []struct{ scope, version string }{{"vendor", "999"}, {"orders", "12"}, {"orders", "13"}} {
		op := projection.ScopedOperationID(c.scope, projection.OperationID(o42, "order.sync", c.version))
		in := h.Outbox.Intent(op)
		if in.Status != ledger.IntentStatusSucceeded || h.Outbox.Down.Effective(op) != 1 {
			t.Fatalf("%s's sync at %s: %s (%s: %s), effective %d; want SUCCEEDED, applied once", c.scope, c.version, in.Status, in.ErrorCode, in.Detail, h.Outbox.Down.Effective(op))
		}
	}
	ops, _ := h.Outbox.Down.Subject("orders", o42)
	if ops.Last != "13" || ops.LastKind != "order.sync" || len(ops.History) != 2 || ops.History[0].Version != "12" || len(ops.Refused) != 0 || ops.Regressions != 0 {
		t.Fatalf("the downstream's view of the operator's O-42: %+v; want 12 then 13, nothing refused", ops)
	}
	if ops.History[1].State["status"] != "confirmed" {
		t.Fatalf("the operator's O-42 ends %v at the downstream", ops.History[1].State)
	}
	ven, _ := h.Outbox.Down.Subject("vendor", o42)
	if ven.Last != "999" || len(ven.History) != 1 || ven.History[0].State["status"] != "shipped" {
		t.Fatalf("the downstream's view of the vendor's O-42: %+v", ven)
	}
}
