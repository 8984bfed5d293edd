package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/source"
)

// HTTPEffect POSTs the call as JSON to URL with the header
// Idempotency-Key: <operation id> and, when Secret is set, a bearer token.
// The call names whose fact it acts on: the body's "scope" and "source",
// and the headers X-Effect-Scope and X-Effect-Source (each absent when
// empty: an unscoped source's intent has no scope). X-Subject-Version
// (and the body's subject_version) orders the versions of the subject in
// that scope only: a downstream that refuses older versions must key
// them by (X-Effect-Scope, subject), or another scope's subject of the
// same id (a vendor's order O-42 at revision 999) makes this scope's
// genuine later versions look old.
//
// It performs only the scopes in Scopes (see ScopeGuard).
//
// Classification: 2xx is success; a 3xx is never followed and never
// success: the intent is QUARANTINED (redirect_refused, naming the
// Location), since only the configured URL may be called; 409 whose response echoes the same
// Idempotency-Key is success (already applied); 429 and 503 are retryable
// and honour Retry-After; 408 and other 5xx are retryable; other 4xx are
// permanent; a timeout or lost connection after the request was written is
// uncertain, before it was written retryable.
//
// With StatusURL set it is also a StatusLookup: GET StatusURL?key=<key>
// answering {"applied":bool,"known":bool} (404 means not known); and a
// SubjectStatus: GET StatusURL?subject=<subject>&scope=<scope> (scope
// absent when empty) answering {"subject":…,"scope":…,"version":"<exact
// decimal>","known":bool,"kind":…} (404 means not known).
type HTTPEffect struct {
	Name   string // the intent kind it performs
	URL    string
	Secret string // optional bearer token; never logged or recorded
	// Token, when set, returns the bearer token per call (a secret that
	// rotates, read through a cache); it wins over Secret.
	Token func(ctx context.Context) (string, error)
	// StatusURL is the downstream's status endpoint, if it has one.
	StatusURL string
	// Window is how long the downstream remembers an idempotency key;
	// 0 leaves the dispatcher's default.
	Window time.Duration
	// Client defaults to one with a 10 second timeout. Its timeout must be
	// shorter than the dispatcher's lease.
	Client *http.Client
	// Clock turns an HTTP-date Retry-After into a wait; default wall clock.
	Clock ledger.Clock
	// Scopes are the scopes whose intents it performs: scope names, or
	// AllScopes alone for every scope (intents without one included).
	// Empty allows none.
	Scopes []string
}

var _ Effect = (*HTTPEffect)(nil)

var _ StatusLookup = (*HTTPEffect)(nil)

var _ SubjectStatus = (*HTTPEffect)(nil)

var _ ScopeGuard = (*HTTPEffect)(nil)

// AllowsScope reports whether the effect performs intents of scope: it is
// in Scopes, or Scopes is AllScopes. An intent without a scope ("") is
// allowed only by AllScopes.
func (e *HTTPEffect) AllowsScope(scope string) bool {
	for _, s := range e.Scopes {
		if s == AllScopes || (s == scope && scope != "") {
			return true
		}
	}
	return false
}

// ErrNoSubjectStatus: the effect has no status endpoint to ask for a
// subject's version (HTTPEffect without StatusURL). The caller cannot tell
// drift from agreement and should skip the subject, as for an effect that
// is no SubjectStatus. It lives here rather than in outbox.go's error
// block because only HTTPEffect returns it.
var ErrNoSubjectStatus = errors.New("outbox: no subject status endpoint")

// StatusAnswer is the status endpoint's JSON answer.
type StatusAnswer struct {
	Key     string `json:"key"`
	Applied bool   `json:"applied"`
	Known   bool   `json:"known"`
}

// IdempotencyWindow is how long the downstream remembers a key (0: the
// dispatcher's default).
func (e *HTTPEffect) IdempotencyWindow() time.Duration { return e.Window }

// client never follows a redirect, whatever Client says (see
// source.NoRedirects).
func (e *HTTPEffect) client() *http.Client { return source.NoRedirects(e.Client) }

