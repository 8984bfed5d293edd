package provider

// Amazon SNS verifier, for Amazon SES notifications delivered through an SNS
// HTTP(S) subscription.
//
// Hand-written: no maintained Go library verifies SNS messages. AWS ships
// validators for Java, .NET, PHP, Ruby and JavaScript but none in the AWS
// SDK for Go, and the small third-party Go packages are unmaintained (no
// fetch timeout, no cache, no topic allowlist). The scheme is the one AWS
// documents in "Verifying the signatures of Amazon SNS messages" (see
// also docs/providers.md).

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// SNS errors. Nothing is recorded for either.
var (
	// ErrForeignTopic: the message is for a topic not in the source's
	// topic_arns. Anyone can subscribe our URL to their own topic, and AWS
	// signs their messages too, so a valid signature alone proves nothing.
	ErrForeignTopic = errors.New("provider: sns topic not allowed for this source")
	// ErrCertUnavailable: the signing certificate could not be fetched
	// (network error, timeout, 5xx, 429). The message may be genuine and
	// deserves a 5xx: SNS retries server errors only, never a 4xx.
	ErrCertUnavailable = errors.New("provider: sns signing certificate unavailable")
)

const (
	// DefaultSNSHostPattern is the hosts AWS serves signing certificates
	// and subscription confirmations from: sns.<region>.amazonaws.com, and
	// sns.cn-<…>.amazonaws.com.cn in the China regions. The region label is
	// two letters that are not "cn" (us, eu, ap, ca, …), an optional "gov",
	// a word and a number: us-east-1, eu-west-3, us-gov-west-1,
	// ap-southeast-5. Never an s3… label: a bucket named "sns" is served as
	// sns.s3.amazonaws.com, sns.s3-us-west-2.amazonaws.com, … with valid
	// AWS TLS certificates, and its owner chooses what it serves.
	DefaultSNSHostPattern = `^sns\.(?:(?:[abd-z][a-z]|c[a-mo-z])-(?:gov-)?[a-z]+-[0-9]+\.amazonaws\.com|cn-[a-z]+-[0-9]+\.amazonaws\.com\.cn)$`

	// DefaultSNSTolerance: SNS keeps a message's Timestamp (and signature)
	// across its delivery retries, and an HTTP(S) delivery policy may spread
	// retries over up to 3,600 s (AWS's hard limit), so a genuine retry can
	// be an hour old. A replay inside the hour only finds its ledger row
	// already there.
	DefaultSNSTolerance = time.Hour

	snsFetchTimeout  = 5 * time.Second
	snsMaxCertBytes  = 64 << 10
	snsCertCacheSize = 32
	snsCertCacheTTL  = time.Hour
	snsMaxMessage    = 256 << 10 // SNS's own message size limit
)

// SNS message types.
const (
	snsNotification = "Notification"
	snsSubscription = "SubscriptionConfirmation"
	snsUnsubscribe  = "UnsubscribeConfirmation"
)

// snsOptions are the options a source of kind sns may set.
var snsOptions = map[string]bool{
	"topic_arns":             true,
	"cert_host_pattern":      true,
	"subscribe_host_pattern": true,
	"trust_ca_file":          true,
	"intermediates_file":     true,
}

// SNS verifies Amazon SNS messages (SignatureVersion 1 or 2) posted to an
// HTTP(S) subscription, and reads the Amazon SES notification inside a
// Notification. Sources of this kind need no secrets: the signing
// certificate is fetched from an https SigningCertURL on an allowed host.
//
// Construct it with NewSNS; it is safe for concurrent use.
type SNS struct {
	// HTTPClient fetches signing certificates and confirms subscriptions.
	// Redirects are never followed, and every request has its own 5 s
	// timeout, whatever the client says.
	HTTPClient *http.Client

	topics        map[string]bool
	certHost      *regexp.Regexp
	subscribeHost *regexp.Regexp
	roots         *x509.CertPool // nil: the system roots
	intermediates *x509.CertPool // shipped, plus intermediates_file
	certs         certCache
	failures      certFailures
	budget        fetchBudget
}

var _ Verifier = (*SNS)(nil)

