package builtin

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// ShopifyOrderProjection is the Shopify order projection's name in the
// ledger.
const ShopifyOrderProjection = "shopify_order"

// ShopifyOrders projects Shopify order webhooks (orders/create,
// orders/updated, orders/cancelled, orders/fulfilled) into one state per
// order id: financial_status, fulfillment_status, cancelled_at and
// total_price (with the order id and currency).
//
// # Ordering rule
//
// version = the order's updated_at in Unix milliseconds. Shopify stamps
// updated_at on every change of the order, deliveries arrive out of order
// and are retried for hours, and several topics fire for one change
// (orders/updated and orders/cancelled for a cancellation, with the same
// updated_at and the same body): the newest updated_at wins, the other
// topics of the same change are noops. Shopify's updated_at has whole
// seconds, so two different changes in one second share a version and the
// later-arriving one is quarantined (version_conflict) rather than
// guessed at.
//
// The state is read from the body only. The topic (X-Shopify-Topic) is not
// signed and orders/updated carries cancellations too, so the topic decides
// nothing: an orders/cancelled body without cancelled_at is not a
// cancellation. No state is terminal: Shopify keeps changing a cancelled
// order (refunds, archiving).
//
// # Intents
//
// Any applied state with cancelled_at set emits one "order.cancelled"
// intent keyed projection.OperationID(order id, "cancelled", cancellation version),
// where the cancellation version is cancelled_at in Unix milliseconds.
// That is deliberately not the event's own version (updated_at): every
// later change of a cancelled order (the refund, a note, archiving) has a
// newer updated_at and still carries cancelled_at, and a key with
// updated_at would mint a new key, and a second cancellation effect, for
// each of them. cancelled_at names the cancellation itself; every event
// that reports it agrees on it.
//
// # Dispatch policy
//
// order.cancelled is once: Shopify never un-cancels an order, so the fact
// stays true.
type ShopifyOrders struct{}

var _ projection.Projection = (*ShopifyOrders)(nil)

// NewShopifyOrders returns the projection.
func NewShopifyOrders() *ShopifyOrders { return &ShopifyOrders{} }

// Name returns the projection name.
func (*ShopifyOrders) Name() string { return ShopifyOrderProjection }

// EventTypes lists the Shopify topics it handles.
func (*ShopifyOrders) EventTypes() []string {
	return []string{"orders/create", "orders/updated", "orders/cancelled", "orders/fulfilled"}
}

type shopifyOrder struct {
	ID                json.RawMessage `json:"id"`
	GraphQLID         string          `json:"admin_graphql_api_id"`
	Name              string          `json:"name"`
	UpdatedAt         string          `json:"updated_at"`
	FinancialStatus   *string         `json:"financial_status"`
	FulfillmentStatus *string         `json:"fulfillment_status"`
	CancelledAt       *string         `json:"cancelled_at"`
	CancelReason      *string         `json:"cancel_reason"`
	TotalPrice        json.RawMessage `json:"total_price"` // a decimal string; a number is read as written
	Currency          string          `json:"currency"`
	Customer          *struct {
		ID json.RawMessage `json:"id"`
	} `json:"customer"`
}

var shopifyTopics = map[string]bool{"orders/create": true, "orders/updated": true, "orders/cancelled": true, "orders/fulfilled": true}

// Project computes the order state from one webhook body.
func (*ShopifyOrders) Project(ev projection.Event) (projection.Result, error) {
	if !shopifyTopics[ev.Type] {
		return projection.Result{}, projection.Permanent("unsupported_type", fmt.Errorf("shopify order projection does not handle %q", ev.Type))
	}
	var o shopifyOrder
	if err := json.Unmarshal(ev.Payload, &o); err != nil {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("shopify order is not JSON: %v", err))
	}
	id := idText(o.ID)
	if err := validSubject("order id", id); err != nil {
		return projection.Result{}, err
	}
	version, err := unixMillis("updated_at", o.UpdatedAt)
	if err != nil {
		return projection.Result{}, err
	}
	total, ok := scalarText(o.TotalPrice)
	if !ok {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("total_price is not a decimal"))
	}
	cancelledAt, cancelledMS := "", int64(0)
	if s := deref(o.CancelledAt); s != "" {
		if cancelledMS, err = unixMillis("cancelled_at", s); err != nil {
			return projection.Result{}, err
		}
		// One spelling per instant: the same cancellation written with
		// another offset is the same state.
		cancelledAt = time.UnixMilli(cancelledMS).UTC().Format(time.RFC3339Nano)
	}
	state := map[string]any{
		"order_id":           id,
		"financial_status":   deref(o.FinancialStatus),
		"fulfillment_status": deref(o.FulfillmentStatus),
		"cancelled_at":       cancelledAt,
		"total_price":        total,
		"currency":           o.Currency,
	}
	res := projection.Result{Write: &projection.Write{
		Name: ShopifyOrderProjection, Subject: id, Version: version,
		Fingerprint: projection.Fingerprint(state), State: state,
	}}
	if cancelledAt != "" {
		customer := ""
		if o.Customer != nil {
			customer = idText(o.Customer.ID)
		}
		res.Intents = []projection.Intent{{
			OperationID: projection.OperationID(id, "cancelled", strconv.FormatInt(cancelledMS, 10)),
			Kind:        "order.cancelled",
			Subject:     id,
			Payload: map[string]any{
				"order_id": id, "admin_graphql_api_id": o.GraphQLID, "name": o.Name, "customer_id": customer,
				"cancelled_at": cancelledAt, "cancel_reason": deref(o.CancelReason),
				"financial_status": deref(o.FinancialStatus), "total_price": total,
				"currency": o.Currency, "cancellation_version": cancelledMS, "version": version,
			},
		}}
	}
	return res, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return strings.TrimSpace(*s)
}
