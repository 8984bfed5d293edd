package provider_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/pkg/provider"
)

// FuzzStandardWebhooksVerify feeds arbitrary bodies, both header families
// and clock skews to the Standard Webhooks verifier. It must never panic,
// must fail only with the sentinel errors, and may succeed only when the
// two families agree, the timestamp text is within the tolerance, and some
// "v1,<sig>" entry is the MAC one of the secrets makes over exactly
// "id.timestamp.body" as sent (computed here without the library).
func FuzzStandardWebhooksVerify(f *testing.F) {
	body := hfEvent(f, "standardwebhooks/order.updated.json")
	ts := fmt.Sprint(now.Unix())
	sig := swSign(f, swSecretPrimary, swMsgID, now, body)
	rot := swSign(f, swSecretRotated, swMsgID, now, body)
	f.Add(body, swMsgID, ts, sig, "", "", "", int64(0))
	f.Add(body, "", "", "", swMsgID, ts, sig, int64(0))
	f.Add(body, swMsgID, ts, sig, swMsgID, ts, sig, int64(0))
	f.Add(body, swMsgID, ts, "v1,xx "+rot, "", "", "", int64(0))
	f.Add(body, swMsgID, ts, sig, "", "", "", int64(-301))
	f.Add(body, swMsgID, ts, sig, "", "1", "", int64(0))
	f.Add(body, swMsgID, "+"+ts, sig, "", "", "", int64(0))
	f.Add(body, swMsgID, "0"+ts, sig, "", "", "", int64(0))
	f.Add([]byte{}, "", "", "", "", "", "", int64(0))

	v := hfNew(f, "standard-webhooks", map[string]string{"version_path": "data.revision"})
	secrets := []string{swSecretNotBase64, swSecretPrimary, swSecretRotated}
	f.Fuzz(func(t *testing.T, body []byte, wid, wts, wsig, sid, sts, ssig string, skew int64) {
		at := hfFuzzClock(skew)
		h := hfHeaders("webhook-id", wid, "webhook-timestamp", wts, "webhook-signature", wsig,
			"svix-id", sid, "svix-timestamp", sts, "svix-signature", ssig)
		got, err := v.Verify(t.Context(), provider.Request{Headers: h, Body: body}, provider.Config{Secrets: secrets, Now: fixedClock(at)})
		if err != nil {
			hfCheckRefusal(t, got, err)
			return
		}
		pick := func(a, b string) string {
			if a != "" && b != "" && a != b {
				t.Fatalf("accepted disagreeing families %q and %q", a, b)
			}
			if a == "" {
				return b
			}
			return a
		}
		id, tsText, sigs := pick(wid, sid), pick(wts, sts), pick(wsig, ssig)
		n, perr := strconv.ParseInt(tsText, 10, 64)
		if perr != nil || at.Sub(time.Unix(n, 0)).Abs() > provider.DefaultTolerance {
			t.Fatalf("accepted timestamp %q at %v", tsText, at)
		}
		matched := false
		for _, s := range secrets {
			key, kerr := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
			if kerr != nil || len(key) == 0 {
				continue
			}
			m := hmac.New(sha256.New, key)
			m.Write([]byte(id + "." + tsText + "."))
			m.Write(body)
			want := base64.StdEncoding.EncodeToString(m.Sum(nil))
			for _, entry := range strings.Split(sigs, " ") {
				parts := strings.Split(entry, ",")
				matched = matched || (len(parts) >= 2 && parts[0] == "v1" && parts[1] == want)
			}
		}
		if !matched {
			t.Fatalf("accepted %q over %q (id %q, t %q) without a matching v1 signature", sigs, body, id, tsText)
		}
		hfCheckIdentities(t, got, body)
		if got.Unidentified == "" && got.Events[0].EventID != id {
			t.Fatalf("EventID %q, want the signed id %q", got.Events[0].EventID, id)
		}
	})
}

// FuzzStandardWebhooksIdentity signs arbitrary bodies and ids with the
// reference library and checks what the identity parser makes of them.
func FuzzStandardWebhooksIdentity(f *testing.F) {
	f.Add(hfEvent(f, "standardwebhooks/order.updated.json"), swMsgID)
	f.Add([]byte(`{"type":7,"data":{"id":1e400}}`), "msg_1")
	f.Add([]byte(`{"type":"a","data":[{"id":"x"}]}`), strings.Repeat("m", 300))
	f.Add([]byte(`not json`), "msg\x00")
	v := hfNew(f, "standard-webhooks", map[string]string{"version_path": "data.revision", "subject_path": "data.0.id"})
	f.Fuzz(func(t *testing.T, body []byte, msgID string) {
		if msgID == "" {
			return // unsigned by definition
		}
		h := swHeaders(msgID, now, swSign(t, swSecretPrimary, msgID, now, body))
		got, err := v.Verify(t.Context(), provider.Request{Headers: h, Body: body},
			provider.Config{Secrets: []string{swSecretPrimary}, Now: fixedClock(now)})
		if err != nil {
			t.Fatalf("Verify: %v (a signed delivery must never be refused for its content)", err)
		}
		hfCheckIdentities(t, got, body)
		if got.Unidentified == "" && (got.Events[0].EventID != msgID || got.Events[0].DeliveryID != msgID) {
			t.Fatalf("identity %+v, want the signed id %q", got.Events[0], msgID)
		}
	})
}
