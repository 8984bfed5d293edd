package builtin

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// StripeOptions configure the Stripe projections.
type StripeOptions struct {
	// AccountMetadataKey is the subscription metadata key that names the
	// local account the subscription entitles. Default "account_id". A
	// subscription without it has an unknown subject and is quarantined: no
	// entitlement is granted to nobody, and nothing unrelated is touched.
	AccountMetadataKey string
}

// StripeSubscriptions projects customer.subscription.* events into one
// subscription/entitlement state per subscription id.
//
// # Ordering rule
//
// Stripe's event "created" is in whole seconds and several events for one
// subscription often share a second, and delivery order is not creation
// order. The version is created×4 + rank, where rank orders the lifecycle
// within one second: created (1) < updated (2) < deleted (3). So an update
// stamped in the same second as the creation still wins over it, and a
// deletion wins over anything in its second.
//
// A deletion is terminal and final: Stripe never revives a deleted
// subscription. Its version is DeletedVersionBase + created×4 + 3, above
// every non-deletion version, so it wins whatever the order of arrival and
// whatever the timestamps (an update stamped after the deletion by a clock
// skew is still older in business terms), and once the projection holds it
// no event changes it again. Deletion can never be undone.
//
// Two updates in the same second with different states have the same
// version and contradict each other: the later-arriving one is quarantined
// rather than guessed at; an operator (or the reconciler, from the Stripe API)
// settles it. Two identical ones are a noop.
//
// # Entitlement
//
// entitled is true for status active, trialing and past_due (access is kept
// while Stripe retries the payment) and false for every other status. Each
// applied state change emits one intent, entitlement.grant or
// entitlement.revoke, carrying the whole target state and keyed by
// projection.OperationID(subscription, kind, version): a retry of the same event
// produces the same key, a newer state a new one. An event that changes no
// state emits nothing.
//
// Both intents are latest (a state sync): performed only while the
// projection still holds the state they carry, else SUPERSEDED without a
// call, so a grant retried after the revoke never re-entitles a deleted
// subscription. The call carries the version (X-Subject-Version, exact)
// so the downstream can guard too.
type StripeSubscriptions struct {
	opts StripeOptions
}

// DeletedVersionBase lifts a deletion's version above every other event's
// (created×4 + rank is below 2^40 until the year 36812).
const DeletedVersionBase int64 = 1 << 60

// NewStripeSubscriptions returns the projection.
func NewStripeSubscriptions(opts StripeOptions) *StripeSubscriptions {
	if opts.AccountMetadataKey == "" {
		opts.AccountMetadataKey = "account_id"
	}
	return &StripeSubscriptions{opts: opts}
}

// maxStripeCreated bounds "created" (year 2100) so created×4+rank cannot overflow.
const maxStripeCreated = 4102444800

// StripeSubscriptionProjection is the projection's name in the ledger.
const StripeSubscriptionProjection = "stripe_subscription"

var stripeSubRank = map[string]int64{
	"customer.subscription.created": 1,
	"customer.subscription.updated": 2,
	"customer.subscription.deleted": 3,
}

// Name returns the projection name.
func (*StripeSubscriptions) Name() string { return StripeSubscriptionProjection }

// EventTypes lists the Stripe event types it handles.
func (*StripeSubscriptions) EventTypes() []string {
	return []string{"customer.subscription.created", "customer.subscription.updated", "customer.subscription.deleted"}
}

type stripeEvent struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Created int64  `json:"created"`
	Data    struct {
		Object json.RawMessage `json:"object"`
	} `json:"data"`
}

type stripeSubscription struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	Customer          json.RawMessage   `json:"customer"` // id or expanded object
	Status            string            `json:"status"`
	CancelAtPeriodEnd bool              `json:"cancel_at_period_end"`
	CurrentPeriodEnd  int64             `json:"current_period_end"`
	Metadata          map[string]string `json:"metadata"`
	Items             struct {
		Data []struct {
			CurrentPeriodEnd int64 `json:"current_period_end"`
			Price            struct {
				ID string `json:"id"`
			} `json:"price"`
		} `json:"data"`
	} `json:"items"`
}

var entitledStatuses = map[string]bool{"active": true, "trialing": true, "past_due": true}

// Project computes the subscription state from one event.
func (p *StripeSubscriptions) Project(ev projection.Event) (projection.Result, error) {
	rank, ok := stripeSubRank[ev.Type]
	if !ok {
		return projection.Result{}, projection.Permanent("unsupported_type", fmt.Errorf("stripe subscription projection does not handle %q", ev.Type))
	}
	var e stripeEvent
	if err := json.Unmarshal(ev.Payload, &e); err != nil {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("stripe event is not JSON: %v", err))
	}
	if e.Created <= 0 || e.Created > maxStripeCreated {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("stripe event created %d is missing or out of range", e.Created))
	}
	var sub stripeSubscription
	if err := json.Unmarshal(e.Data.Object, &sub); err != nil {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("data.object is not a subscription: %v", err))
	}
	if sub.Object != "subscription" || !strings.HasPrefix(sub.ID, "sub_") || sub.Status == "" {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("data.object is not a subscription (object %q, id %q)", sub.Object, sub.ID))
	}
	customer := customerID(sub.Customer)
	account := sub.Metadata[p.opts.AccountMetadataKey]
	if account == "" {
		return projection.Result{}, projection.Permanent("unknown_subject", fmt.Errorf("subscription %s has no metadata %q naming a local account", sub.ID, p.opts.AccountMetadataKey))
	}

	deleted := ev.Type == "customer.subscription.deleted"
	prices := make([]string, 0, len(sub.Items.Data))
	periodEnd := sub.CurrentPeriodEnd
	for _, it := range sub.Items.Data {
		if it.Price.ID != "" {
			prices = append(prices, it.Price.ID)
		}
		if periodEnd == 0 {
			periodEnd = it.CurrentPeriodEnd
		}
	}
	entitled := entitledStatuses[sub.Status] && !deleted
	state := map[string]any{
		"subscription_id":      sub.ID,
		"customer_id":          customer,
		"account_id":           account,
		"status":               sub.Status,
		"price_ids":            sortedCopy(prices),
		"current_period_end":   periodEnd,
		"cancel_at_period_end": sub.CancelAtPeriodEnd,
		"entitled":             entitled,
		"deleted":              deleted,
	}
	version := e.Created*4 + rank
	if deleted {
		version += DeletedVersionBase
	}
	kind := "entitlement.revoke"
	if entitled {
		kind = "entitlement.grant"
	}
	intent := projection.Intent{
		OperationID: projection.OperationID(StripeSubscriptionProjection, sub.ID, kind, strconv.FormatInt(version, 10)),
		Kind:        kind,
		// A state sync: only the subscription's current state is delivered.
		Policy:  projection.PolicyLatest,
		Subject: account,
		Payload: map[string]any{
			"account_id": account, "subscription_id": sub.ID, "entitled": entitled,
			// A string: a deletion's version is above 2^53, where a
			// downstream that reads JSON numbers as doubles would round it.
			"price_ids": sortedCopy(prices), "until": periodEnd, "version": strconv.FormatInt(version, 10),
		},
	}
	return projection.Result{
		Write: &projection.Write{
			Name: StripeSubscriptionProjection, Subject: sub.ID, Version: version,
			Fingerprint: projection.Fingerprint(state), Terminal: deleted, State: state,
		},
		Intents: []projection.Intent{intent},
	}, nil
}

func customerID(raw json.RawMessage) string {
	var id string
	if json.Unmarshal(raw, &id) == nil {
		return id
	}
	var obj struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(raw, &obj)
	return obj.ID
}
