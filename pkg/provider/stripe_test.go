package provider_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/effectively-once/webhooks/pkg/provider"
)

// Visibly fake secrets; none is a real Stripe endpoint secret.
const (
	secretPrimary = "whsec_test_FAKE_primary"
	secretRotated = "whsec_test_FAKE_rotated"
	secretWrong   = "whsec_test_FAKE_wrong"
)

// now is the injected wall clock of every test; time.Now is never consulted.
var now = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

const eventBody = `{"id":"evt_test_FAKE_1","object":"event","type":"payment_intent.succeeded","created":1740830000,` +
	`"data":{"object":{"id":"pi_test_FAKE_1","object":"payment_intent","amount":1000}}}`

// sign returns a Stripe-Signature header made by stripe-go's own signer.
func sign(body []byte, secret string, at time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{
		Payload:   body,
		Secret:    secret,
		Timestamp: at,
	}).Header
}

// v1 returns the hex v1 signature stripe-go computes.
func v1(body []byte, secret string, at time.Time) string {
	return hex.EncodeToString(webhook.ComputeSignature(at, body, secret))
}

func request(header string, body []byte) provider.Request {
	h := map[string]string{}
	if header != "" {
		h["stripe-signature"] = header
	}
	return provider.Request{Headers: h, Body: body}
}

