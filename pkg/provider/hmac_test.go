package provider_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/pkg/provider"
)

// Helpers shared by the tests of the HMAC-family verifiers.

// hfEvent reads a sample delivery from the repository's events/ directory.
func hfEvent(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile("../../events/" + path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hfNew builds a verifier from options or fails the test.
func hfNew(t testing.TB, kind string, opts map[string]string) provider.Verifier {
	t.Helper()
	v, err := provider.New(kind, opts)
	if err != nil {
		t.Fatalf("New(%q, %v): %v", kind, opts, err)
	}
	return v
}

// hfHeaders builds a lower-cased header map from name, value pairs.
func hfHeaders(kv ...string) map[string]string {
	out := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// hfWithout returns a copy of h without the named headers.
func hfWithout(h map[string]string, names ...string) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		out[k] = v
	}
	for _, n := range names {
		delete(out, n)
	}
	return out
}

// hfWith returns a copy of h with extra headers set.
func hfWith(h map[string]string, kv ...string) map[string]string {
	out := hfWithout(h)
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// hfRenamed returns a copy of h with one header under another name (as a
// caller that forgot to lower-case would pass it).
func hfRenamed(h map[string]string, from, to string) map[string]string {
	out := hfWithout(h, from)
	out[to] = h[from]
	return out
}

// hfMAC is an independent HMAC over the concatenated parts.
func hfMAC(newHash func() hash.Hash, secret string, parts ...string) []byte {
	m := hmac.New(newHash, []byte(secret))
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

func hfMACBase64(secret string, parts ...string) string {
	return base64.StdEncoding.EncodeToString(hfMAC(sha256.New, secret, parts...))
}

func hfMACHex(secret string, parts ...string) string {
	return hex.EncodeToString(hfMAC(sha256.New, secret, parts...))
}

// hfReserialised is body parsed and written again by encoding/json, as a
// framework that "helpfully" decodes the request would pass it on. It fails
// the test if the bytes happen to be equal (the case would prove nothing).
func hfReserialised(t testing.TB, body []byte) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) == string(body) {
		t.Fatal("re-serialised body equals the original; pick a body whose bytes change")
	}
	return out
}

// hfCase is one row of a signature table.
type hfCase struct {
	name      string
	req       provider.Request
	secrets   []string
	tolerance time.Duration
	at        time.Time // the injected clock; zero: now
	wantErr   error     // nil: verified
}

// hfRunCases runs a signature table against v. A failure must return
// the wanted sentinel and nothing else; a success must return events or an
// Unidentified reason, and check (when set) looks at it.
func hfRunCases(t *testing.T, v provider.Verifier, cases []hfCase, check func(t *testing.T, got provider.Verified)) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			at := tc.at
			if at.IsZero() {
				at = now
			}
			cfg := provider.Config{Secrets: tc.secrets, Tolerance: tc.tolerance, Now: fixedClock(at)}
			got, err := v.Verify(t.Context(), tc.req, cfg)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Verify error = %v, want %v", err, tc.wantErr)
				}
				if len(got.Events) != 0 || got.Unidentified != "" || got.Confirm != nil {
					t.Errorf("Verify returned %+v with an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if (len(got.Events) == 0) == (got.Unidentified == "") {
				t.Fatalf("Verify = %+v: want either events or an Unidentified reason", got)
			}
			if check != nil {
				check(t, got)
			}
		})
	}
}

// hfWantOne checks the identity of a one-event delivery field by field.
func hfWantOne(t *testing.T, got provider.Verified, want provider.Identity) {
	t.Helper()
	if got.Unidentified != "" || len(got.Events) != 1 {
		t.Fatalf("Verify = %+v, want exactly one identified event", got)
	}
	ev := got.Events[0]
	if ev.EventID != want.EventID || ev.DeliveryID != want.DeliveryID || ev.Type != want.Type ||
		ev.Subject != want.Subject || ev.VersionHint != want.VersionHint {
		t.Errorf("Identity = %+v,\n want %+v", ev, want)
	}
	if !ev.ProviderTime.Equal(want.ProviderTime) {
		t.Errorf("ProviderTime = %v, want %v", ev.ProviderTime, want.ProviderTime)
	}
	if len(ev.Attributes) != 0 || len(want.Attributes) != 0 {
		if !reflect.DeepEqual(ev.Attributes, want.Attributes) {
			t.Errorf("Attributes = %v, want %v", ev.Attributes, want.Attributes)
		}
	}
	if string(ev.Payload) != string(want.Payload) {
		t.Errorf("Payload = %q, want %q", ev.Payload, want.Payload)
	}
}

