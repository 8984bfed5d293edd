package builtin

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// StripePaymentIntentProjection is the payment intent projection's name in
// the ledger.
const StripePaymentIntentProjection = "stripe_payment_intent"

// StripePaymentIntents projects payment_intent.processing, .succeeded,
// .payment_failed and .canceled into one payment state per payment intent
// id.
//
// # Ordering rule
//
// version = created×4 + rank, plus 2^40 when the event is terminal, with
// rank processing (1) < payment_failed (2) < succeeded (3) = canceled (3).
//
// created (whole seconds) orders events of different seconds: a payment
// intent legitimately goes processing → payment_failed → processing again
// (the customer retries) → succeeded, and the newest report wins. Within
// one second a failure outranks processing: the attempt that was
// processing is the one that failed.
//
// succeeded and canceled are terminal (Terminal is set; Stripe never moves
// a payment intent out of either) and sit in the terminal tier (2^40 above
// every non-terminal version), so a processing or payment_failed event
// never overwrites them, whatever its created: a "processing" that
// arrives after "succeeded" is stale, one that arrives before it is
// overwritten by it, and both orders end succeeded. The two terminal
// facts exclude each other in Stripe; should both arrive, the first one
// applied stays and the reconciler compares with Stripe.
//
// # Intents
//
// An applied succeeded state emits one "payment.confirm" intent keyed
// projection.OperationID("stripe_payment_intent", payment intent id, "succeeded").
//
// # Dispatch policy
//
// payment.confirm is once: succeeded is terminal in Stripe.
type StripePaymentIntents struct{}

var _ projection.Projection = (*StripePaymentIntents)(nil)

// NewStripePaymentIntents returns the projection.
func NewStripePaymentIntents() *StripePaymentIntents { return &StripePaymentIntents{} }

var stripePaymentIntentRank = map[string]int64{
	"payment_intent.processing":     1,
	"payment_intent.payment_failed": 2,
	"payment_intent.succeeded":      3,
	"payment_intent.canceled":       3,
}

// Name returns the projection name.
func (*StripePaymentIntents) Name() string { return StripePaymentIntentProjection }

// EventTypes lists the Stripe event types it handles.
func (*StripePaymentIntents) EventTypes() []string {
	return []string{"payment_intent.processing", "payment_intent.succeeded", "payment_intent.payment_failed", "payment_intent.canceled"}
}

type stripePaymentIntent struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Status             string            `json:"status"`
	Amount             int64             `json:"amount"`
	AmountReceived     int64             `json:"amount_received"`
	Currency           string            `json:"currency"`
	Customer           json.RawMessage   `json:"customer"`
	Invoice            json.RawMessage   `json:"invoice"`
	LatestCharge       json.RawMessage   `json:"latest_charge"`
	CancellationReason string            `json:"cancellation_reason"`
	Metadata           map[string]string `json:"metadata"`
	LastPaymentError   *struct {
		Code        string `json:"code"`
		DeclineCode string `json:"decline_code"`
	} `json:"last_payment_error"`
}

// Project computes the payment intent state from one event.
func (*StripePaymentIntents) Project(ev projection.Event) (projection.Result, error) {
	rank, ok := stripePaymentIntentRank[ev.Type]
	if !ok {
		return projection.Result{}, projection.Permanent("unsupported_type", fmt.Errorf("stripe payment intent projection does not handle %q", ev.Type))
	}
	e, err := stripeObject(ev.Payload)
	if err != nil {
		return projection.Result{}, err
	}
	var pi stripePaymentIntent
	if err := json.Unmarshal(e.Data.Object, &pi); err != nil {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("data.object is not a payment intent: %v", err))
	}
	if pi.Object != "payment_intent" || !strings.HasPrefix(pi.ID, "pi_") {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("data.object is not a payment intent (object %q, id %q)", pi.Object, pi.ID))
	}
	if err := validSubject("payment intent id", pi.ID); err != nil {
		return projection.Result{}, err
	}
	outcome := strings.TrimPrefix(ev.Type, "payment_intent.")
	terminal := outcome == "succeeded" || outcome == "canceled"
	version := stripeTieredVersion(e.Created, rank, terminal)
	customer := customerID(pi.Customer)
	failure := ""
	if pi.LastPaymentError != nil && outcome == "payment_failed" {
		failure = pi.LastPaymentError.Code
		if pi.LastPaymentError.DeclineCode != "" {
			failure += "/" + pi.LastPaymentError.DeclineCode
		}
	}
	state := map[string]any{
		"payment_intent_id":   pi.ID,
		"customer_id":         customer,
		"outcome":             outcome,
		"status":              pi.Status,
		"amount":              pi.Amount,
		"amount_received":     pi.AmountReceived,
		"currency":            pi.Currency,
		"failure_code":        failure,
		"cancellation_reason": pi.CancellationReason,
	}
	res := projection.Result{Write: &projection.Write{
		Name: StripePaymentIntentProjection, Subject: pi.ID, Version: version,
		Fingerprint: projection.Fingerprint(state), Terminal: terminal, State: state,
	}}
	if outcome == "succeeded" {
		res.Intents = []projection.Intent{{
			OperationID: projection.OperationID(StripePaymentIntentProjection, pi.ID, "succeeded"),
			Kind:        "payment.confirm",
			Subject:     pi.ID,
			Payload: map[string]any{
				"payment_intent_id": pi.ID, "customer_id": customer, "invoice_id": customerID(pi.Invoice),
				"charge_id": customerID(pi.LatestCharge), "amount": pi.Amount, "amount_received": pi.AmountReceived,
				"currency": pi.Currency, "metadata": stringMap(pi.Metadata), "version": version,
			},
		}}
	}
	return res, nil
}
