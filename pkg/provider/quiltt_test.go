package provider_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/pkg/provider"
)

// Visibly fake Quiltt webhook secrets.
const (
	quilttSecretPrimary = "quiltt_test_FAKE_primary"
	quilttSecretRotated = "quiltt_test_FAKE_rotated"
	quilttSecretWrong   = "quiltt_test_FAKE_wrong"
)

// A fixed vector computed once with openssl, independent of this package:
//
//	secret='quiltt_test_FAKE_vector'; ts=1740830400
//	body='{"eventTypes":["connection.synced.successful"],"events":[{"id":"evt_test_FAKE_1","type":"connection.synced.successful","record":{"id":"conn_test_FAKE_1","profileId":"p_test_FAKE_1"}}]}'
//	printf '1%s%s' "$ts" "$body" | openssl dgst -sha256 -hmac "$secret" -binary | base64
const (
	quilttVectorSecret    = "quiltt_test_FAKE_vector"
	quilttVectorTimestamp = "1740830400"
	quilttVectorElem      = `{"id":"evt_test_FAKE_1","type":"connection.synced.successful","record":{"id":"conn_test_FAKE_1","profileId":"p_test_FAKE_1"}}`
	quilttVectorBody      = `{"eventTypes":["connection.synced.successful"],"events":[` + quilttVectorElem + `]}`
	quilttVectorSignature = "W2tsURNW9LnL3dC+JJL3XKKNDizY2vEpX0eimmC0umQ="
)

func quilttHeaders(secret string, at time.Time, body []byte) map[string]string {
	ts := fmt.Sprint(at.Unix())
	return hfHeaders("quiltt-signature", hfMACBase64(secret, "1", ts, string(body)), "quiltt-timestamp", ts)
}

func TestQuilttVector(t *testing.T) {
	req := provider.Request{
		Headers: hfHeaders("quiltt-signature", quilttVectorSignature, "quiltt-timestamp", quilttVectorTimestamp),
		Body:    []byte(quilttVectorBody),
	}
	got, err := hfNew(t, "quiltt", nil).Verify(t.Context(), req, provider.Config{Secrets: []string{quilttVectorSecret}, Now: fixedClock(now)})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	hfWantOne(t, got, provider.Identity{
		EventID: "evt_test_FAKE_1", Type: "connection.synced.successful", Subject: "conn_test_FAKE_1", ProviderTime: now,
		Attributes: map[string]string{"profile_id": "p_test_FAKE_1"}, Payload: []byte(quilttVectorElem),
	})
}

