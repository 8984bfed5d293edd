package devstack_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
)

func TestGatewayEventShape(t *testing.T) {
	cases := []struct {
		name, contentType string
		body              []byte
		base64            bool
	}{
		{"json stays text", "application/json; charset=utf-8", []byte(`{"id":"evt_1"}`), false},
		{"form stays text", "application/x-www-form-urlencoded", []byte("a=b"), false},
		{"binary is base64", "application/octet-stream", []byte{0xff, 0x00, 0x01}, true},
		{"invalid utf-8 json is base64", "application/json", []byte{'{', 0xff, '}'}, true},
		{"no content type is base64", "", []byte("x"), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/webhooks/stripe?x=1", bytes.NewReader(c.body))
			r.SetPathValue("source", "stripe")
			if c.contentType != "" {
				r.Header.Set("Content-Type", c.contentType)
			}
			r.Header.Add("Stripe-Signature", "t=1,v1=ab")
			r.Header.Add("X-Multi", "a")
			r.Header.Add("X-Multi", "b")
			now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
			ev := devstack.GatewayEvent(r, c.body, now)
			if ev.Version != "2.0" || ev.RawPath != "/webhooks/stripe" || ev.RawQueryString != "x=1" || ev.PathParameters["source"] != "stripe" {
				t.Fatalf("event %+v", ev)
			}
			if ev.Headers["stripe-signature"] != "t=1,v1=ab" || ev.Headers["x-multi"] != "a,b" {
				t.Fatalf("headers %v", ev.Headers)
			}
			if ev.RequestContext.RequestID == "" || ev.RequestContext.TimeEpoch != now.UnixMilli() || ev.RequestContext.Time != "30/Nov/2026:12:00:00 +0000" || ev.RequestContext.HTTP.Method != "POST" {
				t.Fatalf("request context %+v", ev.RequestContext)
			}
			got := []byte(ev.Body)
			if ev.IsBase64Encoded {
				got, _ = base64.StdEncoding.DecodeString(ev.Body)
			}
			if ev.IsBase64Encoded != c.base64 || !bytes.Equal(got, c.body) {
				t.Fatalf("base64=%v body %q", ev.IsBase64Encoded, got)
			}
		})
	}
}

func TestFromEnvValidates(t *testing.T) {
	env := map[string]string{"DEV_HTTP_ADDR": "127.0.0.1:3999", "DEV_VISIBILITY_SECONDS": "7", "DEV_PROCESSOR_INSTANCES": "3",
		"DEV_DISPATCHER_INSTANCES": "2", "DEV_DOWNSTREAM_ADDR": "127.0.0.1:3998"}
	c, err := devstack.FromEnv(func(k string) string { return env[k] })
	if err != nil || c.HTTPAddr != "127.0.0.1:3999" || c.Visibility != 7*time.Second || c.Instances["processor"] != 3 ||
		c.Instances["dispatcher"] != 2 || c.DownstreamAddr != "127.0.0.1:3998" {
		t.Fatalf("%+v %v", c, err)
	}
	// The warehouse sink is on unless DEV_WAREHOUSE says off.
	if c.WarehouseBucket != devstack.DefaultWarehouseBucket || c.S3Addr != "" {
		t.Fatalf("default warehouse: bucket %q, s3 %q", c.WarehouseBucket, c.S3Addr)
	}
	env = map[string]string{"DEV_WAREHOUSE": "off", "DEV_S3_ADDR": "127.0.0.1:9555"}
	if c, err := devstack.FromEnv(func(k string) string { return env[k] }); err != nil || c.WarehouseBucket != "" || c.S3Addr != "127.0.0.1:9555" {
		t.Fatalf("DEV_WAREHOUSE=off: %+v %v", c, err)
	}
	for _, bad := range []map[string]string{{"DEV_VISIBILITY_SECONDS": "soon"}, {"DEV_RIE_BASE_PORT": "-1"}, {"DEV_INTAKE_INSTANCES": "99"}, {"DEV_DISPATCHER_INSTANCES": "0"},
		{"DEV_WAREHOUSE": "maybe"}} {
		if _, err := devstack.FromEnv(func(k string) string { return bad[k] }); !errors.Is(err, devstack.ErrConfig) {
			t.Fatalf("%v accepted: %v", bad, err)
		}
	}
	f, _, err := devstack.LoadFile("../../../scripts/devstack.json")
	if err != nil {
		t.Fatalf("checked-in config: %v", err)
	}
	// Every local secret, the downstream's bearer token included, is
	// visibly fake.
	for name, v := range f.Secrets {
		if !strings.Contains(v, "local_FAKE") && !strings.Contains(string(mustB64(t, v)), "local_FAKE") {
			t.Errorf("secret %s is not visibly fake", name)
		}
	}
	// An effect whose env: secret has no local value is refused.
	bad := t.TempDir() + "/devstack.json"
	doc := `{"sources_config":` + string(f.Sources) + `,"effects_config":{"effects":[{"kind":"refund","url":"http://127.0.0.1:3002/r","secret":"env:MISSING","scopes":["orders"]}]},"secrets":{}}`
	if err := os.WriteFile(bad, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := devstack.LoadFile(bad); !errors.Is(err, devstack.ErrConfig) || !strings.Contains(err.Error(), "MISSING") {
		t.Fatalf("missing effect secret accepted: %v", err)
	}
}

// mustB64 decodes a whsec_<base64> secret (Standard Webhooks) so its fake
// marker can be checked; other secrets come back as they are.
func mustB64(t *testing.T, v string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(v, "whsec_"))
	if err != nil {
		return []byte(v)
	}
	return b
}
