package provider_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/effectively-once/webhooks/pkg/provider"
)

// Visibly fake Standard Webhooks secrets. The scheme's secrets are base64
// after "whsec_", so these use only base64 letters and digits (32 of them,
// 24 key bytes); none is a real endpoint secret.
const (
	swSecretPrimary = "whsec_testFAKEswPrimary000000000000000"
	swSecretRotated = "whsec_testFAKEswRotated000000000000000"
	swSecretWrong   = "whsec_testFAKEswWrong00000000000000000"
	// Not base64 after the prefix: it can never verify anything.
	swSecretNotBase64 = "whsec_test_FAKE_not_base64!"
)

const swMsgID = "msg_test_FAKE_2pQxKzN8wVbT"

// swSign returns a webhook-signature entry made by the reference library's
// own signer (independent of the verifier's code path).
func swSign(t testing.TB, secret, msgID string, at time.Time, body []byte) string {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatalf("NewWebhook: %v", err)
	}
	sig, err := wh.Sign(msgID, at, body)
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

// swHeaders returns the three webhook-* headers; svix returns the svix-* ones.
func swHeaders(msgID string, at time.Time, sig string) map[string]string {
	return hfHeaders("webhook-id", msgID, "webhook-timestamp", fmt.Sprint(at.Unix()), "webhook-signature", sig)
}

func svixHeaders(msgID string, at time.Time, sig string) map[string]string {
	return hfHeaders("svix-id", msgID, "svix-timestamp", fmt.Sprint(at.Unix()), "svix-signature", sig)
}

func TestStandardWebhooksSecretsAreBase64(t *testing.T) {
	for _, s := range []string{swSecretPrimary, swSecretRotated, swSecretWrong} {
		if _, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_")); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
}

// The Standard Webhooks specification's published example (also the
// reference library's own test): a public test key, not a secret. Checked
// once with openssl too:
//
//	key=$(printf '%s' 'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' | base64 -d | xxd -p -c 256)
//	printf '%s.%s.%s' msg_p5jXN8AQM9LWM0D4loKWxJek 1614265330 '{"test": 2432232314}' |
//	  openssl dgst -sha256 -mac HMAC -macopt "hexkey:$key" -binary | base64
func TestStandardWebhooksSpecVector(t *testing.T) {
	at := time.Unix(1614265330, 0)
	req := provider.Request{
		Headers: hfHeaders("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek", "webhook-timestamp", "1614265330",
			"webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="),
		Body: []byte(`{"test": 2432232314}`),
	}
	v := hfNew(t, "standard-webhooks", nil)
	for _, secret := range []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"} {
		got, err := v.Verify(t.Context(), req, provider.Config{Secrets: []string{secret}, Now: fixedClock(at)})
		if err != nil {
			t.Fatalf("secret %q: Verify: %v", secret, err)
		}
		hfWantOne(t, got, provider.Identity{EventID: "msg_p5jXN8AQM9LWM0D4loKWxJek", DeliveryID: "msg_p5jXN8AQM9LWM0D4loKWxJek",
			Type: "unknown", ProviderTime: at})
	}
}

