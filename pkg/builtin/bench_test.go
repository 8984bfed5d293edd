package builtin_test

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Benchmarks of the processor's project step, per built-in projection: the
// projection the default registry (the one the processor and reconciler
// wire) finds for the event's kind and type, applied to one event. Project
// is pure (the version guard runs later, in the ledger's commit), so the
// same event is projected on every iteration. The events are the events/
// fixtures where the repository has one, else the payloads of this
// package's tests. SetBytes is the payload length, so MB/s is payload
// throughput.
//
// Run: go test -run '^$' -bench Project -benchmem ./pkg/builtin/

func benchFixture(b *testing.B, path string) []byte {
	b.Helper()
	raw, err := os.ReadFile("../../events/" + path)
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

func BenchmarkProject(b *testing.B) {
	// Quiltt deliveries carry several events; intake stores each event's own
	// bytes, and that element is what the projection sees.
	var quiltt struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(benchFixture(b, "quiltt/connection-events.json"), &quiltt); err != nil || len(quiltt.Events) == 0 {
		b.Fatalf("quiltt fixture: %v", err)
	}
	received := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

	cases := []struct {
		want string // projection name the registry must resolve to
		ev   projection.Event
	}{
		{builtin.StripeSubscriptionProjection, projection.Event{Source: "stripe", Kind: "stripe", EventID: "evt_fixture",
			Type: "customer.subscription.updated", Payload: benchFixture(b, "stripe/customer.subscription.updated.json")}},
		{builtin.StripeInvoiceProjection, invoiceEvent("invoice.paid", 1740830000, "paid", 1)},
		{builtin.StripePaymentIntentProjection, paymentIntentEvent("payment_intent.succeeded", 1740830000)},
		{builtin.SESMessageProjection, projection.Event{Source: "ses", Kind: "sns", EventID: "9b3e7c1d-2f4a-5b6c-8d9e-0a1b2c3d4e5f",
			Type: "ses.bounce", Payload: benchFixture(b, "sns/ses-bounce.json")}},
		{builtin.ShopifyOrderProjection, projection.Event{Source: "shopify", Kind: "shopify", EventID: "98880550-7158-44d4-b7cd-2c97c8a091b5",
			Type: "orders/updated", Payload: benchFixture(b, "shopify/orders-updated.json")}},
		{builtin.QuilttConnectionProjection, projection.Event{Source: "quiltt", Kind: "quiltt", EventID: "evt_1QfixtureQuilttSync01",
			Type: "connection.synced.successful", Payload: quiltt.Events[0], ReceivedAt: received}},
		{builtin.OrderProjection, projection.Event{Source: "orders", Kind: "standard-webhooks", EventID: "msg_test_FAKE_order",
			Type: "order.updated", Payload: benchFixture(b, "standardwebhooks/order.updated.json")}},
	}
	reg := builtin.Default(builtin.StripeOptions{})
	for _, tc := range cases {
		b.Run(tc.want, func(b *testing.B) {
			p, ok := reg.Lookup(tc.ev.Kind, tc.ev.Type)
			if !ok || p.Name() != tc.want {
				b.Fatalf("registry: %s %s is not projected by %s", tc.ev.Kind, tc.ev.Type, tc.want)
			}
			// Check once, outside the timer, that this is the path that
			// writes state (not an error or an ignored event).
			res, err := p.Project(tc.ev)
			if err != nil || res.Write == nil {
				b.Fatalf("Project: write %v, err %v; want a projection write", res.Write, err)
			}
			b.SetBytes(int64(len(tc.ev.Payload)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Project(tc.ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