// Generic HMAC.

// Visibly fake secrets of the generic HMAC tests.
const (
	hmacSecretPrimary = "hmac_test_FAKE_primary"
	hmacSecretRotated = "hmac_test_FAKE_rotated"
	hmacSecretWrong   = "hmac_test_FAKE_wrong"
)

const hmacBody = `{"event_id":"ev_test_FAKE_1","kind":"invoice.paid","invoice":{"id":"inv_test_FAKE_1","number":20250301}}`

// hmacOpts is a full configuration: a signed timestamp, ids from the body.
var hmacOpts = map[string]string{
	"header": "X-Signature", "prefix": "sha256=", "timestamp_header": "x-timestamp",
	"id_path": "event_id", "type_path": "kind", "subject_path": "invoice.id", "delivery_id_header": "x-delivery",
}

func hmacSigned(secret string, at time.Time, body string) map[string]string {
	ts := fmt.Sprint(at.Unix())
	return hfHeaders("x-signature", "sha256="+hfMACHex(secret, ts, ".", body), "x-timestamp", ts, "x-delivery", "dlv_test_FAKE_1")
}

// Fixed vectors computed once with openssl, independent of this package.
const (
	hmacVectorSecret = "hmac_test_FAKE_vector"
	hmacVectorBody   = `{"event_id":"ev_test_FAKE_1","kind":"invoice.paid","invoice":{"id":"inv_test_FAKE_1"}}`
	hmacVectorTS     = "1740830400" // now
	// secret='hmac_test_FAKE_vector'; ts=1740830400; body='{"event_id":"ev_test_FAKE_1","kind":"invoice.paid","invoice":{"id":"inv_test_FAKE_1"}}'
	// printf '%s.%s' "$ts" "$body" | openssl dgst -sha256 -hmac "$secret" -hex
	hmacVectorSHA256Hex = "923838616a005635892ccc0fe1914b6330f921425343dad602083984b65e158c"
	// printf '%s' "$body" | openssl dgst -sha512 -hmac "$secret" -binary | base64 -w0
	hmacVectorSHA512B64 = "YSLpKsI3gPtYVPyKgn8RxDRlrNgAf3sQ9DWE8jsgHb61tm8puQkEaQLiFPKnz3qCzXAWAj+qtHrwQ7dGoJnSNg=="
)

func TestHMACVectors(t *testing.T) {
	body := []byte(hmacVectorBody)
	tests := []struct {
		name    string
		opts    map[string]string
		headers map[string]string
	}{
		{
			name:    "sha256 hex with prefix over {timestamp}.{body}",
			opts:    map[string]string{"header": "x-signature", "prefix": "sha256=", "timestamp_header": "x-timestamp", "id_path": "event_id"},
			headers: hfHeaders("x-signature", "sha256="+hmacVectorSHA256Hex, "x-timestamp", hmacVectorTS),
		},
		{
			name:    "sha256 hex in upper case",
			opts:    map[string]string{"header": "x-signature", "timestamp_header": "x-timestamp", "id_path": "event_id"},
			headers: hfHeaders("x-signature", strings.ToUpper(hmacVectorSHA256Hex), "x-timestamp", hmacVectorTS),
		},
		{
			name:    "sha512 base64 over the body",
			opts:    map[string]string{"header": "x-signature", "algorithm": "sha512", "encoding": "base64", "id_path": "event_id"},
			headers: hfHeaders("x-signature", hmacVectorSHA512B64),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := hfNew(t, "hmac", tc.opts)
			got, err := v.Verify(t.Context(), provider.Request{Headers: tc.headers, Body: body},
				provider.Config{Secrets: []string{hmacVectorSecret}, Now: fixedClock(now)})
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			hfWantOne(t, got, provider.Identity{EventID: "ev_test_FAKE_1", Type: "unknown"})
		})
	}
}

