package provider_test

import (
	"crypto/hmac"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/effectively-once/webhooks/pkg/provider"
)

// FuzzStripeVerify feeds arbitrary bodies, headers and clock skews to
// Stripe.Verify. It must never panic, must fail only with the package's
// sentinel errors, and may succeed only when the header carries a v1
// signature that one of the secrets made over this very body and a t= value
// that is within the tolerance of the injected clock. A fuzzer cannot forge
// an HMAC, so in practice only the seed's signed header with the seed's body
// (plus harmless extra header parts) can succeed.
func FuzzStripeVerify(f *testing.F) {
	body := []byte(eventBody)
	header := sign(body, secretPrimary, now)
	rotated := sign(body, secretRotated, now)
	sig := v1(body, secretPrimary, now)

	f.Add(body, header, int64(0))
	f.Add(body, rotated, int64(0))
	f.Add(body, header, int64(300))
	f.Add(body, header, int64(-301))
	f.Add(body, fmt.Sprintf("t=%d,v1=%s,v1=%s", now.Unix(), v1(body, secretWrong, now), sig), int64(0))
	f.Add(body, fmt.Sprintf("t=%d,v0=%s", now.Unix(), sig), int64(0))
	f.Add(body, "v1="+sig, int64(0))
	f.Add(body, "t=,v1=", int64(0))
	f.Add(body, "t=-1,v1=zz", int64(0))
	f.Add(body, ",,,=,t==1", int64(0))
	f.Add(body, "", int64(0))
	f.Add([]byte("not json"), sign([]byte("not json"), secretPrimary, now), int64(0))
	f.Add([]byte{}, sign(nil, secretPrimary, now), int64(0))

	secrets := []string{secretPrimary, secretRotated}
	const tolerance = provider.DefaultTolerance

	f.Fuzz(func(t *testing.T, body []byte, header string, skewSeconds int64) {
		at := now.Add(time.Duration(skewSeconds%7200) * time.Second)
		cfg := provider.Config{Secrets: secrets, Now: fixedClock(at)}
		req := provider.Request{Headers: map[string]string{"stripe-signature": header}, Body: body}

		got, err := provider.Stripe{}.Verify(t.Context(), req, cfg)
		if err != nil {
			if !errors.Is(err, provider.ErrNotSigned) && !errors.Is(err, provider.ErrBadSignature) && !errors.Is(err, provider.ErrStale) {
				t.Fatalf("Verify error %v is not one of the sentinel errors", err)
			}
			if len(got.Events) != 0 || got.Unidentified != "" {
				t.Fatalf("Verify returned %+v with error %v", got, err)
			}
			return
		}
		if !validlySigned(body, header, secrets, at, tolerance) {
			t.Fatalf("Verify accepted header %q over body %q at %v without a matching, timely v1 signature", header, body, at)
		}
		if (len(got.Events) == 0) == (got.Unidentified == "") {
			t.Fatalf("Verify = %+v: want either events or an Unidentified reason", got)
		}
	})
}

// validlySigned is the fuzz oracle: some t= value in the header is within
// tolerance of now and some v1= value in it is the HMAC that one of the
// secrets makes over that timestamp and the body. It reads the header more
// leniently than any verifier should, so it never refuses a correct success.
func validlySigned(body []byte, header string, secrets []string, now time.Time, tol time.Duration) bool {
	var stamps []time.Time
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				stamps = append(stamps, time.Unix(n, 0))
			}
		case "v1":
			if s, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, s)
			}
		}
	}
	for _, ts := range stamps {
		if d := now.Sub(ts); d > tol || d < -tol {
			continue
		}
		for _, secret := range secrets {
			want := webhook.ComputeSignature(ts, body, secret)
			for _, s := range sigs {
				if hmac.Equal(want, s) {
					return true
				}
			}
		}
	}
	return false
}