func TestStripeVerifySignature(t *testing.T) {
	body := []byte(eventBody)
	tampered := slices.Clone(body)
	tampered[len(`{"id":"evt_test_FAKE_`)] = '2' // evt_test_FAKE_1 -> evt_test_FAKE_2

	tests := []struct {
		name      string
		req       provider.Request
		secrets   []string
		tolerance time.Duration
		wantErr   error // nil: verified
	}{
		{
			name:    "valid",
			req:     request(sign(body, secretPrimary, now), body),
			secrets: []string{secretPrimary},
		},
		{
			name:    "second of two secrets matches (rotation)",
			req:     request(sign(body, secretRotated, now), body),
			secrets: []string{secretPrimary, secretRotated},
		},
		{
			name:    "first of two secrets matches",
			req:     request(sign(body, secretPrimary, now), body),
			secrets: []string{secretPrimary, secretRotated},
		},
		{
			name: "two v1 signatures, the second matches",
			req: request(fmt.Sprintf("t=%d,v1=%s,v1=%s", now.Unix(),
				v1(body, secretWrong, now), v1(body, secretPrimary, now)), body),
			secrets: []string{secretPrimary},
		},
		{
			name: "two v1 signatures, the first matches",
			req: request(fmt.Sprintf("t=%d,v1=%s,v1=%s", now.Unix(),
				v1(body, secretPrimary, now), v1(body, secretWrong, now)), body),
			secrets: []string{secretPrimary},
		},
		{
			name: "unknown schemes beside v1 are ignored",
			req: request(fmt.Sprintf("t=%d,v1=%s,v0=%s", now.Unix(),
				v1(body, secretPrimary, now), v1(body, secretWrong, now)), body),
			secrets: []string{secretPrimary},
		},
		{
			// Regression: a fresh t= prepended to a captured day-old header
			// must not pass (stripe-go signs against the last t=).
			name: "replay with a fresh timestamp prepended",
			req: request(fmt.Sprintf("t=%d,t=%d,v1=%s", now.Unix(), now.Add(-24*time.Hour).Unix(),
				v1(body, secretPrimary, now.Add(-24*time.Hour))), body),
			secrets: []string{secretPrimary},
			wantErr: provider.ErrBadSignature,
		},
		{
			name: "replay with a fresh timestamp prepended after a space",
			req: request(fmt.Sprintf(" t=%d, t=%d,v1=%s", now.Unix(), now.Add(-24*time.Hour).Unix(),
				v1(body, secretPrimary, now.Add(-24*time.Hour))), body),
			secrets: []string{secretPrimary},
			wantErr: provider.ErrBadSignature,
		},
		{
			name:    "wrong secret",
			req:     request(sign(body, secretWrong, now), body),
			secrets: []string{secretPrimary, secretRotated},
			wantErr: provider.ErrBadSignature,
		},
		{
			name:    "tampered body (one byte changed)",
			req:     request(sign(body, secretPrimary, now), tampered),
			secrets: []string{secretPrimary},
			wantErr: provider.ErrBadSignature,
		},
		{
			name:    "signature for another timestamp",
			req:     request(fmt.Sprintf("t=%d,v1=%s", now.Unix(), v1(body, secretPrimary, now.Add(-time.Second))), body),
			secrets: []string{secretPrimary},
			wantErr: provider.ErrBadSignature,
		},
		{
			name:    "v0 signature only",
			req:     request(fmt.Sprintf("t=%d,v0=%s", now.Unix(), v1(body, secretPrimary, now)), body),
			secrets: []string{secretPrimary},
			wantErr: provider.ErrBadSignature,
		},
		{
			name:    "no timestamp",
			req:     request("v1="+v1(body, secretPrimary, now), body),
			secrets: []string{secretPrimary},
			wantErr: provider.ErrBadSignature,
		},
		{
			name:    "timestamp not a number",
			req:     request("t=soon,v1="+v1(body, secretPrimary, now), body),
			secrets: []string{secretPrimary},
			wantErr: provider.ErrBadSignature,
		},
		{
			name:    "garbage header",
			req:     request("not a signature", body),
			secrets: []string{secretPrimary},
			wantErr: provider.ErrBadSignature,
		},
		{
			name:    "missing header",
			req:     request("", body),
			secrets: []string{secretPrimary},
			wantErr: provider.ErrNotSigned,
		},
		{
			name:    "header name not lower-cased by the caller",
			req:     provider.Request{Headers: map[string]string{"Stripe-Signature": sign(body, secretPrimary, now)}, Body: body},
			secrets: []string{secretPrimary},
			wantErr: provider.ErrNotSigned,
		},
		{
			name:    "no secrets",
			req:     request(sign(body, secretPrimary, now), body),
			secrets: nil,
			wantErr: provider.ErrNoSecrets,
		},
		{
			name:    "timestamp 301 s old, default tolerance",
			req:     request(sign(body, secretPrimary, now.Add(-301*time.Second)), body),
			secrets: []string{secretPrimary},
			wantErr: provider.ErrStale,
		},
		{
			name:    "timestamp 300 s old, default tolerance",
			req:     request(sign(body, secretPrimary, now.Add(-300*time.Second)), body),
			secrets: []string{secretPrimary},
		},
		{
			name:    "timestamp 301 s in the future (stripe-go alone accepts it)",
			req:     request(sign(body, secretPrimary, now.Add(301*time.Second)), body),
			secrets: []string{secretPrimary},
			wantErr: provider.ErrStale,
		},
		{
			name:    "timestamp 300 s in the future",
			req:     request(sign(body, secretPrimary, now.Add(300*time.Second)), body),
			secrets: []string{secretPrimary},
		},
		{
			name:      "custom tolerance accepts an older timestamp",
			req:       request(sign(body, secretPrimary, now.Add(-600*time.Second)), body),
			secrets:   []string{secretPrimary},
			tolerance: 600 * time.Second,
		},
		{
			name:      "custom tolerance refuses just past it",
			req:       request(sign(body, secretPrimary, now.Add(-11*time.Second)), body),
			secrets:   []string{secretPrimary},
			tolerance: 10 * time.Second,
			wantErr:   provider.ErrStale,
		},
		{
			name:      "custom tolerance refuses the future too",
			req:       request(sign(body, secretPrimary, now.Add(11*time.Second)), body),
			secrets:   []string{secretPrimary},
			tolerance: 10 * time.Second,
			wantErr:   provider.ErrStale,
		},
		{
			name:    "old timestamp with a wrong signature is a bad signature",
			req:     request(sign(body, secretWrong, now.Add(-time.Hour)), body),
			secrets: []string{secretPrimary},
			wantErr: provider.ErrBadSignature,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := provider.Config{Secrets: tc.secrets, Tolerance: tc.tolerance, Now: fixedClock(now)}
			got, err := provider.Stripe{}.Verify(t.Context(), tc.req, cfg)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Verify error = %v, want %v", err, tc.wantErr)
				}
				if len(got.Events) != 0 || got.Unidentified != "" {
					t.Errorf("Verify returned %+v with an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if len(got.Events) != 1 || got.Events[0].EventID != "evt_test_FAKE_1" {
				t.Errorf("Verify = %+v, want the one event evt_test_FAKE_1", got)
			}
		})
	}
}