func newSNS(opts map[string]string) (Verifier, error) {
	s, err := NewSNS(opts, nil)
	if err != nil {
		return nil, err // not a typed nil inside the interface
	}
	return s, nil
}

// NewSNS builds the verifier from a source's options:
//
//	topic_arns              required; comma-separated TopicArn allowlist, exact match ("*" is refused)
//	cert_host_pattern       anchored regexp for the SigningCertURL host (default DefaultSNSHostPattern)
//	subscribe_host_pattern  anchored regexp for the SubscribeURL host (default: cert_host_pattern)
//	trust_ca_file           PEM file of CAs to trust instead of the system roots (tests and the local stack only)
//	intermediates_file      PEM file of intermediate CAs, added to the shipped Amazon ones (snsIntermediatesPEM)
//
// A nil client gets a default one, which trusts trust_ca_file for TLS too
// when it is set. Errors wrap ErrOptions and name the option.
func NewSNS(opts map[string]string, client *http.Client) (*SNS, error) {
	for k := range opts {
		if !snsOptions[k] && !sharedOptions[k] {
			return nil, fmt.Errorf("%w: sns takes no option %q", ErrOptions, k)
		}
	}
	s := &SNS{
		HTTPClient: client, topics: map[string]bool{},
		certs:    certCache{max: snsCertCacheSize, ttl: snsCertCacheTTL},
		failures: certFailures{max: snsFailureCache},
	}
	for arn := range strings.SplitSeq(opts["topic_arns"], ",") {
		arn = strings.TrimSpace(arn)
		switch {
		case arn == "":
			continue
		case strings.Contains(arn, "*"):
			return nil, fmt.Errorf("%w: sns option topic_arns: %q: wildcards are not allowed, list each topic", ErrOptions, arn)
		case !strings.HasPrefix(arn, "arn:") || strings.Count(arn, ":") != 5 || hasControl(arn):
			return nil, fmt.Errorf("%w: sns option topic_arns: %q is not a topic ARN (arn:<partition>:sns:<region>:<account>:<name>)", ErrOptions, arn)
		}
		s.topics[arn] = true
	}
	if len(s.topics) == 0 {
		return nil, fmt.Errorf("%w: sns option topic_arns is required (comma-separated topic ARNs)", ErrOptions)
	}
	certPattern := opts["cert_host_pattern"]
	if certPattern == "" {
		certPattern = DefaultSNSHostPattern
	}
	var err error
	if s.certHost, err = hostPattern("cert_host_pattern", certPattern); err != nil {
		return nil, err
	}
	subPattern := opts["subscribe_host_pattern"]
	if subPattern == "" {
		subPattern = certPattern
	}
	if s.subscribeHost, err = hostPattern("subscribe_host_pattern", subPattern); err != nil {
		return nil, err
	}
	if path := opts["trust_ca_file"]; path != "" {
		pemBytes, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%w: sns option trust_ca_file: %v", ErrOptions, err)
		}
		s.roots = x509.NewCertPool()
		if !s.roots.AppendCertsFromPEM(pemBytes) {
			return nil, fmt.Errorf("%w: sns option trust_ca_file: %s holds no PEM certificate", ErrOptions, path)
		}
	}
	s.intermediates = snsShippedIntermediates()
	if path := opts["intermediates_file"]; path != "" {
		pemBytes, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%w: sns option intermediates_file: %v", ErrOptions, err)
		}
		s.intermediates = s.intermediates.Clone()
		if !s.intermediates.AppendCertsFromPEM(pemBytes) {
			return nil, fmt.Errorf("%w: sns option intermediates_file: %s holds no PEM certificate", ErrOptions, path)
		}
	}
	if s.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if s.roots != nil {
			tr.TLSClientConfig = &tls.Config{RootCAs: s.roots, MinVersion: tls.VersionTLS12}
		}
		s.HTTPClient = &http.Client{Transport: tr, Timeout: snsFetchTimeout}
	}
	return s, nil
}

