package pipelinetest_test

import (
	"encoding/json"
	"strings"
	"testing"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// recordForger is another team's projection (or a bug in one) that
// returns, beside its own state, an intent of the warehouse's record kind
// aimed at the operator's order: scope "orders", projection "order",
// O-42 at revision 12, with a state the operator never applied.
type recordForger struct{}

func (recordForger) Name() string { return "inventory" }

func (recordForger) Project(ev projection.Event) (projection.Result, error) {
	var e struct {
		Data struct {
			ID       string `json:"id"`
			Revision int64  `json:"revision"`
		} `json:"data"`
	}
	if err := json.Unmarshal(ev.Payload, &e); err != nil {
		return projection.Result{}, projection.Permanent("malformed", err)
	}
	state := map[string]any{"stock": "synced"}
	return projection.Result{
		Write: &projection.Write{Name: "inventory", Subject: e.Data.ID, Version: e.Data.Revision, State: state, Fingerprint: projection.Fingerprint(state)},
		Intents: []projection.Intent{{
			OperationID: projection.OperationID(e.Data.ID, "forged", "12"), Kind: warehouse.Kind, Subject: o42, Policy: projection.PolicyOnce,
			Payload: map[string]any{
				"scope": "orders", "projection": builtin.OrderProjection, "subject": o42, "version": "12",
				"state": map[string]any{"status": "refunded_in_full"}, "event_id": "msg_o42_12", "source": "orders",
				"applied_at": "2026-11-30T12:00:00.000Z",
			},
		}},
	}, nil
}

// A projection of another scope (the vendor's inventory rule) returns an
// intent of the reserved kind warehouse.record naming the operator's
// O-42 at revision 12, before the operator's own revision 12 arrives.
// The vendor's event is QUARANTINED as a broken projection contract, with
// the code and the projection named, and writes nothing; the operator's
// genuine record of revision 12 is written (its intent SUCCEEDED, not
// warehouse_conflict) and is the warehouse's current row of O-42.
func TestAProjectionCannotForgeAnotherScopesWarehouseRecord(t *testing.T) {
	reg := builtin.Default(builtin.StripeOptions{})
	reg.Register("standard-webhooks", []string{"inventory.synced"}, recordForger{})
	h := pt.NewOrders(t, pt.Options{Registry: reg, SourcesDoc: vendorSources(""), Secrets: map[string]string{"VENDOR_SECRET": vendorSecret}}, pt.OutboxOptions{})
	wh := h.EnableWarehouse(0)
	w, d := h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1")

	if r := h.DeliverStandardWebhook("vendor", vendorSecret, "msg_vendor_forge", pt.OrderEvent("inventory.synced", o42, 12, "", "")); r.Status != 202 {
		t.Fatalf("vendor: %d %s", r.Status, r.Body)
	}
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
	settle(t, h, w, d, "msg_o42_12", pt.OrderEvent("order.cancelled", o42, 12, "", ""))

	ev := h.EventOf("vendor", "msg_vendor_forge")
	if ev.Status != ledger.StatusQuarantined || ev.ErrorCode != projection.CodeInvalidResult ||
		!strings.Contains(ev.ErrorMessage, `projection "vendor/inventory"`) || !strings.Contains(ev.ErrorMessage, warehouse.Kind) {
		t.Errorf("the vendor's event: %s %s %q; want QUARANTINED %s naming vendor/inventory and the reserved kind",
			ev.Status, ev.ErrorCode, ev.ErrorMessage, projection.CodeInvalidResult)
	}
	requireOrder(t, h, "cancelled", 12)
	genuine := h.Outbox.Intent(warehouse.OperationID("orders", builtin.OrderProjection, o42, 12))
	if genuine.Status != ledger.IntentStatusSucceeded {
		t.Errorf("the operator's record of O-42 @ 12: %s %s %s; want SUCCEEDED", genuine.Status, genuine.ErrorCode, genuine.Detail)
	}
	var cur *warehouse.Record
	for _, r := range wh.Records() {
		if r.Scope == "orders" && r.Projection == builtin.OrderProjection && r.Subject == o42 && (cur == nil || r.VersionInt() > cur.VersionInt()) {
			cur = &r
		}
	}
	if cur == nil || cur.VersionInt() != 12 || cur.State["status"] != "cancelled" || cur.Source != "orders" || cur.EventID != "msg_o42_12" {
		t.Errorf("the warehouse's current row of orders/O-42: %+v; want the operator's cancelled @ 12 from msg_o42_12", cur)
	}
	for _, in := range h.Intents() {
		if in.Causation == "vendor/msg_vendor_forge" {
			t.Errorf("the vendor's event wrote intent %s (%s)", in.OperationID, in.Kind)
		}
	}
}
