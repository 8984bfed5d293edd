package provider

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"strings"
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

// TestSNSCertFailuresBounded: the failure cache holds at most max URLs;
// when full, expired failures go first, then the one closest to its
// deadline.
func TestSNSCertFailuresBounded(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	refused := errors.New("refused")
	c := certFailures{max: 3}
	c.put("a", refused, at, at.Add(time.Minute))
	c.put("b", refused, at, at.Add(10*time.Second))
	c.put("c", refused, at, at.Add(time.Minute))
	c.put("d", refused, at, at.Add(time.Minute)) // full: b, closest to its deadline, goes
	if len(c.entries) != 3 || c.get("b", at) != nil || c.get("a", at) == nil || c.get("d", at) == nil {
		t.Fatalf("after a fourth URL: %v", c.entries)
	}
	later := at.Add(2 * time.Minute)
	c.put("e", refused, later, later.Add(time.Minute)) // full of expired ones: all go
	if len(c.entries) != 1 || c.get("e", later) == nil {
		t.Fatalf("after the others expired: %v", c.entries)
	}
	if c.get("e", later.Add(time.Minute)) != nil {
		t.Error("a failure is remembered past its deadline")
	}
}

// TestSNSFetchBudgetClockBack: a clock that goes back refills nothing and
// does not break the bucket.
func TestSNSFetchBudgetClockBack(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	var b fetchBudget
	for i := range snsFetchBurst {
		if !b.take(at) {
			t.Fatalf("token %d refused", i)
		}
	}
	if b.take(at.Add(-time.Hour)) {
		t.Fatal("a token an hour earlier")
	}
	if !b.take(at.Add(snsFetchEvery)) {
		t.Fatal("no token one interval after the last")
	}
}

// TestSNSRegionShapes: the certificate names and the default host pattern
// agree on what a region is.
func TestSNSRegionShapes(t *testing.T) {
	if !strings.Contains(DefaultSNSHostPattern, `^sns\.(?:`+snsRegion+`\.amazonaws\.com|`) {
		t.Errorf("DefaultSNSHostPattern %s does not use snsRegion %s", DefaultSNSHostPattern, snsRegion)
	}
}
