package provider

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"time"
)

// snsRegion is an AWS region name outside China: two letters other than
// "cn", an optional "gov", a word and a number (us-east-1, eu-west-3,
// us-gov-west-1, ap-southeast-5), as in DefaultSNSHostPattern.
const snsRegion = `(?:[abd-z][a-z]|c[a-mo-z])-(?:gov-)?[a-z]+-[0-9]+`

// snsSigningName matches the names SNS signing certificates are issued
// to. AWS's "Verifying the signatures of Amazon SNS messages" asks to check
// that the certificate is SNS's but does not list the names; the AWS SDK for
// Java v2's SNS message manager (SnsHostProvider.signingCertCommonName)
// does: sns.amazonaws.com in the commercial regions,
// sns-signing.<region>.amazonaws.com in the newer ones (af-south-1,
// ap-east-1, eu-south-1, me-central-1, …), sns-us-gov-west-1.amazonaws.com
// for both GovCloud regions and sns-<region>.amazonaws.com.cn in China.
// The ISO and sovereign partitions use other domains and are not accepted.
// Whatever region the message came from, any of these names is accepted:
// only AWS can obtain a certificate for them.
var snsSigningName = regexp.MustCompile(`^(?:sns\.amazonaws\.com` +
	`|sns-signing\.` + snsRegion + `\.amazonaws\.com` +
	`|sns-us-gov-[a-z]+-[0-9]+\.amazonaws\.com` +
	`|sns-cn-[a-z]+-[0-9]+\.amazonaws\.com\.cn)$`)

// checkSigningName requires an SNS signing name among the certificate's
// DNS names, exactly (no wildcard), and its CN, when it has one, to be one
// too. The SAN is what a public CA validates; the CN is checked so that
// nothing in the certificate names another host.
func checkSigningName(c *x509.Certificate) error {
	if !slices.ContainsFunc(c.DNSNames, snsSigningName.MatchString) ||
		(c.Subject.CommonName != "" && !snsSigningName.MatchString(c.Subject.CommonName)) {
		first := ""
		if len(c.DNSNames) > 0 {
			first = c.DNSNames[0]
		}
		return fmt.Errorf("not an SNS signing certificate (CN %.64q, DNS name %.64q)", c.Subject.CommonName, first)
	}
	return nil
}

// verifyPEM parses the served PEM (the signing certificate first, then any
// intermediates) and checks the signing certificate: an RSA key, an SNS
// signing name, within its validity at now, and a chain at now to the
// trusted roots (trust_ca_file, else the system roots) through the served
// intermediates, the shipped ones and intermediates_file. It returns the
// certificate and its verified chain.
func (s *SNS) verifyPEM(body []byte, now time.Time) (*x509.Certificate, []*x509.Certificate, error) {
	var leaf *x509.Certificate
	var served []*x509.Certificate
	for rest := body; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, nil, errors.New("not a parsable certificate")
		}
		if leaf == nil {
			leaf = c
		} else {
			served = append(served, c)
		}
	}
	if leaf == nil {
		return nil, nil, errors.New("no PEM certificate")
	}
	if _, ok := leaf.PublicKey.(*rsa.PublicKey); !ok {
		return nil, nil, errors.New("not an RSA key")
	}
	if err := checkSigningName(leaf); err != nil {
		return nil, nil, err
	}
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return nil, nil, fmt.Errorf("not valid at %s (valid %s to %s)", now.UTC().Format(time.RFC3339),
			leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	inter := s.intermediates
	if len(served) > 0 {
		inter = inter.Clone()
		for _, c := range served {
			inter.AddCert(c)
		}
	}
	chains, err := leaf.Verify(x509.VerifyOptions{
		Roots: s.roots, Intermediates: inter, CurrentTime: now,
		// Whatever usages the certificate names (today serverAuth): what
		// makes it SNS's is its name and its issuer.
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if err != nil {
		return nil, nil, chainError(err, now)
	}
	return leaf, chains[0], nil
}

// chainError says in a few words why a chain did not verify.
func chainError(err error, now time.Time) error {
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var system x509.SystemRootsError
	switch {
	case errors.As(err, &unknown):
		return errors.New("does not chain to a trusted root")
	case errors.As(err, &system):
		return errors.New("does not chain to a trusted root (no system roots)")
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return fmt.Errorf("chain not valid at %s", now.UTC().Format(time.RFC3339))
	}
	msg := err.Error()
	if len(msg) > 120 {
		msg = msg[:120] + "…"
	}
	return fmt.Errorf("chain does not verify: %s", msg)
}

// Limits on fetching signing certificates, per verifier (one per source in
// each Lambda instance). AWS serves one certificate per region, cached an
// hour (snsCertCacheTTL), so a genuine source fetches about once an hour per
// region; the limits only bite on URLs that fail or that nobody sends twice.
const (
	// snsFetchBurst fetches may start at once; then one more every
	// snsFetchEvery (10 a minute). Past that, ErrCertUnavailable: a 503,
	// which SNS retries for a genuine message.
	snsFetchBurst = 10
	snsFetchEvery = 6 * time.Second
	// A failed fetch is remembered by URL: refused (non-200, a certificate
	// refused) for a minute, unavailable (5xx, 429, timeout) for 10 s, so
	// that SNS's own retry of a genuine message, 20 s later by default,
	// fetches again.
	snsRefusedTTL     = time.Minute
	snsUnavailableTTL = 10 * time.Second
	snsFailureCache   = 256
)

// fetchBudget is a token bucket on the verifier's clock. A clock that goes
// back refills nothing.
type fetchBudget struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func (b *fetchBudget) take(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.last.IsZero():
		b.tokens, b.last = snsFetchBurst, now
	case now.After(b.last):
		b.tokens = min(snsFetchBurst, b.tokens+float64(now.Sub(b.last))/float64(snsFetchEvery))
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// certFailures remembers failed fetches by URL until a deadline, at most
// max of them: when full, the expired ones go, then the one closest to its
// deadline.
type certFailures struct {
	mu      sync.Mutex
	max     int
	entries map[string]certFailure
}

type certFailure struct {
	err   error
	until time.Time
}

func (c *certFailures) get(u string, now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.entries[u]
	if !ok {
		return nil
	}
	if !now.Before(f.until) {
		delete(c.entries, u)
		return nil
	}
	return f.err
}

func (c *certFailures) put(u string, err error, now, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]certFailure{}
	}
	if _, ok := c.entries[u]; !ok && len(c.entries) >= c.max {
		soonest := ""
		for k, f := range c.entries {
			if !now.Before(f.until) {
				delete(c.entries, k)
			} else if soonest == "" || f.until.Before(c.entries[soonest].until) {
				soonest = k
			}
		}
		if len(c.entries) >= c.max {
			delete(c.entries, soonest)
		}
	}
	c.entries[u] = certFailure{err: err, until: until}
}
