// Package builtin provides the projections the pipeline ships with, each a
// plain projection.Projection a team may register next to its own:
//
//   - Stripe subscriptions (entitlement sync, policy latest), invoices and
//     payment intents, from snapshot events or thin events whose object
//     is fetched (kind "stripe"; StripeResolver);
//   - Amazon SES delivery status through SNS, with address suppression
//     (kind "sns");
//   - Shopify orders (kind "shopify");
//   - Quiltt connection health (kind "quiltt");
//   - a generic order workflow with refunds and cancellation notices
//     (kind "standard-webhooks").
//
// Default returns a registry with all of them; Register adds them to a
// registry a team already holds:
//
//	reg := projection.NewRegistry()
//	builtin.Register(reg, builtin.StripeOptions{})
//	reg.Register("stripe", []string{"payment_intent.succeeded"}, myShipping{})
//
// Registering one (kind, event type) twice panics at cold start, so a team
// that replaces a built-in for an event type registers the others it wants
// one by one (each constructor's EventTypes lists what it handles).
//
// Stripe thin events need their resolver as well (StripeResolver, which
// fetches the object a thin event names from the source's api); Resolvers
// returns it by kind, for app.Rules.Resolvers:
//
//	app.Rules{Registry: reg, Resolvers: builtin.Resolvers()}
package builtin
