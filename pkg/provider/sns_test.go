package provider_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/pkg/provider"
)

const (
	snsTopic      = "arn:aws:sns:us-east-1:123456789012:ses-notifications"
	snsOtherTopic = "arn:aws:sns:us-east-1:210987654321:someone-elses-topic"
	snsCertPath   = "/SimpleNotificationService-test.pem"
	snsTimeLayout = "2006-01-02T15:04:05.000Z" // as SNS writes Timestamp
)

// snsPKI stands in for AWS's: a test CA; an RSA signing certificate it
// issued; the same key's certificate, expired; a self-signed certificate
// nobody trusts; and the TLS certificate (IP SAN 127.0.0.1) of the test
// server that plays sns.<region>.amazonaws.com. Everything is generated
// here; nothing is a real AWS key.
type snsPKI struct {
	caPEM        []byte
	caPool       *x509.CertPool
	key          *rsa.PrivateKey // signs messages; its certificate is served
	wrongKey     *rsa.PrivateKey
	certPEM      []byte // key, issued by the CA, valid 2020–2040
	expiredPEM   []byte // key, issued by the CA, expired at the end of 2024
	untrustedPEM []byte // wrongKey, self-signed
	tlsCert      tls.Certificate

	// interPEM is an intermediate CA the test CA issued; served alone, a
	// certificate it issued needs it from the PEM or intermediates_file.
	interPEM []byte
	// served are more certificates, all for key (so only the certificate
	// decides), by the path the server serves them at; see signingCerts.
	served map[string][]byte
}

var testSNSPKI = sync.OnceValues(newSNSPKI)

func newSNSPKI() (*snsPKI, error) {
	from := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	until := time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Test SNS Root CA"},
		NotBefore: from, NotAfter: until, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p := &snsPKI{caPEM: snsPEM(caDER), caPool: x509.NewCertPool()}
	p.caPool.AddCert(ca)
	if p.key, err = snsTestKey("sns signing key"); err != nil {
		return nil, err
	}
	if p.wrongKey, err = snsTestKey("some other key"); err != nil {
		return nil, err
	}
	leaf := func(serial int64, cn string, notAfter time.Time) *x509.Certificate {
		return &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, DNSNames: []string{cn},
			NotBefore: from, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf(2, "sns.amazonaws.com", until), ca, &p.key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	p.certPEM = snsPEM(der)
	if der, err = x509.CreateCertificate(rand.Reader, leaf(3, "sns.amazonaws.com", time.Date(2024, 12, 31, 0, 0, 0, 0, time.UTC)), ca, &p.key.PublicKey, caKey); err != nil {
		return nil, err
	}
	p.expiredPEM = snsPEM(der)
	self := leaf(4, "sns.amazonaws.com", until)
	if der, err = x509.CreateCertificate(rand.Reader, self, self, &p.wrongKey.PublicKey, p.wrongKey); err != nil {
		return nil, err
	}
	p.untrustedPEM = snsPEM(der)
	if err := p.signingCerts(ca, caKey, from, until); err != nil {
		return nil, err
	}

	tlsKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tlsTmpl := leaf(5, "127.0.0.1", until)
	tlsTmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	if der, err = x509.CreateCertificate(rand.Reader, tlsTmpl, ca, tlsKey.Public(), caKey); err != nil {
		return nil, err
	}
	p.tlsCert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: tlsKey}
	return p, nil
}

// signingCerts issues the certificates that differ from certPEM in one
// way each: their names, validity, issuer or chain. The key is always
// p.key, so a message signed with it verifies if the certificate is
// accepted.
func (p *snsPKI) signingCerts(ca *x509.Certificate, caKey crypto.Signer, from, until time.Time) error {
	serial := int64(100)
	issue := func(cn string, sans []string, notBefore, notAfter time.Time, parent *x509.Certificate, parentKey crypto.Signer, pub any, isCA bool) (*x509.Certificate, []byte, error) {
		serial++
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, DNSNames: sans,
			NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		if isCA {
			tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage, tmpl.ExtKeyUsage = true, true, x509.KeyUsageCertSign, nil
		}
		if parent == nil {
			parent = tmpl // self-signed, by parentKey
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
		if err != nil {
			return nil, nil, err
		}
		c, err := x509.ParseCertificate(der)
		return c, snsPEM(der), err
	}
	leaf := func(cn string, sans ...string) ([]byte, error) {
		_, pemBytes, err := issue(cn, sans, from, until, ca, caKey, &p.key.PublicKey, false)
		return pemBytes, err
	}
	p.served = map[string][]byte{}
	var err error
	for path, names := range map[string][]string{
		"/sns-signing-region.pem": {"sns-signing.eu-south-1.amazonaws.com", "sns-signing.eu-south-1.amazonaws.com"},
		"/sns-gov.pem":            {"sns-us-gov-west-1.amazonaws.com", "sns-us-gov-west-1.amazonaws.com"},
		"/sns-china.pem":          {"sns-cn-north-1.amazonaws.com.cn", "sns-cn-north-1.amazonaws.com.cn"},
		"/san-only.pem":           {"", "sns.amazonaws.com"},
		"/wrong-name.pem":         {"attacker.example", "attacker.example"},
		"/wrong-san.pem":          {"sns.amazonaws.com", "attacker.example"},
		"/wrong-cn.pem":           {"attacker.example", "sns.amazonaws.com"},
		"/no-san.pem":             {"sns.amazonaws.com"},
		"/wildcard.pem":           {"*.amazonaws.com", "*.amazonaws.com"},
		"/lookalike.pem":          {"sns.amazonaws.com.attacker.example", "sns.amazonaws.com.attacker.example"},
		"/s3-bucket.pem":          {"sns.s3.amazonaws.com", "sns.s3.amazonaws.com"},
	} {
		if p.served[path], err = leaf(names[0], names[1:]...); err != nil {
			return err
		}
	}
	// Within its window only from 2030 on.
	if _, p.served["/not-yet-valid.pem"], err = issue("sns.amazonaws.com", []string{"sns.amazonaws.com"}, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), until, ca, caKey, &p.key.PublicKey, false); err != nil {
		return err
	}
	// Issued by a root nobody trusts, with the right names.
	otherKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	other, _, err := issue("Untrusted Test Root", nil, from, until, nil, otherKey, otherKey.Public(), true)
	if err != nil {
		return err
	}
	if _, p.served["/other-root.pem"], err = issue("sns.amazonaws.com", []string{"sns.amazonaws.com"}, from, until, other, otherKey, &p.key.PublicKey, false); err != nil {
		return err
	}
	// Issued by an intermediate of the test CA: served alone, with the
	// intermediate after it, and with an unrelated certificate after it.
	interKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	inter, interPEM, err := issue("Test SNS Intermediate CA", nil, from, until, ca, caKey, interKey.Public(), true)
	if err != nil {
		return err
	}
	p.interPEM = interPEM
	_, viaInter, err := issue("sns.amazonaws.com", []string{"sns.amazonaws.com"}, from, until, inter, interKey, &p.key.PublicKey, false)
	if err != nil {
		return err
	}
	p.served["/via-intermediate.pem"] = viaInter
	p.served["/via-intermediate-chain.pem"] = append(slices.Clone(viaInter), interPEM...)
	p.served["/via-intermediate-wrong-chain.pem"] = append(slices.Clone(viaInter), p.served["/other-root.pem"]...)
	return nil
}

// snsTestKey derives a 2048-bit RSA key from a label, the same key in every
// process: fuzz workers are processes of their own, and the seeds they are
// given were signed in the coordinator. Since Go 1.26 rsa.GenerateKey
// ignores its reader, so the primes are drawn here from a seeded ChaCha8.
func snsTestKey(label string) (*rsa.PrivateKey, error) {
	rng := mrand.NewChaCha8(sha256.Sum256([]byte(label)))
	e, one := big.NewInt(65537), big.NewInt(1)
	prime := func() *big.Int {
		buf := make([]byte, 128)
		for {
			_, _ = rng.Read(buf)
			buf[0] |= 0xc0 // the top two bits set: p·q has exactly 2048 bits
			buf[len(buf)-1] |= 1
			p := new(big.Int).SetBytes(buf)
			if p.ProbablyPrime(20) && new(big.Int).GCD(nil, nil, e, new(big.Int).Sub(p, one)).Cmp(one) == 0 {
				return p
			}
		}
	}
	p, q := prime(), prime()
	phi := new(big.Int).Mul(new(big.Int).Sub(p, one), new(big.Int).Sub(q, one))
	key := &rsa.PrivateKey{
		PublicKey: rsa.PublicKey{N: new(big.Int).Mul(p, q), E: 65537},
		D:         new(big.Int).ModInverse(e, phi),
		Primes:    []*big.Int{p, q},
	}
	key.Precompute()
	return key, key.Validate()
}

func snsPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// snsServer plays the AWS endpoints over TLS on 127.0.0.1 and records
// every request it receives.
type snsServer struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []string // "GET /path?query"
}

func (s *snsServer) record(r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, r.Method+" "+r.URL.RequestURI())
}

// Requests returns every request so far.
func (s *snsServer) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reqs...)
}

// Count returns how many requests asked for path.
func (s *snsServer) Count(path string) int {
	n := 0
	for _, r := range s.Requests() {
		_, uri, _ := strings.Cut(r, " ")
		if p, _, _ := strings.Cut(uri, "?"); p == path {
			n++
		}
	}
	return n
}

// elsewhere returns a URL for path on the same server under another host
// name (localhost), which the test host pattern does not allow: a request
// made anyway would reach this server and be counted.
func (s *snsServer) elsewhere(path string) string {
	return strings.Replace(s.URL, "127.0.0.1", "localhost", 1) + path
}

func newSNSServer(tb testing.TB, pki *snsPKI) *snsServer {
	s := &snsServer{}
	serve := func(body []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) }
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+snsCertPath, serve(pki.certPEM))
	mux.Handle("GET /c.pem", serve(pki.certPEM))
	mux.Handle("GET /expired.pem", serve(pki.expiredPEM))
	mux.Handle("GET /untrusted.pem", serve(pki.untrustedPEM))
	mux.Handle("GET /huge.pem", serve(bytes.Repeat(pki.certPEM, 100)))
	mux.Handle("GET /busy.pem", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "slow down", http.StatusServiceUnavailable)
	}))
	mux.Handle("GET /redirect.pem", http.RedirectHandler(snsCertPath, http.StatusFound))
	mux.Handle("GET /confirm", serve([]byte(`<ConfirmSubscriptionResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/">`+
		`<ConfirmSubscriptionResult><SubscriptionArn>`+snsTopic+`:4f1c2b9e-7d3a-4c8e-9b16-0a5d2e7f8c31</SubscriptionArn></ConfirmSubscriptionResult>`+
		`</ConfirmSubscriptionResponse>`)))
	mux.Handle("GET /confirm-fails", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "internal error", http.StatusInternalServerError)
	}))
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.record(r)
		if body, ok := pki.served[r.URL.Path]; ok {
			_, _ = w.Write(body)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/certs-") {
			// Any number of distinct URLs for one certificate.
			_, _ = w.Write(pki.certPEM)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{pki.tlsCert}}
	s.StartTLS()
	tb.Cleanup(s.Close)
	return s
}

// snsEnv is one verifier wired to its own server.
type snsEnv struct {
	pki    *snsPKI
	srv    *snsServer
	v      *provider.SNS
	caFile string
	base   string // scheme and host of the URLs in messages
}

// at returns an absolute URL on the server for a path.
func (e *snsEnv) at(path string) string { return e.base + path }

// pin makes the verifier reach this env's server whatever port a URL names,
// and makes message URLs name none ("https://127.0.0.1/…"), so a message
// signed in one process verifies in another (fuzz workers are processes of
// their own, each with its own server).
func (e *snsEnv) pin() {
	addr := e.srv.Listener.Addr().String()
	e.v.HTTPClient = &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: e.pki.caPool},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}}
	e.base = "https://127.0.0.1"
}

// pinAnyHost makes the verifier reach this env's server whatever host and
// port a URL names, and check the server's TLS certificate as 127.0.0.1's:
// a URL on sns.us-east-1.amazonaws.com, or on any host a pattern wrongly
// lets through, then reaches the test server, where the request is counted.
func (e *snsEnv) pinAnyHost() {
	addr := e.srv.Listener.Addr().String()
	e.v.HTTPClient = &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: e.pki.caPool, ServerName: "127.0.0.1"},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}}
}

// newSNSEnv starts a server and builds a verifier that allows the test
// topic, trusts the test CA and accepts certificates and subscriptions on
// 127.0.0.1 only. Extra options override the defaults ("" deletes one).
func newSNSEnv(tb testing.TB, extra map[string]string) *snsEnv {
	tb.Helper()
	pki, err := testSNSPKI()
	if err != nil {
		tb.Fatal(err)
	}
	e := &snsEnv{pki: pki, srv: newSNSServer(tb, pki), caFile: filepath.Join(tb.TempDir(), "ca.pem")}
	e.base = e.srv.URL
	if err := os.WriteFile(e.caFile, pki.caPEM, 0o600); err != nil {
		tb.Fatal(err)
	}
	opts := map[string]string{"topic_arns": snsTopic, "cert_host_pattern": `^127\.0\.0\.1$`, "trust_ca_file": e.caFile}
	for k, v := range extra {
		if v == "" {
			delete(opts, k)
		} else {
			opts[k] = v
		}
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.caPool}}}
	if e.v, err = provider.NewSNS(opts, client); err != nil {
		tb.Fatal(err)
	}
	return e
}

// notification is a v1 SES bounce Notification signed at `at`, with no Subject.
func (e *snsEnv) notification(at time.Time) map[string]string {
	return map[string]string{
		"Type":      "Notification",
		"MessageId": "5a1b2c3d-4e5f-5061-8273-94a5b6c7d8e9",
		"TopicArn":  snsTopic,
		"Message": `{"notificationType":"Bounce","bounce":{"bounceType":"Transient","bounceSubType":"MailboxFull",` +
			`"bouncedRecipients":[{"emailAddress":"full@example.com"}],"timestamp":"2025-03-01T11:59:59.000Z"},` +
			`"mail":{"timestamp":"2025-03-01T11:59:58.000Z","messageId":"0100019500000000-test-bounce-000000","source":"orders@example.com"}}`,
		"Timestamp":        at.UTC().Format(snsTimeLayout),
		"SignatureVersion": "1",
		"SigningCertURL":   e.at(snsCertPath),
		"UnsubscribeURL":   e.at("/?Action=Unsubscribe&SubscriptionArn=" + snsTopic + ":sub"),
	}
}

// confirmation is a v1 SubscriptionConfirmation (or another confirmation
// type) whose SubscribeURL is the server's /confirm.
func (e *snsEnv) confirmation(typ string, at time.Time) map[string]string {
	const token = "2336412f37fb687f5d51e6e2425ba1f2d9c3a1e4b7f60c58d2e91a3b4c5d6e7f"
	return map[string]string{
		"Type":             typ,
		"MessageId":        "165545c9-2a5c-472c-8df2-7ff2be2b3b1b",
		"Token":            token,
		"TopicArn":         snsTopic,
		"Message":          "You have chosen to subscribe to the topic " + snsTopic + ".\nTo confirm the subscription, visit the SubscribeURL included in this message.",
		"SubscribeURL":     e.at("/confirm?Action=ConfirmSubscription&TopicArn=" + snsTopic + "&Token=" + token),
		"Timestamp":        at.UTC().Format(snsTimeLayout),
		"SignatureVersion": "1",
		"SigningCertURL":   e.at(snsCertPath),
	}
}

