package rules

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// DunningProjection is the dunning projection's name in the ledger: a
// subscription's access as its invoices' payments decide it.
const DunningProjection = "dunning"

// SendDunningEmail is the effect that tells a customer an invoice's
// payment failed.
const SendDunningEmail = "send_dunning_email"

// The dunning state's access values.
const (
	AccessSuspended = "suspended" // the newest invoice event is a failed payment
	AccessGranted   = "granted"   // the newest invoice event is a payment
)

// Dunning projects the SaaS's dunning from Stripe's invoice.payment_failed
// (access is suspended) and invoice.paid (access is restored), per
// subscription.
//
// Subject: the subscription the invoice bills, read from
// parent.subscription_details.subscription (API versions from
// 2025-03-31.basil) or subscription (earlier ones), an id or an expanded
// object. An invoice of no subscription (a one-off charge) is not the
// dunning's business: the event is ignored.
//
// Ordering: version = created×4 + rank, with rank payment_failed (1) <
// paid (2): created orders the invoices of one subscription and their
// attempts, and a failed attempt and the payment that follows it in the
// same second leave the subscription paid. Nothing is terminal: a paid
// invoice is followed by next month's. A failure stamped after its own
// invoice's payment (an attempt in flight when the customer paid by other
// means) suspends access until the next payment; this projection sees one
// event at a time and cannot tell.
//
// State: {subscription_id, customer, access, invoice_id, amount_due,
// currency, attempt_count}: access is "suspended" after a failed payment
// and "granted" after a payment, with the invoice that decided it.
// Whether the customer may use the product also depends on the
// subscription itself: see Access.
//
// Intents: a failed payment asks for one send_dunning_email, policy once
// (the customer was told, whatever happens later), keyed by the invoice
// (projection.OperationID("dunning", invoice id, "send_dunning_email")):
// one email per failed invoice, not one per retry attempt (Stripe retries
// a failed invoice several times, each a new invoice.payment_failed with a
// higher attempt_count), and a new one for every other invoice that fails,
// months later too. Its payload is the invoice id, the amount due and the
// currency, the same for every attempt of one invoice.
type Dunning struct{}

var _ projection.Projection = Dunning{}

// NewDunning returns the projection.
func NewDunning() Dunning { return Dunning{} }

// Name returns the projection name.
func (Dunning) Name() string { return DunningProjection }

// EventTypes lists the Stripe event types it handles.
func (Dunning) EventTypes() []string {
	return []string{"invoice.payment_failed", "invoice.paid"}
}

var dunningRank = map[string]int64{
	"invoice.payment_failed": 1,
	"invoice.paid":           2,
}

// invoice is what the SaaS reads of a Stripe Invoice.
type invoice struct {
	ID           string          `json:"id"`
	Object       string          `json:"object"`
	Customer     json.RawMessage `json:"customer"`
	Subscription json.RawMessage `json:"subscription"`
	Parent       struct {
		SubscriptionDetails struct {
			Subscription json.RawMessage `json:"subscription"`
		} `json:"subscription_details"`
	} `json:"parent"`
	Currency     string `json:"currency"`
	AmountDue    int64  `json:"amount_due"`
	AttemptCount int64  `json:"attempt_count"`
}

// Project computes the subscription's dunning state from one event.
func (Dunning) Project(ev projection.Event) (projection.Result, error) {
	rank, ok := dunningRank[ev.Type]
	if !ok {
		return projection.Result{}, projection.Permanent("unsupported_type", fmt.Errorf("the dunning projection does not handle %q", ev.Type))
	}
	e, err := readEvent(ev.Payload)
	if err != nil {
		return projection.Result{}, err
	}
	var inv invoice
	if err := json.Unmarshal(e.Data.Object, &inv); err != nil {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("data.object is not an invoice: %v", err))
	}
	if inv.Object != "invoice" || !strings.HasPrefix(inv.ID, "in_") {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("data.object is not an invoice (object %q, id %q)", inv.Object, inv.ID))
	}
	if err := checkID("invoice id", inv.ID); err != nil {
		return projection.Result{}, err
	}
	sub := objectID(inv.Parent.SubscriptionDetails.Subscription)
	if sub == "" {
		sub = objectID(inv.Subscription)
	}
	if sub == "" {
		return projection.Result{}, nil
	}
	if err := checkID("subscription id", sub); err != nil {
		return projection.Result{}, err
	}
	access := AccessGranted
	if ev.Type == "invoice.payment_failed" {
		access = AccessSuspended
	}
	customer := objectID(inv.Customer)
	state := map[string]any{
		"subscription_id": sub, "customer": customer, "access": access, "invoice_id": inv.ID,
		"amount_due": inv.AmountDue, "currency": inv.Currency, "attempt_count": inv.AttemptCount,
	}
	res := projection.Result{Write: &projection.Write{
		Name: DunningProjection, Subject: sub, Version: e.Created*4 + rank,
		Fingerprint: projection.Fingerprint(state), State: state,
	}}
	if access == AccessSuspended {
		res.Intents = []projection.Intent{{
			OperationID: projection.OperationID(DunningProjection, inv.ID, SendDunningEmail),
			Kind:        SendDunningEmail, Subject: sub, Policy: projection.PolicyOnce,
			Payload: map[string]any{
				"invoice_id": inv.ID, "subscription_id": sub, "customer": customer,
				"amount_due": inv.AmountDue, "currency": inv.Currency,
			},
		}}
	}
	return res, nil
}
