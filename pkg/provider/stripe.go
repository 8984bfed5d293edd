package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"
)

// Stripe verifies Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...], the hex
// HMAC-SHA256 of "t.body" under the endpoint secret; any v1 may match.
type Stripe struct{}

var _ Verifier = Stripe{}

// Verify checks the signature on the raw body, then the timestamp against
// cfg.Now, then reads the event identity.
func (Stripe) Verify(_ context.Context, req Request, cfg Config) (Verified, error) {
	header := req.Header("stripe-signature")
	if header == "" {
		return Verified{}, ErrNotSigned
	}
	if !hasSecret(cfg.Secrets) {
		return Verified{}, ErrNoSecrets
	}
	ts, err := stripeTimestamp(header)
	if err != nil {
		return Verified{}, err
	}
	ok := false
	for _, s := range cfg.Secrets {
		// An empty secret is never a key: anyone can compute an HMAC
		// under it.
		if s != "" && webhook.ValidatePayloadIgnoringTolerance(req.Body, header, s) == nil {
			ok = true
			break
		}
	}
	if !ok {
		return Verified{}, ErrBadSignature
	}
	tol := cfg.Tolerance
	if tol <= 0 {
		tol = DefaultTolerance
	}
	now := time.Now
	if cfg.Now != nil {
		now = cfg.Now
	}
	if !withinTolerance(now(), ts, tol) {
		return Verified{}, ErrStale
	}

	return StripeIdentity(req.Body), nil
}

// StripeThinObject is the "object" of a Stripe thin event (an event
// destination's payload format, Stripe's recommendation for new
// integrations): the event names the changed object in related_object and
// carries no snapshot of it.
const StripeThinObject = "v2.core.event"

// StripeThinPrefix starts the type of every thin event about an API v1
// resource ("v1.customer.subscription.updated").
const StripeThinPrefix = "v1."

// StripeIdentity reads the identity of a Stripe event body whose
// authenticity is already established (a verified signature, or a trusted
// Amazon EventBridge partner event source). It reads both formats:
//
//   - a snapshot event (object "event", data.object holds the object):
//     EventID is its evt_ id, Subject the object's id.
//   - a thin event (object "v2.core.event", related_object {id, type, url}):
//     Subject is related_object.id. When Stripe sends the thin event as the
//     twin of a snapshot event (snapshot_event, during a migration from
//     snapshot to thin destinations), both are one provider fact: EventID is
//     the snapshot event's id, so whichever of the two arrives first creates
//     the one ledger row and the other is a duplicate of it (one outcome,
//     one set of intents). The thin event's own id is kept as the attribute
//     thin_event_id. A thin event without a twin is its own fact, under its
//     own id.
//
// Both forms name the connected account of a Connect event (see
// stripe_connect.go): a snapshot event's account and context, a thin
// event's context. They are the identity's ConnectAccounts, and kept as
// the attributes connect_account and context.
//
// stripe-go (v82.5.1) has the thin event's type (stripe.ThinEvent) but not
// its snapshot_event field, which is read here beside it, nor a snapshot
// event's account (its stripe.Event has it, beside fields that do not fit
// a thin event).
func StripeIdentity(body []byte) Verified {
	var ev struct {
		stripe.ThinEvent
		Created       json.RawMessage `json:"created"` // a Unix second (snapshot) or an RFC 3339 time (thin)
		SnapshotEvent string          `json:"snapshot_event"`
		Account       string          `json:"account"`
		Data          struct {
			Object struct {
				ID string `json:"id"`
			} `json:"object"`
		} `json:"data"`
	}
	// One pass over the body. A value of an unexpected type (a data.object
	// that is not an object, say) leaves its field empty, as Unmarshal
	// documents, and is not a reason to lose the id: the subject is a hint
	// and the projection judges the object (it quarantines).
	var typeErr *json.UnmarshalTypeError
	if err := json.Unmarshal(body, &ev); err != nil && !errors.As(err, &typeErr) {
		return Verified{Unidentified: "body is not JSON"}
	}
	if !strings.HasPrefix(ev.ID, "evt_") || ev.Type == "" || !usableID(ev.ID) {
		return Verified{Unidentified: "no evt_ id or type"}
	}
	stripeCtx := ""
	if ev.Context != nil {
		stripeCtx = *ev.Context
	}
	accounts := stripeConnectAccounts(ev.Account, stripeCtx)
	if ev.Object == StripeThinObject {
		v := stripeThinIdentity(ev.ID, ev.Type, ev.Created, ev.SnapshotEvent, ev.RelatedObject, stripeCtx)
		v.Events[0].ConnectAccounts = accounts
		return v
	}
	// format is kept so the row says which form it holds: the ledger keeps
	// the attributes of the first delivery that had any, and a thin twin
	// arriving later must not claim a thin payload for a snapshot row.
	id := Identity{EventID: ev.ID, Type: typeOrUnknown(ev.Type), Subject: bound(ev.Data.Object.ID), ConnectAccounts: accounts,
		Attributes: boundedAttributes("format", "snapshot", "connect_account", ev.Account, "context", stripeCtx)}
	var created int64
	if json.Unmarshal(ev.Created, &created) == nil && created > 0 {
		id.ProviderTime = time.Unix(created, 0).UTC()
	}
	return Verified{Events: []Identity{id}}
}

func stripeThinIdentity(id, typ string, created json.RawMessage, snapshot string, rel *stripe.RelatedObject, stripeCtx string) Verified {
	ident := Identity{EventID: id, Type: typeOrUnknown(typ)}
	var at time.Time
	if json.Unmarshal(created, &at) == nil && !at.IsZero() {
		ident.ProviderTime = at.UTC()
	}
	relType := ""
	if rel != nil {
		ident.Subject = bound(rel.ID)
		relType = rel.Type
	}
	if snapshot != "" && strings.HasPrefix(snapshot, "evt_") && usableID(snapshot) {
		ident.EventID = snapshot
	} else {
		snapshot = ""
	}
	ident.Attributes = boundedAttributes(
		"format", "thin",
		"thin_event_id", id,
		"snapshot_event", snapshot,
		"related_object_type", relType,
		"context", stripeCtx,
	)
	return Verified{Events: []Identity{ident}}
}

func stripeTimestamp(header string) (time.Time, error) {
	// Exactly one t=: stripe-go signs against the last one, so a header
	// with a fresh t= prepended to a captured old one would otherwise pass
	// the tolerance check here and the signature check there (a replay).
	var ts time.Time
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || strings.TrimSpace(k) != "t" {
			continue
		}
		if !ts.IsZero() {
			return time.Time{}, fmt.Errorf("%w: more than one timestamp", ErrBadSignature)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return time.Time{}, fmt.Errorf("%w: bad timestamp", ErrBadSignature)
		}
		ts = time.Unix(n, 0)
	}
	if ts.IsZero() {
		return time.Time{}, fmt.Errorf("%w: no timestamp", ErrBadSignature)
	}
	return ts, nil
}