func TestStripeVerifyIdentity(t *testing.T) {
	tests := []struct {
		name             string
		body             string
		want             *provider.Identity // nil: unidentified
		wantUnidentified bool
	}{
		{
			name: "event with an object subject",
			body: eventBody,
			want: &provider.Identity{
				EventID:      "evt_test_FAKE_1",
				Type:         "payment_intent.succeeded",
				Subject:      "pi_test_FAKE_1",
				ProviderTime: time.Unix(1740830000, 0).UTC(),
			},
		},
		{
			name: "data.object that is a string keeps the event id",
			body: `{"id":"evt_test_FAKE_2","type":"charge.refunded","created":1740830001,"data":{"object":"ch_test_FAKE_2"}}`,
			want: &provider.Identity{
				EventID:      "evt_test_FAKE_2",
				Type:         "charge.refunded",
				ProviderTime: time.Unix(1740830001, 0).UTC(),
			},
		},
		{
			name: "no data and no created",
			body: `{"id":"evt_test_FAKE_3","type":"ping"}`,
			want: &provider.Identity{EventID: "evt_test_FAKE_3", Type: "ping"},
		},
		{
			name:             "body not JSON but validly signed",
			body:             `id=evt_test_FAKE_4&type=ping`,
			wantUnidentified: true,
		},
		{
			name:             "empty body",
			body:             ``,
			wantUnidentified: true,
		},
		{
			name:             "JSON without an evt_ id",
			body:             `{"id":"ch_test_FAKE_5","type":"charge.succeeded"}`,
			wantUnidentified: true,
		},
		{
			name:             "JSON without any id",
			body:             `{"type":"charge.succeeded","data":{"object":{"id":"ch_test_FAKE_6"}}}`,
			wantUnidentified: true,
		},
		{
			name:             "JSON array",
			body:             `[{"id":"evt_test_FAKE_7","type":"ping"}]`,
			wantUnidentified: true,
		},
		{
			name:             "evt_ id without a type",
			body:             `{"id":"evt_test_FAKE_8"}`,
			wantUnidentified: true,
		},
		{
			name: "thin event without a twin: its own fact",
			body: `{"id":"evt_test_FAKE_thin_1","object":"v2.core.event","type":"v1.customer.subscription.updated","created":"2026-10-01T12:00:00.000Z",` +
				`"related_object":{"id":"sub_test_FAKE_1","type":"subscription","url":"/v1/subscriptions/sub_test_FAKE_1"}}`,
			want: &provider.Identity{
				EventID: "evt_test_FAKE_thin_1", Type: "v1.customer.subscription.updated", Subject: "sub_test_FAKE_1",
				ProviderTime: time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC),
				Attributes:   map[string]string{"format": "thin", "thin_event_id": "evt_test_FAKE_thin_1", "related_object_type": "subscription"},
			},
		},
		{
			name: "thin twin of a snapshot event: the snapshot's fact",
			body: `{"id":"evt_test_FAKE_thin_2","object":"v2.core.event","type":"v1.invoice.paid","created":"2026-10-01T12:00:01Z",` +
				`"related_object":{"id":"in_test_FAKE_2","type":"invoice","url":"/v1/invoices/in_test_FAKE_2"},"snapshot_event":"evt_test_FAKE_snap_2"}`,
			want: &provider.Identity{
				EventID: "evt_test_FAKE_snap_2", Type: "v1.invoice.paid", Subject: "in_test_FAKE_2",
				ProviderTime: time.Date(2026, 10, 1, 12, 0, 1, 0, time.UTC),
				Attributes: map[string]string{"format": "thin", "thin_event_id": "evt_test_FAKE_thin_2", "snapshot_event": "evt_test_FAKE_snap_2",
					"related_object_type": "invoice"},
			},
		},
		{
			name: "thin event whose twin is not an event id keeps its own id",
			body: `{"id":"evt_test_FAKE_thin_3","object":"v2.core.event","type":"v1.invoice.paid","related_object":{"id":"in_3","type":"invoice"},"snapshot_event":"in_3"}`,
			want: &provider.Identity{
				EventID: "evt_test_FAKE_thin_3", Type: "v1.invoice.paid", Subject: "in_3",
				Attributes: map[string]string{"format": "thin", "thin_event_id": "evt_test_FAKE_thin_3", "related_object_type": "invoice"},
			},
		},
		{
			name: "thin event without related_object keeps its id (the processor quarantines it)",
			body: `{"id":"evt_test_FAKE_thin_4","object":"v2.core.event","type":"v1.invoice.paid"}`,
			want: &provider.Identity{
				EventID: "evt_test_FAKE_thin_4", Type: "v1.invoice.paid",
				Attributes: map[string]string{"format": "thin", "thin_event_id": "evt_test_FAKE_thin_4"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			cfg := provider.Config{Secrets: []string{secretPrimary}, Now: fixedClock(now)}
			got, err := provider.Stripe{}.Verify(t.Context(), request(sign(body, secretPrimary, now), body), cfg)
			if err != nil {
				t.Fatalf("Verify: %v (a signed delivery must never be refused for its content)", err)
			}
			if tc.wantUnidentified {
				if got.Unidentified == "" {
					t.Errorf("Unidentified is empty, want a reason")
				}
				if len(got.Events) != 0 {
					t.Errorf("Events = %+v, want none", got.Events)
				}
				return
			}
			if got.Unidentified != "" {
				t.Errorf("Unidentified = %q, want empty", got.Unidentified)
			}
			if len(got.Events) != 1 {
				t.Fatalf("Events = %+v, want exactly one", got.Events)
			}
			ev := got.Events[0]
			if ev.EventID != tc.want.EventID || ev.Type != tc.want.Type || ev.Subject != tc.want.Subject || ev.DeliveryID != "" {
				t.Errorf("Identity = %+v, want %+v", ev, *tc.want)
			}
			if !ev.ProviderTime.Equal(tc.want.ProviderTime) {
				t.Errorf("ProviderTime = %v, want %v", ev.ProviderTime, tc.want.ProviderTime)
			}
			if tc.want.Attributes == nil {
				tc.want.Attributes = map[string]string{"format": "snapshot"}
			}
			if len(ev.Attributes) != len(tc.want.Attributes) {
				t.Errorf("Attributes = %v, want %v", ev.Attributes, tc.want.Attributes)
			}
			for k, v := range tc.want.Attributes {
				if ev.Attributes[k] != v {
					t.Errorf("Attributes[%s] = %q, want %q", k, ev.Attributes[k], v)
				}
			}
			if ev.Payload != nil {
				t.Errorf("Payload = %q, want nil (the whole body)", ev.Payload)
			}
		})
	}
}

