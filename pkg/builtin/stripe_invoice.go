package builtin

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// StripeInvoiceProjection is the invoice projection's name in the ledger.
const StripeInvoiceProjection = "stripe_invoice"

// Stripe versions with a terminal tier (invoices and payment intents).
const (
	// stripeTerminalTier lifts the version of a terminal fact (invoice paid
	// or voided, payment intent succeeded or canceled) above every
	// non-terminal version of the same object, whatever their timestamps.
	stripeTerminalTier int64 = 1 << 40
	// stripeMaxCreated bounds event.created (year ~6300) so that created×4 +
	// rank stays below the tier and never overflows.
	stripeMaxCreated int64 = 1 << 37
)

// stripeTieredVersion is created×4 + rank, plus stripeTerminalTier when
// the fact is terminal.
func stripeTieredVersion(created, rank int64, terminal bool) int64 {
	v := created*4 + rank
	if terminal {
		v += stripeTerminalTier
	}
	return v
}

// stripeObject reads a Stripe event's envelope and checks created.
func stripeObject(payload []byte) (stripeEvent, error) {
	var e stripeEvent
	if err := json.Unmarshal(payload, &e); err != nil {
		return e, projection.Permanent("malformed", fmt.Errorf("stripe event is not JSON: %v", err))
	}
	if e.Created <= 0 || e.Created >= stripeMaxCreated {
		return e, projection.Permanent("malformed", errors.New("stripe event has no plausible created time"))
	}
	return e, nil
}

// StripeInvoices projects invoice.paid, invoice.payment_failed and
// invoice.voided into one payment state per invoice id.
//
// # Ordering rule
//
// version = created×4 + rank, plus 2^40 when the event is terminal, with
// rank payment_failed (1) < paid (2) < voided (3).
//
// created is Stripe's event time in whole seconds: it orders events of
// different seconds, and the rank orders those of one second (a failed
// attempt and the successful retry are often stamped in the same second;
// the success must win).
//
// paid and voided are terminal (Terminal is set): Stripe never reopens a
// paid or voided invoice. The terminal tier (2^40, far above any created×4)
// puts every terminal version above every non-terminal one, so a
// payment_failed never overwrites paid or voided, whatever the arrival
// order and even when its created is later (a payment attempt still in
// flight when the invoice was paid out of band fails after the payment).
// Without the tier, a late-stamped failure that arrived first would make
// the paid event stale and the invoice would stay "failed" forever; the
// terminal flag alone only protects a paid state already stored.
//
// paid and voided exclude each other in Stripe. Should both ever arrive,
// the first one applied stays (the other is recorded stale because the
// stored state is terminal) and the reconciler compares with Stripe.
//
// Two different payment_failed events in one second with different states
// share a version and are quarantined by the ledger (version_conflict);
// identical ones are a noop.
//
// # Intents
//
// An applied paid state emits one "invoice.fulfil" intent keyed
// projection.OperationID("stripe_invoice", invoice id, "paid"): one fulfilment per
// invoice, however many events or deliveries report the payment. Its
// policy is once: paid is terminal in Stripe, so the fact that justifies
// fulfilment never stops being true.
type StripeInvoices struct{}

var _ projection.Projection = (*StripeInvoices)(nil)

// NewStripeInvoices returns the projection.
func NewStripeInvoices() *StripeInvoices { return &StripeInvoices{} }

var stripeInvoiceRank = map[string]int64{
	"invoice.payment_failed": 1,
	"invoice.paid":           2,
	"invoice.voided":         3,
}

// Name returns the projection name.
func (*StripeInvoices) Name() string { return StripeInvoiceProjection }

// EventTypes lists the Stripe event types it handles.
func (*StripeInvoices) EventTypes() []string {
	return []string{"invoice.paid", "invoice.payment_failed", "invoice.voided"}
}

type stripeInvoice struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Customer         json.RawMessage   `json:"customer"`
	Subscription     json.RawMessage   `json:"subscription"`
	Status           string            `json:"status"`
	Number           string            `json:"number"`
	Currency         string            `json:"currency"`
	AmountDue        int64             `json:"amount_due"`
	AmountPaid       int64             `json:"amount_paid"`
	AmountRemaining  int64             `json:"amount_remaining"`
	AttemptCount     int64             `json:"attempt_count"`
	Metadata         map[string]string `json:"metadata"`
	PaymentIntent    json.RawMessage   `json:"payment_intent"`
	HostedInvoiceURL string            `json:"hosted_invoice_url"`
}

// Project computes the invoice state from one event.
func (*StripeInvoices) Project(ev projection.Event) (projection.Result, error) {
	rank, ok := stripeInvoiceRank[ev.Type]
	if !ok {
		return projection.Result{}, projection.Permanent("unsupported_type", fmt.Errorf("stripe invoice projection does not handle %q", ev.Type))
	}
	e, err := stripeObject(ev.Payload)
	if err != nil {
		return projection.Result{}, err
	}
	var inv stripeInvoice
	if err := json.Unmarshal(e.Data.Object, &inv); err != nil {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("data.object is not an invoice: %v", err))
	}
	if inv.Object != "invoice" || !strings.HasPrefix(inv.ID, "in_") {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("data.object is not an invoice (object %q, id %q)", inv.Object, inv.ID))
	}
	if err := validSubject("invoice id", inv.ID); err != nil {
		return projection.Result{}, err
	}
	outcome := strings.TrimPrefix(ev.Type, "invoice.")
	terminal := outcome != "payment_failed"
	version := stripeTieredVersion(e.Created, rank, terminal)
	customer := customerID(inv.Customer)
	state := map[string]any{
		"invoice_id":       inv.ID,
		"customer_id":      customer,
		"outcome":          outcome,
		"status":           inv.Status,
		"currency":         inv.Currency,
		"amount_due":       inv.AmountDue,
		"amount_paid":      inv.AmountPaid,
		"amount_remaining": inv.AmountRemaining,
		"attempt_count":    inv.AttemptCount,
	}
	res := projection.Result{Write: &projection.Write{
		Name: StripeInvoiceProjection, Subject: inv.ID, Version: version,
		Fingerprint: projection.Fingerprint(state), Terminal: terminal, State: state,
	}}
	if outcome == "paid" {
		res.Intents = []projection.Intent{{
			OperationID: projection.OperationID(StripeInvoiceProjection, inv.ID, "paid"),
			Kind:        "invoice.fulfil",
			Subject:     inv.ID,
			Payload: map[string]any{
				"invoice_id": inv.ID, "customer_id": customer, "subscription_id": customerID(inv.Subscription),
				"payment_intent_id": customerID(inv.PaymentIntent), "number": inv.Number,
				"amount_paid": inv.AmountPaid, "currency": inv.Currency,
				"metadata": stringMap(inv.Metadata), "version": version,
			},
		}}
	}
	return res, nil
}
