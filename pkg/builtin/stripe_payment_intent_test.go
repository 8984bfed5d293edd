package builtin_test

import (
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"

	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

func paymentIntentEvent(typ string, created int64) projection.Event {
	status := map[string]string{
		"payment_intent.processing":     "processing",
		"payment_intent.payment_failed": "requires_payment_method",
		"payment_intent.succeeded":      "succeeded",
		"payment_intent.canceled":       "canceled",
	}[typ]
	received, lastErr, reason := 0, "null", "null"
	switch typ {
	case "payment_intent.succeeded":
		received = 2500
	case "payment_intent.payment_failed":
		lastErr = `{"code":"card_declined","decline_code":"insufficient_funds"}`
	case "payment_intent.canceled":
		reason = `"abandoned"`
	}
	body := fmt.Sprintf(`{"id":"evt_%d","object":"event","type":%q,"created":%d,"data":{"object":{"id":"pi_1","object":"payment_intent","status":%q,"amount":2500,"amount_received":%d,"currency":"usd","customer":{"id":"cus_1","object":"customer"},"invoice":"in_1","latest_charge":"ch_1","cancellation_reason":%s,"last_payment_error":%s,"metadata":{"order_id":"O-9"}}}}`,
		created, typ, created, status, received, reason, lastErr)
	return projection.Event{Source: "stripe", Kind: "stripe", EventID: fmt.Sprintf("evt_%d", created), Type: typ, Payload: []byte(body)}
}

func TestStripePaymentIntentVersionsAndIntents(t *testing.T) {
	p := builtin.NewStripePaymentIntents()
	cases := []struct {
		typ      string
		version  int64
		terminal bool
		failure  string
		intent   bool
	}{
		{"payment_intent.processing", 1000*4 + 1, false, "", false},
		{"payment_intent.payment_failed", 1000*4 + 2, false, "card_declined/insufficient_funds", false},
		{"payment_intent.succeeded", tier + 1000*4 + 3, true, "", true},
		{"payment_intent.canceled", tier + 1000*4 + 3, true, "", false},
	}
	for _, c := range cases {
		t.Run(c.typ, func(t *testing.T) {
			res, err := p.Project(paymentIntentEvent(c.typ, 1000))
			if err != nil {
				t.Fatal(err)
			}
			w := res.Write
			if w.Name != builtin.StripePaymentIntentProjection || w.Subject != "pi_1" || w.Version != c.version || w.Terminal != c.terminal {
				t.Fatalf("write %+v", w)
			}
			if w.State["failure_code"] != c.failure || w.State["customer_id"] != "cus_1" || w.State["amount"] != int64(2500) {
				t.Fatalf("state %+v", w.State)
			}
			if !c.intent {
				if len(res.Intents) != 0 {
					t.Fatalf("intents %+v", res.Intents)
				}
				return
			}
			if len(res.Intents) != 1 {
				t.Fatalf("intents %+v", res.Intents)
			}
			in := res.Intents[0]
			if in.Kind != "payment.confirm" || in.OperationID != projection.OperationID("stripe_payment_intent", "pi_1", "succeeded") {
				t.Fatalf("intent %+v", in)
			}
			pl := in.Payload
			if pl["amount_received"] != int64(2500) || pl["currency"] != "usd" || pl["invoice_id"] != "in_1" || pl["charge_id"] != "ch_1" || pl["version"] != c.version {
				t.Fatalf("payload %+v", pl)
			}
			if md, _ := pl["metadata"].(map[string]any); md["order_id"] != "O-9" {
				t.Fatalf("metadata %+v", pl["metadata"])
			}
		})
	}
	// processing never outranks succeeded, even stamped later.
	late, _ := p.Project(paymentIntentEvent("payment_intent.processing", 5000))
	ok, _ := p.Project(paymentIntentEvent("payment_intent.succeeded", 1000))
	if late.Write.Version >= ok.Write.Version {
		t.Fatal("a later processing outranks succeeded")
	}
}

func TestStripePaymentIntentPermanentErrors(t *testing.T) {
	p := builtin.NewStripePaymentIntents()
	cases := map[string]struct {
		ev   projection.Event
		code string
	}{
		"not JSON":         {projection.Event{Type: "payment_intent.succeeded", Payload: []byte("[]")}, "malformed"},
		"no created":       {paymentIntentEvent("payment_intent.succeeded", 0), "malformed"},
		"not a PI":         {projection.Event{Type: "payment_intent.succeeded", Payload: []byte(`{"created":5,"data":{"object":{"id":"ch_1","object":"charge"}}}`)}, "malformed"},
		"unsupported type": {paymentIntentEvent("payment_intent.created", 1000), "unsupported_type"},
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

// processing, a failure, the retry, success, and a processing report
// stamped after the success: every order ends succeeded with one
// confirmation.
func TestStripePaymentIntentEveryOrder(t *testing.T) {
	events := []labelled{
		{"processing#1", paymentIntentEvent("payment_intent.processing", 1000)},
		{"failed", paymentIntentEvent("payment_intent.payment_failed", 1001)},
		{"processing#2", paymentIntentEvent("payment_intent.processing", 1002)},
		{"succeeded", paymentIntentEvent("payment_intent.succeeded", 1003)},
		{"processing-late", paymentIntentEvent("payment_intent.processing", 1010)},
	}
	for _, r := range runPermutations(t, builtin.NewStripePaymentIntents(), "pi_1", events, true) {
		if r.final.State["outcome"] != "succeeded" || r.final.Version != tier+1003*4+3 {
			t.Fatalf("order %v: %+v", r.order, r.final)
		}
		if k := intentKinds(r.sim); len(k) != 1 || k["payment.confirm"] != 1 {
			t.Fatalf("order %v: intents %v", r.order, k)
		}
	}
	// Within one second, the failure wins over processing.
	events = []labelled{
		{"processing", paymentIntentEvent("payment_intent.processing", 1000)},
		{"failed", paymentIntentEvent("payment_intent.payment_failed", 1000)},
	}
	for _, r := range runPermutations(t, builtin.NewStripePaymentIntents(), "pi_1", events, true) {
		if r.final.State["outcome"] != "payment_failed" {
			t.Fatalf("order %v: %+v", r.order, r.final)
		}
	}
}

// Found by FuzzStripePaymentIntentProject: an empty metadata key, which
// DynamoDB cannot store, is dropped instead of failing the commit (and
// losing the confirmation).
func TestStripePaymentIntentEmptyMetadataKey(t *testing.T) {
	res, err := builtin.NewStripePaymentIntents().Project(projection.Event{Type: "payment_intent.succeeded",
		Payload: []byte(`{"CreAted":1,"dAtA":{"oBjeCt":{"id":"pi_","oBjeCt":"payment_intent","metAdAtA":{"":"","k":"v"}}}}`)})
	if err != nil {
		t.Fatal(err)
	}
	md := res.Intents[0].Payload["metadata"].(map[string]any)
	if len(md) != 1 || md["k"] != "v" {
		t.Fatalf("metadata %v", md)
	}
	if _, err := attributevalue.MarshalMap(res.Intents[0].Payload); err != nil {
		t.Fatal(err)
	}
}
