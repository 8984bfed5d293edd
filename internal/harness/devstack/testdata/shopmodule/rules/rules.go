// Package rules is a team's rules in miniature, for the local stack's
// tests: Stripe's payment_intent.succeeded marks the order its
// metadata.order_id names paid, and asks for its shipment (ship_order,
// while the order is still paid) and its confirmation (send_confirmation,
// once).
package rules

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Rules are the module's rules.
func Rules() app.Rules {
	reg := projection.NewRegistry()
	reg.Register("stripe", []string{"payment_intent.succeeded"}, paidOrders{})
	// Stripe's thin events are read through its API (the source's "api").
	return app.Rules{Registry: reg, Resolvers: builtin.Resolvers()}
}

// paidOrders projects a succeeded payment intent onto its order.
type paidOrders struct{}

func (paidOrders) Name() string { return "order" }

func (paidOrders) Project(ev projection.Event) (projection.Result, error) {
	var e struct {
		Created int64 `json:"created"`
		Data    struct {
			Object struct {
				ID       string            `json:"id"`
				Amount   int64             `json:"amount"`
				Currency string            `json:"currency"`
				Metadata map[string]string `json:"metadata"`
			} `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(ev.Payload, &e); err != nil {
		return projection.Result{}, projection.Permanent("malformed", err)
	}
	pi := e.Data.Object
	order := pi.Metadata["order_id"]
	if order == "" || pi.ID == "" {
		return projection.Result{}, projection.Permanent("unknown_subject", errors.New("the payment intent names no order (metadata.order_id)"))
	}
	state := map[string]any{"status": "paid", "payment_intent": pi.ID, "amount": strconv.FormatInt(pi.Amount, 10), "currency": pi.Currency}
	payload := map[string]any{"order_id": order, "payment_intent": pi.ID}
	return projection.Result{
		Write: &projection.Write{Name: "order", Subject: order, Version: e.Created, Fingerprint: projection.Fingerprint(state), State: state},
		Intents: []projection.Intent{
			{OperationID: projection.OperationID(order, "ship", pi.ID), Kind: "ship_order", Subject: order,
				Policy: projection.PolicyWhileCurrent, Condition: map[string]string{"status": "paid"}, Payload: payload},
			{OperationID: projection.OperationID(order, "confirm", pi.ID), Kind: "send_confirmation", Subject: order,
				Policy: projection.PolicyOnce, Payload: payload},
		},
	}, nil
}
