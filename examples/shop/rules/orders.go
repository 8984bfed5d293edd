package rules

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// OrderProjection is the shop's order projection's name in the ledger
// (a service reads an order with state.Reader.Subject(ctx, "shop-stripe",
// "order", id)).
const OrderProjection = "order"

// Orders projects the shop's orders from Stripe: payment_intent.succeeded
// (the order is paid) and charge.refunded (the order's charge was refunded,
// in full or in part).
//
// Subject: the order id, from the Stripe object's metadata.order_id (the
// shop's checkout sets it on the PaymentIntent and on its charge). An
// event without it names no order of the shop and is quarantined
// (unknown_subject) for an operator, never guessed.
//
// Ordering: version = created×10 + rank, with rank paid (1) < partly
// refunded (2) < refunded (3). created (Stripe's event time, whole
// seconds) orders events of different seconds whatever order they arrive
// in; a payment and its refund often share a second (an automated fraud
// refund), and a refund cannot precede its payment, so the rank puts it
// after, and a full refund after a partial one. Two partial refunds with
// different amounts in one second share a version with two states: the
// second processed is quarantined (version_conflict), not settled by
// arrival order.
//
// State: {order_id, status, payment_intent, customer, amount,
// amount_refunded, currency}. status is "paid" until the charge is
// refunded in full, then "refunded"; a partial refund keeps the order paid
// (it still ships) and records how much was refunded.
//
// Intents: a paid state, whichever event brings it (a partial refund may
// arrive before the payment), asks for two effects, each keyed by the
// order and the effect, so the ledger writes each once per order:
//
//   - ship_order, while_current with the condition status=paid: a
//     shipment still waiting when the refund arrives ends OBSOLETE without
//     a call. One already sent is compensated: the refund's commit writes
//     a cancel_shipment intent (once, keyed projection.CompensationID of
//     the shipment's), which stops the parcel or arranges its return.
//   - send_confirmation, once: the customer was told the payment went
//     through, whatever happens later.
type Orders struct{}

var _ projection.Projection = Orders{}

// NewOrders returns the projection.
func NewOrders() Orders { return Orders{} }

// Name returns the projection name.
func (Orders) Name() string { return OrderProjection }

// EventTypes lists the Stripe event types it handles.
func (Orders) EventTypes() []string {
	return []string{"payment_intent.succeeded", "charge.refunded"}
}

// The ranks of the ordering rule.
const (
	rankPaid     = 1
	rankPartly   = 2
	rankRefunded = 3
)

// maxCreated bounds created (the year 2100), so created×10 + rank cannot
// overflow.
const maxCreated = 4102444800

// stripeEvent is the envelope of a Stripe snapshot event.
type stripeEvent struct {
	Created int64 `json:"created"`
	Data    struct {
		Object json.RawMessage `json:"object"`
	} `json:"data"`
}

// payment is what the shop reads of a PaymentIntent or a Charge.
type payment struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	AmountRefunded int64             `json:"amount_refunded"`
	Refunded       bool              `json:"refunded"`
	Currency       string            `json:"currency"`
	Customer       string            `json:"customer"`
	PaymentIntent  string            `json:"payment_intent"`
	Metadata       map[string]string `json:"metadata"`
}

// Project computes the order's state from one event.
func (Orders) Project(ev projection.Event) (projection.Result, error) {
	var e stripeEvent
	if err := json.Unmarshal(ev.Payload, &e); err != nil {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("stripe event is not JSON: %v", err))
	}
	if e.Created <= 0 || e.Created >= maxCreated {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("stripe event created %d is missing or out of range", e.Created))
	}
	var p payment
	if err := json.Unmarshal(e.Data.Object, &p); err != nil {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("data.object: %v", err))
	}
	var status, pi string
	var rank int64
	switch {
	case ev.Type == "payment_intent.succeeded" && p.Object == "payment_intent":
		status, rank, pi = "paid", rankPaid, p.ID
		p.AmountRefunded = 0
	case ev.Type == "charge.refunded" && p.Object == "charge" && p.Refunded:
		status, rank, pi = "refunded", rankRefunded, p.PaymentIntent
	case ev.Type == "charge.refunded" && p.Object == "charge":
		status, rank, pi = "paid", rankPartly, p.PaymentIntent
	default:
		return projection.Result{}, projection.Permanent("unsupported_type", fmt.Errorf("%s with a data.object of type %q", ev.Type, p.Object))
	}
	order := p.Metadata["order_id"]
	if err := checkOrderID(order); err != nil {
		return projection.Result{}, err
	}
	state := map[string]any{
		"order_id": order, "status": status, "payment_intent": pi, "customer": p.Customer,
		"amount": p.Amount, "amount_refunded": p.AmountRefunded, "currency": p.Currency,
	}
	res := projection.Result{Write: &projection.Write{
		Name: OrderProjection, Subject: order, Version: e.Created*10 + rank,
		Fingerprint: projection.Fingerprint(state), State: state,
	}}
	if status != "paid" {
		return res, nil
	}
	payload := map[string]any{"order_id": order, "payment_intent": pi, "customer": p.Customer, "amount": p.Amount, "currency": p.Currency}
	res.Intents = []projection.Intent{
		{
			OperationID: projection.OperationID(order, "ship_order"),
			Kind:        "ship_order", Subject: order, Payload: payload,
			// Shipping is justified by the order being paid: a refund
			// processed before the shipment is sent makes it obsolete, one
			// processed after it cancels the shipment.
			Policy: projection.PolicyWhileCurrent, Condition: map[string]string{"status": "paid"},
			Compensation: "cancel_shipment",
		},
		{
			OperationID: projection.OperationID(order, "send_confirmation"),
			Kind:        "send_confirmation", Subject: order, Payload: payload,
			Policy: projection.PolicyOnce,
		},
	}
	return res, nil
}

// checkOrderID refuses an order id the ledger cannot key.
func checkOrderID(id string) error {
	switch {
	case id == "":
		return projection.Permanent("unknown_subject", errors.New("no metadata.order_id: the event names no order of the shop"))
	case len(id) > projection.MaxIDLength:
		return projection.Permanent("malformed", fmt.Errorf("metadata.order_id is longer than %d bytes", projection.MaxIDLength))
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return projection.Permanent("malformed", errors.New("metadata.order_id has control characters: "+strconv.Quote(id)))
		}
	}
	return nil
}
