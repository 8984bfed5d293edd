package provider_test

import (
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/pkg/provider"
)

// Visibly fake GitHub webhook secrets.
const (
	githubSecretPrimary = "gh_test_FAKE_primary"
	githubSecretRotated = "gh_test_FAKE_rotated"
	githubSecretWrong   = "gh_test_FAKE_wrong"
)

const githubDelivery = "72d3162e-cc78-11e3-81ab-4c9367dc0958"

func githubHeaders(secret string, body []byte) map[string]string {
	return hfHeaders("x-hub-signature-256", "sha256="+hfMACHex(secret, string(body)), "x-github-event", "push",
		"x-github-delivery", githubDelivery, "x-github-hook-id", "292430182")
}

// GitHub's documented test vector ("Validating webhook deliveries").
func TestGitHubDocumentedVector(t *testing.T) {
	req := provider.Request{
		Headers: hfHeaders("x-hub-signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
			"x-github-delivery", githubDelivery, "x-github-event", "ping"),
		Body: []byte("Hello, World!"),
	}
	got, err := hfNew(t, "github", nil).Verify(t.Context(), req,
		provider.Config{Secrets: []string{"It's a Secret to Everybody"}, Now: fixedClock(now)})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	hfWantOne(t, got, provider.Identity{EventID: githubDelivery, DeliveryID: githubDelivery, Type: "ping"})
}

func TestGitHubVerifySignature(t *testing.T) {
	v := hfNew(t, "github", nil)
	body := hfEvent(t, "github/push.json")
	good := githubHeaders(githubSecretPrimary, body)
	sig := good["x-hub-signature-256"]
	req := func(h map[string]string) provider.Request { return provider.Request{Headers: h, Body: body} }
	tampered := []byte(strings.Replace(string(body), `"forced": false`, `"forced": true`, 1))
	one := []string{githubSecretPrimary}

	hfRunCases(t, v, []hfCase{
		{name: "valid", req: req(good), secrets: one},
		{name: "upper-case hex", req: req(hfWith(good, "x-hub-signature-256", "sha256="+strings.ToUpper(strings.TrimPrefix(sig, "sha256=")))), secrets: one},
		{name: "second of two secrets matches (rotation)", req: req(githubHeaders(githubSecretRotated, body)), secrets: []string{githubSecretPrimary, githubSecretRotated}},
		{name: "wrong secret", req: req(githubHeaders(githubSecretWrong, body)), secrets: []string{githubSecretPrimary, githubSecretRotated}, wantErr: provider.ErrBadSignature},
		{name: "tampered body", req: provider.Request{Headers: good, Body: tampered}, secrets: one, wantErr: provider.ErrBadSignature},
		{name: "body re-serialised from parsed JSON", req: provider.Request{Headers: good, Body: hfReserialised(t, body)}, secrets: one, wantErr: provider.ErrBadSignature},
		{name: "no sha256= prefix", req: req(hfWith(good, "x-hub-signature-256", strings.TrimPrefix(sig, "sha256="))), secrets: one, wantErr: provider.ErrBadSignature},
		{name: "sha1= prefix", req: req(hfWith(good, "x-hub-signature-256", "sha1="+strings.TrimPrefix(sig, "sha256="))), secrets: one, wantErr: provider.ErrBadSignature},
		{name: "two signatures joined by the gateway", req: req(hfWith(good, "x-hub-signature-256", "sha256="+hfMACHex(githubSecretWrong, string(body))+","+sig)), secrets: one, wantErr: provider.ErrBadSignature},
		{name: "truncated signature", req: req(hfWith(good, "x-hub-signature-256", sig[:len(sig)-2])), secrets: one, wantErr: provider.ErrBadSignature},
		{name: "legacy SHA-1 header only", req: req(hfWith(hfWithout(good, "x-hub-signature-256"), "x-hub-signature", "sha1=0000")), secrets: one, wantErr: provider.ErrNotSigned},
		{name: "missing signature", req: req(hfWithout(good, "x-hub-signature-256")), secrets: one, wantErr: provider.ErrNotSigned},
		{name: "header name not lower-cased by the caller", req: req(hfRenamed(good, "x-hub-signature-256", "X-Hub-Signature-256")), secrets: one, wantErr: provider.ErrNotSigned},
		{name: "no secrets", req: req(good), wantErr: provider.ErrNoSecrets},
	}, nil)
}

func TestGitHubIdentity(t *testing.T) {
	push := hfEvent(t, "github/push.json")
	tests := []struct {
		name             string
		event            string
		delivery         string
		body             []byte
		want             provider.Identity
		wantUnidentified bool
	}{
		{
			name: "push", event: "push", delivery: githubDelivery, body: push,
			want: provider.Identity{Type: "push", Subject: "octo-org/webhooks-fixture"},
		},
		{
			name: "issues with an action", event: "issues", delivery: githubDelivery,
			body: []byte(`{"action":"opened","issue":{"number":1},"repository":{"full_name":"octo-org/webhooks-fixture"}}`),
			want: provider.Identity{Type: "issues.opened", Subject: "octo-org/webhooks-fixture"},
		},
		{
			name: "an action that is not a string is not appended", event: "issues", delivery: githubDelivery,
			body: []byte(`{"action":7}`),
			want: provider.Identity{Type: "issues"},
		},
		{
			name: "no event header", delivery: githubDelivery, body: []byte(`{"action":"opened"}`),
			want: provider.Identity{Type: "unknown"},
		},
		{
			name: "form-encoded body keeps the delivery id", event: "push", delivery: githubDelivery, body: []byte(`payload=%7B%7D`),
			want: provider.Identity{Type: "push"},
		},
		{name: "no delivery header", event: "push", body: push, wantUnidentified: true},
		{name: "delivery id longer than 256 bytes", event: "push", delivery: strings.Repeat("d", 257), body: push, wantUnidentified: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := hfHeaders("x-hub-signature-256", "sha256="+hfMACHex(githubSecretPrimary, string(tc.body)))
			if tc.event != "" {
				h["x-github-event"] = tc.event
			}
			if tc.delivery != "" {
				h["x-github-delivery"] = tc.delivery
			}
			got, err := provider.GitHub{}.Verify(t.Context(), provider.Request{Headers: h, Body: tc.body},
				provider.Config{Secrets: []string{githubSecretPrimary}, Now: fixedClock(now)})
			if err != nil {
				t.Fatalf("Verify: %v (a signed delivery must never be refused for its content)", err)
			}
			if tc.wantUnidentified {
				if got.Unidentified == "" || len(got.Events) != 0 {
					t.Fatalf("Verify = %+v, want Unidentified and no events", got)
				}
				return
			}
			want := tc.want
			want.EventID, want.DeliveryID = tc.delivery, tc.delivery
			hfWantOne(t, got, want)
		})
	}
}
