package builtin_test

import (
	"fmt"
	"testing"

	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

const tier = int64(1) << 40

func invoiceEvent(typ string, created int64, status string, attempt int) projection.Event {
	paid := 0
	if typ == "invoice.paid" {
		paid = 5000
	}
	body := fmt.Sprintf(`{"id":"evt_%d","object":"event","type":%q,"created":%d,"data":{"object":{"id":"in_1","object":"invoice","customer":"cus_1","subscription":{"id":"sub_1","object":"subscription"},"payment_intent":"pi_1","status":%q,"number":"INV-7","currency":"eur","amount_due":5000,"amount_paid":%d,"amount_remaining":%d,"attempt_count":%d,"metadata":{"order_id":"O-7"}}}}`,
		created, typ, created, status, paid, 5000-paid, attempt)
	return projection.Event{Source: "stripe", Kind: "stripe", EventID: fmt.Sprintf("evt_%d", created), Type: typ, Payload: []byte(body)}
}

func TestStripeInvoiceVersionsAndIntents(t *testing.T) {
	p := builtin.NewStripeInvoices()
	cases := []struct {
		typ, status string
		version     int64
		terminal    bool
		intent      string
	}{
		{"invoice.payment_failed", "open", 1000*4 + 1, false, ""},
		{"invoice.paid", "paid", tier + 1000*4 + 2, true, "invoice.fulfil"},
		{"invoice.voided", "void", tier + 1000*4 + 3, true, ""},
	}
	for _, c := range cases {
		t.Run(c.typ, func(t *testing.T) {
			res, err := p.Project(invoiceEvent(c.typ, 1000, c.status, 1))
			if err != nil {
				t.Fatal(err)
			}
			w := res.Write
			if w.Name != builtin.StripeInvoiceProjection || w.Subject != "in_1" || w.Version != c.version || w.Terminal != c.terminal {
				t.Fatalf("write %+v", w)
			}
			if w.State["status"] != c.status || w.State["customer_id"] != "cus_1" || w.State["amount_due"] != int64(5000) {
				t.Fatalf("state %+v", w.State)
			}
			if c.intent == "" {
				if len(res.Intents) != 0 {
					t.Fatalf("intents %+v", res.Intents)
				}
				return
			}
			if len(res.Intents) != 1 {
				t.Fatalf("intents %+v", res.Intents)
			}
			in := res.Intents[0]
			if in.Kind != c.intent || in.OperationID != projection.OperationID("stripe_invoice", "in_1", "paid") || in.Subject != "in_1" {
				t.Fatalf("intent %+v", in)
			}
			pl := in.Payload
			if pl["amount_paid"] != int64(5000) || pl["currency"] != "eur" || pl["subscription_id"] != "sub_1" || pl["payment_intent_id"] != "pi_1" || pl["version"] != c.version {
				t.Fatalf("payload %+v", pl)
			}
		})
	}
	// A terminal fact outranks any failure, whatever its timestamp.
	late, _ := p.Project(invoiceEvent("invoice.payment_failed", 999_999, "open", 4))
	paid, _ := p.Project(invoiceEvent("invoice.paid", 1000, "paid", 1))
	if late.Write.Version >= paid.Write.Version {
		t.Fatal("a later payment_failed outranks paid")
	}
	// The paid intent's key is the same for every event reporting the payment.
	other, _ := p.Project(invoiceEvent("invoice.paid", 2000, "paid", 1))
	if other.Intents[0].OperationID != paid.Intents[0].OperationID {
		t.Fatal("two paid events for one invoice gave two fulfilment keys")
	}
}

func TestStripeInvoicePermanentErrors(t *testing.T) {
	p := builtin.NewStripeInvoices()
	cases := map[string]struct {
		ev   projection.Event
		code string
	}{
		"not JSON":         {projection.Event{Type: "invoice.paid", Payload: []byte("{")}, "malformed"},
		"no created":       {invoiceEvent("invoice.paid", 0, "paid", 1), "malformed"},
		"absurd created":   {invoiceEvent("invoice.paid", 1<<40, "paid", 1), "malformed"},
		"not an invoice":   {projection.Event{Type: "invoice.paid", Payload: []byte(`{"created":5,"data":{"object":{"id":"sub_1","object":"subscription"}}}`)}, "malformed"},
		"object not JSON":  {projection.Event{Type: "invoice.paid", Payload: []byte(`{"created":5,"data":{"object":"in_1"}}`)}, "malformed"},
		"unsupported type": {invoiceEvent("invoice.created", 1000, "draft", 0), "unsupported_type"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := p.Project(c.ev)
			if code, perm := projection.AsPermanent(err); !perm || code != c.code {
				t.Fatalf("err %v: permanent=%v code=%q, want %q", err, perm, code, c.code)
			}
		})
	}
}

// Failed attempts, the payment, a failure stamped after the payment, and a
// second event reporting the payment: every order ends paid, with one
// fulfilment.
func TestStripeInvoiceEveryOrder(t *testing.T) {
	events := []labelled{
		{"failed#1", invoiceEvent("invoice.payment_failed", 1000, "open", 1)},
		{"failed#2", invoiceEvent("invoice.payment_failed", 1060, "open", 2)},
		{"paid", invoiceEvent("invoice.paid", 1100, "paid", 2)},
		{"failed-late", invoiceEvent("invoice.payment_failed", 1200, "open", 3)},
		{"paid-again", invoiceEvent("invoice.paid", 1100, "paid", 2)},
	}
	events[4].ev.EventID = "evt_other"
	runs := runPermutations(t, builtin.NewStripeInvoices(), "in_1", events, true)
	for _, r := range runs {
		if r.final.State["outcome"] != "paid" || r.final.Version != tier+1100*4+2 || !r.final.Terminal {
			t.Fatalf("order %v: %+v", r.order, r.final)
		}
		if k := intentKinds(r.sim); len(k) != 1 || k["invoice.fulfil"] != 1 {
			t.Fatalf("order %v: intents %v", r.order, k)
		}
	}
}
