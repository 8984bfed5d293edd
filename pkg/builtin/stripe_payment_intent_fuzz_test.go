package builtin_test

import (
	"testing"

	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

func FuzzStripePaymentIntentProject(f *testing.F) {
	for _, typ := range []string{"payment_intent.processing", "payment_intent.succeeded", "payment_intent.payment_failed", "payment_intent.canceled"} {
		f.Add(typ, paymentIntentEvent(typ, 1000).Payload)
	}
	f.Add("payment_intent.payment_failed", []byte(`{"created":9,"data":{"object":{"id":"pi_1","object":"payment_intent","last_payment_error":{}}}}`))
	p := builtin.NewStripePaymentIntents()
	f.Fuzz(func(t *testing.T, typ string, payload []byte) {
		fuzzProject(t, p, projection.Event{Type: typ, Payload: payload}, 1)
	})
}