func TestFor(t *testing.T) {
	tests := []struct {
		kind    string
		wantErr error
	}{
		{kind: "stripe"},
		{kind: "nope", wantErr: provider.ErrUnknownKind},
		{kind: "", wantErr: provider.ErrUnknownKind},
		{kind: "Stripe", wantErr: provider.ErrUnknownKind},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("kind %q", tc.kind), func(t *testing.T) {
			v, err := provider.For(tc.kind)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("For error = %v, want %v", err, tc.wantErr)
				}
				if v != nil {
					t.Errorf("For returned a verifier %T with an error", v)
				}
				return
			}
			if err != nil {
				t.Fatalf("For: %v", err)
			}
			body := []byte(eventBody)
			got, err := v.Verify(t.Context(), request(sign(body, secretPrimary, now), body),
				provider.Config{Secrets: []string{secretPrimary}, Now: fixedClock(now)})
			if err != nil {
				t.Fatalf("Verify through For: %v", err)
			}
			if len(got.Events) != 1 || got.Events[0].EventID != "evt_test_FAKE_1" {
				t.Errorf("Verify = %+v", got)
			}
		})
	}

	t.Run("every listed kind has a verifier", func(t *testing.T) {
		kinds := provider.Kinds()
		if !slices.Contains(kinds, "stripe") {
			t.Errorf("Kinds() = %v, want it to list stripe", kinds)
		}
		for _, k := range kinds {
			// A kind that needs options (sns, hmac) says so; none is unknown.
			if _, err := provider.For(k); err != nil && !errors.Is(err, provider.ErrOptions) {
				t.Errorf("For(%q): %v", k, err)
			}
		}
	})
}

