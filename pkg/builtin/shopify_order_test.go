package builtin_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

func shopifyEvent(topic, updatedAt, financial, fulfillment, cancelledAt string) projection.Event {
	q := func(s string) string {
		if s == "" {
			return "null"
		}
		return fmt.Sprintf("%q", s)
	}
	body := fmt.Sprintf(`{"id":820982911946154508,"admin_graphql_api_id":"gid://shopify/Order/820982911946154508","name":"#9999","currency":"USD","total_price":"403.00","updated_at":%q,"financial_status":%s,"fulfillment_status":%s,"cancelled_at":%s,"cancel_reason":%s,"customer":{"id":115310627314723954}}`,
		updatedAt, q(financial), q(fulfillment), q(cancelledAt), q(map[bool]string{true: "customer"}[cancelledAt != ""]))
	return projection.Event{Source: "shop", Kind: "shopify", EventID: topic + updatedAt, Type: topic, Payload: []byte(body)}
}

func ms(s string) int64 {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UnixMilli()
}

func TestShopifyFixture(t *testing.T) {
	res, err := builtin.NewShopifyOrders().Project(projection.Event{Kind: "shopify", Type: "orders/updated", Payload: fixture(t, "shopify/orders-updated.json")})
	if err != nil {
		t.Fatal(err)
	}
	w := res.Write
	if w.Name != builtin.ShopifyOrderProjection || w.Subject != "820982911946154508" || w.Version != ms("2026-11-30T06:59:58-05:00") || w.Terminal {
		t.Fatalf("write %+v", w)
	}
	want := map[string]any{"order_id": "820982911946154508", "financial_status": "paid", "fulfillment_status": "", "cancelled_at": "", "total_price": "403.00", "currency": "USD"}
	if fmt.Sprint(w.State) != fmt.Sprint(want) {
		t.Fatalf("state %v", w.State)
	}
	if len(res.Intents) != 0 {
		t.Fatalf("intents %+v", res.Intents)
	}
}

func TestShopifyCancellation(t *testing.T) {
	p := builtin.NewShopifyOrders()
	cancelled, err := p.Project(shopifyEvent("orders/cancelled", "2026-11-30T08:00:00-05:00", "voided", "", "2026-11-30T08:00:00-05:00"))
	if err != nil {
		t.Fatal(err)
	}
	if cancelled.Write.State["cancelled_at"] != "2026-11-30T13:00:00Z" || len(cancelled.Intents) != 1 {
		t.Fatalf("result %+v", cancelled)
	}
	in := cancelled.Intents[0]
	wantOp := projection.OperationID("820982911946154508", "cancelled", fmt.Sprint(ms("2026-11-30T08:00:00-05:00")))
	if in.Kind != "order.cancelled" || in.OperationID != wantOp || in.Subject != "820982911946154508" {
		t.Fatalf("intent %+v", in)
	}
	if in.Payload["total_price"] != "403.00" || in.Payload["customer_id"] != "115310627314723954" || in.Payload["version"] != ms("2026-11-30T08:00:00-05:00") || in.Payload["cancel_reason"] != "customer" {
		t.Fatalf("payload %+v", in.Payload)
	}
	// The same cancellation reported by orders/updated, written with
	// another offset: the same state and the same key.
	same, _ := p.Project(shopifyEvent("orders/updated", "2026-11-30T08:00:00-05:00", "voided", "", "2026-11-30T13:00:00Z"))
	if same.Write.Fingerprint != cancelled.Write.Fingerprint || same.Intents[0].OperationID != wantOp {
		t.Fatal("one cancellation, two states or keys")
	}
	// A later change of the cancelled order (refund) is a new state with
	// the same cancellation key: one cancellation effect.
	refund, _ := p.Project(shopifyEvent("orders/updated", "2026-11-30T09:30:00-05:00", "refunded", "", "2026-11-30T08:00:00-05:00"))
	if refund.Write.Version <= cancelled.Write.Version || refund.Write.Fingerprint == cancelled.Write.Fingerprint || refund.Intents[0].OperationID != wantOp {
		t.Fatalf("refund %+v", refund)
	}
	// The topic decides nothing: orders/cancelled without cancelled_at is
	// not a cancellation.
	if odd, _ := p.Project(shopifyEvent("orders/cancelled", "2026-11-30T08:00:00-05:00", "paid", "", "")); len(odd.Intents) != 0 {
		t.Fatalf("intents %+v", odd.Intents)
	}
}