// hostPattern compiles a host regexp option, which must match a whole
// host. It must be written anchored at both ends (an unanchored
// "amazonaws\.com" would also match "amazonaws.com.attacker.example"), and
// it is compiled wrapped as ^(?:…)$: "^a|b$" starts with ^ and ends with $
// yet leaves each branch open at one end ("a.attacker.example",
// "attacker-b"); wrapped, it allows exactly "a" and "b".
func hostPattern(name, pattern string) (*regexp.Regexp, error) {
	if !strings.HasPrefix(pattern, "^") || !strings.HasSuffix(pattern, "$") {
		return nil, fmt.Errorf("%w: sns option %s: %q must be anchored with ^ and $", ErrOptions, name, pattern)
	}
	if _, err := regexp.Compile(pattern); err != nil {
		return nil, fmt.Errorf("%w: sns option %s: %v", ErrOptions, name, err)
	}
	re, err := regexp.Compile(`^(?:` + pattern + `)$`)
	if err != nil {
		return nil, fmt.Errorf("%w: sns option %s: %v", ErrOptions, name, err)
	}
	return re, nil
}

// snsMessage is the SNS JSON envelope.
type snsMessage struct {
	Type, MessageID, Token, TopicARN, Subject, Message, Timestamp string
	SignatureVersion, Signature, SigningCertURL                   string
	SubscribeURL, UnsubscribeURL                                  string
	hasSubject                                                    bool
}

// snsField is one envelope field: its exact JSON name, its size bound and
// where it goes.
type snsField struct {
	name string
	max  int
	ptr  func(*snsMessage) *string
}

var snsFields = []snsField{
	{"Type", 64, func(m *snsMessage) *string { return &m.Type }},
	{"MessageId", 128, func(m *snsMessage) *string { return &m.MessageID }},
	{"Token", 1024, func(m *snsMessage) *string { return &m.Token }},
	{"TopicArn", 512, func(m *snsMessage) *string { return &m.TopicARN }},
	{"Subject", 512, func(m *snsMessage) *string { return &m.Subject }},
	{"Message", snsMaxMessage, func(m *snsMessage) *string { return &m.Message }},
	{"Timestamp", 64, func(m *snsMessage) *string { return &m.Timestamp }},
	{"SignatureVersion", 8, func(m *snsMessage) *string { return &m.SignatureVersion }},
	{"Signature", 2048, func(m *snsMessage) *string { return &m.Signature }},
	{"SigningCertURL", 2048, func(m *snsMessage) *string { return &m.SigningCertURL }},
	{"SubscribeURL", 2048, func(m *snsMessage) *string { return &m.SubscribeURL }},
	{"UnsubscribeURL", 2048, func(m *snsMessage) *string { return &m.UnsubscribeURL }},
}

// parseSNSEnvelope reads the envelope strictly: one JSON object, each known
// field at most once, spelled exactly (encoding/json would also fill a field
// from "message" or a second "Message", so a later reader could see a value
// other than the signed one), a string or null, within its size bound.
// Unknown fields are skipped. Only Message may hold control characters:
// a newline in any other field could move text between fields of the
// canonical string and keep a captured signature valid for a different
// MessageId.
func parseSNSEnvelope(body []byte) (snsMessage, error) {
	var m snsMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return m, fmt.Errorf("%w: body is not an SNS JSON message", ErrNotSigned)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return m, fmt.Errorf("%w: malformed JSON", ErrBadSignature)
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return m, fmt.Errorf("%w: malformed JSON", ErrBadSignature)
		}
		i := slices.IndexFunc(snsFields, func(f snsField) bool { return strings.EqualFold(f.name, key) })
		if i < 0 {
			continue
		}
		f := snsFields[i]
		if key != f.name {
			return m, fmt.Errorf("%w: field %q is spelled %q", ErrBadSignature, f.name, key)
		}
		if seen[key] {
			return m, fmt.Errorf("%w: field %s appears twice", ErrBadSignature, key)
		}
		seen[key] = true
		if bytes.Equal(raw, []byte("null")) {
			continue
		}
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return m, fmt.Errorf("%w: field %s is not a string", ErrBadSignature, key)
		}
		if len(v) > f.max {
			return m, fmt.Errorf("%w: field %s longer than %d bytes", ErrBadSignature, key, f.max)
		}
		if key != "Message" && hasControl(v) {
			return m, fmt.Errorf("%w: field %s contains control characters", ErrBadSignature, key)
		}
		*f.ptr(&m) = v
		if key == "Subject" {
			m.hasSubject = true
		}
	}
	if _, err := dec.Token(); err != nil {
		return m, fmt.Errorf("%w: malformed JSON", ErrBadSignature)
	}
	if _, err := dec.Token(); err != io.EOF {
		return m, fmt.Errorf("%w: data after the JSON message", ErrBadSignature)
	}
	if m.Signature == "" || m.SigningCertURL == "" {
		return m, fmt.Errorf("%w: no Signature or SigningCertURL", ErrNotSigned)
	}
	return m, nil
}

