package provider_test

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/pkg/provider"
)

// FuzzSNSVerify feeds arbitrary bodies and clock skews to SNS.Verify, with a
// live test server for certificates. It must never panic, must fail only
// with the package's sentinel errors, and may succeed only when the body is
// a message for the allowed topic, timely at the injected clock, and signed
// by the test key as AWS documents it (checked by snsValidlySigned, which
// shares no code with the verifier). A fuzzer cannot forge RSA, so in
// practice only the seeds' signed fields can succeed, in any JSON spelling.
func FuzzSNSVerify(f *testing.F) {
	pki, err := testSNSPKI()
	if err != nil {
		f.Fatal(err)
	}
	e := newSNSEnv(f, nil)
	e.pin()
	// Small seeds: when the fuzzer finds a new input it minimizes it, in
	// time quadratic in its length, before fuzzing on.
	note := map[string]string{
		"Type": "Notification", "MessageId": "m-1", "TopicArn": snsTopic,
		"Message":   `{"notificationType":"Bounce","mail":{"messageId":"x"},"bounce":{"bounceType":"Permanent"}}`,
		"Timestamp": now.Format(snsTimeLayout), "SignatureVersion": "1", "SigningCertURL": e.at("/c.pem"),
	}
	confirm := map[string]string{
		"Type": "SubscriptionConfirmation", "MessageId": "m-2", "Token": "t", "TopicArn": snsTopic, "Message": "confirm",
		"SubscribeURL": e.at("/confirm?Token=t"), "Timestamp": now.Format(snsTimeLayout), "SignatureVersion": "2", "SigningCertURL": e.at("/c.pem"),
	}
	signed := snsSign(f, note, pki.key)
	seeds := [][]byte{
		signed,
		snsSign(f, snsWith(note, "SignatureVersion", "2", "Subject", "s"), pki.key),
		snsSign(f, confirm, pki.key),
		snsSign(f, snsWith(confirm, "Type", "UnsubscribeConfirmation"), pki.key),
		snsSign(f, snsWith(note, "Message", "not SES"), pki.key),
		snsSign(f, snsWith(note, "TopicArn", snsOtherTopic), pki.key),
		snsSign(f, note, pki.wrongKey),
		snsReencode(f, signed, nil),
		bytes.Replace(signed, []byte("Permanent"), []byte("Transient"), 1),
		append([]byte(`{"Subject":null,`), signed[1:]...),
		[]byte(`{"Type":"Notification","Signature":"","SigningCertURL":""}`),
		[]byte(`{}`),
		[]byte(``),
	}
	for _, s := range seeds {
		f.Add(s, int64(0))
	}
	f.Add(signed, int64(3601))
	f.Add(signed, int64(-3600))

	f.Fuzz(func(t *testing.T, body []byte, skewSeconds int64) {
		at := now.Add(time.Duration(skewSeconds%7200) * time.Second)
		got, err := e.v.Verify(t.Context(), snsRequest(body), provider.Config{Now: fixedClock(at)})
		if err != nil {
			if !errors.Is(err, provider.ErrNotSigned) && !errors.Is(err, provider.ErrBadSignature) && !errors.Is(err, provider.ErrStale) &&
				!errors.Is(err, provider.ErrForeignTopic) && !errors.Is(err, provider.ErrCertUnavailable) {
				t.Fatalf("Verify error %v is not one of the sentinel errors", err)
			}
			if len(got.Events) != 0 || got.Unidentified != "" || got.Confirm != nil {
				t.Fatalf("Verify returned %+v with error %v", got, err)
			}
			return
		}
		m, ok := snsValidlySigned(body, &pki.key.PublicKey)
		if !ok {
			t.Fatalf("Verify accepted %q without a valid signature by the test key", body)
		}
		if m["TopicArn"] != snsTopic {
			t.Fatalf("Verify accepted topic %q", m["TopicArn"])
		}
		ts, err := time.Parse(time.RFC3339Nano, m["Timestamp"])
		if err != nil || ts.Sub(at) > provider.DefaultSNSTolerance || at.Sub(ts) > provider.DefaultSNSTolerance {
			t.Fatalf("Verify accepted Timestamp %q at %v", m["Timestamp"], at)
		}
		if len(got.Events) != 1 || got.Unidentified != "" || got.Events[0].EventID != m["MessageId"] {
			t.Fatalf("Verify = %+v, want the one event %q", got, m["MessageId"])
		}
		if (got.Confirm != nil) != (m["Type"] == "SubscriptionConfirmation") {
			t.Fatalf("Confirm set = %v for a %s", got.Confirm != nil, m["Type"])
		}
	})
}

// snsValidlySigned is the fuzz oracle: read the body with plain
// encoding/json, build the canonical string as AWS documents it, and check
// the signature with the test public key. It returns the string fields.
func snsValidlySigned(body []byte, pub *rsa.PublicKey) (map[string]string, bool) {
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, false
	}
	m := map[string]string{}
	for k, v := range raw {
		if s, ok := v.(string); ok {
			m[k] = s
		}
	}
	sig, err := base64.StdEncoding.DecodeString(m["Signature"])
	if err != nil {
		return nil, false
	}
	data := snsStringToSign(m)
	switch m["SignatureVersion"] {
	case "1":
		sum := sha1.Sum(data)
		return m, rsa.VerifyPKCS1v15(pub, crypto.SHA1, sum[:], sig) == nil
	case "2":
		sum := sha256.Sum256(data)
		return m, rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig) == nil
	}
	return nil, false
}

// FuzzSESParse feeds arbitrary notification bodies to ParseSES. It must never
// panic, and whatever it recognises has one of the documented types.
func FuzzSESParse(f *testing.F) {
	for _, name := range []string{"ses-bounce.json", "ses-complaint.json", "ses-delivery.json", "subscription-confirmation.json"} {
		raw, err := os.ReadFile("../../events/sns/" + name)
		if err != nil {
			f.Fatal(err)
		}
		var env struct{ Message string }
		if err := json.Unmarshal(raw, &env); err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(env.Message))
	}
	for _, s := range []string{
		`{"eventType":"Open","mail":{"messageId":"m","timestamp":"2025-03-01T12:00:00Z"},"open":{"ipAddress":"192.0.2.1"}}`,
		`{"eventType":"Rendering Failure","mail":{"messageId":"m"}}`,
		`{"notificationType":"Bounce","eventType":"Complaint"}`,
		`{"notificationType":"AmazonSnsSubscriptionSucceeded","message":"ok"}`,
		`{"notificationType":"Bounce","mail":{"messageId":7},"bounce":[]}`,
		`{"notificationType":"Bounce","mail":{"timestamp":"not a time"}}`,
		`null`, `[]`, `"Bounce"`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		ev, ok := provider.ParseSES(msg)
		if !ok {
			if ev != (provider.SESEvent{}) {
				t.Fatalf("ParseSES(%q) = %+v, false; want the zero event", msg, ev)
			}
			return
		}
		if !slices.Contains(provider.SESTypes, ev.Type) {
			t.Fatalf("ParseSES(%q) type %q is not one of %v", msg, ev.Type, provider.SESTypes)
		}
		if !ev.MailTimestamp.IsZero() && ev.MailTimestamp.Location() != time.UTC {
			t.Fatalf("MailTimestamp %v not in UTC", ev.MailTimestamp)
		}
		if strings.ContainsAny(ev.Type, "\n\r") {
			t.Fatalf("type %q holds a newline", ev.Type)
		}
	})
}