func TestHMACVerifySignature(t *testing.T) {
	v := hfNew(t, "hmac", hmacOpts)
	body := []byte(hmacBody)
	good := hmacSigned(hmacSecretPrimary, now, hmacBody)
	old := now.Add(-24 * time.Hour)
	oldTS := fmt.Sprint(old.Unix())
	oldSig := "sha256=" + hfMACHex(hmacSecretPrimary, oldTS, ".", hmacBody)
	tampered := strings.Replace(hmacBody, "inv_test_FAKE_1", "inv_test_FAKE_2", 1)
	pretty := []byte("{\n  \"event_id\": \"ev_test_FAKE_1\",\n  \"kind\": \"invoice.paid\"\n}")
	prettyHeaders := hmacSigned(hmacSecretPrimary, now, string(pretty))

	hfRunCases(t, v, []hfCase{
		{name: "valid", req: provider.Request{Headers: good, Body: body}, secrets: []string{hmacSecretPrimary}},
		{name: "second of two secrets matches (rotation)", req: provider.Request{Headers: hmacSigned(hmacSecretRotated, now, hmacBody), Body: body},
			secrets: []string{hmacSecretPrimary, hmacSecretRotated}},
		{name: "empty secret beside a good one is skipped", req: provider.Request{Headers: good, Body: body}, secrets: []string{"", hmacSecretPrimary}},
		{name: "wrong secret", req: provider.Request{Headers: hmacSigned(hmacSecretWrong, now, hmacBody), Body: body},
			secrets: []string{hmacSecretPrimary, hmacSecretRotated}, wantErr: provider.ErrBadSignature},
		{name: "tampered body", req: provider.Request{Headers: good, Body: []byte(tampered)}, secrets: []string{hmacSecretPrimary}, wantErr: provider.ErrBadSignature},
		{name: "body re-serialised from parsed JSON", req: provider.Request{Headers: prettyHeaders, Body: hfReserialised(t, pretty)},
			secrets: []string{hmacSecretPrimary}, wantErr: provider.ErrBadSignature},
		{name: "signature without the prefix", req: provider.Request{Headers: hfWith(good, "x-signature", strings.TrimPrefix(good["x-signature"], "sha256=")), Body: body},
			secrets: []string{hmacSecretPrimary}, wantErr: provider.ErrBadSignature},
		{name: "signature truncated", req: provider.Request{Headers: hfWith(good, "x-signature", good["x-signature"][:40]), Body: body},
			secrets: []string{hmacSecretPrimary}, wantErr: provider.ErrBadSignature},
		{name: "timestamp changed after signing", req: provider.Request{Headers: hfWith(good, "x-timestamp", fmt.Sprint(now.Unix()+1)), Body: body},
			secrets: []string{hmacSecretPrimary}, wantErr: provider.ErrBadSignature},
		{name: "timestamp 301 s old", req: provider.Request{Headers: hmacSigned(hmacSecretPrimary, now.Add(-301*time.Second), hmacBody), Body: body},
			secrets: []string{hmacSecretPrimary}, wantErr: provider.ErrStale},
		{name: "timestamp 300 s old", req: provider.Request{Headers: hmacSigned(hmacSecretPrimary, now.Add(-300*time.Second), hmacBody), Body: body},
			secrets: []string{hmacSecretPrimary}},
		{name: "timestamp 301 s in the future", req: provider.Request{Headers: hmacSigned(hmacSecretPrimary, now.Add(301*time.Second), hmacBody), Body: body},
			secrets: []string{hmacSecretPrimary}, wantErr: provider.ErrStale},
		{name: "custom tolerance refuses just past it", req: provider.Request{Headers: hmacSigned(hmacSecretPrimary, now.Add(-11*time.Second), hmacBody), Body: body},
			secrets: []string{hmacSecretPrimary}, tolerance: 10 * time.Second, wantErr: provider.ErrStale},
		{name: "custom tolerance accepts an older timestamp", req: provider.Request{Headers: hmacSigned(hmacSecretPrimary, now.Add(-600*time.Second), hmacBody), Body: body},
			secrets: []string{hmacSecretPrimary}, tolerance: 600 * time.Second},
		{
			// A gateway joins a repeated header with commas: a fresh
			// timestamp added to a captured delivery must not be half-read.
			name:    "two timestamps joined by the gateway",
			req:     provider.Request{Headers: hfHeaders("x-signature", oldSig, "x-timestamp", fmt.Sprint(now.Unix())+","+oldTS), Body: body},
			secrets: []string{hmacSecretPrimary}, wantErr: provider.ErrBadSignature,
		},
		{name: "two signatures joined by the gateway", req: provider.Request{Headers: hfWith(good, "x-signature", good["x-signature"]+","+good["x-signature"]), Body: body},
			secrets: []string{hmacSecretPrimary}, wantErr: provider.ErrBadSignature},
		{name: "timestamp with a sign", req: provider.Request{Headers: hfWith(good, "x-timestamp", "+"+good["x-timestamp"]), Body: body},
			secrets: []string{hmacSecretPrimary}, wantErr: provider.ErrBadSignature},
		{name: "missing signature header", req: provider.Request{Headers: hfWithout(good, "x-signature"), Body: body},
			secrets: []string{hmacSecretPrimary}, wantErr: provider.ErrNotSigned},
		{name: "missing timestamp header", req: provider.Request{Headers: hfWithout(good, "x-timestamp"), Body: body},
			secrets: []string{hmacSecretPrimary}, wantErr: provider.ErrNotSigned},
		{name: "signature header name not lower-cased by the caller", req: provider.Request{Headers: hfRenamed(good, "x-signature", "X-Signature"), Body: body},
			secrets: []string{hmacSecretPrimary}, wantErr: provider.ErrNotSigned},
		{name: "no secrets", req: provider.Request{Headers: good, Body: body}, wantErr: provider.ErrNoSecrets},
		{name: "only an empty secret", req: provider.Request{Headers: good, Body: body}, secrets: []string{""}, wantErr: provider.ErrNoSecrets},
		{name: "old timestamp with a wrong signature is a bad signature", req: provider.Request{Headers: hmacSigned(hmacSecretWrong, old, hmacBody), Body: body},
			secrets: []string{hmacSecretPrimary}, wantErr: provider.ErrBadSignature},
	}, nil)
}