func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// stringToSign builds the canonical "Name\nValue\n" string AWS signs, with
// the fields of the message's type in byte order.
func (m *snsMessage) stringToSign() ([]byte, error) {
	var b bytes.Buffer
	add := func(name, value string) {
		b.WriteString(name)
		b.WriteByte('\n')
		b.WriteString(value)
		b.WriteByte('\n')
	}
	if m.MessageID == "" || m.Timestamp == "" || m.TopicARN == "" {
		return nil, fmt.Errorf("%w: MessageId, Timestamp or TopicArn missing", ErrBadSignature)
	}
	switch m.Type {
	case snsNotification:
		add("Message", m.Message)
		add("MessageId", m.MessageID)
		if m.hasSubject {
			add("Subject", m.Subject)
		}
		add("Timestamp", m.Timestamp)
		add("TopicArn", m.TopicARN)
		add("Type", m.Type)
	case snsSubscription, snsUnsubscribe:
		if m.SubscribeURL == "" || m.Token == "" {
			return nil, fmt.Errorf("%w: %s without SubscribeURL or Token", ErrBadSignature, m.Type)
		}
		add("Message", m.Message)
		add("MessageId", m.MessageID)
		add("SubscribeURL", m.SubscribeURL)
		add("Timestamp", m.Timestamp)
		add("Token", m.Token)
		add("TopicArn", m.TopicARN)
		add("Type", m.Type)
	default:
		return nil, fmt.Errorf("%w: unknown SNS message type %q", ErrBadSignature, m.Type)
	}
	return b.Bytes(), nil
}

// Verify checks, in order and before trusting any field: the envelope's
// shape, the signature version, the SigningCertURL (https, allowed host,
// port 443, one .pem file; refused without a request otherwise), the topic
// allowlist and, for a SubscriptionConfirmation, the SubscribeURL; then the
// RSA signature with the fetched (or cached) certificate, whose name,
// validity and chain are checked at cfg.Now; then the Timestamp against
// the tolerance.
func (s *SNS) Verify(ctx context.Context, req Request, cfg Config) (Verified, error) {
	if len(req.Body) == 0 {
		return Verified{}, ErrNotSigned
	}
	m, err := parseSNSEnvelope(req.Body)
	if err != nil {
		return Verified{}, err
	}
	// SNS's own headers are unsigned; they may only agree with the body.
	for h, v := range map[string]string{"x-amz-sns-message-type": m.Type, "x-amz-sns-message-id": m.MessageID, "x-amz-sns-topic-arn": m.TopicARN} {
		if got := req.Header(h); got != "" && got != v {
			return Verified{}, fmt.Errorf("%w: header %s disagrees with the message", ErrBadSignature, h)
		}
	}
	signed, err := m.stringToSign()
	if err != nil {
		return Verified{}, err
	}
	var hash crypto.Hash
	var digest []byte
	switch m.SignatureVersion {
	case "1":
		sum := sha1.Sum(signed) // SHA1withRSA is what AWS defines version 1 to be
		hash, digest = crypto.SHA1, sum[:]
	case "2":
		sum := sha256.Sum256(signed)
		hash, digest = crypto.SHA256, sum[:]
	default:
		return Verified{}, fmt.Errorf("%w: unsupported SignatureVersion %q", ErrBadSignature, m.SignatureVersion)
	}
	sig, err := base64.StdEncoding.DecodeString(m.Signature)
	if err != nil {
		return Verified{}, fmt.Errorf("%w: Signature is not base64", ErrBadSignature)
	}
	if err := checkSNSURL(m.SigningCertURL, s.certHost, true); err != nil {
		return Verified{}, fmt.Errorf("%w: SigningCertURL: %v", ErrBadSignature, err)
	}
	if !s.topics[m.TopicARN] {
		return Verified{}, ErrForeignTopic
	}
	if m.Type == snsSubscription {
		if err := checkSNSURL(m.SubscribeURL, s.subscribeHost, false); err != nil {
			return Verified{}, fmt.Errorf("%w: SubscribeURL: %v", ErrBadSignature, err)
		}
	}
	ts, err := time.Parse(time.RFC3339Nano, m.Timestamp)
	if err != nil {
		return Verified{}, fmt.Errorf("%w: Timestamp is not RFC 3339", ErrBadSignature)
	}
	now := time.Now
	if cfg.Now != nil {
		now = cfg.Now
	}
	at := now()
	cert, err := s.certificate(ctx, m.SigningCertURL, at)
	if err != nil {
		return Verified{}, err
	}
	if err := rsa.VerifyPKCS1v15(cert.PublicKey.(*rsa.PublicKey), hash, digest, sig); err != nil {
		return Verified{}, ErrBadSignature
	}
	tol := cfg.Tolerance
	if tol <= 0 {
		tol = DefaultSNSTolerance
	}
	if !withinTolerance(at, ts, tol) {
		return Verified{}, ErrStale
	}
	return s.identify(m, ts.UTC()), nil
}