// An empty secret is refused by the verifier itself, not only
// by the secrets loader: a body signed with the empty key (which anyone
// can compute) never verifies, alone or next to a real secret.
func TestStripeEmptySecretIsNeverAKey(t *testing.T) {
	body := []byte(eventBody)
	forged := sign(body, "", now)
	for _, secrets := range [][]string{{""}, {"", ""}, {secretWrong, ""}} {
		_, err := provider.Stripe{}.Verify(context.Background(), request(forged, body), provider.Config{Secrets: secrets, Now: fixedClock(now)})
		if err == nil {
			t.Fatalf("secrets %q: a body signed with the empty key verified", secrets)
		}
	}
	if _, err := (provider.Stripe{}).Verify(context.Background(), request(forged, body), provider.Config{Secrets: []string{""}, Now: fixedClock(now)}); !errors.Is(err, provider.ErrNoSecrets) {
		t.Fatalf("only empty secrets: %v, want ErrNoSecrets", err)
	}
}

// The identity is read in one pass; a value of an unexpected type leaves
// its field empty and costs the event nothing but that field, while a body
// that is not JSON, or whose id or type is unusable, is unidentified.
func TestStripeIdentityOfOddShapes(t *testing.T) {
	for _, c := range []struct {
		name, body, id, subject, unidentified string
	}{
		{"snapshot", `{"id":"evt_1","object":"event","type":"customer.created","data":{"object":{"id":"cus_1"}}}`, "evt_1", "cus_1", ""},
		{"data.object is a string", `{"id":"evt_1","object":"event","type":"customer.created","data":{"object":"cus_1"}}`, "evt_1", "", ""},
		{"data is a list", `{"id":"evt_1","object":"event","type":"customer.created","data":[1,2]}`, "evt_1", "", ""},
		{"object id is a number", `{"id":"evt_1","object":"event","type":"customer.created","data":{"object":{"id":42}}}`, "evt_1", "", ""},
		{"account is a number", `{"id":"evt_1","object":"event","type":"customer.created","account":7,"data":{"object":{"id":"cus_1"}}}`, "evt_1", "cus_1", ""},
		{"id is a number", `{"id":1,"object":"event","type":"customer.created","data":{"object":{"id":"cus_1"}}}`, "", "", "no evt_ id or type"},
		{"type is missing", `{"id":"evt_1","object":"event","data":{"object":{"id":"cus_1"}}}`, "", "", "no evt_ id or type"},
		{"not JSON", `{"id":"evt_1",`, "", "", "body is not JSON"},
	} {
		v := provider.StripeIdentity([]byte(c.body))
		if v.Unidentified != c.unidentified {
			t.Errorf("%s: unidentified %q, want %q", c.name, v.Unidentified, c.unidentified)
			continue
		}
		if c.unidentified != "" {
			continue
		}
		if len(v.Events) != 1 || v.Events[0].EventID != c.id || v.Events[0].Subject != c.subject {
			t.Errorf("%s: %+v, want id %q subject %q", c.name, v.Events, c.id, c.subject)
		}
	}
}