// fixture loads an SNS envelope from events/sns/ and points it at the
// server, timestamped `at` (its Signature is a placeholder until signed).
func (e *snsEnv) fixture(tb testing.TB, name string, at time.Time) map[string]string {
	tb.Helper()
	raw, err := os.ReadFile("../../events/sns/" + name)
	if err != nil {
		tb.Fatal(err)
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	m["SigningCertURL"] = e.at(snsCertPath)
	m["Timestamp"] = at.UTC().Format(snsTimeLayout)
	if m["SubscribeURL"] != "" {
		m["SubscribeURL"] = e.at("/confirm?Action=ConfirmSubscription&TopicArn=" + m["TopicArn"] + "&Token=" + m["Token"])
	}
	return m
}

// snsStringToSign is AWS's documented canonical string, written here
// independently of the verifier: "Name\nValue\n" for the type's fields in
// byte order, Subject only when the message has one.
func snsStringToSign(m map[string]string) []byte {
	keys := []string{"Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"}
	if m["Type"] == "Notification" {
		keys = []string{"Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"}
	}
	var b bytes.Buffer
	for _, k := range keys {
		if v, ok := m[k]; ok {
			fmt.Fprintf(&b, "%s\n%s\n", k, v)
		}
	}
	return b.Bytes()
}

// snsSign sets m's Signature, SHA1withRSA for SignatureVersion "1" and
// SHA256withRSA otherwise (PKCS #1 v1.5), and returns the JSON body.
func snsSign(tb testing.TB, m map[string]string, key *rsa.PrivateKey) []byte {
	tb.Helper()
	m = maps.Clone(m)
	data := snsStringToSign(m)
	var sig []byte
	var err error
	if m["SignatureVersion"] == "1" {
		sum := sha1.Sum(data)
		sig, err = rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA1, sum[:])
	} else {
		sum := sha256.Sum256(data)
		sig, err = rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	}
	if err != nil {
		tb.Fatal(err)
	}
	m["Signature"] = base64.StdEncoding.EncodeToString(sig)
	body, err := json.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// snsWith returns a copy of m with fields set ("\x00" deletes one).
func snsWith(m map[string]string, kv ...string) map[string]string {
	m = maps.Clone(m)
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "\x00" {
			delete(m, kv[i])
		} else {
			m[kv[i]] = kv[i+1]
		}
	}
	return m
}

// snsReencode parses a signed body, lets edit change it, and writes it again
// (indented: a re-serialisation that alone must not matter).
func snsReencode(tb testing.TB, body []byte, edit func(map[string]any)) []byte {
	tb.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		tb.Fatal(err)
	}
	if edit != nil {
		edit(m)
	}
	out, err := json.MarshalIndent(m, "", "    ")
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

func snsRequest(body []byte) provider.Request {
	return provider.Request{Headers: map[string]string{"content-type": "text/plain; charset=UTF-8"}, Body: body}
}