// identify names the verified message's event.
func (s *SNS) identify(m snsMessage, ts time.Time) Verified {
	id := Identity{EventID: m.MessageID, ProviderTime: ts, Attributes: map[string]string{"topic_arn": m.TopicARN}}
	switch m.Type {
	case snsSubscription:
		id.Type = "sns.subscription_confirmation"
		return Verified{Events: []Identity{id}, Confirm: s.confirm(m.SubscribeURL)}
	case snsUnsubscribe:
		// Recorded, never acted on: resubscribing is an operator's decision.
		id.Type = "sns.unsubscribe_confirmation"
		return Verified{Events: []Identity{id}}
	}
	if m.hasSubject && m.Subject != "" {
		id.Attributes["sns_subject"] = m.Subject
	}
	ses, ok := ParseSES([]byte(m.Message))
	if !ok {
		// Verified, but not SES: recorded, and the processor ignores it.
		id.Type = "sns.notification"
		return Verified{Events: []Identity{id}}
	}
	id.Type = "ses." + strings.ReplaceAll(strings.ToLower(ses.Type), " ", "_")
	id.Subject = ses.MessageID
	if !ses.MailTimestamp.IsZero() {
		id.ProviderTime = ses.MailTimestamp
	}
	for k, v := range map[string]string{
		"bounce_type":             ses.BounceType,
		"bounce_sub_type":         ses.BounceSubType,
		"complaint_feedback_type": ses.ComplaintFeedbackType,
	} {
		if v != "" {
			id.Attributes[k] = v
		}
	}
	return Verified{Events: []Identity{id}}
}

// checkSNSURL allows only an https URL without user info on a host the
// pattern matches, on port 443: AWS names no other, and a forged message
// must not make us knock on any port of an allowed host. Loopback IP hosts
// (which only a test or local stack's pattern allows; a test server cannot
// listen on 443) may name any port. A certificate URL must also name one
// .pem file at the root, spelled without escapes and with no query, as
// AWS's /SimpleNotificationService-<hex>.pem: a forged message must not
// choose any path on the host either.
func checkSNSURL(raw string, host *regexp.Regexp, certificate bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	if u.Scheme != "https" {
		return errors.New("not https")
	}
	if u.User != nil || u.Opaque != "" || u.Fragment != "" {
		return errors.New("unexpected URL parts")
	}
	h := strings.ToLower(u.Hostname())
	if h == "" || !host.MatchString(h) {
		return fmt.Errorf("host %.64q not allowed", u.Hostname())
	}
	if p := u.Port(); p != "" && p != "443" {
		if ip, err := netip.ParseAddr(h); err != nil || !ip.IsLoopback() {
			return fmt.Errorf("port %.8q not allowed (only 443)", p)
		}
	}
	if certificate && (!snsCertPath.MatchString(u.EscapedPath()) || u.RawQuery != "" || u.ForceQuery) {
		return errors.New("not a .pem file at the root")
	}
	return nil
}

