// Package rules is the example shop's business: its projections, and the
// Rules every one of its functions runs.
package rules

import (
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Registry holds the shop's projections, all for its Stripe account: its
// orders (payment_intent.succeeded, charge.refunded) and, next to them,
// the pipeline's own Stripe subscriptions (customer.subscription.*: the
// shop's members, whose entitlement.grant and entitlement.revoke sync
// the membership service). Only the built-ins the shop wants are
// registered: builtin.Register would register payment_intent.succeeded a
// second time.
func Registry() *projection.Registry {
	reg := projection.NewRegistry()
	orders := NewOrders()
	reg.Register("stripe", orders.EventTypes(), orders)
	subs := builtin.NewStripeSubscriptions(builtin.StripeOptions{})
	reg.Register("stripe", subs.EventTypes(), subs)
	return reg
}

// Rules are the shop's rules: its registry, and Stripe's resolver, which
// fetches the object a thin event names (a source with an "api") so the
// same projections read it.
func Rules() app.Rules {
	return app.Rules{Registry: Registry(), Resolvers: builtin.Resolvers()}
}
