package provider

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"
)

// snsRegion is an AWS region name outside China: two letters other than
// "cn", an optional "gov", a word and a number (us-east-1, eu-west-3,
// us-gov-west-1, ap-southeast-5).
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