// snsCertPath is the only path shape a SigningCertURL may have.
var snsCertPath = regexp.MustCompile(`^/[A-Za-z0-9][A-Za-z0-9._-]{0,200}\.pem$`)

// client returns a copy of the HTTP client that never follows a redirect
// (a redirect could lead off the allowed hosts).
func (s *SNS) client() *http.Client {
	c := http.Client{Timeout: snsFetchTimeout}
	if s.HTTPClient != nil {
		c = *s.HTTPClient
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

// certificate returns the RSA signing certificate at an already checked URL,
// from the cache or fetched, with its chain verified at now. A failure is
// remembered for a while; a fetch needs a token from the budget.
func (s *SNS) certificate(ctx context.Context, certURL string, now time.Time) (*x509.Certificate, error) {
	if c := s.certs.get(certURL, now); c != nil {
		return c, nil
	}
	if err := s.failures.get(certURL, now); err != nil {
		return nil, err
	}
	if !s.budget.take(now) {
		// Not remembered: the URL may be genuine, and gets the next token.
		return nil, fmt.Errorf("%w: over %d certificate fetches a minute", ErrCertUnavailable, int(time.Minute/snsFetchEvery))
	}
	c, err := s.fetchCertificate(ctx, certURL, now)
	if err != nil {
		ttl := snsRefusedTTL
		if errors.Is(err, ErrCertUnavailable) {
			ttl = snsUnavailableTTL
		}
		s.failures.put(certURL, err, now, now.Add(ttl))
		return nil, err
	}
	return c, nil
}

// fetchCertificate fetches, verifies and caches the certificate at certURL.
func (s *SNS) fetchCertificate(ctx context.Context, certURL string, now time.Time) (*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(ctx, snsFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, certURL, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: SigningCertURL: %v", ErrBadSignature, err)
	}
	resp, err := s.client().Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCertUnavailable, urlErr(err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return nil, fmt.Errorf("%w: status %d", ErrCertUnavailable, resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%w: certificate fetch answered %d", ErrBadSignature, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, snsMaxCertBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCertUnavailable, urlErr(err))
	}
	if len(body) > snsMaxCertBytes {
		return nil, fmt.Errorf("%w: certificate over %d bytes", ErrBadSignature, snsMaxCertBytes)
	}
	leaf, chain, err := s.verifyPEM(body, now)
	if err != nil {
		return nil, fmt.Errorf("%w: signing certificate: %v", ErrBadSignature, err)
	}
	expires := now.Add(s.certs.ttl)
	for _, c := range chain {
		if c.NotAfter.Before(expires) {
			expires = c.NotAfter
		}
	}
	s.certs.put(certURL, leaf, now, expires)
	return leaf, nil
}

// confirm returns the action that confirms a verified subscription: one GET
// of its SubscribeURL, checked again here, expecting a 2xx.
func (s *SNS) confirm(subscribeURL string) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := checkSNSURL(subscribeURL, s.subscribeHost, false); err != nil {
			return fmt.Errorf("sns: confirm subscription: SubscribeURL %v", err)
		}
		ctx, cancel := context.WithTimeout(ctx, snsFetchTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, subscribeURL, nil)
		if err != nil {
			return fmt.Errorf("sns: confirm subscription: %v", err)
		}
		resp, err := s.client().Do(req)
		if err != nil {
			// Not the URL: it carries the subscription token.
			return fmt.Errorf("sns: confirm subscription at %s: %w", req.URL.Host, urlErr(err))
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("sns: confirm subscription at %s: status %d", req.URL.Host, resp.StatusCode)
		}
		return nil
	}
}

// urlErr drops the URL net/http puts in its errors.
func urlErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// certCache keeps verified signing certificates by URL, bounded in size
// and time, so a burst of messages costs one fetch.
type certCache struct {
	mu      sync.Mutex
	max     int
	ttl     time.Duration
	entries map[string]certEntry
}

type certEntry struct {
	cert             *x509.Certificate
	fetched, expires time.Time
}

func (c *certCache) get(u string, now time.Time) *x509.Certificate {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[u]
	if !ok {
		return nil
	}
	if !now.Before(e.expires) || now.Before(e.cert.NotBefore) {
		delete(c.entries, u)
		return nil
	}
	return e.cert
}

func (c *certCache) put(u string, cert *x509.Certificate, now, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]certEntry{}
	}
	if _, ok := c.entries[u]; !ok && len(c.entries) >= c.max {
		oldest := ""
		for k, e := range c.entries {
			if oldest == "" || e.fetched.Before(c.entries[oldest].fetched) {
				oldest = k
			}
		}
		delete(c.entries, oldest)
	}
	c.entries[u] = certEntry{cert: cert, fetched: now, expires: expires}
}

