package provider_test

import (
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/pkg/provider"
)

// Visibly fake Shopify app secrets.
const (
	shopifySecretPrimary = "shpss_test_FAKE_primary"
	shopifySecretRotated = "shpss_test_FAKE_rotated"
	shopifySecretWrong   = "shpss_test_FAKE_wrong"
)

// A fixed vector computed once with openssl, independent of this package:
//
//	secret='shpss_test_FAKE_vector'
//	body='{"id":820982911946154508,"admin_graphql_api_id":"gid://shopify/Order/820982911946154508","updated_at":"2025-03-01T12:00:00-05:00"}'
//	printf '%s' "$body" | openssl dgst -sha256 -hmac "$secret" -binary | base64
const (
	shopifyVectorSecret = "shpss_test_FAKE_vector"
	shopifyVectorBody   = `{"id":820982911946154508,"admin_graphql_api_id":"gid://shopify/Order/820982911946154508","updated_at":"2025-03-01T12:00:00-05:00"}`
	shopifyVectorHMAC   = "sEubdIy34gOLCICXu7HKawkK6ZN9Ki+zxC/6B1/S/Yc="
)

// shopifyHeaders are the headers of a Shopify delivery, signed with secret.
func shopifyHeaders(secret string, body []byte) map[string]string {
	return hfHeaders(
		"x-shopify-hmac-sha256", hfMACBase64(secret, string(body)),
		"x-shopify-topic", "orders/updated",
		"x-shopify-shop-domain", "fixture-shop.myshopify.com",
		"x-shopify-webhook-id", "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
		"x-shopify-event-id", "98880550-7158-44d4-b7cd-2c97c8a091b5",
		"x-shopify-triggered-at", "2026-11-30T11:59:58.123456789Z",
		"x-shopify-api-version", "2025-01",
	)
}

func TestShopifyVector(t *testing.T) {
	v := hfNew(t, "shopify", nil)
	req := provider.Request{
		Headers: hfHeaders("x-shopify-hmac-sha256", shopifyVectorHMAC, "x-shopify-webhook-id", "wh_test_FAKE_1", "x-shopify-topic", "orders/updated"),
		Body:    []byte(shopifyVectorBody),
	}
	got, err := v.Verify(t.Context(), req, provider.Config{Secrets: []string{shopifyVectorSecret}, Now: fixedClock(now)})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	hfWantOne(t, got, provider.Identity{
		EventID: "wh_test_FAKE_1", DeliveryID: "wh_test_FAKE_1", Type: "orders/updated",
		Subject: "gid://shopify/Order/820982911946154508", VersionHint: "2025-03-01T12:00:00-05:00",
		Attributes: map[string]string{"webhook_id": "wh_test_FAKE_1", "topic": "orders/updated"},
	})
}

func TestShopifyVerifySignature(t *testing.T) {
	v := hfNew(t, "shopify", nil)
	body := hfEvent(t, "shopify/orders-updated.json")
	good := shopifyHeaders(shopifySecretPrimary, body)
	sig := good["x-shopify-hmac-sha256"]
	req := func(h map[string]string) provider.Request { return provider.Request{Headers: h, Body: body} }
	tampered := []byte(strings.Replace(string(body), `"total_price": "403.00"`, `"total_price": "4.03"`, 1))
	one := []string{shopifySecretPrimary}

	hfRunCases(t, v, []hfCase{
		{name: "valid", req: req(good), secrets: one},
		{name: "second of two secrets matches (rotation)", req: req(shopifyHeaders(shopifySecretRotated, body)), secrets: []string{shopifySecretPrimary, shopifySecretRotated}},
		{name: "wrong secret", req: req(shopifyHeaders(shopifySecretWrong, body)), secrets: []string{shopifySecretPrimary, shopifySecretRotated}, wantErr: provider.ErrBadSignature},
		{name: "tampered body", req: provider.Request{Headers: good, Body: tampered}, secrets: one, wantErr: provider.ErrBadSignature},
		{name: "body re-serialised from parsed JSON", req: provider.Request{Headers: good, Body: hfReserialised(t, body)}, secrets: one, wantErr: provider.ErrBadSignature},
		{name: "hex instead of base64", req: req(hfWith(good, "x-shopify-hmac-sha256", hfMACHex(shopifySecretPrimary, string(body)))), secrets: one, wantErr: provider.ErrBadSignature},
		{name: "base64 without padding", req: req(hfWith(good, "x-shopify-hmac-sha256", strings.TrimRight(sig, "="))), secrets: one, wantErr: provider.ErrBadSignature},
		{name: "two signatures joined by the gateway", req: req(hfWith(good, "x-shopify-hmac-sha256", hfMACBase64(shopifySecretWrong, string(body))+","+sig)), secrets: one, wantErr: provider.ErrBadSignature},
		{name: "two signatures joined by a space", req: req(hfWith(good, "x-shopify-hmac-sha256", hfMACBase64(shopifySecretWrong, string(body))+" "+sig)), secrets: one, wantErr: provider.ErrBadSignature},
		{
			// Shopify signs no timestamp and retries for hours: an old,
			// unsigned X-Shopify-Triggered-At is no reason to refuse.
			name: "day-old triggered-at is accepted", req: req(hfWith(good, "x-shopify-triggered-at", now.Add(-26*time.Hour).Format(time.RFC3339))), secrets: one,
		},
		{name: "missing signature", req: req(hfWithout(good, "x-shopify-hmac-sha256")), secrets: one, wantErr: provider.ErrNotSigned},
		{name: "header name not lower-cased by the caller", req: req(hfRenamed(good, "x-shopify-hmac-sha256", "X-Shopify-Hmac-Sha256")), secrets: one, wantErr: provider.ErrNotSigned},
		{name: "no secrets", req: req(good), wantErr: provider.ErrNoSecrets},
		{name: "only an empty secret", req: req(good), secrets: []string{""}, wantErr: provider.ErrNoSecrets},
	}, nil)
}