func TestQuilttVerifySignature(t *testing.T) {
	v := hfNew(t, "quiltt", nil)
	body := hfEvent(t, "quiltt/connection-events.json")
	good := quilttHeaders(quilttSecretPrimary, now, body)
	req := func(h map[string]string) provider.Request { return provider.Request{Headers: h, Body: body} }
	at := func(d time.Duration) provider.Request {
		return req(quilttHeaders(quilttSecretPrimary, now.Add(d), body))
	}
	tampered := []byte(strings.Replace(string(body), "conn_1QfixtureConn0002", "conn_1QfixtureConn0003", 1))
	old := now.Add(-24 * time.Hour)
	oldHeaders := quilttHeaders(quilttSecretPrimary, old, body)
	ts := good["quiltt-timestamp"]
	one := []string{quilttSecretPrimary}

	hfRunCases(t, v, []hfCase{
		{name: "valid", req: req(good), secrets: one},
		{name: "second of two secrets matches (rotation)", req: req(quilttHeaders(quilttSecretRotated, now, body)), secrets: []string{quilttSecretPrimary, quilttSecretRotated}},
		{name: "wrong secret", req: req(quilttHeaders(quilttSecretWrong, now, body)), secrets: []string{quilttSecretPrimary, quilttSecretRotated}, wantErr: provider.ErrBadSignature},
		{name: "tampered body", req: provider.Request{Headers: good, Body: tampered}, secrets: one, wantErr: provider.ErrBadSignature},
		{name: "body re-serialised from parsed JSON", req: provider.Request{Headers: good, Body: hfReserialised(t, body)}, secrets: one, wantErr: provider.ErrBadSignature},
		{name: "signed without the version 1", req: req(hfWith(good, "quiltt-signature", hfMACBase64(quilttSecretPrimary, ts, string(body)))), secrets: one, wantErr: provider.ErrBadSignature},
		{name: "timestamp changed after signing", req: req(hfWith(good, "quiltt-timestamp", fmt.Sprint(now.Unix()+1))), secrets: one, wantErr: provider.ErrBadSignature},
		{name: "timestamp 301 s old", req: at(-301 * time.Second), secrets: one, wantErr: provider.ErrStale},
		{name: "timestamp 300 s old", req: at(-300 * time.Second), secrets: one},
		{name: "timestamp 301 s in the future", req: at(301 * time.Second), secrets: one, wantErr: provider.ErrStale},
		{name: "timestamp 300 s in the future", req: at(300 * time.Second), secrets: one},
		{name: "custom tolerance refuses just past it", req: at(-11 * time.Second), secrets: one, tolerance: 10 * time.Second, wantErr: provider.ErrStale},
		{name: "custom tolerance accepts an older timestamp", req: at(-600 * time.Second), secrets: one, tolerance: 600 * time.Second},
		{name: "day-old delivery replayed as is", req: req(oldHeaders), secrets: one, wantErr: provider.ErrStale},
		{
			name:    "fresh timestamp joined to a captured one by the gateway",
			req:     req(hfWith(oldHeaders, "quiltt-timestamp", ts+","+oldHeaders["quiltt-timestamp"])),
			secrets: one, wantErr: provider.ErrBadSignature,
		},
		{
			// Nothing separates the timestamp from the body: moving a digit
			// across the boundary must not yield a fresh, valid delivery.
			name:    "a digit moved from the timestamp into the body",
			req:     provider.Request{Headers: hfWith(good, "quiltt-timestamp", ts[:len(ts)-1]), Body: append([]byte(ts[len(ts)-1:]), body...)},
			secrets: one, wantErr: provider.ErrStale,
		},
		{name: "timestamp with a leading zero", req: req(hfWith(good, "quiltt-timestamp", "0"+ts)), secrets: one, wantErr: provider.ErrBadSignature},
		{name: "timestamp in milliseconds (13 digits) is malformed", req: req(quilttHeadersMS(quilttSecretPrimary, now, body)), secrets: one, wantErr: provider.ErrBadSignature},
		{name: "two signatures joined by the gateway", req: req(hfWith(good, "quiltt-signature", good["quiltt-signature"]+","+good["quiltt-signature"])), secrets: one, wantErr: provider.ErrBadSignature},
		{name: "missing signature", req: req(hfWithout(good, "quiltt-signature")), secrets: one, wantErr: provider.ErrNotSigned},
		{name: "missing timestamp", req: req(hfWithout(good, "quiltt-timestamp")), secrets: one, wantErr: provider.ErrNotSigned},
		{name: "header name not lower-cased by the caller", req: req(hfRenamed(good, "quiltt-signature", "Quiltt-Signature")), secrets: one, wantErr: provider.ErrNotSigned},
		{name: "no secrets", req: req(good), wantErr: provider.ErrNoSecrets},
		{name: "clock far ahead", req: req(good), secrets: one, at: now.Add(time.Hour), wantErr: provider.ErrStale},
	}, nil)
}

func quilttHeadersMS(secret string, at time.Time, body []byte) map[string]string {
	ts := fmt.Sprint(at.UnixMilli())
	return hfHeaders("quiltt-signature", hfMACBase64(secret, "1", ts, string(body)), "quiltt-timestamp", ts)
}

