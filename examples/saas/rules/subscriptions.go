package rules

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// SubscriptionProjection is the subscription projection's name in the
// ledger (a service reads one with state.Reader.Subject(ctx,
// "saas-stripe", "subscription", "sub_…")).
const SubscriptionProjection = "subscription"

// SetSeatLimit is the effect that tells the SaaS's seat service how many
// seats a subscription pays for, and on which plan.
const SetSeatLimit = "set_seat_limit"

// endedTier lifts an ended subscription's version above every other
// version of it (created×4 + rank stays below 2^35 until the year 2100).
const endedTier int64 = 1 << 40

// Subscriptions projects the SaaS's seat subscriptions from Stripe's
// customer.subscription.created, .updated and .deleted: how many seats a
// customer pays for, on which plan, in which status.
//
// Subject: the subscription id (sub_…).
//
// Ordering: version = created×4 + rank, with rank created (1) < updated
// (2) < deleted (3). created (Stripe's event time, whole seconds) orders
// events of different seconds whatever order they arrive in, and the rank
// orders those of one second (a subscription is often created and updated
// in the same second). Two updates of one second with different states
// share a version: the second processed is quarantined
// (version_conflict), not settled by arrival order. A deletion is final
// (Stripe never revives a deleted subscription): its version is in a tier
// above every other (endedTier + created×4 + 3) and it is Terminal, so an
// update stamped after it by a clock skew never brings seats back.
//
// State: {subscription_id, customer, status, plan, quantity, seats,
// ended}. quantity is the seat item's quantity as Stripe has it; seats is
// the limit the SaaS enforces: the quantity, or 0 once the subscription
// ended (deleted, canceled or incomplete_expired). plan is the seat
// price's lookup_key, else its id. The SaaS sells one seat price per
// subscription: a subscription of several items is quarantined
// (unsupported_subscription) for an operator rather than guessed at.
//
// Intents: each applied state asks for one set_seat_limit, policy latest
// (a state sync: only the subscription's current seats matter; an older
// limit still waiting when a newer one is committed ends SUPERSEDED
// without a call, and the limits reach the seat service in version
// order). Its operation id is made of the subscription AND the version
// (projection.OperationID("subscription", sub, "set_seat_limit",
// version)): each revision is its own call, and a retry of the same event
// reuses its id. Without the version, the second revision would reuse the
// first one's id and the seat service would never hear of it. The payload
// is the seat limit, the plan, the status and the version (a string: the
// ended tier is above 2^53, where a JSON reader of doubles would round).
type Subscriptions struct{}

var _ projection.Projection = Subscriptions{}

// NewSubscriptions returns the projection.
func NewSubscriptions() Subscriptions { return Subscriptions{} }

// Name returns the projection name.
func (Subscriptions) Name() string { return SubscriptionProjection }

// EventTypes lists the Stripe event types it handles.
func (Subscriptions) EventTypes() []string {
	return []string{"customer.subscription.created", "customer.subscription.updated", "customer.subscription.deleted"}
}

var subscriptionRank = map[string]int64{
	"customer.subscription.created": 1,
	"customer.subscription.updated": 2,
	"customer.subscription.deleted": 3,
}

// endedStatuses are the statuses in which a subscription pays for no seat.
var endedStatuses = map[string]bool{"canceled": true, "incomplete_expired": true}

// subscription is what the SaaS reads of a Stripe Subscription.
type subscription struct {
	ID       string          `json:"id"`
	Object   string          `json:"object"`
	Customer json.RawMessage `json:"customer"`
	Status   string          `json:"status"`
	Items    struct {
		Data []struct {
			Quantity *int64 `json:"quantity"`
			Price    struct {
				ID        string `json:"id"`
				LookupKey string `json:"lookup_key"`
			} `json:"price"`
		} `json:"data"`
	} `json:"items"`
}

// Project computes the subscription's seats from one event.
func (Subscriptions) Project(ev projection.Event) (projection.Result, error) {
	rank, ok := subscriptionRank[ev.Type]
	if !ok {
		return projection.Result{}, projection.Permanent("unsupported_type", fmt.Errorf("the subscription projection does not handle %q", ev.Type))
	}
	e, err := readEvent(ev.Payload)
	if err != nil {
		return projection.Result{}, err
	}
	var sub subscription
	if err := json.Unmarshal(e.Data.Object, &sub); err != nil {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("data.object is not a subscription: %v", err))
	}
	if sub.Object != "subscription" || !strings.HasPrefix(sub.ID, "sub_") || sub.Status == "" {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("data.object is not a subscription (object %q, id %q)", sub.Object, sub.ID))
	}
	if err := checkID("subscription id", sub.ID); err != nil {
		return projection.Result{}, err
	}
	if n := len(sub.Items.Data); n != 1 {
		return projection.Result{}, projection.Permanent("unsupported_subscription", fmt.Errorf("subscription %s has %d items; the SaaS sells one seat price per subscription", sub.ID, n))
	}
	item := sub.Items.Data[0]
	if item.Quantity == nil || *item.Quantity < 0 || *item.Quantity > 1_000_000 {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("subscription %s has no plausible seat quantity", sub.ID))
	}
	plan := item.Price.LookupKey
	if plan == "" {
		plan = item.Price.ID
	}
	deleted := ev.Type == "customer.subscription.deleted"
	ended := deleted || endedStatuses[sub.Status]
	seats := *item.Quantity
	if ended {
		seats = 0
	}
	version := e.Created*4 + rank
	if deleted {
		version += endedTier
	}
	customer := objectID(sub.Customer)
	state := map[string]any{
		"subscription_id": sub.ID, "customer": customer, "status": sub.Status, "plan": plan,
		"quantity": *item.Quantity, "seats": seats, "ended": ended,
	}
	return projection.Result{
		Write: &projection.Write{
			Name: SubscriptionProjection, Subject: sub.ID, Version: version,
			Fingerprint: projection.Fingerprint(state), Terminal: deleted, State: state,
		},
		Intents: []projection.Intent{{
			OperationID: projection.OperationID(SubscriptionProjection, sub.ID, SetSeatLimit, strconv.FormatInt(version, 10)),
			Kind:        SetSeatLimit, Subject: sub.ID, Policy: projection.PolicyLatest,
			Payload: map[string]any{
				"subscription_id": sub.ID, "customer": customer, "seats": seats, "plan": plan,
				"status": sub.Status, "version": strconv.FormatInt(version, 10),
			},
		}},
	}, nil
}
