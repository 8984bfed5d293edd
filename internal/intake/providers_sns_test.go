package intake_test

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
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// Amazon SES through SNS, end to end through the intake's Lambda JSON path:
// the source is configured by options only (provider.New builds its
// verifier), with a test CA standing in for the public roots and a TLS
// test server on 127.0.0.1 standing in for sns.<region>.amazonaws.com.

const (
	sesTopic    = "arn:aws:sns:us-east-1:123456789012:ses-notifications"
	sesCertPath = "/SimpleNotificationService-test.pem"
)

// snsStack is the test CA, the signing key and the fake AWS endpoint.
type snsStack struct {
	key    *rsa.PrivateKey
	caFile string
	srv    *httptest.Server
	mu     sync.Mutex
	reqs   []string // "GET /path?query", in order
}

func newSNSStack(t *testing.T) *snsStack {
	t.Helper()
	from, until := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Test SNS Root CA"}, NotBefore: from, NotAfter: until,
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(serial int64, cn string, pub any) []byte {
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, NotBefore: from, NotAfter: until,
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		if ip := net.ParseIP(cn); ip != nil {
			tmpl.IPAddresses = []net.IP{ip}
		} else {
			tmpl.DNSNames = []string{cn}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, pub, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	s := &snsStack{}
	if s.key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	signingPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: issue(2, "sns.amazonaws.com", &s.key.PublicKey)})
	tlsKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tlsCert := tls.Certificate{Certificate: [][]byte{issue(3, "127.0.0.1", tlsKey.Public())}, PrivateKey: tlsKey}

	s.caFile = filepath.Join(t.TempDir(), "test-ca.pem")
	if err := os.WriteFile(s.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.reqs = append(s.reqs, r.Method+" "+r.URL.RequestURI())
		s.mu.Unlock()
		switch r.URL.Path {
		case sesCertPath:
			_, _ = w.Write(signingPEM)
		case "/confirm":
			_, _ = w.Write([]byte(`<ConfirmSubscriptionResponse><ConfirmSubscriptionResult><SubscriptionArn>` + sesTopic +
				`:4f1c2b9e</SubscriptionArn></ConfirmSubscriptionResult></ConfirmSubscriptionResponse>`))
		default:
			http.NotFound(w, r)
		}
	}))
	s.srv.TLS = &tls.Config{Certificates: []tls.Certificate{tlsCert}}
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

// requests returns every request the fake AWS endpoint received.
func (s *snsStack) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reqs...)
}

func (s *snsStack) count(path string) int {
	n := 0
	for _, r := range s.requests() {
		if strings.HasPrefix(r, "GET "+path) {
			n++
		}
	}
	return n
}

