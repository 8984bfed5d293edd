package builtin_test

import (
	"fmt"
	"testing"

	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

func event(typ, status, customer, meta string, created int64) projection.Event {
	body := fmt.Sprintf(`{"id":"evt_1","object":"event","type":%q,"created":%d,"data":{"object":{"id":"sub_1","object":"subscription","customer":%s,"status":%q,"metadata":%s,"items":{"data":[{"current_period_end":1800000000,"price":{"id":"price_b"}},{"price":{"id":"price_a"}}]}}}}`,
		typ, created, customer, status, meta)
	return projection.Event{Source: "stripe", Kind: "stripe", EventID: "evt_1", Type: typ, Payload: []byte(body)}
}

func TestStripeSubscriptionVersionsAndEntitlement(t *testing.T) {
	p := builtin.NewStripeSubscriptions(builtin.StripeOptions{})
	acct := `{"account_id":"acct_1"}`
	cases := []struct {
		typ, status string
		version     int64
		entitled    bool
		terminal    bool
		kind        string
	}{
		{"customer.subscription.created", "trialing", 1000*4 + 1, true, false, "entitlement.grant"},
		{"customer.subscription.updated", "active", 1000*4 + 2, true, false, "entitlement.grant"},
		{"customer.subscription.updated", "past_due", 1000*4 + 2, true, false, "entitlement.grant"},
		{"customer.subscription.updated", "unpaid", 1000*4 + 2, false, false, "entitlement.revoke"},
		{"customer.subscription.updated", "incomplete_expired", 1000*4 + 2, false, false, "entitlement.revoke"},
		{"customer.subscription.deleted", "active", builtin.DeletedVersionBase + 1000*4 + 3, false, true, "entitlement.revoke"},
	}
	for _, c := range cases {
		t.Run(c.typ+"/"+c.status, func(t *testing.T) {
			res, err := p.Project(event(c.typ, c.status, `"cus_1"`, acct, 1000))
			if err != nil {
				t.Fatal(err)
			}
			w := res.Write
			if w.Subject != "sub_1" || w.Version != c.version || w.State["entitled"] != c.entitled || w.Terminal != c.terminal {
				t.Fatalf("write %+v", w)
			}
			if fmt.Sprint(w.State["price_ids"]) != "[price_a price_b]" || w.State["current_period_end"] != int64(1800000000) {
				t.Fatalf("state %+v", w.State)
			}
			if len(res.Intents) != 1 || res.Intents[0].Kind != c.kind || res.Intents[0].Subject != "acct_1" {
				t.Fatalf("intents %+v", res.Intents)
			}
			again, _ := p.Project(event(c.typ, c.status, `"cus_1"`, acct, 1000))
			if again.Intents[0].OperationID != res.Intents[0].OperationID || again.Write.Fingerprint != w.Fingerprint {
				t.Fatal("projecting the same event twice gave different keys")
			}
		})
	}
	// Within one second the lifecycle rank orders events; across seconds,
	// time does; a deletion is final and outranks any timestamp.
	a, _ := p.Project(event("customer.subscription.deleted", "canceled", `"cus_1"`, acct, 1000))
	b, _ := p.Project(event("customer.subscription.created", "active", `"cus_1"`, acct, 1001))
	c, _ := p.Project(event("customer.subscription.updated", "active", `"cus_1"`, acct, 1002))
	if !(b.Write.Version < c.Write.Version && c.Write.Version < a.Write.Version) {
		t.Fatal("a later second must outrank an earlier one, and a deletion every non-deletion (it is final)")
	}
	// An expanded customer object is read by id.
	exp, err := p.Project(event("customer.subscription.updated", "active", `{"id":"cus_9","object":"customer"}`, acct, 1000))
	if err != nil || exp.Write.State["customer_id"] != "cus_9" {
		t.Fatalf("expanded customer: %v %v", exp.Write.State["customer_id"], err)
	}
}

func TestStripeSubscriptionPermanentErrors(t *testing.T) {
	p := builtin.NewStripeSubscriptions(builtin.StripeOptions{AccountMetadataKey: "tenant"})
	cases := map[string]struct {
		ev   projection.Event
		code string
	}{
		"no mapping metadata": {event("customer.subscription.updated", "active", `"cus_1"`, `{"account_id":"acct_1"}`, 1000), "unknown_subject"},
		"not JSON":            {projection.Event{Type: "customer.subscription.updated", Payload: []byte("{")}, "malformed"},
		"no created":          {event("customer.subscription.updated", "active", `"cus_1"`, `{"tenant":"t"}`, 0), "malformed"},
		"object not a subscription": {projection.Event{Type: "customer.subscription.updated",
			Payload: []byte(`{"created":5,"data":{"object":{"id":"in_1","object":"invoice","status":"paid"}}}`)}, "malformed"},
		"unsupported type": {event("invoice.paid", "active", `"cus_1"`, `{"tenant":"t"}`, 1000), "unsupported_type"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := p.Project(c.ev)
			code, perm := projection.AsPermanent(err)
			if !perm || code != c.code {
				t.Fatalf("err %v: permanent=%v code=%q, want %q", err, perm, code, c.code)
			}
		})
	}
}

func TestRegistry(t *testing.T) {
	r := builtin.Default(builtin.StripeOptions{})
	if _, ok := r.Lookup("stripe", "customer.subscription.deleted"); !ok {
		t.Fatal("deleted not registered")
	}
	if _, ok := r.Lookup("stripe", "charge.refunded"); ok {
		t.Fatal("unexpected projection")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("double registration did not panic")
		}
	}()
	r.Register("stripe", []string{"customer.subscription.created"}, builtin.NewStripeSubscriptions(builtin.StripeOptions{}))
}