func TestHMACTimestampFormats(t *testing.T) {
	body := hmacBody
	tests := []struct {
		name, format, ts string
		wantErr          error
	}{
		{name: "unix_ms now", format: "unix_ms", ts: fmt.Sprint(now.UnixMilli())},
		{name: "unix_ms 301 s old", format: "unix_ms", ts: fmt.Sprint(now.Add(-301 * time.Second).UnixMilli()), wantErr: provider.ErrStale},
		{name: "unix_ms given seconds is stale", format: "unix_ms", ts: fmt.Sprint(now.Unix()), wantErr: provider.ErrStale},
		{name: "rfc3339 now", format: "rfc3339", ts: now.Format(time.RFC3339)},
		{name: "rfc3339 with an offset and fraction", format: "rfc3339", ts: now.In(time.FixedZone("", -5*3600)).Add(-time.Second).Format(time.RFC3339Nano)},
		{name: "rfc3339 in the future", format: "rfc3339", ts: now.Add(301 * time.Second).Format(time.RFC3339), wantErr: provider.ErrStale},
		{name: "rfc3339 given unix", format: "rfc3339", ts: fmt.Sprint(now.Unix()), wantErr: provider.ErrBadSignature},
		{name: "rfc3339 twice", format: "rfc3339", ts: now.Format(time.RFC3339) + "," + now.Format(time.RFC3339), wantErr: provider.ErrBadSignature},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := hfNew(t, "hmac", map[string]string{"header": "x-sig", "timestamp_header": "x-ts", "timestamp_format": tc.format,
				"signed_payload": "v0:{timestamp}:{body}", "id_header": "x-id"})
			h := hfHeaders("x-sig", hfMACHex(hmacSecretPrimary, "v0:", tc.ts, ":", body), "x-ts", tc.ts, "x-id", "ev_test_FAKE_h")
			got, err := v.Verify(t.Context(), provider.Request{Headers: h, Body: []byte(body)},
				provider.Config{Secrets: []string{hmacSecretPrimary}, Now: fixedClock(now)})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Verify error = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			hfWantOne(t, got, provider.Identity{EventID: "ev_test_FAKE_h", Type: "unknown"})
		})
	}
}

