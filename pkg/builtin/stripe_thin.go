package builtin

import (
	"github.com/effectively-once/webhooks/pkg/projection"

	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/effectively-once/webhooks/pkg/provider"
)

// Stripe thin events.
//
// A thin event (object "v2.core.event", type "v1.<snapshot type>") names
// the object that changed in related_object and carries no snapshot of it.
// The processor's resolver for the source (StripeResolver) fetches the
// object from the Stripe API, and the fetched object is projected through
// the same projection as a snapshot event, as if Stripe had sent a
// snapshot event observed at the moment of the fetch.
//
// # Version rule for fetched state
//
// Fetched state is current truth at fetch time, not the event's state: by
// the time the thin event is processed the object may have changed again.
// So it is versioned by when Stripe answered (the response's Date header:
// Stripe's own clock, in whole seconds like a snapshot event's created),
// with the rank of an update: version = observed×4 + rank of the state the
// object is in now (see StripeFetched), with the same terminal tiers as
// snapshot events. Consequences:
//   - every snapshot event created before the fetch is older than the
//     fetched state and is recorded stale if it arrives later (the fetch
//     already saw its change);
//   - a later thin event fetches again and is newer still, so in any
//     arrival order the projection converges to the object's state at the
//     last fetch, which is Stripe's state once the events stop;
//   - a fetch that sees the same state as a newer-versioned projection is a
//     noop that advances the version and creates no intent (the ledger's
//     rule for "newer version, same state"), so one change reported both
//     by a snapshot event and by a thin one is performed once;
//   - a snapshot event created in the same second as the fetch with a
//     different state has the same version and is quarantined as a
//     same-version conflict (as two same-second updates already are): the
//     order inside one second is unknowable, so an operator, or the next
//     thin event's fetch, settles it rather than a guess.
//
// A deletion (subscription status canceled), a paid or voided invoice and
// a succeeded or canceled payment intent are terminal as in their snapshot
// form: once stored, nothing changes them.

// StripeThin is a thin event's reference to the object it concerns.
type StripeThin struct {
	EventID       string    // the thin event's own id
	Type          string    // e.g. "v1.customer.subscription.updated"
	BaseType      string    // the snapshot event type it corresponds to, e.g. "customer.subscription.updated"
	ObjectType    string    // related_object.type, e.g. "subscription"
	ObjectID      string    // related_object.id
	SnapshotEvent string    // the twin snapshot event's id, when Stripe sends both
	Created       time.Time // when the change happened (not when the state was read)
	// Context is the account whose object it is, as the Stripe-Context
	// header names it (a connected account's id, or a path of them):
	// the object is fetched in that context. Empty for the platform's own.
	Context string
}

// thinObjectTypes maps a snapshot type's prefix to the object type a thin
// event of that family must name (and the fetcher retrieves).
var thinObjectTypes = map[string]string{
	"customer.subscription.": "subscription",
	"invoice.":               "invoice",
	"payment_intent.":        "payment_intent",
}

// ParseStripeThin reads a Stripe event body. ok is false for a snapshot
// event (anything whose object is not "v2.core.event"). A thin event
// without a usable related_object is a permanent error.
func ParseStripeThin(payload []byte) (StripeThin, bool, error) {
	var ev struct {
		stripe.ThinEvent
		SnapshotEvent string `json:"snapshot_event"`
	}
	var head struct {
		Object string `json:"object"`
	}
	if json.Unmarshal(payload, &head) != nil || head.Object != provider.StripeThinObject {
		return StripeThin{}, false, nil
	}
	if err := json.Unmarshal(payload, &ev); err != nil {
		return StripeThin{}, true, projection.Permanent("malformed", fmt.Errorf("stripe thin event: %v", err))
	}
	t := StripeThin{EventID: ev.ID, Type: ev.Type, SnapshotEvent: ev.SnapshotEvent, Created: ev.Created}
	if ev.Context != nil {
		t.Context = *ev.Context
	}
	if !strings.HasPrefix(ev.Type, provider.StripeThinPrefix) {
		return t, true, projection.Permanent("malformed", fmt.Errorf("stripe thin event type %q does not start with %q", ev.Type, provider.StripeThinPrefix))
	}
	t.BaseType = strings.TrimPrefix(ev.Type, provider.StripeThinPrefix)
	if ev.RelatedObject == nil || ev.RelatedObject.ID == "" || ev.RelatedObject.Type == "" {
		return t, true, projection.Permanent("malformed", fmt.Errorf("stripe thin event %s has no related_object", ev.ID))
	}
	t.ObjectType, t.ObjectID = ev.RelatedObject.Type, ev.RelatedObject.ID
	if err := validSubject("related object id", t.ObjectID); err != nil {
		return t, true, err
	}
	return t, true, nil
}