func TestSNSVerifySignature(t *testing.T) {
	pki, err := testSNSPKI()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		// body builds the delivery; the message is signed with pki.key
		// unless the case signs it otherwise.
		body      func(t *testing.T, e *snsEnv) []byte
		headers   map[string]string
		tolerance time.Duration
		wantErr   error // nil: verified
		// wantRequests is the number of requests the server must see; -1
		// means do not check. Every refusal of a URL must make none.
		wantRequests int
	}{
		{
			name: "v1 notification with a Subject",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "Subject", "Amazon SES Email Event Notification"), pki.key)
			},
			wantRequests: 1,
		},
		{
			name: "v2 notification without a Subject",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "SignatureVersion", "2"), pki.key)
			},
			wantRequests: 1,
		},
		{
			name: "v2 notification with an empty Subject (signed as present)",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "SignatureVersion", "2", "Subject", ""), pki.key)
			},
			wantRequests: 1,
		},
		{
			name: "Subject null is no Subject",
			body: func(t *testing.T, e *snsEnv) []byte {
				body := snsSign(t, e.notification(now), pki.key)
				return append([]byte(`{"Subject":null,`), body[1:]...)
			},
			wantRequests: 1,
		},
		{
			name: "Message with newlines, quotes and non-ASCII text",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "Message", "line one\nline \"two\"\r\n\tGrüße <&> 🚀"), pki.key)
			},
			wantRequests: 1,
		},
		{
			name: "v1 SubscriptionConfirmation",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, e.confirmation("SubscriptionConfirmation", now), pki.key)
			},
			wantRequests: 1, // the certificate; confirming is the caller's move
		},
		{
			name: "v2 UnsubscribeConfirmation",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.confirmation("UnsubscribeConfirmation", now), "SignatureVersion", "2"), pki.key)
			},
			wantRequests: 1,
		},
		{
			name: "re-serialised JSON with the same values",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsReencode(t, snsSign(t, snsWith(e.notification(now), "Subject", "s"), pki.key), nil)
			},
			wantRequests: 1,
		},
		{
			name: "SNS headers that agree with the body",
			body: func(t *testing.T, e *snsEnv) []byte { return snsSign(t, e.notification(now), pki.key) },
			headers: map[string]string{
				"x-amz-sns-message-type": "Notification", "x-amz-sns-topic-arn": snsTopic,
				"x-amz-sns-message-id": "5a1b2c3d-4e5f-5061-8273-94a5b6c7d8e9",
			},
			wantRequests: 1,
		},
		{
			name:         "Timestamp exactly one hour old (default SNS tolerance)",
			body:         func(t *testing.T, e *snsEnv) []byte { return snsSign(t, e.notification(now.Add(-time.Hour)), pki.key) },
			wantRequests: 1,
		},
		{
			name:         "Timestamp one hour ahead",
			body:         func(t *testing.T, e *snsEnv) []byte { return snsSign(t, e.notification(now.Add(time.Hour)), pki.key) },
			wantRequests: 1,
		},
		{
			name:         "wrong key",
			body:         func(t *testing.T, e *snsEnv) []byte { return snsSign(t, e.notification(now), pki.wrongKey) },
			wantErr:      provider.ErrBadSignature,
			wantRequests: 1,
		},
		{
			name: "signed by a certificate no trusted CA issued",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "SigningCertURL", e.at("/untrusted.pem")), pki.wrongKey)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 1,
		},
		{
			name: "expired certificate",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "SigningCertURL", e.at("/expired.pem")), pki.key)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 1,
		},
		{
			name: "tampered Message (one byte changed)",
			body: func(t *testing.T, e *snsEnv) []byte {
				body := snsSign(t, e.notification(now), pki.key)
				return bytes.Replace(body, []byte("Transient"), []byte("Permanent"), 1)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 1,
		},
		{
			name: "re-serialised JSON that changes the Subject",
			body: func(t *testing.T, e *snsEnv) []byte {
				body := snsSign(t, snsWith(e.notification(now), "Subject", "s"), pki.key)
				return snsReencode(t, body, func(m map[string]any) { m["Subject"] = "t" })
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 1,
		},
		{
			name: "re-serialised JSON that drops the Subject",
			body: func(t *testing.T, e *snsEnv) []byte {
				body := snsSign(t, snsWith(e.notification(now), "Subject", "s"), pki.key)
				return snsReencode(t, body, func(m map[string]any) { delete(m, "Subject") })
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 1,
		},
		{
			name: "re-serialised JSON that moves the Type",
			body: func(t *testing.T, e *snsEnv) []byte {
				body := snsSign(t, e.confirmation("UnsubscribeConfirmation", now), pki.key)
				return snsReencode(t, body, func(m map[string]any) { m["Type"] = "SubscriptionConfirmation" })
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 1,
		},
		{
			// Regression: the same canonical string with the Subject folded
			// into the MessageId would keep the signature valid for a new
			// event id. Newlines are refused outside Message.
			name: "Subject re-framed into the MessageId",
			body: func(t *testing.T, e *snsEnv) []byte {
				m := snsWith(e.notification(now), "Subject", "s")
				body := snsSign(t, m, pki.key)
				return snsReencode(t, body, func(j map[string]any) {
					j["MessageId"] = m["MessageId"] + "\nSubject\ns"
					delete(j, "Subject")
				})
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "a second Message after the signed one",
			body: func(t *testing.T, e *snsEnv) []byte {
				body := snsSign(t, e.notification(now), pki.key)
				return append(body[:len(body)-1], []byte(`,"Message":"{\"notificationType\":\"Delivery\"}"}`)...)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "a lower-case message beside the signed one",
			body: func(t *testing.T, e *snsEnv) []byte {
				body := snsSign(t, e.notification(now), pki.key)
				return append(body[:len(body)-1], []byte(`,"message":"other"}`)...)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "Timestamp one hour and a second old",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, e.notification(now.Add(-time.Hour-time.Second)), pki.key)
			},
			wantErr:      provider.ErrStale,
			wantRequests: 1,
		},
		{
			name: "Timestamp one hour and a second ahead",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, e.notification(now.Add(time.Hour+time.Second)), pki.key)
			},
			wantErr:      provider.ErrStale,
			wantRequests: 1,
		},
		{
			name: "source tolerance of 5 minutes refuses 6 minutes old",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, e.notification(now.Add(-6*time.Minute)), pki.key)
			},
			tolerance:    5 * time.Minute,
			wantErr:      provider.ErrStale,
			wantRequests: 1,
		},
		{
			name: "Timestamp not RFC 3339",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "Timestamp", now.Format(time.RFC1123)), pki.key)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "foreign TopicArn, validly signed",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "TopicArn", snsOtherTopic), pki.key)
			},
			wantErr:      provider.ErrForeignTopic,
			wantRequests: 0,
		},
		{
			name: "SubscriptionConfirmation for a foreign topic",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.confirmation("SubscriptionConfirmation", now), "TopicArn", snsOtherTopic), pki.key)
			},
			wantErr:      provider.ErrForeignTopic,
			wantRequests: 0,
		},
		{
			name: "SignatureVersion 3",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "SignatureVersion", "3"), pki.key)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "no SignatureVersion",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "SignatureVersion", "\x00"), pki.key)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "cert URL over http",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "SigningCertURL", strings.Replace(e.at(snsCertPath), "https:", "http:", 1)), pki.key)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "cert URL on a foreign host",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "SigningCertURL", e.srv.elsewhere(snsCertPath)), pki.key)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "cert URL host that only starts with the allowed one",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "SigningCertURL", "https://127.0.0.1.attacker.example"+snsCertPath), pki.key)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "cert URL without .pem",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "SigningCertURL", e.at("/SimpleNotificationService-test.crt")), pki.key)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "cert URL with .pem only in the query",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "SigningCertURL", e.at("/cert?file=x.pem")), pki.key)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "cert URL with user info",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "SigningCertURL", strings.Replace(e.at(snsCertPath), "https://", "https://localhost@", 1)), pki.key)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "cert URL not found",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "SigningCertURL", e.at("/missing.pem")), pki.key)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 1,
		},
		{
			name: "cert URL redirects (not followed)",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "SigningCertURL", e.at("/redirect.pem")), pki.key)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 1,
		},
		{
			name: "certificate over the size cap",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "SigningCertURL", e.at("/huge.pem")), pki.key)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 1,
		},
		{
			name: "certificate host answers 503",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "SigningCertURL", e.at("/busy.pem")), pki.key)
			},
			wantErr:      provider.ErrCertUnavailable,
			wantRequests: 1,
		},
		{
			name: "SubscribeURL on a foreign host",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.confirmation("SubscriptionConfirmation", now), "SubscribeURL", e.srv.elsewhere("/confirm?Token=x")), pki.key)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "SubscribeURL over http",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.confirmation("SubscriptionConfirmation", now), "SubscribeURL", strings.Replace(e.at("/confirm?Token=x"), "https:", "http:", 1)), pki.key)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "SubscriptionConfirmation without a Token",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.confirmation("SubscriptionConfirmation", now), "Token", "\x00"), pki.key)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "unknown Type",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "Type", "Announcement"), pki.key)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name:         "x-amz-sns-message-type header disagrees with the body",
			body:         func(t *testing.T, e *snsEnv) []byte { return snsSign(t, e.notification(now), pki.key) },
			headers:      map[string]string{"x-amz-sns-message-type": "SubscriptionConfirmation"},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "Subject over its size bound",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "Subject", strings.Repeat("s", 513)), pki.key)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "Message over 256 KiB",
			body: func(t *testing.T, e *snsEnv) []byte {
				return snsSign(t, snsWith(e.notification(now), "Message", strings.Repeat("m", 256<<10+1)), pki.key)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "MessageId not a string",
			body: func(t *testing.T, e *snsEnv) []byte {
				body := snsSign(t, e.notification(now), pki.key)
				return snsReencode(t, body, func(m map[string]any) { m["MessageId"] = 42 })
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "Signature not base64",
			body: func(t *testing.T, e *snsEnv) []byte {
				body := snsSign(t, e.notification(now), pki.key)
				return snsReencode(t, body, func(m map[string]any) { m["Signature"] = "not base64!" })
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "trailing data after the message",
			body: func(t *testing.T, e *snsEnv) []byte {
				return append(snsSign(t, e.notification(now), pki.key), []byte(`{"Type":"Notification"}`)...)
			},
			wantErr:      provider.ErrBadSignature,
			wantRequests: 0,
		},
		{
			name: "no Signature",
			body: func(t *testing.T, e *snsEnv) []byte {
				body := snsSign(t, e.notification(now), pki.key)
				return snsReencode(t, body, func(m map[string]any) { delete(m, "Signature") })
			},
			wantErr:      provider.ErrNotSigned,
			wantRequests: 0,
		},
		{
			name:         "body not JSON",
			body:         func(*testing.T, *snsEnv) []byte { return []byte("Type=Notification") },
			wantErr:      provider.ErrNotSigned,
			wantRequests: 0,
		},
		{
			name:         "JSON array",
			body:         func(*testing.T, *snsEnv) []byte { return []byte(`[{"Type":"Notification"}]`) },
			wantErr:      provider.ErrNotSigned,
			wantRequests: 0,
		},
		{
			name:         "empty body",
			body:         func(*testing.T, *snsEnv) []byte { return nil },
			wantErr:      provider.ErrNotSigned,
			wantRequests: 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newSNSEnv(t, nil)
			req := snsRequest(tc.body(t, e))
			maps.Copy(req.Headers, tc.headers)
			got, err := e.v.Verify(t.Context(), req, provider.Config{Tolerance: tc.tolerance, Now: fixedClock(now)})
			t.Logf("Verify error: %v", err)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Verify error = %v, want %v", err, tc.wantErr)
				}
				if len(got.Events) != 0 || got.Unidentified != "" || got.Confirm != nil {
					t.Errorf("Verify returned %+v with an error", got)
				}
			} else {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if len(got.Events) != 1 || got.Events[0].EventID == "" {
					t.Errorf("Verify = %+v, want one identified event", got)
				}
			}
			if reqs := e.srv.Requests(); tc.wantRequests >= 0 && len(reqs) != tc.wantRequests {
				t.Errorf("server saw %d requests %v, want %d", len(reqs), reqs, tc.wantRequests)
			}
		})
	}
}