func TestShopifyIDsAndErrors(t *testing.T) {
	p := builtin.NewShopifyOrders()
	// An id past int64 is kept as written; a numeric total is read as written.
	big, err := p.Project(projection.Event{Type: "orders/create", Payload: []byte(`{"id":8209829119461545081234,"updated_at":"2026-11-30T12:00:00-05:00","financial_status":"paid","total_price":199.5}`)})
	if err != nil || big.Write.Subject != "8209829119461545081234" || big.Write.State["total_price"] != "199.5" {
		t.Fatalf("%v %+v", err, big.Write)
	}
	cases := map[string]struct {
		body, topic, code string
	}{
		"no id":            {`{"updated_at":"2026-11-30T12:00:00Z"}`, "orders/updated", "malformed"},
		"fractional id":    {`{"id":1.5,"updated_at":"2026-11-30T12:00:00Z"}`, "orders/updated", "malformed"},
		"no updated_at":    {`{"id":1}`, "orders/updated", "malformed"},
		"bad updated_at":   {`{"id":1,"updated_at":"yesterday"}`, "orders/updated", "malformed"},
		"before 1970":      {`{"id":1,"updated_at":"1969-12-31T00:00:00Z"}`, "orders/updated", "malformed"},
		"bad cancelled_at": {`{"id":1,"updated_at":"2026-11-30T12:00:00Z","cancelled_at":"soon"}`, "orders/cancelled", "malformed"},
		"total an object":  {`{"id":1,"updated_at":"2026-11-30T12:00:00Z","total_price":{}}`, "orders/updated", "malformed"},
		"not JSON":         {`{`, "orders/updated", "malformed"},
		"unsupported":      {`{"id":1,"updated_at":"2026-11-30T12:00:00Z"}`, "orders/paid", "unsupported_type"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := p.Project(projection.Event{Type: c.topic, Payload: []byte(c.body)})
			if code, perm := projection.AsPermanent(err); !perm || code != c.code {
				t.Fatalf("err %v: permanent=%v code=%q, want %q", err, perm, code, c.code)
			}
		})
	}
}

// An order's life in every order: created, paid, fulfilled, cancelled
// (reported by two topics), refunded. It ends refunded and cancelled, with
// one cancellation effect.
func TestShopifyEveryOrder(t *testing.T) {
	cancelAt := "2026-11-30T10:00:00-05:00"
	events := []labelled{
		{"create", shopifyEvent("orders/create", "2026-11-30T07:00:00-05:00", "pending", "", "")},
		{"paid", shopifyEvent("orders/updated", "2026-11-30T07:00:05-05:00", "paid", "", "")},
		{"fulfilled", shopifyEvent("orders/fulfilled", "2026-11-30T09:00:00-05:00", "paid", "fulfilled", "")},
		{"cancelled", shopifyEvent("orders/cancelled", cancelAt, "paid", "fulfilled", cancelAt)},
		{"cancelled-as-updated", shopifyEvent("orders/updated", cancelAt, "paid", "fulfilled", cancelAt)},
		{"refunded", shopifyEvent("orders/updated", "2026-11-30T10:05:00-05:00", "refunded", "fulfilled", cancelAt)},
	}
	for _, r := range runPermutations(t, builtin.NewShopifyOrders(), "820982911946154508", events, true) {
		if r.final.State["financial_status"] != "refunded" || r.final.State["cancelled_at"] != "2026-11-30T15:00:00Z" || r.final.Version != ms("2026-11-30T10:05:00-05:00") {
			t.Fatalf("order %v: %+v", r.order, r.final)
		}
		if k := intentKinds(r.sim); len(k) != 1 || k["order.cancelled"] != 1 {
			t.Fatalf("order %v: intents %v", r.order, k)
		}
	}
}
