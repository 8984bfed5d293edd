package provider_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"testing"

	"github.com/effectively-once/webhooks/pkg/provider"
)

// FuzzShopifyVerify feeds arbitrary bodies and signature headers to the
// Shopify verifier. It must never panic, must fail only with the sentinel
// errors, and may succeed only when the header decodes (leniently, here)
// to the MAC one of the secrets makes over this very body.
func FuzzShopifyVerify(f *testing.F) {
	body := hfEvent(f, "shopify/orders-updated.json")
	sig := hfMACBase64(shopifySecretPrimary, string(body))
	f.Add(body, sig)
	f.Add(body, hfMACBase64(shopifySecretRotated, string(body)))
	f.Add(body, sig+","+sig)
	f.Add(body, sig[:len(sig)-1])
	f.Add([]byte(shopifyVectorBody), shopifyVectorHMAC)
	f.Add([]byte{}, "")

	secrets := []string{shopifySecretPrimary, shopifySecretRotated}
	f.Fuzz(func(t *testing.T, body []byte, sig string) {
		h := shopifyHeaders(shopifySecretWrong, body)
		h["x-shopify-hmac-sha256"] = sig
		got, err := provider.Shopify{}.Verify(t.Context(), provider.Request{Headers: h, Body: body},
			provider.Config{Secrets: secrets, Now: fixedClock(now)})
		if err != nil {
			hfCheckRefusal(t, got, err)
			return
		}
		raw, derr := base64.StdEncoding.DecodeString(sig)
		if derr != nil {
			raw, derr = base64.RawStdEncoding.DecodeString(sig)
		}
		matched := false
		for _, s := range secrets {
			m := hmac.New(sha256.New, []byte(s))
			m.Write(body)
			matched = matched || (derr == nil && hmac.Equal(raw, m.Sum(nil)))
		}
		if !matched {
			t.Fatalf("accepted %q over %q without a matching MAC", sig, body)
		}
		hfCheckIdentities(t, got, body)
	})
}

// FuzzShopifyIdentity signs arbitrary bodies and headers and checks what
// the identity parser makes of them.
func FuzzShopifyIdentity(f *testing.F) {
	f.Add(hfEvent(f, "shopify/orders-updated.json"), "98880550-7158-44d4-b7cd-2c97c8a091b5", "b54557e4", "orders/updated", "shop.myshopify.com")
	f.Add([]byte(`{"id":1e999,"admin_graphql_api_id":7}`), "", "wh", "", "")
	f.Add([]byte(`[]`), "", "", "t", "")
	f.Add([]byte(`{"updated_at":{"a":1}}`), "ev\x7f", "", "", "")
	f.Fuzz(func(t *testing.T, body []byte, eventID, webhookID, topic, shop string) {
		h := hfHeaders("x-shopify-hmac-sha256", hfMACBase64(shopifySecretPrimary, string(body)),
			"x-shopify-event-id", eventID, "x-shopify-webhook-id", webhookID, "x-shopify-topic", topic, "x-shopify-shop-domain", shop)
		got, err := provider.Shopify{}.Verify(t.Context(), provider.Request{Headers: h, Body: body},
			provider.Config{Secrets: []string{shopifySecretPrimary}, Now: fixedClock(now)})
		if err != nil {
			t.Fatalf("Verify: %v (a signed delivery must never be refused for its content)", err)
		}
		hfCheckIdentities(t, got, body)
		if got.Unidentified == "" {
			want := eventID
			if want == "" {
				want = webhookID
			}
			if got.Events[0].EventID != want {
				t.Fatalf("EventID %q, want %q", got.Events[0].EventID, want)
			}
		}
	})
}