func TestSNSVerifyIdentity(t *testing.T) {
	pki, err := testSNSPKI()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		message func(t *testing.T, e *snsEnv) map[string]string
		want    provider.Identity
		confirm bool
	}{
		{
			name:    "SES bounce (fixture)",
			message: func(t *testing.T, e *snsEnv) map[string]string { return e.fixture(t, "ses-bounce.json", now) },
			want: provider.Identity{
				EventID: "9b3e7c1d-2f4a-5b6c-8d9e-0a1b2c3d4e5f", Type: "ses.bounce",
				Subject:      "0100019ad6c3b8f0-2f4e6a1d-7c5b-4e2a-9d3f-1b8c0a6e5d47-000000",
				ProviderTime: time.Date(2026, 11, 30, 11, 59, 57, 0, time.UTC),
				Attributes:   map[string]string{"topic_arn": snsTopic, "bounce_type": "Permanent", "bounce_sub_type": "General"},
			},
		},
		{
			name:    "SES complaint, event publishing format (fixture)",
			message: func(t *testing.T, e *snsEnv) map[string]string { return e.fixture(t, "ses-complaint.json", now) },
			want: provider.Identity{
				EventID: "2c4d6e8f-1a3b-5c7d-9e0f-2a4b6c8d0e1f", Type: "ses.complaint",
				Subject:      "0100019ad6cf77e3-61a2b3c4-d5e6-4f70-8192-a3b4c5d6e7f8-000000",
				ProviderTime: time.Date(2026, 11, 30, 11, 59, 38, 0, time.UTC),
				Attributes:   map[string]string{"topic_arn": snsTopic, "complaint_feedback_type": "abuse"},
			},
		},
		{
			name:    "SES delivery (fixture)",
			message: func(t *testing.T, e *snsEnv) map[string]string { return e.fixture(t, "ses-delivery.json", now) },
			want: provider.Identity{
				EventID: "7e5d3c1b-9a8f-5e6d-4c3b-2a1f0e9d8c7b", Type: "ses.delivery",
				Subject:      "0100019ad6c1f2a3-0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9-000000",
				ProviderTime: time.Date(2026, 11, 30, 11, 59, 50, 0, time.UTC),
				Attributes:   map[string]string{"topic_arn": snsTopic},
			},
		},
		{
			name: "SES DeliveryDelay with a Subject",
			message: func(t *testing.T, e *snsEnv) map[string]string {
				return snsWith(e.notification(now), "Subject", "Amazon SES Email Event Notification",
					"Message", `{"eventType":"DeliveryDelay","mail":{"messageId":"m-1"},"deliveryDelay":{"delayType":"MailboxFull"}}`)
			},
			want: provider.Identity{
				EventID: "5a1b2c3d-4e5f-5061-8273-94a5b6c7d8e9", Type: "ses.deliverydelay", Subject: "m-1",
				ProviderTime: now, // no mail.timestamp: the SNS Timestamp
				Attributes:   map[string]string{"topic_arn": snsTopic, "sns_subject": "Amazon SES Email Event Notification"},
			},
		},
		{
			name: "SES Rendering Failure",
			message: func(t *testing.T, e *snsEnv) map[string]string {
				return snsWith(e.notification(now), "Message", `{"eventType":"Rendering Failure","mail":{"messageId":"m-2","timestamp":"2025-03-01T11:00:00Z"}}`)
			},
			want: provider.Identity{
				EventID: "5a1b2c3d-4e5f-5061-8273-94a5b6c7d8e9", Type: "ses.rendering_failure", Subject: "m-2",
				ProviderTime: time.Date(2025, 3, 1, 11, 0, 0, 0, time.UTC),
				Attributes:   map[string]string{"topic_arn": snsTopic},
			},
		},
		{
			name: "a Message that is not SES JSON",
			message: func(t *testing.T, e *snsEnv) map[string]string {
				return snsWith(e.notification(now), "Message", "hello from a test publish")
			},
			want: provider.Identity{
				EventID: "5a1b2c3d-4e5f-5061-8273-94a5b6c7d8e9", Type: "sns.notification", ProviderTime: now,
				Attributes: map[string]string{"topic_arn": snsTopic},
			},
		},
		{
			name: "SES's own subscription notice is not an SES event",
			message: func(t *testing.T, e *snsEnv) map[string]string {
				return snsWith(e.notification(now), "Message", `{"notificationType":"AmazonSnsSubscriptionSucceeded","message":"You have successfully subscribed"}`)
			},
			want: provider.Identity{
				EventID: "5a1b2c3d-4e5f-5061-8273-94a5b6c7d8e9", Type: "sns.notification", ProviderTime: now,
				Attributes: map[string]string{"topic_arn": snsTopic},
			},
		},
		{
			name: "SubscriptionConfirmation (fixture)",
			message: func(t *testing.T, e *snsEnv) map[string]string {
				return e.fixture(t, "subscription-confirmation.json", now)
			},
			want: provider.Identity{
				EventID: "165545c9-2a5c-472c-8df2-7ff2be2b3b1b", Type: "sns.subscription_confirmation", ProviderTime: now,
				Attributes: map[string]string{"topic_arn": snsTopic},
			},
			confirm: true,
		},
		{
			name:    "UnsubscribeConfirmation",
			message: func(t *testing.T, e *snsEnv) map[string]string { return e.confirmation("UnsubscribeConfirmation", now) },
			want: provider.Identity{
				EventID: "165545c9-2a5c-472c-8df2-7ff2be2b3b1b", Type: "sns.unsubscribe_confirmation", ProviderTime: now,
				Attributes: map[string]string{"topic_arn": snsTopic},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newSNSEnv(t, nil)
			body := snsSign(t, tc.message(t, e), pki.key)
			got, err := e.v.Verify(t.Context(), snsRequest(body), provider.Config{Now: fixedClock(now)})
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if got.Unidentified != "" || len(got.Events) != 1 {
				t.Fatalf("Verify = %+v, want one identified event", got)
			}
			ev := got.Events[0]
			if ev.EventID != tc.want.EventID || ev.Type != tc.want.Type || ev.Subject != tc.want.Subject || ev.DeliveryID != "" {
				t.Errorf("Identity = %+v, want %+v", ev, tc.want)
			}
			if !ev.ProviderTime.Equal(tc.want.ProviderTime) {
				t.Errorf("ProviderTime = %v, want %v", ev.ProviderTime, tc.want.ProviderTime)
			}
			if !maps.Equal(ev.Attributes, tc.want.Attributes) {
				t.Errorf("Attributes = %v, want %v", ev.Attributes, tc.want.Attributes)
			}
			if ev.Payload != nil {
				t.Errorf("Payload = %q, want nil (the whole envelope)", ev.Payload)
			}
			if (got.Confirm != nil) != tc.confirm {
				t.Errorf("Confirm set = %v, want %v", got.Confirm != nil, tc.confirm)
			}
			if n := e.srv.Count("/confirm"); n != 0 {
				t.Errorf("Verify itself made %d confirmation requests", n)
			}
		})
	}
}

func TestSNSConfirmSubscription(t *testing.T) {
	pki, err := testSNSPKI()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("GETs the SubscribeURL exactly once, on the allowed host", func(t *testing.T) {
		e := newSNSEnv(t, nil)
		m := e.fixture(t, "subscription-confirmation.json", now)
		got, err := e.v.Verify(t.Context(), snsRequest(snsSign(t, m, pki.key)), provider.Config{Now: fixedClock(now)})
		if err != nil || got.Confirm == nil {
			t.Fatalf("Verify = %+v, %v; want a Confirm", got, err)
		}
		if err := got.Confirm(t.Context()); err != nil {
			t.Fatalf("Confirm: %v", err)
		}
		_, wantURI, _ := strings.Cut(m["SubscribeURL"], e.base)
		if reqs := e.srv.Requests(); len(reqs) != 2 || reqs[1] != "GET "+wantURI {
			t.Errorf("requests = %v, want the certificate then GET %s", reqs, wantURI)
		}
		if n := e.srv.Count("/confirm"); n != 1 {
			t.Errorf("%d confirmations, want 1", n)
		}
	})
	t.Run("a non-2xx answer is an error", func(t *testing.T) {
		e := newSNSEnv(t, nil)
		m := snsWith(e.confirmation("SubscriptionConfirmation", now), "SubscribeURL", e.at("/confirm-fails?Token=x"))
		got, err := e.v.Verify(t.Context(), snsRequest(snsSign(t, m, pki.key)), provider.Config{Now: fixedClock(now)})
		if err != nil || got.Confirm == nil {
			t.Fatalf("Verify = %+v, %v; want a Confirm", got, err)
		}
		err = got.Confirm(t.Context())
		if err == nil || !strings.Contains(err.Error(), "500") {
			t.Fatalf("Confirm error = %v, want one naming status 500", err)
		}
		if strings.Contains(err.Error(), "Token") {
			t.Errorf("Confirm error %q leaks the SubscribeURL", err)
		}
	})
	t.Run("a SubscribeURL on another host is refused before any request", func(t *testing.T) {
		e := newSNSEnv(t, nil)
		m := snsWith(e.confirmation("SubscriptionConfirmation", now), "SubscribeURL", e.srv.elsewhere("/confirm?Token=x"))
		if _, err := e.v.Verify(t.Context(), snsRequest(snsSign(t, m, pki.key)), provider.Config{Now: fixedClock(now)}); !errors.Is(err, provider.ErrBadSignature) {
			t.Fatalf("Verify error = %v, want ErrBadSignature", err)
		}
		if reqs := e.srv.Requests(); len(reqs) != 0 {
			t.Errorf("requests = %v, want none", reqs)
		}
	})
	t.Run("a SubscribeURL on another port is refused before any request", func(t *testing.T) {
		e := newSNSEnv(t, map[string]string{"cert_host_pattern": ""})
		e.pinAnyHost()
		m := snsWith(e.confirmation("SubscriptionConfirmation", now),
			"SigningCertURL", "https://sns.us-east-1.amazonaws.com"+snsCertPath,
			"SubscribeURL", "https://sns.us-east-1.amazonaws.com:8443/?Action=ConfirmSubscription&Token=x")
		if reqs, err := e.verifyAt(t, m, now); !errors.Is(err, provider.ErrBadSignature) || reqs != 0 {
			t.Fatalf("Verify = %v after %d requests; want ErrBadSignature and none", err, reqs)
		}
	})
	t.Run("subscribe_host_pattern narrower than the certificate hosts", func(t *testing.T) {
		e := newSNSEnv(t, map[string]string{"subscribe_host_pattern": `^sns\.us-east-1\.amazonaws\.com$`})
		m := e.confirmation("SubscriptionConfirmation", now)
		if _, err := e.v.Verify(t.Context(), snsRequest(snsSign(t, m, pki.key)), provider.Config{Now: fixedClock(now)}); !errors.Is(err, provider.ErrBadSignature) {
			t.Fatalf("Verify error = %v, want ErrBadSignature", err)
		}
		if reqs := e.srv.Requests(); len(reqs) != 0 {
			t.Errorf("requests = %v, want none", reqs)
		}
	})
}

