package builtin_test

import (
	"testing"

	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Seeds are compact on purpose (see FuzzSESMessageProject); the fixture is
// covered by TestShopifyFixture.
func FuzzShopifyOrderProject(f *testing.F) {
	f.Add("orders/updated", []byte(`{"id":820982911946154508,"updated_at":"2026-11-30T06:59:58-05:00","financial_status":"paid","fulfillment_status":null,"cancelled_at":null,"total_price":"403.00","currency":"USD"}`))
	f.Add("orders/cancelled", []byte(`{"id":1,"updated_at":"2026-11-30T08:00:00-05:00","cancelled_at":"2026-11-30T08:00:00-05:00","cancel_reason":"customer","customer":{"id":7}}`))
	f.Add("orders/create", []byte(`{"id":"gid://shopify/Order/1","updated_at":"2026-11-30T12:00:00.123+01:00","total_price":1e999}`))
	p := builtin.NewShopifyOrders()
	f.Fuzz(func(t *testing.T, typ string, payload []byte) {
		fuzzProject(t, p, projection.Event{Type: typ, Payload: payload}, 1)
	})
}