func TestQuilttIdentity(t *testing.T) {
	fixture := hfEvent(t, "quiltt/connection-events.json")
	var parsed struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(fixture, &parsed); err != nil || len(parsed.Events) != 2 {
		t.Fatalf("fixture: %v", err)
	}
	many := func(n int) []byte {
		elems := make([]string, n)
		for i := range elems {
			elems[i] = fmt.Sprintf(`{"id":"evt_test_FAKE_%d","type":"connection.synced.successful","record":{"id":"conn_%d"}}`, i, i)
		}
		return []byte(`{"events":[` + strings.Join(elems, ",") + `]}`)
	}
	type ev struct{ id, typ, subject, profile, payload string }
	tests := []struct {
		name             string
		body             []byte
		want             []ev
		wantUnidentified bool
	}{
		{
			name: "two events in one delivery",
			body: fixture,
			want: []ev{
				{"evt_1QfixtureQuilttSync01", "connection.synced.successful", "conn_1QfixtureConn0001", "p_1QfixtureProfile01", string(parsed.Events[0])},
				{"evt_1QfixtureQuilttSync02", "connection.synced.successful", "conn_1QfixtureConn0002", "p_1QfixtureProfile01", string(parsed.Events[1])},
			},
		},
		{
			name: "elements without an id are skipped, a repeated id counts once",
			body: []byte(`{"events":[{"type":"a"},"x",{"id":"evt_A","type":"profile.created","record":{"id":"p_1"}},{"id":""},{"id":"evt_A","type":"dup"}]}`),
			want: []ev{{"evt_A", "profile.created", "p_1", "", `{"id":"evt_A","type":"profile.created","record":{"id":"p_1"}}`}},
		},
		{
			name: "no type, record not an object",
			body: []byte(`{"events":[{"id":"evt_B","record":"conn_x"}]}`),
			want: []ev{{"evt_B", "unknown", "", "", `{"id":"evt_B","record":"conn_x"}`}},
		},
		{
			name: "exactly the cap",
			body: many(provider.MaxQuilttEvents),
		},
		{name: "more than the cap", body: many(provider.MaxQuilttEvents + 1), wantUnidentified: true},
		{name: "no element with an id", body: []byte(`{"events":[{"type":"a"}]}`), wantUnidentified: true},
		{name: "empty events", body: []byte(`{"eventTypes":[],"events":[]}`), wantUnidentified: true},
		{name: "events not an array", body: []byte(`{"events":{"id":"evt_C"}}`), wantUnidentified: true},
		{name: "events under another letter case", body: []byte(`{"Events":[{"id":"evt_D"}]}`), wantUnidentified: true},
		{name: "body not JSON", body: []byte(`events=evt_E`), wantUnidentified: true},
		{name: "an id longer than 256 bytes", body: fmt.Appendf(nil, `{"events":[{"id":"evt_F"},{"id":%q}]}`, strings.Repeat("f", 257)), wantUnidentified: true},
		{name: "an id with a control character", body: []byte(`{"events":[{"id":"evt_\u0007G"}]}`), wantUnidentified: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := provider.Quiltt{}.Verify(t.Context(), provider.Request{Headers: quilttHeaders(quilttSecretPrimary, now, tc.body), Body: tc.body},
				provider.Config{Secrets: []string{quilttSecretPrimary}, Now: fixedClock(now)})
			if err != nil {
				t.Fatalf("Verify: %v (a signed delivery must never be refused for its content)", err)
			}
			if tc.wantUnidentified {
				if got.Unidentified == "" || len(got.Events) != 0 {
					t.Fatalf("Verify = %+v, want Unidentified and no events", got)
				}
				return
			}
			if got.Unidentified != "" {
				t.Fatalf("Unidentified = %q", got.Unidentified)
			}
			if tc.want == nil {
				if len(got.Events) != provider.MaxQuilttEvents {
					t.Fatalf("%d events, want %d", len(got.Events), provider.MaxQuilttEvents)
				}
				return
			}
			if len(got.Events) != len(tc.want) {
				t.Fatalf("Events = %+v, want %d", got.Events, len(tc.want))
			}
			for i, w := range tc.want {
				g := got.Events[i]
				if g.EventID != w.id || g.Type != w.typ || g.Subject != w.subject || g.Attributes["profile_id"] != w.profile ||
					string(g.Payload) != w.payload || g.DeliveryID != "" || !g.ProviderTime.Equal(now) {
					t.Errorf("Events[%d] = %+v (payload %s),\n want %+v", i, g, g.Payload, w)
				}
			}
		})
	}
}