func (e *HTTPEffect) authorize(ctx context.Context, req *http.Request) error {
	tok := e.Secret
	if e.Token != nil {
		var err error
		if tok, err = e.Token(ctx); err != nil {
			return err
		}
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return nil
}

// statusGet sends GET StatusURL with the query parameters params (those
// with an empty value left out) and the effect's authorization. The
// caller closes the body.
func (e *HTTPEffect) statusGet(ctx context.Context, params map[string]string) (*http.Response, error) {
	u, err := url.Parse(e.StatusURL)
	if err != nil {
		return nil, fmt.Errorf("status url: %w", err)
	}
	q := u.Query()
	for k, v := range params {
		if v != "" {
			q.Set(k, v)
		}
	}
	u.RawQuery = q.Encode()
	// The URL built here passes the rule EFFECTS validation applies.
	if err := source.CheckEndpointURL(u.String()); err != nil {
		return nil, fmt.Errorf("status url: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if err := e.authorize(ctx, req); err != nil {
		return nil, err
	}
	resp, err := e.client().Do(req)
	if err != nil {
		return nil, err
	}
	if rerr := source.CheckRedirect(resp); rerr != nil {
		resp.Body.Close()
		return nil, rerr
	}
	return resp, nil
}

// Lookup asks the status endpoint whether key was applied. Without a
// StatusURL the answer is "not known", so the dispatcher falls back to a
// retry with the same key inside the idempotency window.
func (e *HTTPEffect) Lookup(ctx context.Context, key string) (applied, known bool, err error) {
	if e.StatusURL == "" {
		return false, false, nil
	}
	resp, err := e.statusGet(ctx, map[string]string{"key": key})
	if err != nil {
		return false, false, fmt.Errorf("status lookup %s: %w", key, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		var a StatusAnswer
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxStatusAnswer)).Decode(&a); err != nil {
			return false, false, fmt.Errorf("status lookup %s: bad answer: %w", key, err)
		}
		return a.Applied, a.Known, nil
	case http.StatusNotFound:
		return false, false, nil
	default:
		return false, false, fmt.Errorf("status lookup %s: HTTP %d", key, resp.StatusCode)
	}
}

// SubjectAnswer is the status endpoint's JSON answer about a subject.
// Version is the exact decimal of the last version applied; a JSON number
// is accepted too and kept as written (never through float64). Scope is
// the scope asked about (absent for none).
type SubjectAnswer struct {
	Subject string `json:"subject"`
	Scope   string `json:"scope,omitempty"`
	Version string `json:"version"`
	Known   bool   `json:"known"`
	Kind    string `json:"kind,omitempty"`
}

// maxStatusAnswer bounds the status endpoint's answer read.
const maxStatusAnswer = 4096

// SubjectVersion asks the status endpoint which version of scope's
// subject the downstream last applied. A 404, or an answer with known
// false, is not known; an answer about another subject or scope is an
// error. Without a StatusURL it returns ErrNoSubjectStatus. The version is
// kept as the exact decimal the downstream wrote.
func (e *HTTPEffect) SubjectVersion(ctx context.Context, scope, subject string) (version string, known bool, err error) {
	if e.StatusURL == "" {
		return "", false, fmt.Errorf("%s: %w", e.Name, ErrNoSubjectStatus)
	}
	resp, err := e.statusGet(ctx, map[string]string{"subject": subject, "scope": scope})
	if err != nil {
		return "", false, fmt.Errorf("subject status %s: %w", subject, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return "", false, nil
	default:
		return "", false, fmt.Errorf("subject status %s: HTTP %d", subject, resp.StatusCode)
	}
	var raw struct {
		Subject string          `json:"subject"`
		Scope   string          `json:"scope"`
		Version json.RawMessage `json:"version"`
		Known   bool            `json:"known"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxStatusAnswer)).Decode(&raw); err != nil {
		return "", false, fmt.Errorf("subject status %s: bad answer: %w", subject, err)
	}
	if raw.Subject != "" && raw.Subject != subject {
		return "", false, fmt.Errorf("subject status %s: the answer is about subject %q", subject, raw.Subject)
	}
	if raw.Scope != "" && raw.Scope != scope {
		return "", false, fmt.Errorf("subject status %s: the answer is about scope %q, not %q", subject, raw.Scope, scope)
	}
	if !raw.Known {
		return "", false, nil
	}
	v := strings.TrimSpace(string(raw.Version))
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	if !isDecimal(v) {
		return "", false, fmt.Errorf("subject status %s: version %q is not a decimal integer", subject, truncate(v, 40))
	}
	return v, true, nil
}

// isDecimal reports whether s is a decimal integer: an optional minus sign
// and 1 to 40 digits.
func isDecimal(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" || len(s) > 40 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return strings.ToValidUTF8(s, "")
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// MaxDetail bounds the response text kept in errors and results.
const MaxDetail = 200

// Kind returns the intent kind.
func (e *HTTPEffect) Kind() string { return e.Name }

type wireCall struct {
	Key     string         `json:"key"`
	Kind    string         `json:"kind"`
	Subject string         `json:"subject"`
	Payload map[string]any `json:"payload,omitempty"`
	// Version is the subject's version as an exact decimal string.
	Version string `json:"subject_version,omitempty"`
	// Scope and Source: whose fact the call acts on.
	Scope  string `json:"scope,omitempty"`
	Source string `json:"source,omitempty"`
}

// Do performs one call.
func (e *HTTPEffect) Do(ctx context.Context, c Call) (Result, error) {
	body, err := json.Marshal(wireCall{Key: c.Key, Kind: c.Kind, Subject: c.Subject, Payload: c.Payload, Version: c.Version, Scope: c.Scope, Source: c.Source})
	if err != nil {
		return Result{}, fmt.Errorf("%w: encode %s: %v", ErrPermanent, c.Key, err)
	}
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			wrote.Store(true)
		}
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, e.URL, bytes.NewReader(body))
	if err != nil {
		return Result{}, fmt.Errorf("%w: build request: %v", ErrPermanent, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", c.Key)
	if c.Version != "" {
		// The subject's version, exact (a decimal string, never a float),
		// so the downstream can refuse an older state too.
		req.Header.Set("X-Subject-Version", c.Version)
	}
	// Whose fact this is: the downstream keys the subject (and its
	// versions) by scope, and can refuse a source it does not serve.
	if c.Scope != "" {
		req.Header.Set("X-Effect-Scope", c.Scope)
	}
	if c.Source != "" {
		req.Header.Set("X-Effect-Source", c.Source)
	}
	if err := e.authorize(ctx, req); err != nil {
		// Nothing was sent: safe to retry once the secret is readable.
		return Result{}, &RetryableError{Err: fmt.Errorf("%s: bearer token: %w", c.Key, err)}
	}
	resp, err := e.client().Do(req)
	if err != nil {
		what := "connection lost"
		if os.IsTimeout(err) || errors.Is(err, context.DeadlineExceeded) {
			what = "timeout"
		}
		if wrote.Load() {
			return Result{}, fmt.Errorf("%w: %s %s after the request was sent", ErrUncertain, c.Key, what)
		}
		return Result{}, &RetryableError{Err: fmt.Errorf("%s %s before the request was sent", c.Key, what)}
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, MaxDetail))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	detail := strings.ToValidUTF8(string(snippet), "")
	code := resp.StatusCode
	if rerr := source.CheckRedirect(resp); rerr != nil {
		// Not performed as far as we can tell, and no retry can help:
		// the configuration is wrong. The owner must look.
		return Result{}, &MisconfiguredError{Code: "redirect_refused", Err: fmt.Errorf("%s: %w", c.Key, rerr)}
	}
	switch {
	case code >= 200 && code < 300:
		return Result{StatusCode: code, Detail: detail}, nil
	case code == http.StatusConflict && resp.Header.Get("Idempotency-Key") == c.Key:
		return Result{StatusCode: code, Replayed: true, Detail: detail}, nil
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		return Result{}, &RetryableError{RetryAfter: e.retryAfter(resp.Header.Get("Retry-After")), Err: fmt.Errorf("%s: HTTP %d", c.Key, code)}
	case code == http.StatusRequestTimeout || code >= 500:
		return Result{}, &RetryableError{Err: fmt.Errorf("%s: HTTP %d: %s", c.Key, code, detail)}
	default:
		return Result{}, fmt.Errorf("%w: %s: HTTP %d: %s", ErrPermanent, c.Key, code, detail)
	}
}

// retryAfter parses delta-seconds or an HTTP-date; anything else is 0.
func (e *HTTPEffect) retryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil && s > 0 {
		// Bounded before the multiplication: a huge delta-seconds would
		// overflow time.Duration and wrap.
		return time.Duration(min(s, int64(MaxRetryAfter/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		now := time.Now()
		if e.Clock != nil {
			now = e.Clock.Now()
		}
		return min(max(t.Sub(now), 0), MaxRetryAfter)
	}
	return 0
}

// MaxRetryAfter bounds the wait a downstream's Retry-After can impose on
// one intent (a day): longer answers are read as this.
const MaxRetryAfter = 24 * time.Hour