// ExpectedObjectType is the related_object.type a thin event of this base
// type must name; "" when no projection here reads that family.
func (t StripeThin) ExpectedObjectType() string {
	for prefix, obj := range thinObjectTypes {
		if strings.HasPrefix(t.BaseType, prefix) {
			return obj
		}
	}
	return ""
}

// StripeFetched turns a thin event and the object fetched for it into the
// snapshot event the projections read: type is the event type the
// object's current state corresponds to (not the thin event's own type:
// the state may have moved on), created is observedAt (see the version
// rule above), data.object is the fetched object as Stripe sent it. An
// empty type means the object is in a state no projection models (a
// payment intent that requires action, an open invoice reported by
// anything but a failed payment): the event changes no projected state.
func StripeFetched(t StripeThin, object []byte, observedAt time.Time) (eventType string, payload []byte, err error) {
	var obj struct {
		ID               string          `json:"id"`
		Object           string          `json:"object"`
		Status           string          `json:"status"`
		LastPaymentError json.RawMessage `json:"last_payment_error"`
	}
	if err := json.Unmarshal(object, &obj); err != nil {
		return "", nil, projection.Permanent("malformed", fmt.Errorf("fetched %s %s is not a JSON object: %v", t.ObjectType, t.ObjectID, err))
	}
	if obj.Object != t.ObjectType || obj.ID != t.ObjectID {
		return "", nil, projection.Permanent("malformed", fmt.Errorf("fetched object is %s %q, the event names %s %q", obj.Object, obj.ID, t.ObjectType, t.ObjectID))
	}
	switch t.ObjectType {
	case "subscription":
		eventType = "customer.subscription.updated"
		if obj.Status == "canceled" {
			eventType = "customer.subscription.deleted"
		}
	case "invoice":
		switch {
		case obj.Status == "paid":
			eventType = "invoice.paid"
		case obj.Status == "void":
			eventType = "invoice.voided"
		case t.BaseType == "invoice.payment_failed" && obj.Status == "open":
			eventType = "invoice.payment_failed"
		}
	case "payment_intent":
		switch obj.Status {
		case "succeeded":
			eventType = "payment_intent.succeeded"
		case "canceled":
			eventType = "payment_intent.canceled"
		case "processing":
			eventType = "payment_intent.processing"
		case "requires_payment_method":
			if len(obj.LastPaymentError) > 0 && string(obj.LastPaymentError) != "null" {
				eventType = "payment_intent.payment_failed"
			}
		}
	default:
		return "", nil, projection.Permanent("unsupported_object", fmt.Errorf("no projection reads fetched %s objects", t.ObjectType))
	}
	if eventType == "" {
		return "", nil, nil
	}
	synthetic := struct {
		ID        string          `json:"id"`
		Object    string          `json:"object"`
		Type      string          `json:"type"`
		Created   int64           `json:"created"`
		Fetched   bool            `json:"fetched"`
		ThinEvent string          `json:"thin_event"`
		Data      json.RawMessage `json:"data"`
	}{
		ID: t.EventID, Object: "event", Type: eventType, Created: observedAt.Unix(), Fetched: true, ThinEvent: t.EventID,
		Data: json.RawMessage(`{"object":` + string(object) + `}`),
	}
	payload, err = json.Marshal(synthetic)
	if err != nil {
		return "", nil, projection.Permanent("malformed", fmt.Errorf("fetched %s %s: %v", t.ObjectType, t.ObjectID, err))
	}
	return eventType, payload, nil
}