func TestShopifyIdentity(t *testing.T) {
	order := hfEvent(t, "shopify/orders-updated.json")
	full := shopifyHeaders(shopifySecretPrimary, order)
	allAttrs := map[string]string{
		"webhook_id": "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043", "event_id": "98880550-7158-44d4-b7cd-2c97c8a091b5",
		"topic": "orders/updated", "shop_domain": "fixture-shop.myshopify.com",
		"triggered_at": "2026-11-30T11:59:58.123456789Z", "api_version": "2025-01",
	}
	tests := []struct {
		name             string
		headers          map[string]string // without the signature
		body             []byte
		want             provider.Identity
		wantUnidentified bool
	}{
		{
			name:    "orders/updated",
			headers: full,
			body:    order,
			want: provider.Identity{
				EventID: "98880550-7158-44d4-b7cd-2c97c8a091b5", DeliveryID: "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
				Type: "orders/updated", Subject: "gid://shopify/Order/820982911946154508",
				VersionHint: "2026-11-30T06:59:58-05:00", Attributes: allAttrs,
			},
		},
		{
			name:    "no event id: the webhook id is the event id",
			headers: hfWithout(full, "x-shopify-event-id"),
			body:    []byte(`{"id":820982911946154508,"updated_at":"2026-11-30T06:59:58-05:00"}`),
			want: provider.Identity{
				EventID: "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043", DeliveryID: "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
				Type: "orders/updated", Subject: "820982911946154508", VersionHint: "2026-11-30T06:59:58-05:00",
				Attributes: hfWithout(allAttrs, "event_id"),
			},
		},
		{
			name:    "event id without a webhook id",
			headers: hfHeaders("x-shopify-event-id", "ev_test_FAKE_s"),
			body:    []byte(`{"id":"not-a-number"}`),
			want: provider.Identity{EventID: "ev_test_FAKE_s", Type: "unknown", Subject: "not-a-number",
				Attributes: map[string]string{"event_id": "ev_test_FAKE_s"}},
		},
		{
			name:    "body not JSON keeps the header identity",
			headers: hfHeaders("x-shopify-webhook-id", "wh_test_FAKE_2", "x-shopify-topic", "app/uninstalled"),
			body:    []byte(`uninstalled`),
			want: provider.Identity{EventID: "wh_test_FAKE_2", DeliveryID: "wh_test_FAKE_2", Type: "app/uninstalled",
				Attributes: map[string]string{"webhook_id": "wh_test_FAKE_2", "topic": "app/uninstalled"}},
		},
		{
			name:    "long attribute values are cut",
			headers: hfHeaders("x-shopify-webhook-id", "wh_test_FAKE_3", "x-shopify-shop-domain", strings.Repeat("d", 300)),
			body:    []byte(`{}`),
			want: provider.Identity{EventID: "wh_test_FAKE_3", DeliveryID: "wh_test_FAKE_3", Type: "unknown",
				Attributes: map[string]string{"webhook_id": "wh_test_FAKE_3", "shop_domain": strings.Repeat("d", provider.MaxAttributeLen)}},
		},
		{name: "neither id header", headers: hfWithout(full, "x-shopify-event-id", "x-shopify-webhook-id"), body: order, wantUnidentified: true},
		{name: "event id longer than 256 bytes", headers: hfWith(full, "x-shopify-event-id", strings.Repeat("e", 257)), body: order, wantUnidentified: true},
		{name: "id header not lower-cased by the caller", headers: hfRenamed(hfWithout(full, "x-shopify-event-id"), "x-shopify-webhook-id", "X-Shopify-Webhook-Id"), body: order, wantUnidentified: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := hfWith(tc.headers, "x-shopify-hmac-sha256", hfMACBase64(shopifySecretPrimary, string(tc.body)))
			got, err := provider.Shopify{}.Verify(t.Context(), provider.Request{Headers: h, Body: tc.body},
				provider.Config{Secrets: []string{shopifySecretPrimary}, Now: fixedClock(now)})
			if err != nil {
				t.Fatalf("Verify: %v (a signed delivery must never be refused for its content)", err)
			}
			if tc.wantUnidentified {
				if got.Unidentified == "" || len(got.Events) != 0 {
					t.Fatalf("Verify = %+v, want Unidentified and no events", got)
				}
				return
			}
			hfWantOne(t, got, tc.want)
		})
	}
}
