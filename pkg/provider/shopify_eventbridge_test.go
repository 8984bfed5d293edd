package provider_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/pkg/provider"
)

// ebDetail returns the detail of the EventBridge fixture and its parts.
func ebDetail(t testing.TB) (detail, payload []byte, metadata map[string]string) {
	t.Helper()
	var ev struct {
		Detail json.RawMessage `json:"detail"`
	}
	if err := json.Unmarshal(hfEvent(t, "eventbridge/shopify-orders-updated.json"), &ev); err != nil {
		t.Fatal(err)
	}
	var d struct {
		Payload  json.RawMessage   `json:"payload"`
		Metadata map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(ev.Detail, &d); err != nil {
		t.Fatal(err)
	}
	return ev.Detail, d.Payload, d.Metadata
}

func TestShopifyEventBridgeIdentityIsTheHTTPSIdentity(t *testing.T) {
	// GIVEN one webhook as Shopify puts it on a partner event bus
	detail, payload, meta := ebDetail(t)
	// WHEN its identity is read from the envelope
	got := provider.ShopifyEventBridgeIdentity(detail)
	// THEN it is exactly the identity the HTTPS path reads from the same
	// headers (lower-cased, as the gateway gives them) and body, signed
	headers := map[string]string{}
	for k, v := range meta {
		headers[strings.ToLower(k)] = v
	}
	headers["x-shopify-hmac-sha256"] = hfMACBase64(shopifySecretPrimary, string(payload))
	viaHTTPS, err := hfNew(t, "shopify", nil).Verify(t.Context(), provider.Request{Headers: headers, Body: payload},
		provider.Config{Secrets: []string{shopifySecretPrimary}, Now: fixedClock(now)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Events) != 1 || len(viaHTTPS.Events) != 1 {
		t.Fatalf("eventbridge %+v, https %+v", got, viaHTTPS)
	}
	// AND the stored payload is the webhook body, not the envelope
	if !bytes.Equal(got.Events[0].Payload, payload) {
		t.Fatalf("payload %s", got.Events[0].Payload)
	}
	eb := got.Events[0]
	eb.Payload = nil
	// The one difference: over HTTPS the ids are unsigned headers; through
	// EventBridge AWS delivers the envelope.
	https := viaHTTPS.Events[0]
	if eb.UnsignedID || !https.UnsignedID {
		t.Fatalf("unsigned id: eventbridge %v, https %v", eb.UnsignedID, https.UnsignedID)
	}
	https.UnsignedID = false
	if !reflect.DeepEqual(eb, https) {
		t.Fatalf("eventbridge identity\n %+v\nhttps identity\n %+v", eb, viaHTTPS.Events[0])
	}
	hfWantOne(t, provider.Verified{Events: []provider.Identity{eb}}, provider.Identity{
		EventID: "ev_test_FAKE_eventbridge_0001", DeliveryID: "wh_test_FAKE_eventbridge_0001", Type: "orders/updated",
		Subject: "gid://shopify/Order/820982911946154999", VersionHint: "2026-11-30T06:59:58-05:00",
		Attributes: map[string]string{
			"webhook_id": "wh_test_FAKE_eventbridge_0001", "event_id": "ev_test_FAKE_eventbridge_0001", "topic": "orders/updated",
			"shop_domain": "fixture-shop.myshopify.com", "triggered_at": "2026-11-30T11:59:59.123456789Z", "api_version": "2025-01",
		},
	})
}

func TestShopifyEventBridgeIdentityEdges(t *testing.T) {
	for _, c := range []struct {
		name, detail string
		wantID       string // "" means Unidentified
		wantPayload  string
	}{
		{"metadata names are matched case-insensitively", `{"payload":{"id":1},"metadata":{"x-shopify-event-id":"ev1","X-SHOPIFY-TOPIC":"orders/create"}}`, "ev1", `{"id":1}`},
		{"webhook id when there is no event id", `{"payload":{"id":1},"metadata":{"X-Shopify-Webhook-Id":"wh1"}}`, "wh1", `{"id":1}`},
		{"a string payload is the body text", `{"payload":"<order/>","metadata":{"X-Shopify-Event-Id":"ev2"}}`, "ev2", `<order/>`},
		{"a number in metadata is read as written", `{"payload":{},"metadata":{"X-Shopify-Event-Id":42}}`, "42", `{}`},
		{"no ids", `{"payload":{"id":1},"metadata":{"X-Shopify-Topic":"orders/create"}}`, "", ""},
		{"no payload", `{"metadata":{"X-Shopify-Event-Id":"ev3"}}`, "", ""},
		{"null payload", `{"payload":null,"metadata":{"X-Shopify-Event-Id":"ev3"}}`, "", ""},
		{"not an object", `[1,2]`, "", ""},
		{"not JSON", `{"payload":`, "", ""},
		{"one header twice with different values", `{"payload":{},"metadata":{"X-Shopify-Event-Id":"a","x-shopify-event-id":"b"}}`, "", ""},
		{"an id with a control character", `{"payload":{},"metadata":{"X-Shopify-Event-Id":"a\u0007"}}`, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := provider.ShopifyEventBridgeIdentity([]byte(c.detail))
			if c.wantID == "" {
				if got.Unidentified == "" || len(got.Events) != 0 {
					t.Fatalf("got %+v, want Unidentified", got)
				}
				return
			}
			if len(got.Events) != 1 || got.Events[0].EventID != c.wantID || string(got.Events[0].Payload) != c.wantPayload {
				t.Fatalf("got %+v", got)
			}
		})
	}
}

// FuzzShopifyEventBridgeIdentity: any detail gives events or an
// Unidentified reason, within the identity bounds, never a panic; every
// event carries its own payload.
func FuzzShopifyEventBridgeIdentity(f *testing.F) {
	detail, _, _ := ebDetail(f)
	f.Add(detail)
	f.Add([]byte(`{"payload":"x","metadata":{"X-Shopify-Webhook-Id":"w"}}`))
	f.Add([]byte(`{"payload":{},"metadata":{"X-Shopify-Event-Id":{"a":1}}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, detail []byte) {
		got := provider.ShopifyEventBridgeIdentity(detail)
		for _, ev := range got.Events {
			if len(ev.Payload) == 0 {
				t.Fatalf("event %+v without a payload", ev)
			}
			hfCheckIdentities(t, got, ev.Payload)
		}
		if len(got.Events) == 0 && got.Unidentified == "" {
			t.Fatalf("neither events nor a reason for %q", detail)
		}
	})
}
