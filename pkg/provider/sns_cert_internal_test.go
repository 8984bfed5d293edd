package provider

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"testing"
	"time"
)

// TestSNSShippedIntermediates: the intermediates shipped for SNS signing
// certificates are the four Amazon RSA 2048 CAs whose fingerprints the
// comment lists, each a CA that chains to Amazon Root CA 1 in the system
// roots. Skipped where the system roots lack Amazon's (no CA bundle).
func TestSNSShippedIntermediates(t *testing.T) {
	want := map[string]string{
		"Amazon RSA 2048 M01": "5338ebec8fb2ac60996126d3e76aa34fd0f3318ac78ebb7ac8f6f1361f484b33",
		"Amazon RSA 2048 M02": "b0f330a31a0c50987e1c3a7bb02c2dda682991d3165b517bd44fba4a6020bd94",
		"Amazon RSA 2048 M03": "bf8a69027bcc8d2d42a6e6d25bdd4873f6a34b8f90edf07e86c5d6916da0b933",
		"Amazon RSA 2048 M04": "138bdf6e23ac971eb4e626b279dd6a26f057510f1de394293a5eea2860de019b",
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		t.Skipf("no system roots: %v", err)
	}
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	seen := 0
	for rest := []byte(snsIntermediatesPEM); ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("shipped certificate %d: %v", seen, err)
		}
		seen++
		name := c.Subject.CommonName
		sum := sha256.Sum256(c.Raw)
		if fp, ok := want[name]; !ok || fp != hex.EncodeToString(sum[:]) {
			t.Errorf("shipped %q has SHA-256 %x, want one of the listed intermediates", name, sum)
		}
		if !c.IsCA || c.Issuer.CommonName != "Amazon Root CA 1" {
			t.Errorf("%s: IsCA %v, issuer %q", name, c.IsCA, c.Issuer.CommonName)
		}
		_, err = c.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		var unknown x509.UnknownAuthorityError
		if errors.As(err, &unknown) {
			t.Skipf("the system roots lack Amazon Root CA 1: %v", err)
		}
		if err != nil {
			t.Errorf("%s does not chain to the system roots: %v", name, err)
		}
	}
	if seen != len(want) {
		t.Errorf("%d shipped certificates, want %d", seen, len(want))
	}
}
