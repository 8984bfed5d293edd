package provider_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/pkg/provider"
)

// FuzzQuilttVerify feeds arbitrary bodies, signature and timestamp headers
// and clock skews to the Quiltt verifier. It must never panic, must fail
// only with the sentinel errors, and may succeed only when the signature
// is the MAC one of the secrets makes over "1" + the timestamp text + this
// very body, and the timestamp is within the tolerance.
func FuzzQuilttVerify(f *testing.F) {
	body := hfEvent(f, "quiltt/connection-events.json")
	good := quilttHeaders(quilttSecretPrimary, now, body)
	ts := good["quiltt-timestamp"]
	f.Add(body, good["quiltt-signature"], ts, int64(0))
	f.Add(body, quilttHeaders(quilttSecretRotated, now, body)["quiltt-signature"], ts, int64(0))
	f.Add(body, good["quiltt-signature"], ts, int64(-301))
	f.Add(body, good["quiltt-signature"], ts+","+ts, int64(0))
	f.Add(body, good["quiltt-signature"], ts[:len(ts)-1], int64(0))
	f.Add([]byte(quilttVectorBody), quilttVectorSignature, quilttVectorTimestamp, int64(0))
	f.Add([]byte{}, "", "", int64(0))

	secrets := []string{quilttSecretPrimary, quilttSecretRotated}
	f.Fuzz(func(t *testing.T, body []byte, sig, ts string, skew int64) {
		at := hfFuzzClock(skew)
		h := hfHeaders("quiltt-signature", sig, "quiltt-timestamp", ts)
		got, err := provider.Quiltt{}.Verify(t.Context(), provider.Request{Headers: h, Body: body},
			provider.Config{Secrets: secrets, Now: fixedClock(at)})
		if err != nil {
			hfCheckRefusal(t, got, err)
			return
		}
		n, perr := strconv.ParseInt(ts, 10, 64)
		if perr != nil || at.Sub(time.Unix(n, 0)).Abs() > provider.DefaultTolerance {
			t.Fatalf("accepted timestamp %q at %v", ts, at)
		}
		raw, derr := base64.StdEncoding.DecodeString(sig)
		matched := false
		for _, s := range secrets {
			m := hmac.New(sha256.New, []byte(s))
			m.Write([]byte("1" + ts))
			m.Write(body)
			matched = matched || (derr == nil && hmac.Equal(raw, m.Sum(nil)))
		}
		if !matched {
			t.Fatalf("accepted %q over %q at %q without a matching MAC", sig, body, ts)
		}
		hfCheckIdentities(t, got, body)
	})
}

// FuzzQuilttIdentity signs arbitrary bodies and checks what the events
// parser makes of them: at most MaxQuilttEvents events, unique storable
// ids, and each Payload a JSON value taken from the body.
func FuzzQuilttIdentity(f *testing.F) {
	f.Add(hfEvent(f, "quiltt/connection-events.json"))
	f.Add([]byte(quilttVectorBody))
	f.Add([]byte(`{"events":[{"type":"a"},"x",{"id":"evt_A"},{"id":"evt_A"},{"id":12}]}`))
	f.Add([]byte(`{"events":[{"id":"evt_\u0007"}]}`))
	f.Add([]byte(`{"events":null}`))
	f.Add([]byte(`{"Events":[{"id":"e"}],"events":[{"id":"f","record":{"id":{"x":1},"profileId":3}}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		h := quilttHeaders(quilttSecretPrimary, now, body)
		got, err := provider.Quiltt{}.Verify(t.Context(), provider.Request{Headers: h, Body: body},
			provider.Config{Secrets: []string{quilttSecretPrimary}, Now: fixedClock(now)})
		if err != nil {
			t.Fatalf("Verify: %v (a signed delivery must never be refused for its content)", err)
		}
		hfCheckIdentities(t, got, body)
		if len(got.Events) > provider.MaxQuilttEvents {
			t.Fatalf("%d events", len(got.Events))
		}
		for i, ev := range got.Events {
			if !json.Valid(ev.Payload) || ev.DeliveryID != "" {
				t.Fatalf("Events[%d] = %+v: payload %q", i, ev, ev.Payload)
			}
			var elem struct {
				ID json.RawMessage `json:"id"`
			}
			if err := json.Unmarshal(ev.Payload, &elem); err != nil || len(elem.ID) == 0 {
				t.Fatalf("Events[%d].Payload %q has no id", i, ev.Payload)
			}
		}
	})
}
