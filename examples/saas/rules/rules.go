// Package rules is the example SaaS's business: seat-based subscriptions
// billed by Stripe. Its projections (Subscriptions: seats and plan per
// subscription; Dunning: access suspended by a failed invoice and restored
// by a paid one), the effects they ask for (set_seat_limit, latest;
// send_dunning_email, once), how a service combines the two (Access), and
// the Rules every one of its functions runs.
package rules

import (
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Registry holds the SaaS's projections, both for its Stripe account.
func Registry() *projection.Registry {
	reg := projection.NewRegistry()
	subs := NewSubscriptions()
	reg.Register("stripe", subs.EventTypes(), subs)
	dunning := NewDunning()
	reg.Register("stripe", dunning.EventTypes(), dunning)
	return reg
}

// Rules are the SaaS's rules. Its Stripe source sends snapshot events, so
// no resolver is needed (a source with an "api" for thin events would add
// builtin.Resolvers()).
func Rules() app.Rules {
	return app.Rules{Registry: Registry()}
}
