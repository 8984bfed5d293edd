package builtin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/effectively-once/webhooks/internal/stripeapi"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Resolvers returns the built-in resolver factories by provider kind, for
// app.Rules.Resolvers: Stripe thin events (kind "stripe", StripeResolver).
// The map is new on every call; a team adds its own kinds to it:
//
//	resolvers := builtin.Resolvers()
//	resolvers["acme-orders"] = newOrderResolver
//	app.Rules{Registry: reg, Resolvers: resolvers}
func Resolvers() map[string]projection.ResolverFactory {
	return map[string]projection.ResolverFactory{"stripe": StripeResolver}
}

// StripeResolver builds the resolver of a Stripe source's thin events
// (object v2.core.event; see ParseStripeThin). It fetches the object a
// thin event names from the Stripe API, with the source's api settings
// (api.secret: a restricted key that can read subscriptions, invoices and
// payment intents), in the Stripe context the event names, and resolves
// the event to the snapshot event StripeFetched builds from it (the
// version rule is there). A snapshot event, and a thin event of a type no
// projection reads, are left as delivered (nothing is fetched).
//
// What it answers, by the code an event is quarantined or waits with:
//
//	malformed                  a thin event without a usable related_object
//	unsupported_object         it names an object of another type than its event type concerns
//	stripe_api_not_configured  the source has no api to fetch from (configure it and replay)
//	stripe_object_not_found    Stripe has no such object (404)
//	stripe_object_invalid      an id, a context or an answer Stripe's API refuses or that is not the object asked for
//	stripe_api_auth            (retried) the key is refused (401, 403): the key's problem, not the event's
//	stripe_api_unavailable     (retried, honouring Retry-After) 429, 5xx, a timeout, the key store failing
//
// The completion audit notes "fetched from Stripe at <Stripe's clock>".
func StripeResolver(src projection.ResolverSource) (projection.Resolver, error) {
	r := &stripeResolver{source: src.Name, reads: src.Reads}
	if src.API != nil {
		if src.Secret == nil {
			return nil, fmt.Errorf("stripe source %s: an api without a way to read its secret", src.Name)
		}
		ref, secret := src.API.Secret, src.Secret
		r.api = &stripeapi.Client{
			Key:     func(ctx context.Context) (string, error) { return secret(ctx, ref) },
			Backend: stripeapi.NewBackend(src.API.URL, nil),
			Timeout: src.API.Timeout,
		}
	}
	return r, nil
}

type stripeResolver struct {
	source string
	reads  func(eventType string) bool
	api    *stripeapi.Client // nil: the source configures no api
}

func (r *stripeResolver) Resolve(ctx context.Context, ev projection.Event) (projection.Resolved, error) {
	thin, isThin, err := ParseStripeThin(ev.Payload)
	switch {
	case !isThin:
		return projection.Resolved{}, projection.ErrNothingToResolve
	case err != nil:
		return projection.Resolved{}, err
	case r.reads != nil && !r.reads(thin.BaseType):
		// Ignored like its snapshot twin would be: no request to Stripe.
		return projection.Resolved{}, projection.ErrNothingToResolve
	}
	if want := thin.ExpectedObjectType(); want != thin.ObjectType {
		return projection.Resolved{}, projection.Permanent("unsupported_object",
			fmt.Errorf("thin event %s names a %s; %s events concern a %s", thin.EventID, thin.ObjectType, thin.BaseType, want))
	}
	if r.api == nil {
		return projection.Resolved{}, projection.Permanent("stripe_api_not_configured",
			errors.New("source "+r.source+" has no Stripe API key (api.secret) to fetch the object a thin event names; configure it and replay"))
	}
	// A connected account's object lives in its account: it is read in
	// the context the event names (the intake accepted the event only if
	// the source accepts that account).
	obj, err := r.api.RetrieveIn(ctx, thin.Context, thin.ObjectType, thin.ObjectID)
	switch {
	case err == nil:
	case errors.Is(err, stripeapi.ErrNotFound):
		return projection.Resolved{}, projection.Permanent("stripe_object_not_found", err)
	case errors.Is(err, stripeapi.ErrUnsupported), errors.Is(err, stripeapi.ErrInvalid):
		return projection.Resolved{}, projection.Permanent("stripe_object_invalid", err)
	case errors.Is(err, stripeapi.ErrAuth):
		// Neither the event's fault nor a passing one: retried until an
		// operator fixes the key, or DEAD (visible), never quarantined.
		return projection.Resolved{}, projection.Retryable("stripe_api_auth", err)
	default:
		wait, _ := stripeapi.RetryAfter(err)
		return projection.Resolved{}, projection.RetryAfter("stripe_api_unavailable", err, wait)
	}
	eventType, payload, err := StripeFetched(thin, obj.JSON, obj.ObservedAt)
	if err != nil {
		return projection.Resolved{}, err
	}
	// eventType "" : the object is in a state no projection models, and
	// the event changes nothing.
	return projection.Resolved{Type: eventType, Payload: payload, Note: "fetched from Stripe at " + obj.ObservedAt.UTC().Format(time.RFC3339)}, nil
}