func TestStandardWebhooksVerifySignature(t *testing.T) {
	v := hfNew(t, "standard-webhooks", nil)
	body := hfEvent(t, "standardwebhooks/order.updated.json")
	sig := swSign(t, swSecretPrimary, swMsgID, now, body)
	good := swHeaders(swMsgID, now, sig)
	req := func(h map[string]string) provider.Request { return provider.Request{Headers: h, Body: body} }
	at := func(d time.Duration, secret string) provider.Request {
		return req(swHeaders(swMsgID, now.Add(d), swSign(t, secret, swMsgID, now.Add(d), body)))
	}
	tampered := []byte(strings.Replace(string(body), `"revision": 12`, `"revision": 13`, 1))
	old := now.Add(-24 * time.Hour)
	oldSig := swSign(t, swSecretPrimary, swMsgID, old, body)
	otherID := "msg_test_FAKE_other"
	one := []string{swSecretPrimary}

	hfRunCases(t, v, []hfCase{
		{name: "valid webhook-* headers", req: req(good), secrets: one},
		{name: "valid svix-* headers", req: req(svixHeaders(swMsgID, now, sig)), secrets: one},
		{name: "both families with equal values", req: req(hfWith(good, "svix-id", swMsgID, "svix-timestamp", fmt.Sprint(now.Unix()), "svix-signature", sig)), secrets: one},
		{name: "second of two secrets matches (rotation)", req: at(0, swSecretRotated), secrets: []string{swSecretPrimary, swSecretRotated}},
		{name: "raw base64 secret without the whsec_ prefix", req: req(good), secrets: []string{strings.TrimPrefix(swSecretPrimary, "whsec_")}},
		{name: "a secret that is not base64 beside a good one", req: req(good), secrets: []string{swSecretNotBase64, swSecretPrimary}},
		{name: "two signatures, the second matches", req: req(hfWith(good, "webhook-signature", swSign(t, swSecretWrong, swMsgID, now, body)+" "+sig)), secrets: one},
		{name: "two signatures, the first matches", req: req(hfWith(good, "webhook-signature", sig+" "+swSign(t, swSecretWrong, swMsgID, now, body))), secrets: one},
		{name: "wrong secret", req: at(0, swSecretWrong), secrets: []string{swSecretPrimary, swSecretRotated}, wantErr: provider.ErrBadSignature},
		{name: "tampered body", req: provider.Request{Headers: good, Body: tampered}, secrets: one, wantErr: provider.ErrBadSignature},
		{name: "body re-serialised from parsed JSON", req: provider.Request{Headers: good, Body: hfReserialised(t, body)}, secrets: one, wantErr: provider.ErrBadSignature},
		{name: "signature made for another id", req: req(hfWith(good, "webhook-id", otherID)), secrets: one, wantErr: provider.ErrBadSignature},
		{name: "v2 entry only", req: req(hfWith(good, "webhook-signature", "v2,"+strings.TrimPrefix(sig, "v1,"))), secrets: one, wantErr: provider.ErrBadSignature},
		{name: "signature without a version", req: req(hfWith(good, "webhook-signature", strings.TrimPrefix(sig, "v1,"))), secrets: one, wantErr: provider.ErrBadSignature},
		{name: "timestamp 301 s old", req: at(-301*time.Second, swSecretPrimary), secrets: one, wantErr: provider.ErrStale},
		{name: "timestamp 300 s old", req: at(-300*time.Second, swSecretPrimary), secrets: one},
		{name: "timestamp 301 s in the future", req: at(301*time.Second, swSecretPrimary), secrets: one, wantErr: provider.ErrStale},
		{name: "timestamp 300 s in the future", req: at(300*time.Second, swSecretPrimary), secrets: one},
		{name: "custom tolerance refuses just past it", req: at(-11*time.Second, swSecretPrimary), secrets: one, tolerance: 10 * time.Second, wantErr: provider.ErrStale},
		{name: "custom tolerance refuses the future too", req: at(11*time.Second, swSecretPrimary), secrets: one, tolerance: 10 * time.Second, wantErr: provider.ErrStale},
		{name: "custom tolerance accepts an older timestamp", req: at(-600*time.Second, swSecretPrimary), secrets: one, tolerance: 600 * time.Second},
		{name: "old timestamp with a wrong signature is a bad signature", req: at(-time.Hour, swSecretWrong), secrets: one, wantErr: provider.ErrBadSignature},
		{
			// A fresh svix-timestamp beside a captured webhook-* set: the
			// families disagree, so neither is believed.
			name:    "families disagree on the timestamp",
			req:     req(hfWith(swHeaders(swMsgID, old, oldSig), "svix-timestamp", fmt.Sprint(now.Unix()))),
			secrets: one, wantErr: provider.ErrBadSignature,
		},
		{name: "families disagree on the id", req: req(hfWith(good, "svix-id", otherID)), secrets: one, wantErr: provider.ErrBadSignature},
		{name: "families disagree on the signature", req: req(hfWith(good, "svix-signature", swSign(t, swSecretWrong, swMsgID, now, body))), secrets: one, wantErr: provider.ErrBadSignature},
		{
			name:    "two timestamps joined by the gateway",
			req:     req(hfWith(swHeaders(swMsgID, old, oldSig), "webhook-timestamp", fmt.Sprintf("%d,%d", now.Unix(), old.Unix()))),
			secrets: one, wantErr: provider.ErrBadSignature,
		},
		{name: "timestamp with a plus sign", req: req(hfWith(good, "webhook-timestamp", fmt.Sprintf("+%d", now.Unix()))), secrets: one, wantErr: provider.ErrBadSignature},
		{name: "timestamp with a leading zero", req: req(hfWith(good, "webhook-timestamp", fmt.Sprintf("0%d", now.Unix()))), secrets: one, wantErr: provider.ErrBadSignature},
		{name: "timestamp not a number", req: req(hfWith(good, "webhook-timestamp", "soon")), secrets: one, wantErr: provider.ErrBadSignature},
		{name: "missing webhook-id", req: req(hfWithout(good, "webhook-id")), secrets: one, wantErr: provider.ErrNotSigned},
		{name: "missing webhook-timestamp", req: req(hfWithout(good, "webhook-timestamp")), secrets: one, wantErr: provider.ErrNotSigned},
		{name: "missing webhook-signature", req: req(hfWithout(good, "webhook-signature")), secrets: one, wantErr: provider.ErrNotSigned},
		{name: "no headers", req: req(nil), secrets: one, wantErr: provider.ErrNotSigned},
		{name: "header name not lower-cased by the caller", req: req(hfRenamed(good, "webhook-signature", "Webhook-Signature")), secrets: one, wantErr: provider.ErrNotSigned},
		{name: "no secrets", req: req(good), wantErr: provider.ErrNoSecrets},
		{name: "only a secret that is not base64", req: req(good), secrets: []string{swSecretNotBase64}, wantErr: provider.ErrNoSecrets},
		{name: "only an empty key", req: req(good), secrets: []string{"whsec_"}, wantErr: provider.ErrNoSecrets},
	}, nil)
}

