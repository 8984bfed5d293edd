package builtin

import (
	"sort"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// Default returns a registry with every built-in projection: Stripe
// subscriptions, invoices and payment intents (kind "stripe"), SES
// delivery status ("sns"), Shopify orders ("shopify"), Quiltt connection
// health ("quiltt") and the order workflow ("standard-webhooks", with the
// default hop budget).
func Default(opts StripeOptions) *projection.Registry {
	r := projection.NewRegistry()
	Register(r, opts)
	return r
}

// Register adds every built-in projection to r. It panics if r already
// holds one of their (kind, event type) pairs: a wiring bug, found at cold
// start.
func Register(r *projection.Registry, opts StripeOptions) {
	sub := NewStripeSubscriptions(opts)
	r.Register("stripe", sub.EventTypes(), sub)
	inv := NewStripeInvoices()
	r.Register("stripe", inv.EventTypes(), inv)
	pi := NewStripePaymentIntents()
	r.Register("stripe", pi.EventTypes(), pi)
	ses := NewSESMessages()
	r.Register("sns", ses.EventTypes(), ses)
	shop := NewShopifyOrders()
	r.Register("shopify", shop.EventTypes(), shop)
	q := NewQuilttConnections()
	r.Register("quiltt", q.EventTypes(), q)
	orders := NewOrders(OrderOptions{})
	r.Register("standard-webhooks", orders.EventTypes(), orders)
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}