func TestHMACIdentity(t *testing.T) {
	long := strings.Repeat("x", 257)
	tests := []struct {
		name             string
		opts             map[string]string
		body             string
		headers          map[string]string // besides the signature
		want             provider.Identity
		wantUnidentified bool
	}{
		{
			name:    "ids and hints from the body and headers",
			opts:    hmacOpts,
			body:    hmacBody,
			headers: hfHeaders("x-delivery", "dlv_test_FAKE_1"),
			want:    provider.Identity{EventID: "ev_test_FAKE_1", DeliveryID: "dlv_test_FAKE_1", Type: "invoice.paid", Subject: "inv_test_FAKE_1"},
		},
		{
			name:    "ids from headers",
			opts:    map[string]string{"header": "x-sig", "id_header": "x-event-id", "type_header": "x-event-type"},
			body:    `not json at all`,
			headers: hfHeaders("x-event-id", "ev_test_FAKE_2", "x-event-type", "thing.happened"),
			want:    provider.Identity{EventID: "ev_test_FAKE_2", Type: "thing.happened"},
		},
		{
			name: "numbers as written, array index in a path",
			opts: map[string]string{"header": "x-sig", "id_path": "events.0.id", "subject_path": "events.0.order"},
			body: `{"events":[{"id":820982911946154508,"order":1.50}]}`,
			want: provider.Identity{EventID: "820982911946154508", Type: "unknown", Subject: "1.50"},
		},
		{
			name: "subject that is an object is left empty",
			opts: map[string]string{"header": "x-sig", "id_path": "id", "subject_path": "data"},
			body: `{"id":"ev_test_FAKE_3","data":{"id":"x"}}`,
			want: provider.Identity{EventID: "ev_test_FAKE_3", Type: "unknown"},
		},
		{
			name: "long type and subject are cut at 256 bytes",
			opts: map[string]string{"header": "x-sig", "id_path": "id", "type_path": "t", "subject_path": "s"},
			body: fmt.Sprintf(`{"id":"ev_test_FAKE_4","t":%q,"s":%q}`, long, long),
			want: provider.Identity{EventID: "ev_test_FAKE_4", Type: long[:256], Subject: long[:256]},
		},
		{name: "id path missing", opts: hmacOpts, body: `{"kind":"invoice.paid"}`, wantUnidentified: true},
		{name: "id is an object", opts: hmacOpts, body: `{"event_id":{"v":1}}`, wantUnidentified: true},
		{name: "body not JSON with an id path", opts: hmacOpts, body: `event_id=ev_1`, wantUnidentified: true},
		{name: "JSON with trailing data", opts: hmacOpts, body: `{"event_id":"ev_1"} {"event_id":"ev_2"}`, wantUnidentified: true},
		{name: "id longer than 256 bytes", opts: hmacOpts, body: fmt.Sprintf(`{"event_id":%q}`, long), wantUnidentified: true},
		{name: "id with a control character", opts: hmacOpts, body: `{"event_id":"ev\u0000x"}`, wantUnidentified: true},
		{name: "id header missing", opts: map[string]string{"header": "x-sig", "id_header": "x-event-id"}, body: `{}`, wantUnidentified: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := hfNew(t, "hmac", tc.opts)
			h := hfWith(tc.headers)
			sigHeader, ok := tc.opts["header"]
			sigHeader = strings.ToLower(sigHeader)
			if !ok {
				t.Fatal("no header option")
			}
			if tc.opts["timestamp_header"] != "" {
				ts := fmt.Sprint(now.Unix())
				h[tc.opts["timestamp_header"]] = ts
				h[sigHeader] = tc.opts["prefix"] + hfMACHex(hmacSecretPrimary, ts, ".", tc.body)
			} else {
				h[sigHeader] = tc.opts["prefix"] + hfMACHex(hmacSecretPrimary, tc.body)
			}
			got, err := v.Verify(t.Context(), provider.Request{Headers: h, Body: []byte(tc.body)},
				provider.Config{Secrets: []string{hmacSecretPrimary}, Now: fixedClock(now)})
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

func TestHMACOptions(t *testing.T) {
	base := func(kv ...string) map[string]string {
		o := map[string]string{"header": "x-signature", "id_path": "id"}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "<unset>" {
				delete(o, kv[i])
				continue
			}
			o[kv[i]] = kv[i+1]
		}
		return o
	}
	tests := []struct {
		name     string
		opts     map[string]string
		wantName string // "": valid; else the option the error must name
	}{
		{name: "minimal", opts: base()},
		{name: "everything", opts: base("algorithm", "sha512", "encoding", "base64", "prefix", "v1=", "timestamp_header", "X-Timestamp",
			"timestamp_format", "rfc3339", "signed_payload", "{timestamp}\n{body}", "type_path", "type", "delivery_id_header", "x-attempt",
			"subject_path", "data.object.id", "account_metadata_key", "account_id")},
		{name: "id header instead of path", opts: base("id_path", "<unset>", "id_header", "x-event-id")},
		{name: "no options at all", opts: nil, wantName: "header"},
		{name: "no header", opts: base("header", "<unset>"), wantName: "header"},
		{name: "empty header", opts: base("header", ""), wantName: "header"},
		{name: "header with a space", opts: base("header", "x signature"), wantName: "header"},
		{name: "unknown option", opts: base("secret", "x"), wantName: "secret"},
		{name: "unknown algorithm", opts: base("algorithm", "sha1"), wantName: "algorithm"},
		{name: "unknown encoding", opts: base("encoding", "base32"), wantName: "encoding"},
		{name: "unknown timestamp format", opts: base("timestamp_header", "x-ts", "timestamp_format", "iso"), wantName: "timestamp_format"},
		{name: "timestamp format without a header", opts: base("timestamp_format", "unix"), wantName: "timestamp_format"},
		{name: "template without {body}", opts: base("signed_payload", "{timestamp}", "timestamp_header", "x-ts"), wantName: "signed_payload"},
		{name: "template with {timestamp} but no header", opts: base("signed_payload", "{timestamp}.{body}"), wantName: "signed_payload"},
		{name: "timestamp header not signed", opts: base("timestamp_header", "x-ts", "signed_payload", "{body}"), wantName: "signed_payload"},
		{name: "template with an unknown placeholder", opts: base("signed_payload", "{nonce}.{body}"), wantName: "signed_payload"},
		{name: "template with {id} and the id in the body", opts: base("signed_payload", "{id}.{body}"), wantName: "signed_payload"},
		{name: "template with {id} twice", opts: base("id_path", "<unset>", "id_header", "x-event-id", "signed_payload", "{id}{id}.{body}"), wantName: "signed_payload"},
		{name: "template with {id}, {timestamp} and {body}", opts: base("id_path", "<unset>", "id_header", "x-event-id", "timestamp_header", "x-ts",
			"signed_payload", "{id}.{timestamp}.{body}")},
		{name: "template with {body} twice", opts: base("signed_payload", "{body}{body}"), wantName: "signed_payload"},
		{name: "neither id option", opts: base("id_path", "<unset>"), wantName: "id_path"},
		{name: "both id options", opts: base("id_header", "x-event-id"), wantName: "id_header"},
		{name: "both type options", opts: base("type_header", "x-type", "type_path", "type"), wantName: "type_path"},
		{name: "empty path segment", opts: base("subject_path", "data..id"), wantName: "subject_path"},
		{name: "empty id path", opts: base("id_path", ""), wantName: "id_path"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := provider.New("hmac", tc.opts)
			if tc.wantName == "" {
				if err != nil || v == nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if !errors.Is(err, provider.ErrOptions) || v != nil {
				t.Fatalf("New = %v, %v; want ErrOptions", v, err)
			}
			if !strings.Contains(err.Error(), `"`+tc.wantName+`"`) {
				t.Errorf("error %q does not name option %q", err, tc.wantName)
			}
		})
	}
}

// The zero HMAC has no header to read: it verifies nothing.
func TestHMACZeroValue(t *testing.T) {
	_, err := provider.HMAC{}.Verify(t.Context(), provider.Request{Headers: hfHeaders("", "x"), Body: []byte("{}")},
		provider.Config{Secrets: []string{hmacSecretPrimary}, Now: fixedClock(now)})
	if !errors.Is(err, provider.ErrNotSigned) {
		t.Fatalf("Verify error = %v, want ErrNotSigned", err)
	}
}

// Whether the signature covers the event id (Identity.UnsignedID): an id
// read from the body is signed with it; an id header only when the signed
// payload has {id}. A signed timestamp does not sign the id: within the
// tolerance, a captured delivery verifies under any id header.
func TestHMACUnsignedID(t *testing.T) {
	const body = `{"event_id":"ev_test_FAKE_9","kind":"invoice.paid"}`
	ts := fmt.Sprint(now.Unix())
	tests := []struct {
		name     string
		opts     map[string]string
		signed   []string // the signed payload's parts, in order
		unsigned bool
	}{
		{name: "id_path", opts: map[string]string{"header": "x-sig", "id_path": "event_id"},
			signed: []string{body}},
		{name: "id_path with a timestamp", opts: map[string]string{"header": "x-sig", "id_path": "event_id", "timestamp_header": "x-ts"},
			signed: []string{ts, ".", body}},
		{name: "id_header", opts: map[string]string{"header": "x-sig", "id_header": "x-event-id"},
			signed: []string{body}, unsigned: true},
		{name: "id_header beside a signed timestamp", opts: map[string]string{"header": "x-sig", "id_header": "x-event-id", "timestamp_header": "x-ts"},
			signed: []string{ts, ".", body}, unsigned: true},
		{name: "id_header signed with {id}", opts: map[string]string{"header": "x-sig", "id_header": "x-event-id", "signed_payload": "{id}.{body}"},
			signed: []string{"ev_test_FAKE_101", ".", body}},
		{name: "id_header signed with {id} and a timestamp", opts: map[string]string{"header": "x-sig", "id_header": "x-event-id", "timestamp_header": "x-ts",
			"signed_payload": "{id}.{timestamp}.{body}"},
			signed: []string{"ev_test_FAKE_101", ".", ts, ".", body}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := hfNew(t, "hmac", tc.opts)
			h := hfHeaders("x-sig", hfMACHex(hmacSecretPrimary, tc.signed...), "x-event-id", "ev_test_FAKE_101", "x-ts", ts)
			got, err := v.Verify(t.Context(), provider.Request{Headers: h, Body: []byte(body)},
				provider.Config{Secrets: []string{hmacSecretPrimary}, Now: fixedClock(now)})
			if err != nil || len(got.Events) != 1 {
				t.Fatalf("Verify = %+v, %v", got, err)
			}
			if got.Events[0].UnsignedID != tc.unsigned {
				t.Errorf("UnsignedID = %v, want %v", got.Events[0].UnsignedID, tc.unsigned)
			}
			if tc.unsigned {
				// The attack it names: the same signed delivery under
				// another id still verifies.
				moved := hfWith(h, "x-event-id", "ev_test_FAKE_102")
				if got, err := v.Verify(t.Context(), provider.Request{Headers: moved, Body: []byte(body)},
					provider.Config{Secrets: []string{hmacSecretPrimary}, Now: fixedClock(now)}); err != nil || got.Events[0].EventID != "ev_test_FAKE_102" {
					t.Fatalf("re-sent under another id: %+v, %v", got, err)
				}
			}
		})
	}
}

// With {id} in the signed payload, the id header is part of what the MAC
// covers: a captured delivery re-sent under another id does not verify,
// and one without the id header is not signed.
func TestHMACSignedIDHeader(t *testing.T) {
	v := hfNew(t, "hmac", map[string]string{"header": "x-sig", "id_header": "x-event-id", "timestamp_header": "x-ts",
		"signed_payload": "{id}.{timestamp}.{body}"})
	const body = `{"kind":"invoice.paid"}`
	ts := fmt.Sprint(now.Unix())
	good := hfHeaders("x-sig", hfMACHex(hmacSecretPrimary, "ev_test_FAKE_101", ".", ts, ".", body), "x-event-id", "ev_test_FAKE_101", "x-ts", ts)
	hfRunCases(t, v, []hfCase{
		{name: "valid", req: provider.Request{Headers: good, Body: []byte(body)}, secrets: []string{hmacSecretPrimary}},
		{name: "re-sent under another id", req: provider.Request{Headers: hfWith(good, "x-event-id", "ev_test_FAKE_102"), Body: []byte(body)},
			secrets: []string{hmacSecretPrimary}, wantErr: provider.ErrBadSignature},
		{name: "id header missing", req: provider.Request{Headers: hfWithout(good, "x-event-id"), Body: []byte(body)},
			secrets: []string{hmacSecretPrimary}, wantErr: provider.ErrNotSigned},
	}, func(t *testing.T, got provider.Verified) {
		hfWantOne(t, got, provider.Identity{EventID: "ev_test_FAKE_101", Type: "unknown"})
		if got.Events[0].UnsignedID {
			t.Error("a signed id header is UnsignedID")
		}
	})
}