func TestSNSCertificateCache(t *testing.T) {
	pki, err := testSNSPKI()
	if err != nil {
		t.Fatal(err)
	}
	verify := func(t *testing.T, e *snsEnv, m map[string]string, at time.Time) {
		t.Helper()
		if _, err := e.v.Verify(t.Context(), snsRequest(snsSign(t, m, pki.key)), provider.Config{Now: fixedClock(at)}); err != nil {
			t.Fatalf("Verify: %v", err)
		}
	}
	t.Run("two messages, one fetch", func(t *testing.T) {
		e := newSNSEnv(t, nil)
		verify(t, e, e.notification(now), now)
		verify(t, e, snsWith(e.notification(now), "MessageId", "second-message", "SignatureVersion", "2"), now.Add(time.Minute))
		if n := e.srv.Count(snsCertPath); n != 1 {
			t.Errorf("%d certificate fetches, want 1", n)
		}
	})
	t.Run("refetched after an hour", func(t *testing.T) {
		e := newSNSEnv(t, nil)
		verify(t, e, e.notification(now), now)
		later := now.Add(time.Hour + time.Minute)
		verify(t, e, e.notification(later), later)
		if n := e.srv.Count(snsCertPath); n != 2 {
			t.Errorf("%d certificate fetches, want 2", n)
		}
	})
	t.Run("refused messages do not poison it", func(t *testing.T) {
		e := newSNSEnv(t, nil)
		if _, err := e.v.Verify(t.Context(), snsRequest(snsSign(t, e.notification(now), pki.wrongKey)), provider.Config{Now: fixedClock(now)}); !errors.Is(err, provider.ErrBadSignature) {
			t.Fatalf("wrong key: %v", err)
		}
		verify(t, e, e.notification(now), now)
		if n := e.srv.Count(snsCertPath); n != 1 {
			t.Errorf("%d certificate fetches, want 1", n)
		}
	})
	t.Run("bounded: the oldest of 33 URLs is evicted", func(t *testing.T) {
		e := newSNSEnv(t, nil)
		for i := range 33 { // 6 s apart: within the fetch budget
			at := now.Add(time.Duration(i) * 6 * time.Second)
			verify(t, e, snsWith(e.notification(at), "SigningCertURL", e.at(fmt.Sprintf("/certs-%d.pem", i))), at)
		}
		at := now.Add(33 * 6 * time.Second)
		verify(t, e, snsWith(e.notification(at), "SigningCertURL", e.at("/certs-32.pem")), at) // newest: cached
		verify(t, e, snsWith(e.notification(at), "SigningCertURL", e.at("/certs-0.pem")), at)  // oldest: evicted
		if n := e.srv.Count("/certs-32.pem"); n != 1 {
			t.Errorf("newest URL fetched %d times, want 1", n)
		}
		if n := e.srv.Count("/certs-0.pem"); n != 2 {
			t.Errorf("oldest URL fetched %d times, want 2", n)
		}
	})
}

func TestNewSNSOptions(t *testing.T) {
	pki, err := testSNSPKI()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(caFile, pki.caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		opts     map[string]string
		wantName string // "": valid; else the option the error must name
	}{
		{name: "one topic", opts: map[string]string{"topic_arns": snsTopic}},
		{name: "two topics with spaces", opts: map[string]string{"topic_arns": snsTopic + ", " + snsOtherTopic}},
		{name: "China partition", opts: map[string]string{"topic_arns": "arn:aws-cn:sns:cn-north-1:123456789012:ses"}},
		{name: "all options", opts: map[string]string{
			"topic_arns": snsTopic, "cert_host_pattern": `^127\.0\.0\.1$`, "subscribe_host_pattern": `^localhost$`,
			"trust_ca_file": caFile, "intermediates_file": caFile, "account_metadata_key": "account_id",
		}},
		{name: "no options", opts: nil, wantName: "topic_arns"},
		{name: "empty topic_arns", opts: map[string]string{"topic_arns": " , "}, wantName: "topic_arns"},
		{name: "wildcard topic", opts: map[string]string{"topic_arns": "*"}, wantName: "topic_arns"},
		{name: "wildcard among topics", opts: map[string]string{"topic_arns": snsTopic + ",arn:aws:sns:us-east-1:123456789012:*"}, wantName: "topic_arns"},
		{name: "not an ARN", opts: map[string]string{"topic_arns": "ses-notifications"}, wantName: "topic_arns"},
		{name: "unknown option", opts: map[string]string{"topic_arns": snsTopic, "secret": "x"}, wantName: "secret"},
		{name: "bad cert_host_pattern", opts: map[string]string{"topic_arns": snsTopic, "cert_host_pattern": `^sns\.(`}, wantName: "cert_host_pattern"},
		{name: "unanchored cert_host_pattern", opts: map[string]string{"topic_arns": snsTopic, "cert_host_pattern": `amazonaws\.com`}, wantName: "cert_host_pattern"},
		{name: "bad subscribe_host_pattern", opts: map[string]string{"topic_arns": snsTopic, "subscribe_host_pattern": `^[$`}, wantName: "subscribe_host_pattern"},
		{name: "missing trust_ca_file", opts: map[string]string{"topic_arns": snsTopic, "trust_ca_file": filepath.Join(dir, "nope.pem")}, wantName: "trust_ca_file"},
		{name: "trust_ca_file without a certificate", opts: map[string]string{"topic_arns": snsTopic, "trust_ca_file": notPEM}, wantName: "trust_ca_file"},
		{name: "missing intermediates_file", opts: map[string]string{"topic_arns": snsTopic, "intermediates_file": filepath.Join(dir, "nope.pem")}, wantName: "intermediates_file"},
		{name: "intermediates_file without a certificate", opts: map[string]string{"topic_arns": snsTopic, "intermediates_file": notPEM}, wantName: "intermediates_file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := provider.New("sns", tc.opts)
			if tc.wantName == "" {
				if err != nil || v == nil {
					t.Fatalf("New = %v, %v; want a verifier", v, err)
				}
				return
			}
			if !errors.Is(err, provider.ErrOptions) || !strings.Contains(err.Error(), tc.wantName) {
				t.Fatalf("New error = %v, want ErrOptions naming %q", err, tc.wantName)
			}
			if v != nil {
				t.Errorf("New returned %T with an error", v)
			}
		})
	}
}