// harness builds a pipeline whose one source, "ses", is of kind sns and
// trusts this stack through its options alone.
func (s *snsStack) harness(t *testing.T) *pt.Harness {
	t.Helper()
	doc, err := json.Marshal(map[string]any{"sources": []any{map[string]any{
		"name": "ses", "kind": "sns",
		"options": map[string]string{
			"topic_arns":        sesTopic,
			"cert_host_pattern": `^127\.0\.0\.1$`,
			"trust_ca_file":     s.caFile,
		},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return pt.New(t, pt.Options{SourcesDoc: string(doc)})
}

// message loads an SNS envelope from events/sns/, points its URLs at the
// stack and stamps it `at`.
func (s *snsStack) message(t *testing.T, name string, at time.Time) map[string]string {
	t.Helper()
	var m map[string]string
	if err := json.Unmarshal(fixture(t, "sns/"+name), &m); err != nil {
		t.Fatal(err)
	}
	m["SigningCertURL"] = s.srv.URL + sesCertPath
	m["Timestamp"] = at.UTC().Format("2006-01-02T15:04:05.000Z")
	if m["SubscribeURL"] != "" {
		m["SubscribeURL"] = s.srv.URL + "/confirm?Action=ConfirmSubscription&TopicArn=" + m["TopicArn"] + "&Token=" + m["Token"]
	}
	return m
}

// sign signs m as AWS documents (canonical "Name\nValue\n" string, SHA1withRSA
// for version 1, SHA256withRSA for 2) and returns the body SNS would post.
func (s *snsStack) sign(t *testing.T, m map[string]string) []byte {
	t.Helper()
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
	var sig []byte
	var err error
	if m["SignatureVersion"] == "1" {
		sum := sha1.Sum(b.Bytes())
		sig, err = rsa.SignPKCS1v15(rand.Reader, s.key, crypto.SHA1, sum[:])
	} else {
		sum := sha256.Sum256(b.Bytes())
		sig, err = rsa.SignPKCS1v15(rand.Reader, s.key, crypto.SHA256, sum[:])
	}
	if err != nil {
		t.Fatal(err)
	}
	signed := map[string]string{}
	for k, v := range m {
		signed[k] = v
	}
	signed["Signature"] = base64.StdEncoding.EncodeToString(sig)
	body, err := json.Marshal(signed)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// snsHeaders are the headers SNS sends with an HTTP(S) delivery.
func snsHeaders(m map[string]string) map[string]string {
	return map[string]string{
		"content-type":           "text/plain; charset=UTF-8",
		"user-agent":             "Amazon Simple Notification Service Agent",
		"x-amz-sns-message-type": m["Type"],
		"x-amz-sns-message-id":   m["MessageId"],
		"x-amz-sns-topic-arn":    m["TopicArn"],
	}
}

// sesMessageID returns mail.messageId of the SES notification in m.
func sesMessageID(t *testing.T, m map[string]string) string {
	t.Helper()
	var ses struct {
		Mail struct {
			MessageID string `json:"messageId"`
		} `json:"mail"`
	}
	if err := json.Unmarshal([]byte(m["Message"]), &ses); err != nil || ses.Mail.MessageID == "" {
		t.Fatalf("fixture Message has no mail.messageId: %v", err)
	}
	return ses.Mail.MessageID
}

func TestSNSBounceIsAcceptedAndEnqueued(t *testing.T) {
	stack := newSNSStack(t)
	h := stack.harness(t)
	ctx := context.Background()

	// GIVEN an SES bounce, signed and posted as SNS does
	m := stack.message(t, "ses-bounce.json", h.Clock.Now())
	// WHEN it is delivered
	resp := h.DeliverTo("ses", stack.sign(t, m), snsHeaders(m))
	// THEN it is recorded under its SNS MessageId, typed and subjected by SES, and enqueued
	if resp.Status != 202 {
		t.Fatalf("status %d %s", resp.Status, resp.Body)
	}
	ev, err := h.Ledger.Get(ctx, "ses", m["MessageId"])
	if err != nil {
		t.Fatalf("no ledger row: %v", err)
	}
	if ev.Status != ledger.StatusReceived || ev.EventType != "ses.bounce" || ev.Subject != sesMessageID(t, m) {
		t.Fatalf("row %+v", ev)
	}
	if ev.Attributes["topic_arn"] != sesTopic || ev.Attributes["bounce_type"] != "Permanent" {
		t.Errorf("attributes %v", ev.Attributes)
	}
	if d := h.Depth(h.Queues.Queue); d != 1 {
		t.Fatalf("queue depth %d, want 1", d)
	}

	// AND a second notification verifies with the cached certificate
	m2 := stack.message(t, "ses-complaint.json", h.Clock.Now())
	if resp := h.DeliverTo("ses", stack.sign(t, m2), snsHeaders(m2)); resp.Status != 202 {
		t.Fatalf("complaint: status %d %s", resp.Status, resp.Body)
	}
	if ev, err := h.Ledger.Get(ctx, "ses", m2["MessageId"]); err != nil || ev.EventType != "ses.complaint" || ev.Subject != sesMessageID(t, m2) {
		t.Fatalf("complaint row %+v, %v", ev, err)
	}
	if n := stack.count(sesCertPath); n != 1 {
		t.Errorf("certificate fetched %d times, want 1", n)
	}
}

func TestSNSSubscriptionConfirmationIsRecordedThenConfirmed(t *testing.T) {
	stack := newSNSStack(t)
	h := stack.harness(t)

	m := stack.message(t, "subscription-confirmation.json", h.Clock.Now())
	resp := h.DeliverTo("ses", stack.sign(t, m), snsHeaders(m))
	if resp.Status != 202 {
		t.Fatalf("status %d %s", resp.Status, resp.Body)
	}
	ev, err := h.Ledger.Get(context.Background(), "ses", m["MessageId"])
	if err != nil || ev.EventType != "sns.subscription_confirmation" || ev.Attributes["topic_arn"] != sesTopic {
		t.Fatalf("row %+v, %v", ev, err)
	}
	if n := stack.count("/confirm"); n != 1 {
		t.Fatalf("%d GETs of the SubscribeURL, want exactly 1 (requests %v)", n, stack.requests())
	}
	_, wantURI, _ := strings.Cut(m["SubscribeURL"], stack.srv.URL)
	if reqs := stack.requests(); reqs[len(reqs)-1] != "GET "+wantURI {
		t.Errorf("last request %q, want GET %s", reqs[len(reqs)-1], wantURI)
	}
}

func TestSNSRejectionsTouchNothing(t *testing.T) {
	stack := newSNSStack(t)
	h := stack.harness(t)
	foreignHost := strings.Replace(stack.srv.URL, "127.0.0.1", "localhost", 1)
	cases := []struct {
		name string
		body func(m map[string]string) []byte
		// wantFetch: the certificate may be fetched (the URL is allowed).
		wantFetch bool
	}{
		{"tampered Message", func(m map[string]string) []byte {
			return bytes.Replace(stack.sign(t, m), []byte("Permanent"), []byte("Transient"), 1)
		}, true},
		{"foreign topic", func(m map[string]string) []byte {
			m["TopicArn"] = "arn:aws:sns:us-east-1:210987654321:someone-elses-topic"
			return stack.sign(t, m)
		}, false},
		{"certificate on a foreign host", func(m map[string]string) []byte {
			m["SigningCertURL"] = foreignHost + sesCertPath
			return stack.sign(t, m)
		}, false},
		{"certificate over http", func(m map[string]string) []byte {
			m["SigningCertURL"] = strings.Replace(stack.srv.URL, "https:", "http:", 1) + sesCertPath
			return stack.sign(t, m)
		}, false},
		{"subscription confirmation for a SubscribeURL on a foreign host", func(map[string]string) []byte {
			m := stack.message(t, "subscription-confirmation.json", h.Clock.Now())
			m["SubscribeURL"] = foreignHost + "/confirm?Action=ConfirmSubscription&Token=" + m["Token"]
			return stack.sign(t, m)
		}, false},
		{"stale Timestamp", func(m map[string]string) []byte {
			m["Timestamp"] = h.Clock.Now().Add(-2 * time.Hour).UTC().Format("2006-01-02T15:04:05.000Z")
			return stack.sign(t, m)
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := stack.message(t, "ses-bounce.json", h.Clock.Now())
			body := c.body(m)
			var sent map[string]string
			if err := json.Unmarshal(body, &sent); err != nil {
				t.Fatal(err)
			}
			before := len(stack.requests())
			depth := h.Depth(h.Queues.Queue)
			h.IntakeRec.Reset()

			resp := h.DeliverTo("ses", body, snsHeaders(sent))

			if resp.Status != 401 {
				t.Fatalf("status %d, want 401 (%s)", resp.Status, resp.Body)
			}
			if n := h.IntakeRec.Total(""); n != 0 {
				t.Errorf("rejected request made %d AWS calls: %s", n, h.IntakeRec)
			}
			if _, err := h.Ledger.Get(context.Background(), "ses", sent["MessageId"]); !errors.Is(err, ledger.ErrNotFound) {
				t.Errorf("a rejected request left a row: %v", err)
			}
			if d := h.Depth(h.Queues.Queue); d != depth {
				t.Errorf("queue depth %d, want %d", d, depth)
			}
			if n := stack.count("/confirm"); n != 0 {
				t.Errorf("a rejected request confirmed a subscription")
			}
			if got := stack.requests()[before:]; !c.wantFetch && len(got) != 0 {
				t.Errorf("requests %v, want none", got)
			}
		})
	}
}
