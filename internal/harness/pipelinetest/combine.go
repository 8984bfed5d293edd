package pipelinetest

import (
	"encoding/json"
	"fmt"

	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// One subject fed by two event families, as a seat-billing team has it:
// builtin.StripeSubscriptions projects customer.subscription.* onto the
// subscription id, and SubscriptionPayments projects invoice.paid and
// invoice.payment_failed onto the same id (the invoice's subscription),
// each under its own version rule. Access combines their current states.

// SubscriptionPaymentProjection is SubscriptionPayments' name.
const SubscriptionPaymentProjection = "subscription_payment"

// SubscriptionPayments projects a subscription's invoices onto the
// subscription: the outcome of its latest invoice event. version =
// created×4 + rank (payment_failed 1 < paid 2): a later invoice's
// outcome replaces an earlier one's, and a payment in the second of a
// failed attempt wins over it. It asks for no effect.
type SubscriptionPayments struct{}

// Name is the projection's name.
func (SubscriptionPayments) Name() string { return SubscriptionPaymentProjection }

// EventTypes are the Stripe events it projects.
func (SubscriptionPayments) EventTypes() []string {
	return []string{"invoice.paid", "invoice.payment_failed"}
}

// Project reads the invoice and writes its outcome on its subscription.
func (SubscriptionPayments) Project(ev projection.Event) (projection.Result, error) {
	rank := map[string]int64{"invoice.payment_failed": 1, "invoice.paid": 2}[ev.Type]
	if rank == 0 {
		return projection.Result{}, projection.Permanent("unsupported_type", fmt.Errorf("not an invoice outcome: %q", ev.Type))
	}
	var e struct {
		Created int64 `json:"created"`
		Data    struct {
			Object struct {
				ID           string `json:"id"`
				Subscription string `json:"subscription"`
			} `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(ev.Payload, &e); err != nil {
		return projection.Result{}, projection.Permanent("malformed", err)
	}
	inv := e.Data.Object
	if inv.Subscription == "" || e.Created <= 0 || e.Created > 1<<40 {
		return projection.Result{}, projection.Permanent("unknown_subject", fmt.Errorf("invoice %q names no subscription or time", inv.ID))
	}
	outcome := "failed"
	if ev.Type == "invoice.paid" {
		outcome = "paid"
	}
	st := map[string]any{"invoice_id": inv.ID, "payment": outcome}
	return projection.Result{Write: &projection.Write{
		Name: SubscriptionPaymentProjection, Subject: inv.Subscription, Version: e.Created*4 + rank,
		Fingerprint: projection.Fingerprint(st), State: st,
	}}, nil
}

// InvoiceEvent renders a Stripe invoice.* event body of an invoice of
// subscription subID.
func InvoiceEvent(eventID, eventType, invoiceID, subID string, created int64) []byte {
	status := "open"
	if eventType == "invoice.paid" {
		status = "paid"
	}
	return fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2025-03-31.basil","created":%d,"type":%q,"livemode":false,`+
		`"data":{"object":{"id":%q,"object":"invoice","customer":"cus_test_1","subscription":%q,"status":%q,"currency":"eur","amount_due":4900}}}`,
		eventID, created, eventType, invoiceID, subID, status)
}

// Access is the combined rule: a subscription that ended (deleted, or
// canceled or expired in Stripe) has access "ended" whatever its
// invoices say; else a failed latest payment suspends it and a paid one
// restores it ("active"). With no subscription state yet it is "none".
func Access(states map[string]map[string]any) map[string]any {
	sub, pay := states[builtin.StripeSubscriptionProjection], states[SubscriptionPaymentProjection]
	access := "none"
	switch {
	case sub == nil:
	case sub["deleted"] == true || sub["status"] == "canceled" || sub["status"] == "incomplete_expired":
		access = "ended"
	case pay != nil && pay["payment"] == "failed":
		access = "suspended"
	default:
		access = "active"
	}
	return map[string]any{"access": access}
}