// TestSNSThroughNew is the production path: provider.New with only options,
// its own HTTP client trusting trust_ca_file for TLS and for the chain.
func TestSNSThroughNew(t *testing.T) {
	pki, err := testSNSPKI()
	if err != nil {
		t.Fatal(err)
	}
	e := newSNSEnv(t, nil)
	v, err := provider.New("sns", map[string]string{"topic_arns": snsTopic, "cert_host_pattern": `^127\.0\.0\.1$`, "trust_ca_file": e.caFile})
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.Verify(t.Context(), snsRequest(snsSign(t, e.fixture(t, "ses-bounce.json", now), pki.key)), provider.Config{Now: fixedClock(now)})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if len(got.Events) != 1 || got.Events[0].Type != "ses.bounce" {
		t.Errorf("Verify = %+v", got)
	}
	if n := e.srv.Count(snsCertPath); n != 1 {
		t.Errorf("%d certificate fetches, want 1", n)
	}

	// The default pattern is AWS's: the test host is refused without a request.
	strict, err := provider.New("sns", map[string]string{"topic_arns": snsTopic, "trust_ca_file": e.caFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := strict.Verify(t.Context(), snsRequest(snsSign(t, e.notification(now), pki.key)), provider.Config{Now: fixedClock(now)}); !errors.Is(err, provider.ErrBadSignature) {
		t.Fatalf("default pattern accepted %s: %v", e.srv.URL, err)
	}
	if n := len(e.srv.Requests()); n != 1 {
		t.Errorf("server saw %d requests, want still 1", n)
	}
}

// TestSNSSystemRootsCheckTheCertificate is the production trust path (no
// trust_ca_file): the certificate's chain is checked against the system
// roots, not only the TLS connection that brought it. Before, any RSA
// certificate within its validity served from an allowed host verified a
// message signed with its key: the owner of a bucket named "sns" could
// serve their own from sns.s3.amazonaws.com, over AWS's valid TLS. Here
// the server's TLS is trusted (the test client trusts the test CA) but the
// certificate it serves chains to no system root.
func TestSNSSystemRootsCheckTheCertificate(t *testing.T) {
	e := newSNSEnv(t, map[string]string{"trust_ca_file": ""})
	for _, path := range []string{snsCertPath, "/expired.pem", "/untrusted.pem"} {
		body := snsSign(t, snsWith(e.notification(now), "SigningCertURL", e.at(path)), e.pki.key)
		got, err := e.v.Verify(t.Context(), snsRequest(body), provider.Config{Now: fixedClock(now)})
		if !errors.Is(err, provider.ErrBadSignature) {
			t.Errorf("%s: Verify = %+v, %v; want ErrBadSignature", path, got, err)
		}
	}
}

// verifyAt signs m with the test key and verifies it at `at`; it returns
// how many requests the server saw meanwhile, and Verify's error.
func (e *snsEnv) verifyAt(t *testing.T, m map[string]string, at time.Time) (int, error) {
	t.Helper()
	before := len(e.srv.Requests())
	got, err := e.v.Verify(t.Context(), snsRequest(snsSign(t, m, e.pki.key)), provider.Config{Now: fixedClock(at)})
	if err != nil && (len(got.Events) != 0 || got.Unidentified != "" || got.Confirm != nil) {
		t.Errorf("Verify returned %+v with error %v", got, err)
	}
	return len(e.srv.Requests()) - before, err
}

// TestSNSDefaultCertHostPattern: a bucket named "sns" has the S3 hosts
// sns.s3.amazonaws.com, sns.s3-external-1.amazonaws.com, … which the first
// default pattern matched, and S3 serves them with valid AWS TLS
// certificates. Only sns.<region>.amazonaws.com (.cn for China's regions)
// is allowed; anything else is refused before any request.
func TestSNSDefaultCertHostPattern(t *testing.T) {
	tests := []struct {
		host string
		ok   bool
	}{
		{"sns.us-east-1.amazonaws.com", true},
		{"sns.eu-west-3.amazonaws.com", true},
		{"sns.ap-southeast-5.amazonaws.com", true},
		{"sns.ca-west-1.amazonaws.com", true},
		{"sns.us-gov-west-1.amazonaws.com", true},
		{"sns.cn-north-1.amazonaws.com.cn", true},
		{"sns.cn-northwest-1.amazonaws.com.cn", true},
		{"sns.s3.amazonaws.com", false},
		{"sns.s3-external-1.amazonaws.com", false},
		{"sns.s3-us-west-2.amazonaws.com", false},
		{"sns.s3-accelerate.amazonaws.com", false},
		{"sns.s3-website-us-east-1.amazonaws.com", false},
		{"sns.s3.us-east-1.amazonaws.com", false},
		{"sns.execute-api.amazonaws.com", false},
		{"sns.us-east-1.amazonaws.com.cn", false}, // .cn only for a cn- region
		{"sns.cn-north-1.amazonaws.com", false},   // and a cn- region only with .cn
		{"sns.useast1.amazonaws.com", false},
		{"sns.us-east-1.amazonaws.com.attacker.example", false},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			e := newSNSEnv(t, map[string]string{"cert_host_pattern": ""})
			e.pinAnyHost()
			m := snsWith(e.notification(now), "SigningCertURL", "https://"+tc.host+snsCertPath)
			reqs, err := e.verifyAt(t, m, now)
			if tc.ok {
				if err != nil || reqs != 1 {
					t.Fatalf("Verify = %v after %d requests; want verified after 1", err, reqs)
				}
				return
			}
			if !errors.Is(err, provider.ErrBadSignature) || reqs != 0 {
				t.Fatalf("Verify = %v after %d requests; want ErrBadSignature and no request", err, reqs)
			}
		})
	}
}

// TestSNSHostPatternMatchesTheWholeHost: "^a|b$" starts with ^ and ends
// with $ but leaves each branch open at one end, so a check of the anchors
// alone is not enough: a pattern is matched against the whole host.
func TestSNSHostPatternMatchesTheWholeHost(t *testing.T) {
	const pattern = `^127\.0\.0\.1|sns\.example$`
	tests := []struct {
		host string
		ok   bool
	}{
		{"127.0.0.1", true},
		{"sns.example", true},
		{"127.0.0.1.attacker.example", false},
		{"attacker-sns.example", false},
		{"attacker.sns.example", false},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			e := newSNSEnv(t, map[string]string{"cert_host_pattern": pattern})
			e.pinAnyHost()
			m := snsWith(e.notification(now), "SigningCertURL", "https://"+tc.host+snsCertPath)
			reqs, err := e.verifyAt(t, m, now)
			if tc.ok {
				if err != nil || reqs != 1 {
					t.Fatalf("Verify = %v after %d requests; want verified after 1", err, reqs)
				}
				return
			}
			if !errors.Is(err, provider.ErrBadSignature) || reqs != 0 {
				t.Fatalf("Verify = %v after %d requests; want ErrBadSignature and no request", err, reqs)
			}
		})
	}
}

// TestSNSCertURLPortAndPath: on an allowed host, a SigningCertURL may name
// only port 443 and one .pem file at the root, spelled without escapes (AWS
// serves /SimpleNotificationService-<hex>.pem). Anything else is refused
// before any request.
func TestSNSCertURLPortAndPath(t *testing.T) {
	const host = "https://sns.us-east-1.amazonaws.com"
	tests := []struct {
		name, url string
		ok        bool
	}{
		{"AWS's shape", host + snsCertPath, true},
		{"port 443 spelled out", "https://sns.us-east-1.amazonaws.com:443" + snsCertPath, true},
		{"another port", "https://sns.us-east-1.amazonaws.com:8443" + snsCertPath, false},
		{"port 80 over https", "https://sns.us-east-1.amazonaws.com:80" + snsCertPath, false},
		{"a .pem in a folder", host + "/certs/any.pem", false},
		{"dot segments", host + "/a/.." + snsCertPath, false},
		{"an escaped name", host + "/%53impleNotificationService-test.pem", false},
		{"an escaped slash", host + "/a%2Fb.pem", false},
		{"only the extension", host + "/.pem", false},
		{"a query", host + snsCertPath + "?x=1", false},
		{"not .pem", host + "/SimpleNotificationService-test.crt", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newSNSEnv(t, map[string]string{"cert_host_pattern": ""})
			e.pinAnyHost()
			reqs, err := e.verifyAt(t, snsWith(e.notification(now), "SigningCertURL", tc.url), now)
			if tc.ok {
				if err != nil || reqs != 1 {
					t.Fatalf("Verify = %v after %d requests; want verified after 1", err, reqs)
				}
				return
			}
			if !errors.Is(err, provider.ErrBadSignature) || reqs != 0 {
				t.Fatalf("Verify = %v after %d requests; want ErrBadSignature and no request", err, reqs)
			}
		})
	}
}

