package builtin_test

import (
	"testing"

	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

func FuzzStripeInvoiceProject(f *testing.F) {
	for _, typ := range []string{"invoice.paid", "invoice.payment_failed", "invoice.voided"} {
		f.Add(typ, invoiceEvent(typ, 1000, "open", 1).Payload)
	}
	f.Add("invoice.paid", []byte(`{"created":5,"data":{"object":{"id":"in_x","object":"invoice","customer":{"id":"c"},"amount_paid":1e30}}}`))
	f.Add("invoice.paid", []byte(`{"created":137438953471,"data":{"object":{"id":"in_\u0000","object":"invoice"}}}`))
	p := builtin.NewStripeInvoices()
	f.Fuzz(func(t *testing.T, typ string, payload []byte) {
		fuzzProject(t, p, projection.Event{Type: typ, Payload: payload}, 1)
	})
}