func TestStandardWebhooksIdentity(t *testing.T) {
	order := hfEvent(t, "standardwebhooks/order.updated.json")
	long := strings.Repeat("y", 300)
	tests := []struct {
		name             string
		opts             map[string]string
		msgID            string
		body             []byte
		want             provider.Identity
		wantUnidentified bool
	}{
		{
			name: "order.updated with the default paths",
			body: order,
			want: provider.Identity{Type: "order.updated", Subject: "O-42"},
		},
		{
			name: "version path reads the revision as written",
			opts: map[string]string{"version_path": "data.revision"},
			body: order,
			want: provider.Identity{Type: "order.updated", Subject: "O-42", VersionHint: "12"},
		},
		{
			name: "custom paths",
			opts: map[string]string{"type_path": "event.kind", "subject_path": "event.order.number", "version_path": "event.order.updated_at"},
			body: []byte(`{"event":{"kind":"order.paid","order":{"number":1234,"updated_at":"2025-03-01T11:59:00Z"}}}`),
			want: provider.Identity{Type: "order.paid", Subject: "1234", VersionHint: "2025-03-01T11:59:00Z"},
		},
		{
			name: "no type in the body",
			body: []byte(`{"data":{"id":"O-43"}}`),
			want: provider.Identity{Type: "unknown", Subject: "O-43"},
		},
		{
			name: "body not JSON keeps the signed id",
			body: []byte(`order O-42 updated`),
			want: provider.Identity{Type: "unknown"},
		},
		{
			name: "long type and subject are cut at 256 bytes",
			body: fmt.Appendf(nil, `{"type":%q,"data":{"id":%q}}`, long, long),
			want: provider.Identity{Type: long[:256], Subject: long[:256]},
		},
		{name: "id longer than 256 bytes", msgID: "msg_" + long, body: order, wantUnidentified: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := hfNew(t, "standard-webhooks", tc.opts)
			msgID := tc.msgID
			if msgID == "" {
				msgID = swMsgID
			}
			req := provider.Request{Headers: swHeaders(msgID, now, swSign(t, swSecretPrimary, msgID, now, tc.body)), Body: tc.body}
			got, err := v.Verify(t.Context(), req, provider.Config{Secrets: []string{swSecretPrimary}, Now: fixedClock(now)})
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
			want.EventID, want.DeliveryID, want.ProviderTime = msgID, msgID, now
			hfWantOne(t, got, want)
		})
	}
}

func TestStandardWebhooksOptions(t *testing.T) {
	tests := []struct {
		name     string
		opts     map[string]string
		wantName string
	}{
		{name: "none", opts: nil},
		{name: "all", opts: map[string]string{"type_path": "type", "subject_path": "data.id", "version_path": "data.revision", "account_metadata_key": "account_id"}},
		{name: "unknown option", opts: map[string]string{"header": "x"}, wantName: "header"},
		{name: "empty subject path", opts: map[string]string{"subject_path": ""}, wantName: "subject_path"},
		{name: "trailing dot", opts: map[string]string{"version_path": "data."}, wantName: "version_path"},
		{name: "too deep", opts: map[string]string{"type_path": strings.Repeat("a.", 16) + "a"}, wantName: "type_path"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := provider.New("standard-webhooks", tc.opts)
			if tc.wantName == "" {
				if err != nil || v == nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if !errors.Is(err, provider.ErrOptions) || !strings.Contains(err.Error(), `"`+tc.wantName+`"`) {
				t.Fatalf("New error = %v, want ErrOptions naming %q", err, tc.wantName)
			}
		})
	}
}
