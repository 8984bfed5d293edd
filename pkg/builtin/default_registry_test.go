package builtin_test

import (
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/pkg/builtin"
)

func TestDefaultRegistersEveryProjection(t *testing.T) {
	r := builtin.Default(builtin.StripeOptions{})
	want := map[string][]string{
		"stripe/" + builtin.StripeSubscriptionProjection:  {"customer.subscription.created", "customer.subscription.updated", "customer.subscription.deleted"},
		"stripe/" + builtin.StripeInvoiceProjection:       {"invoice.paid", "invoice.payment_failed", "invoice.voided"},
		"stripe/" + builtin.StripePaymentIntentProjection: {"payment_intent.processing", "payment_intent.succeeded", "payment_intent.payment_failed", "payment_intent.canceled"},
		"sns/" + builtin.SESMessageProjection:             {"ses.send", "ses.deliverydelay", "ses.delivery", "ses.reject", "ses.bounce", "ses.complaint"},
		"shopify/" + builtin.ShopifyOrderProjection:       {"orders/create", "orders/updated", "orders/cancelled", "orders/fulfilled"},
		"quiltt/" + builtin.QuilttConnectionProjection: {
			"connection.synced.successful", "connection.synced.successful.initial", "connection.synced.successful.historical",
			"connection.synced.errored.repairable", "connection.synced.errored.service", "connection.synced.errored.provider",
			"connection.synced.errored.institution", "connection.disconnected",
		},
		"standard-webhooks/" + builtin.OrderProjection: {"order.created", "order.updated", "order.confirmed", "order.cancelled"},
	}
	for key, types := range want {
		kind, name, _ := strings.Cut(key, "/")
		for _, typ := range types {
			p, ok := r.Lookup(kind, typ)
			if !ok || p.Name() != name {
				t.Errorf("%s %s: registered=%v", kind, typ, ok)
			}
		}
	}
	for _, miss := range [][2]string{{"sns", "ses.open"}, {"sns", "sns.notification"}, {"quiltt", "connection.created"}, {"shopify", "orders/paid"}, {"github", "push"}, {"stripe", "charge.refunded"}} {
		if _, ok := r.Lookup(miss[0], miss[1]); ok {
			t.Errorf("%s %s should stay unprojected (ignored)", miss[0], miss[1])
		}
	}
}
