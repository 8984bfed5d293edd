package provider_test

import (
	"context"
	"testing"

	"github.com/effectively-once/webhooks/pkg/provider"
)

// Benchmarks of verify+parse: one Verify call per iteration, on a validly
// signed delivery (the events/ fixtures where the repository has one), with
// one active secret and the injected clock of the tests. Verify checks the
// signature on the raw bytes and then parses the identities out of them, so
// each iteration is the whole per-delivery cost of a provider scheme before
// intake touches the ledger. SetBytes is the body length, so MB/s is body
// throughput.
//
// Run: go test -run '^$' -bench Verify -benchmem ./pkg/provider/

// verifyBench is one provider's benchmark case.
type verifyBench struct {
	name   string
	v      provider.Verifier
	req    provider.Request
	cfg    provider.Config
	events int // identities a correct verification returns
}

// run checks the case once outside the timer (a benchmark of the refusal
// path would measure the wrong thing), then times Verify.
func (c verifyBench) run(b *testing.B) {
	ctx := context.Background()
	got, err := c.v.Verify(ctx, c.req, c.cfg)
	if err != nil {
		b.Fatalf("%s: fixture does not verify: %v", c.name, err)
	}
	if len(got.Events) != c.events || got.Unidentified != "" {
		b.Fatalf("%s: got %d events (unidentified %q), want %d", c.name, len(got.Events), got.Unidentified, c.events)
	}
	b.SetBytes(int64(len(c.req.Body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.v.Verify(ctx, c.req, c.cfg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	cfg := func(secret string) provider.Config {
		return provider.Config{Secrets: []string{secret}, Now: fixedClock(now)}
	}

	b.Run("stripe", func(b *testing.B) {
		body := hfEvent(b, "stripe/customer.subscription.updated.json")
		req := provider.Request{Headers: map[string]string{"stripe-signature": sign(body, secretPrimary, now)}, Body: body}
		verifyBench{"stripe", hfNew(b, "stripe", nil), req, cfg(secretPrimary), 1}.run(b)
	})

	b.Run("standard-webhooks", func(b *testing.B) {
		body := hfEvent(b, "standardwebhooks/order.updated.json")
		req := provider.Request{Headers: swHeaders(swMsgID, now, swSign(b, swSecretPrimary, swMsgID, now, body)), Body: body}
		verifyBench{"standard-webhooks", hfNew(b, "standard-webhooks", nil), req, cfg(swSecretPrimary), 1}.run(b)
	})

	b.Run("shopify", func(b *testing.B) {
		body := hfEvent(b, "shopify/orders-updated.json")
		req := provider.Request{Headers: shopifyHeaders(shopifySecretPrimary, body), Body: body}
		verifyBench{"shopify", hfNew(b, "shopify", nil), req, cfg(shopifySecretPrimary), 1}.run(b)
	})

	b.Run("github", func(b *testing.B) {
		body := hfEvent(b, "github/push.json")
		req := provider.Request{Headers: githubHeaders(githubSecretPrimary, body), Body: body}
		verifyBench{"github", hfNew(b, "github", nil), req, cfg(githubSecretPrimary), 1}.run(b)
	})

	b.Run("quiltt", func(b *testing.B) {
		// One delivery carrying two events: both identities are parsed.
		body := hfEvent(b, "quiltt/connection-events.json")
		req := provider.Request{Headers: quilttHeaders(quilttSecretPrimary, now, body), Body: body}
		verifyBench{"quiltt", hfNew(b, "quiltt", nil), req, cfg(quilttSecretPrimary), 2}.run(b)
	})

	b.Run("hmac", func(b *testing.B) {
		// The full generic configuration: signed timestamp, prefix, ids
		// read from JSON paths and a delivery-id header.
		req := provider.Request{Headers: hmacSigned(hmacSecretPrimary, now, hmacBody), Body: []byte(hmacBody)}
		verifyBench{"hmac", hfNew(b, "hmac", hmacOpts), req, cfg(hmacSecretPrimary), 1}.run(b)
	})

	// SNS verifies RSA signatures with the signing certificate named in the
	// message. The certificate comes from the test server once, in the
	// check before the timer, and from the verifier's cache afterwards: the
	// loop measures envelope parsing, the canonical string, the hash and
	// the RSA-2048 PKCS #1 v1.5 verification, not a fetch. The server's
	// request count proves it.
	for _, sv := range []struct{ name, fixture string }{
		{"sns-v1-sha1", "ses-bounce.json"},      // SignatureVersion 1
		{"sns-v2-sha256", "ses-complaint.json"}, // SignatureVersion 2
	} {
		b.Run(sv.name, func(b *testing.B) {
			e := newSNSEnv(b, nil)
			body := snsSign(b, e.fixture(b, sv.fixture, now), e.pki.key)
			verifyBench{sv.name, e.v, snsRequest(body), provider.Config{Now: fixedClock(now)}, 1}.run(b)
			if n := e.srv.Count(snsCertPath); n != 1 {
				b.Fatalf("the certificate was fetched %d times, want once (cache miss inside the timed loop)", n)
			}
		})
	}
}
