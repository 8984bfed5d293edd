package provider_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/effectively-once/webhooks/pkg/provider"
)

// Fuzz helpers shared by the HMAC-family fuzz targets.

// hfFuzzClock is the injected clock of a fuzz case: now moved by up to two
// hours either way.
func hfFuzzClock(skewSeconds int64) time.Time {
	return now.Add(time.Duration(skewSeconds%7200) * time.Second)
}

// hfCheckRefusal: a refusal is one of the sentinel errors and returns nothing.
func hfCheckRefusal(t *testing.T, got provider.Verified, err error) {
	t.Helper()
	if !errors.Is(err, provider.ErrNotSigned) && !errors.Is(err, provider.ErrBadSignature) &&
		!errors.Is(err, provider.ErrStale) && !errors.Is(err, provider.ErrNoSecrets) {
		t.Fatalf("Verify error %v is not one of the sentinel errors", err)
	}
	if len(got.Events) != 0 || got.Unidentified != "" || got.Confirm != nil {
		t.Fatalf("Verify returned %+v with error %v", got, err)
	}
}

// hfCheckIdentities checks what any verifier may return for a verified
// delivery: events or an Unidentified reason, never both; storable event
// ids; everything else within its bound.
func hfCheckIdentities(t *testing.T, got provider.Verified, body []byte) {
	t.Helper()
	if (len(got.Events) == 0) == (got.Unidentified == "") {
		t.Fatalf("Verify = %+v: want either events or an Unidentified reason", got)
	}
	seen := map[string]bool{}
	for i, ev := range got.Events {
		if ev.EventID == "" || len(ev.EventID) > 256 || !utf8.ValidString(ev.EventID) || strings.ContainsFunc(ev.EventID, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			t.Fatalf("Events[%d].EventID %q is not storable", i, ev.EventID)
		}
		if seen[ev.EventID] {
			t.Fatalf("Events[%d].EventID %q repeated", i, ev.EventID)
		}
		seen[ev.EventID] = true
		if ev.Type == "" || len(ev.Type) > 256 || len(ev.Subject) > 256 || len(ev.DeliveryID) > 256 || len(ev.VersionHint) > 256 {
			t.Fatalf("Events[%d] = %+v exceeds a bound", i, ev)
		}
		if len(ev.Attributes) > provider.MaxAttributes {
			t.Fatalf("Events[%d] has %d attributes", i, len(ev.Attributes))
		}
		for k, v := range ev.Attributes {
			if len(v) > provider.MaxAttributeLen || v == "" {
				t.Fatalf("Events[%d].Attributes[%q] = %q", i, k, v)
			}
		}
		if ev.Payload != nil && !bytes.Contains(body, ev.Payload) {
			t.Fatalf("Events[%d].Payload %q is not part of the body", i, ev.Payload)
		}
	}
}

// FuzzHMACVerify feeds arbitrary bodies, signature and timestamp headers and
// clock skews to a generic HMAC verifier configured like hmacOpts
// (sha256=<hex> over "{timestamp}.{body}"). It must never panic, must fail
// only with the sentinel errors, and may succeed only when the header is
// the MAC one of the secrets makes over exactly this timestamp text and
// body, and the timestamp is within the tolerance.
func FuzzHMACVerify(f *testing.F) {
	body := []byte(hmacBody)
	good := hmacSigned(hmacSecretPrimary, now, hmacBody)
	f.Add(body, good["x-signature"], good["x-timestamp"], int64(0))
	rot := hmacSigned(hmacSecretRotated, now, hmacBody)
	f.Add(body, rot["x-signature"], rot["x-timestamp"], int64(0))
	f.Add(body, good["x-signature"], good["x-timestamp"], int64(301))
	f.Add(body, good["x-signature"], good["x-timestamp"]+","+good["x-timestamp"], int64(0))
	f.Add(body, strings.TrimPrefix(good["x-signature"], "sha256="), good["x-timestamp"], int64(0))
	f.Add([]byte{}, "sha256=", "", int64(0))
	f.Add([]byte("x"), "sha256=zz", "+1", int64(0))

	v := hfNew(f, "hmac", hmacOpts)
	secrets := []string{hmacSecretPrimary, hmacSecretRotated}
	f.Fuzz(func(t *testing.T, body []byte, sig, ts string, skew int64) {
		at := hfFuzzClock(skew)
		req := provider.Request{Headers: hfHeaders("x-signature", sig, "x-timestamp", ts, "x-delivery", "dlv_1"), Body: body}
		got, err := v.Verify(t.Context(), req, provider.Config{Secrets: secrets, Now: fixedClock(at)})
		if err != nil {
			hfCheckRefusal(t, got, err)
			return
		}
		n, perr := strconv.ParseInt(ts, 10, 64)
		if perr != nil || at.Sub(time.Unix(n, 0)).Abs() > provider.DefaultTolerance {
			t.Fatalf("accepted timestamp %q at %v", ts, at)
		}
		want := false
		for _, s := range secrets {
			m := hmac.New(sha256.New, []byte(s))
			m.Write([]byte(ts + "."))
			m.Write(body)
			want = want || strings.EqualFold(sig, "sha256="+hex.EncodeToString(m.Sum(nil)))
		}
		if !want {
			t.Fatalf("accepted signature %q over %q at %q without a matching MAC", sig, body, ts)
		}
		hfCheckIdentities(t, got, body)
	})
}