// TestSNSSigningCertificate: the certificate at an allowed URL must itself
// be SNS's signing certificate: an SNS signing name in its SAN (and its CN,
// when it has one), within its validity at the verifier's clock, and
// chaining to a trusted root, through intermediates served after it or
// configured in intermediates_file. Each message here is signed with the
// key of the certificate served, so only the certificate decides. A refusal
// is ErrBadSignature (the intake's 401, nothing recorded) with a short
// message that says why.
func TestSNSSigningCertificate(t *testing.T) {
	pki, err := testSNSPKI()
	if err != nil {
		t.Fatal(err)
	}
	interFile := filepath.Join(t.TempDir(), "intermediates.pem")
	if err := os.WriteFile(interFile, pki.interPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
		opts map[string]string
		at   time.Time // zero: now
		want string    // "": verified; else a phrase of the error
	}{
		{name: "sns.amazonaws.com (commercial regions)", path: snsCertPath},
		{name: "sns-signing.<region>.amazonaws.com (newer regions)", path: "/sns-signing-region.pem"},
		{name: "sns-us-gov-west-1.amazonaws.com (GovCloud)", path: "/sns-gov.pem"},
		{name: "sns-cn-north-1.amazonaws.com.cn (China)", path: "/sns-china.pem"},
		{name: "the name in the SAN only, no CN", path: "/san-only.pem"},
		{name: "another name", path: "/wrong-name.pem", want: "not an SNS signing certificate"},
		{name: "a look-alike name", path: "/lookalike.pem", want: "not an SNS signing certificate"},
		{name: "the S3 bucket's host name", path: "/s3-bucket.pem", want: "not an SNS signing certificate"},
		{name: "a wildcard", path: "/wildcard.pem", want: "not an SNS signing certificate"},
		{name: "the SNS name in the CN, another in the SAN", path: "/wrong-san.pem", want: "not an SNS signing certificate"},
		{name: "the SNS name in the SAN, another in the CN", path: "/wrong-cn.pem", want: "not an SNS signing certificate"},
		{name: "the SNS name in the CN, no SAN", path: "/no-san.pem", want: "not an SNS signing certificate"},
		{name: "expired", path: "/expired.pem", want: "not valid at 2025-03-01T12:00:00Z"},
		{name: "not yet valid", path: "/not-yet-valid.pem", want: "not valid at 2025-03-01T12:00:00Z"},
		{name: "valid by the verifier's clock, not by the wall clock", path: "/not-yet-valid.pem", at: time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)},
		{name: "issued by an untrusted root", path: "/other-root.pem", want: "does not chain to a trusted root"},
		{name: "self-signed", path: "/untrusted.pem", want: "does not chain to a trusted root"},
		{name: "intermediate served after it", path: "/via-intermediate-chain.pem"},
		{name: "intermediate from intermediates_file", path: "/via-intermediate.pem", opts: map[string]string{"intermediates_file": interFile}},
		{name: "intermediate missing", path: "/via-intermediate.pem", want: "does not chain to a trusted root"},
		{name: "an unrelated certificate served after it", path: "/via-intermediate-wrong-chain.pem", want: "does not chain to a trusted root"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newSNSEnv(t, tc.opts)
			at := now
			if !tc.at.IsZero() {
				at = tc.at
			}
			key := pki.key
			if tc.path == "/untrusted.pem" {
				key = pki.wrongKey
			}
			body := snsSign(t, snsWith(e.notification(at), "SigningCertURL", e.at(tc.path)), key)
			got, err := e.v.Verify(t.Context(), snsRequest(body), provider.Config{Now: fixedClock(at)})
			if n := e.srv.Count(tc.path); n != 1 {
				t.Errorf("%s fetched %d times, want 1", tc.path, n)
			}
			if tc.want == "" {
				if err != nil || len(got.Events) != 1 {
					t.Fatalf("Verify = %+v, %v; want verified", got, err)
				}
				return
			}
			if !errors.Is(err, provider.ErrBadSignature) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Verify error = %v; want ErrBadSignature saying %q", err, tc.want)
			}
			if len(err.Error()) > 300 {
				t.Errorf("error is %d bytes long: %q", len(err.Error()), err)
			}
			if len(got.Events) != 0 || got.Unidentified != "" || got.Confirm != nil {
				t.Errorf("Verify returned %+v with an error", got)
			}
		})
	}
}

// TestSNSCertFetchFailuresAreRemembered: a failed fetch is remembered by
// URL, a refusal (non-200, a certificate refused) for a minute and an
// unavailable host (5xx, timeout) for 10 s, so a burst of forged messages
// naming one URL, and the intake's second Verify after ErrBadSignature,
// cost one fetch. Unavailability is remembered briefly: SNS retries a 503
// 20 s later by default, and that retry must fetch again.
func TestSNSCertFetchFailuresAreRemembered(t *testing.T) {
	tests := []struct {
		name, path string
		wantErr    error
		remembered time.Duration
	}{
		{"not found", "/missing.pem", provider.ErrBadSignature, time.Minute},
		{"a certificate refused", "/wrong-name.pem", provider.ErrBadSignature, time.Minute},
		{"host unavailable", "/busy.pem", provider.ErrCertUnavailable, 10 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newSNSEnv(t, nil)
			for i, at := range []time.Time{now, now, now.Add(tc.remembered - time.Second), now.Add(tc.remembered), now.Add(tc.remembered + time.Second)} {
				_, err := e.verifyAt(t, snsWith(e.notification(at), "SigningCertURL", e.at(tc.path)), at)
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Verify %d: %v, want %v", i, err, tc.wantErr)
				}
			}
			if n := e.srv.Count(tc.path); n != 2 {
				t.Errorf("%s fetched %d times in %v, want twice (once, then once after %v)", tc.path, n, tc.remembered+time.Second, tc.remembered)
			}
		})
	}
}

// TestSNSCertFetchBudget: each verifier fetches at most 10 certificates at
// once and 10 a minute after that (a token every 6 s, by the verifier's
// clock). Past the budget a message whose certificate is not cached is
// refused with ErrCertUnavailable (503: a genuine one is retried by SNS)
// without a request; cached certificates still verify.
func TestSNSCertFetchBudget(t *testing.T) {
	e := newSNSEnv(t, nil)
	url := func(i int) string { return e.at(fmt.Sprintf("/certs-%d.pem", i)) }
	for i := range 10 {
		if _, err := e.verifyAt(t, snsWith(e.notification(now), "SigningCertURL", url(i)), now); err != nil {
			t.Fatalf("fetch %d: %v", i, err)
		}
	}
	reqs, err := e.verifyAt(t, snsWith(e.notification(now), "SigningCertURL", url(10)), now)
	if !errors.Is(err, provider.ErrCertUnavailable) || reqs != 0 {
		t.Fatalf("11th fetch at once: %v after %d requests; want ErrCertUnavailable and none", err, reqs)
	}
	if reqs, err := e.verifyAt(t, snsWith(e.notification(now), "SigningCertURL", url(3)), now); err != nil || reqs != 0 {
		t.Fatalf("cached certificate past the budget: %v after %d requests; want verified from the cache", err, reqs)
	}
	at := now.Add(5 * time.Second)
	if _, err := e.verifyAt(t, snsWith(e.notification(at), "SigningCertURL", url(10)), at); !errors.Is(err, provider.ErrCertUnavailable) {
		t.Fatalf("5 s later: %v, want ErrCertUnavailable", err)
	}
	at = now.Add(6 * time.Second) // one token back; the refusal was not remembered as a failure
	if reqs, err := e.verifyAt(t, snsWith(e.notification(at), "SigningCertURL", url(10)), at); err != nil || reqs != 1 {
		t.Fatalf("6 s later: %v after %d requests; want verified after 1", err, reqs)
	}
	if _, err := e.verifyAt(t, snsWith(e.notification(at), "SigningCertURL", url(11)), at); !errors.Is(err, provider.ErrCertUnavailable) {
		t.Fatalf("a second fetch 6 s later: %v, want ErrCertUnavailable", err)
	}
	at = now.Add(10 * time.Minute) // the bucket is full again, and holds no more than 10
	for i := range 11 {
		_, err := e.verifyAt(t, snsWith(e.notification(at), "SigningCertURL", url(100+i)), at)
		if (i < 10) != (err == nil) {
			t.Fatalf("fetch %d after a quiet 10 minutes: %v", i, err)
		}
	}
	if n := len(e.srv.Requests()); n != 21 {
		t.Errorf("%d fetches, want 21", n)
	}
}