// SESEvent is what this package reads from an Amazon SES notification (the
// Message of an SNS Notification), in either of SES's formats: identity
// notifications ("notificationType") or event publishing ("eventType").
type SESEvent struct {
	Type                  string    // as SES names it: Bounce, Complaint, Delivery, ...
	MessageID             string    // mail.messageId: the email the event concerns
	MailTimestamp         time.Time // mail.timestamp, when SES accepted the email
	BounceType            string    // bounce.bounceType (Permanent, Transient, Undetermined)
	BounceSubType         string    // bounce.bounceSubType
	ComplaintFeedbackType string    // complaint.complaintFeedbackType, when the report names one
}

// SESTypes are the SES notification and event types ParseSES recognises.
// Open, Click and Rendering Failure are recorded like the others; the
// processor decides what, if anything, they change.
var SESTypes = []string{"Bounce", "Complaint", "Delivery", "Send", "Reject", "DeliveryDelay", "Open", "Click", "Rendering Failure"}

// ParseSES reads an SES notification. ok is false when message is not one
// (not a JSON object, no recognised type, or two disagreeing types). A
// recognised notification with an odd mail, bounce or complaint part keeps
// its type; the odd part is left empty.
func ParseSES(message []byte) (ev SESEvent, ok bool) {
	var n struct {
		NotificationType string          `json:"notificationType"`
		EventType        string          `json:"eventType"`
		Mail             json.RawMessage `json:"mail"`
		Bounce           json.RawMessage `json:"bounce"`
		Complaint        json.RawMessage `json:"complaint"`
	}
	if err := json.Unmarshal(message, &n); err != nil {
		return SESEvent{}, false
	}
	typ := n.NotificationType
	if typ == "" {
		typ = n.EventType
	} else if n.EventType != "" && n.EventType != typ {
		return SESEvent{}, false
	}
	if !slices.Contains(SESTypes, typ) {
		return SESEvent{}, false
	}
	var mail struct {
		MessageID string `json:"messageId"`
		Timestamp string `json:"timestamp"`
	}
	var bounce struct {
		BounceType    string `json:"bounceType"`
		BounceSubType string `json:"bounceSubType"`
	}
	var complaint struct {
		ComplaintFeedbackType string `json:"complaintFeedbackType"`
	}
	if json.Unmarshal(n.Mail, &mail) != nil {
		mail.MessageID, mail.Timestamp = "", ""
	}
	if json.Unmarshal(n.Bounce, &bounce) != nil {
		bounce.BounceType, bounce.BounceSubType = "", ""
	}
	if json.Unmarshal(n.Complaint, &complaint) != nil {
		complaint.ComplaintFeedbackType = ""
	}
	ev = SESEvent{
		Type:                  typ,
		MessageID:             mail.MessageID,
		BounceType:            bounce.BounceType,
		BounceSubType:         bounce.BounceSubType,
		ComplaintFeedbackType: complaint.ComplaintFeedbackType,
	}
	if t, err := time.Parse(time.RFC3339Nano, mail.Timestamp); err == nil {
		ev.MailTimestamp = t.UTC()
	}
	return ev, true
}