// FuzzHMACIdentity signs arbitrary bodies and ids correctly and checks the
// identity read through JSON paths and headers: a signed delivery is never
// refused, and what it yields is within bounds.
func FuzzHMACIdentity(f *testing.F) {
	f.Add([]byte(hmacBody), "ev_h_1", "t")
	f.Add([]byte(`{"events":[{"id":820982911946154508,"order":1.5}]}`), "", "")
	f.Add([]byte(`{"event_id":"ev\u0000"}`), "ev\x00", "")
	f.Add([]byte(`[1,2,{"a":"b"}]`), strings.Repeat("i", 300), strings.Repeat("t", 300))
	f.Add([]byte(`{"event_id":{"x":1}} trailing`), "", "")
	bodyPaths := hfNew(f, "hmac", map[string]string{"header": "x-sig", "id_path": "event_id", "type_path": "events.0.type",
		"subject_path": "invoice.id", "delivery_id_header": "x-delivery"})
	headerIDs := hfNew(f, "hmac", map[string]string{"header": "x-sig", "id_header": "x-id", "type_header": "x-type", "subject_path": "events.0.order"})
	f.Fuzz(func(t *testing.T, body []byte, id, typ string) {
		for _, v := range []provider.Verifier{bodyPaths, headerIDs} {
			h := hfHeaders("x-sig", hfMACHex(hmacSecretPrimary, string(body)), "x-id", id, "x-type", typ, "x-delivery", typ)
			got, err := v.Verify(t.Context(), provider.Request{Headers: h, Body: body},
				provider.Config{Secrets: []string{hmacSecretPrimary}, Now: fixedClock(now)})
			if err != nil {
				t.Fatalf("Verify: %v (a signed delivery must never be refused for its content)", err)
			}
			hfCheckIdentities(t, got, body)
		}
	})
}

// FuzzHMACOptions builds generic HMAC verifiers from arbitrary signed_payload
// templates and paths (an id header instead of the path when the template
// names {id}). New must never panic and must fail only with ErrOptions; a
// template it accepts must contain {body}, and a delivery signed by
// expanding that template independently must verify, with its id unsigned
// exactly when it is a header the template does not name.
func FuzzHMACOptions(f *testing.F) {
	f.Add("{timestamp}.{body}", "x-ts", "id")
	f.Add("{body}", "", "a.0.b")
	f.Add("v0:{timestamp}:{body}", "x-ts", "a..b")
	f.Add("{body}{body}", "", "id")
	f.Add("{timestamp}", "x-ts", "id")
	f.Add("{id}.{body}", "", "")
	f.Add("{{body}}", "", "id")
	f.Add("{id}.{timestamp}.{body}", "x-ts", "")
	f.Fuzz(func(t *testing.T, tmpl, tsHeader, idPath string) {
		opts := map[string]string{"header": "x-sig", "signed_payload": tmpl, "id_path": idPath}
		if strings.Contains(tmpl, "{id}") {
			delete(opts, "id_path")
			opts["id_header"] = "x-event-id"
		}
		if tsHeader != "" {
			opts["timestamp_header"] = tsHeader
		}
		v, err := provider.New("hmac", opts)
		if err != nil {
			if !errors.Is(err, provider.ErrOptions) || v != nil {
				t.Fatalf("New = %v, %v; want only ErrOptions", v, err)
			}
			return
		}
		if !strings.Contains(tmpl, "{body}") {
			t.Fatalf("New accepted template %q without {body}", tmpl)
		}
		if (tsHeader != "") != strings.Contains(tmpl, "{timestamp}") {
			t.Fatalf("New accepted template %q with timestamp header %q", tmpl, tsHeader)
		}
		ts := fmt.Sprint(now.Unix())
		body := `{"id":"ev_1"}`
		signed := strings.NewReplacer("{timestamp}", ts, "{body}", body, "{id}", "ev_2").Replace(tmpl)
		h := hfHeaders("x-sig", hfMACHex(hmacSecretPrimary, signed), strings.ToLower(tsHeader), ts, "x-event-id", "ev_2")
		got, err := v.Verify(t.Context(), provider.Request{Headers: h, Body: []byte(body)},
			provider.Config{Secrets: []string{hmacSecretPrimary}, Now: fixedClock(now)})
		if err != nil {
			t.Fatalf("template %q: Verify: %v", tmpl, err)
		}
		hfCheckIdentities(t, got, []byte(body))
		for _, ev := range got.Events {
			if ev.UnsignedID {
				t.Fatalf("template %q: the id is signed (in the body or the template), yet UnsignedID", tmpl)
			}
		}
	})
}
