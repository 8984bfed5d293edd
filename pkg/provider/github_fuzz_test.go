package provider_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/pkg/provider"
)

// FuzzGitHubVerify feeds arbitrary bodies and signature headers to the
// GitHub verifier. It must never panic, must fail only with the sentinel
// errors, and may succeed only when the header is "sha256=" and the hex MAC
// one of the secrets makes over this very body.
func FuzzGitHubVerify(f *testing.F) {
	body := hfEvent(f, "github/push.json")
	sig := "sha256=" + hfMACHex(githubSecretPrimary, string(body))
	f.Add(body, sig)
	f.Add(body, "sha256="+hfMACHex(githubSecretRotated, string(body)))
	f.Add(body, sig+","+sig)
	f.Add(body, strings.TrimPrefix(sig, "sha256="))
	f.Add([]byte("Hello, World!"), "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
	f.Add([]byte{}, "sha256=")

	secrets := []string{githubSecretPrimary, githubSecretRotated, "It's a Secret to Everybody"}
	f.Fuzz(func(t *testing.T, body []byte, sig string) {
		h := githubHeaders(githubSecretWrong, body)
		h["x-hub-signature-256"] = sig
		got, err := provider.GitHub{}.Verify(t.Context(), provider.Request{Headers: h, Body: body},
			provider.Config{Secrets: secrets, Now: fixedClock(now)})
		if err != nil {
			hfCheckRefusal(t, got, err)
			return
		}
		matched := false
		for _, s := range secrets {
			m := hmac.New(sha256.New, []byte(s))
			m.Write(body)
			matched = matched || strings.EqualFold(sig, "sha256="+hex.EncodeToString(m.Sum(nil)))
		}
		if !matched {
			t.Fatalf("accepted %q over %q without a matching MAC", sig, body)
		}
		hfCheckIdentities(t, got, body)
	})
}

// FuzzGitHubIdentity signs arbitrary bodies and headers and checks what the
// identity parser makes of them.
func FuzzGitHubIdentity(f *testing.F) {
	f.Add(hfEvent(f, "github/push.json"), "push", githubDelivery)
	f.Add([]byte(`{"action":"opened","repository":{"full_name":7}}`), "issues", "d")
	f.Add([]byte(`{"action":{"a":1}}`), "", "d\x00")
	f.Fuzz(func(t *testing.T, body []byte, event, delivery string) {
		h := hfHeaders("x-hub-signature-256", "sha256="+hfMACHex(githubSecretPrimary, string(body)), "x-github-event", event, "x-github-delivery", delivery)
		got, err := provider.GitHub{}.Verify(t.Context(), provider.Request{Headers: h, Body: body},
			provider.Config{Secrets: []string{githubSecretPrimary}, Now: fixedClock(now)})
		if err != nil {
			t.Fatalf("Verify: %v (a signed delivery must never be refused for its content)", err)
		}
		hfCheckIdentities(t, got, body)
		if got.Unidentified == "" {
			ev := got.Events[0]
			if ev.EventID != delivery || ev.DeliveryID != delivery || (event != "" && len(event) <= 256 && !strings.HasPrefix(ev.Type, event)) {
				t.Fatalf("identity %+v for event %q delivery %q", ev, event, delivery)
			}
		}
	})
}
