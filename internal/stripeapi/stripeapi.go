package stripeapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v82"
)

var (
	// ErrNotFound: Stripe has no such object (404). Permanent.
	ErrNotFound = errors.New("stripeapi: object not found")
	// ErrUnsupported: an object type this package does not fetch. Permanent.
	ErrUnsupported = errors.New("stripeapi: unsupported object type")
	// ErrInvalid: an id that is not a Stripe id, a request Stripe refused as
	// invalid (a 4xx other than 401, 403, 404, 409, 429), or a body that is
	// not the JSON object asked for. Permanent.
	ErrInvalid = errors.New("stripeapi: invalid")
	// ErrAuth: the API key was refused (401, 403) or none is configured.
	// Not the event's fault: retry, do not quarantine.
	ErrAuth = errors.New("stripeapi: API key refused")
	// ErrUnavailable: rate limited (429), conflict (409), a server error
	// (5xx), a timeout, a cancellation, a network failure, an undecodable
	// error answer, or the key source failing. Transient.
	ErrUnavailable = errors.New("stripeapi: Stripe unavailable")
)

const (
	// DefaultTimeout bounds a Retrieve when Client.Timeout is zero.
	DefaultTimeout = 5 * time.Second
	// MaxRetryAfter caps what RetryAfter reports.
	MaxRetryAfter = 10 * time.Minute
	// maxIDLen is Stripe's bound on object ids.
	maxIDLen = 255
)

// collections maps each object type we fetch (the related_object.type of a
// thin event, and the object's own "object" field) to its path segment.
var collections = map[string]string{
	"subscription":   "subscriptions",
	"invoice":        "invoices",
	"payment_intent": "payment_intents",
}

// Client fetches Stripe objects by type and id. The zero value with Key set
// talks to api.stripe.com.
type Client struct {
	// Key returns the API key: a restricted key that can read subscriptions,
	// invoices and payment intents. It is called on every Retrieve (cache in
	// the key source, not here), bounded by the same timeout.
	Key func(ctx context.Context) (string, error)
	// Backend sends the requests; nil means NewBackend("", nil). Tests pass
	// NewBackend(fake.URL, fake.Client()).
	Backend stripe.Backend
	// Timeout bounds one Retrieve (key and request), within ctx's own
	// deadline; zero means DefaultTimeout.
	Timeout time.Duration
	// Now is the fallback for ObservedAt when a response has no usable Date
	// header; nil means time.Now.
	Now func() time.Time
	// APIVersion is the Stripe-Version to render objects in; "" means
	// stripe-go's own (stripe.APIVersion).
	APIVersion string
}

// Object is one Stripe object as retrieved.
type Object struct {
	Type string // subscription, invoice, payment_intent
	ID   string
	// JSON is the response body exactly as Stripe sent it.
	JSON []byte
	// ObservedAt is the response's Date header: Stripe's clock, in whole
	// seconds, UTC. Without one, Client.Now at the answer.
	ObservedAt time.Time
	// RequestID is Stripe's Request-Id, for logs.
	RequestID string
}

// NewBackend returns a Stripe API backend for baseURL ("" for
// api.stripe.com) over a copy of hc (nil: a client with stripe-go's 80 s
// timeout) that does not retry on its own, refuses redirects and logs
// nothing.
func NewBackend(baseURL string, hc *http.Client) stripe.Backend {
	c := http.Client{Timeout: 80 * time.Second}
	if hc != nil {
		c = *hc
	}
	c.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
		return fmt.Errorf("redirect to %s refused", req.URL.Host)
	}
	cfg := &stripe.BackendConfig{
		MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		HTTPClient:        &c,
	}
	if baseURL != "" {
		cfg.URL = stripe.String(baseURL)
	}
	return stripe.GetBackendWithConfig(stripe.APIBackend, cfg)
}

var defaultBackend = sync.OnceValue(func() stripe.Backend { return NewBackend("", nil) })

// Path returns the API path of objType/id, or ErrUnsupported or ErrInvalid.
// An id is 1 to 255 characters of [A-Za-z0-9_], so it can never change the
// path it is put in.
func Path(objType, id string) (string, error) {
	c, ok := collections[objType]
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrUnsupported, clip(objType))
	}
	if !validID(id) {
		return "", fmt.Errorf("%w: %s id %q", ErrInvalid, objType, clip(id))
	}
	return "/v1/" + c + "/" + id, nil
}

func validID(id string) bool {
	if id == "" || len(id) > maxIDLen {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// validContext: one to eight ids, each valid, joined by "/" (the form of
// a Stripe-Context path), so the header carries nothing else.
func validContext(c string) bool {
	parts := strings.Split(c, "/")
	if len(parts) > 8 {
		return false
	}
	for _, p := range parts {
		if !validID(p) {
			return false
		}
	}
	return true
}

// clip bounds what an error quotes of untrusted input.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// rawObject decodes only what Retrieve checks; the body itself is kept from
// LastResponse.RawJSON.
type rawObject struct {
	stripe.APIResource
	ID     string `json:"id"`
	Object string `json:"object"`
}

// Retrieve fetches objType/id of the key's own account. The error, if any,
// is one of the package's sentinels (see the package documentation),
// wrapped with the type, id and what Stripe said.
func (c *Client) Retrieve(ctx context.Context, objType, id string) (Object, error) {
	return c.RetrieveIn(ctx, "", objType, id)
}

// RetrieveIn is Retrieve in a Stripe context: stripeContext, when not
// empty, is sent as the Stripe-Context header, so the object of a
// connected account (the account a Connect event names in its context) is
// read as that account's, where it lives. A context that is not account
// ids of [A-Za-z0-9_] joined by "/" is ErrInvalid, before any request.
func (c *Client) RetrieveIn(ctx context.Context, stripeContext, objType, id string) (Object, error) {
	path, err := Path(objType, id)
	if err != nil {
		return Object{}, fmt.Errorf("retrieve: %w", err)
	}
	op := "retrieve " + objType + " " + id
	if stripeContext != "" {
		if !validContext(stripeContext) {
			return Object{}, fmt.Errorf("retrieve: %w: Stripe context %q", ErrInvalid, clip(stripeContext))
		}
		op += " in " + stripeContext
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	if c.Key == nil {
		return Object{}, &apiError{op: op, kind: ErrAuth, detail: "no API key configured"}
	}
	key, err := c.Key(ctx)
	if err != nil {
		return Object{}, &apiError{op: op, kind: ErrUnavailable, detail: "API key: " + err.Error(), cause: err}
	}
	if key == "" {
		return Object{}, &apiError{op: op, kind: ErrAuth, detail: "empty API key"}
	}

	backend := c.Backend
	if backend == nil {
		backend = defaultBackend()
	}
	params := &stripe.Params{Context: ctx}
	if c.APIVersion != "" {
		params.Headers = http.Header{"Stripe-Version": {c.APIVersion}}
	}
	if stripeContext != "" {
		params.StripeContext = stripe.String(stripeContext)
	}
	var res rawObject
	err = backend.CallRaw(http.MethodGet, path, key, nil, params, &res)
	if err != nil {
		return Object{}, c.classify(ctx, op, key, timeout, err, res.LastResponse)
	}
	if res.LastResponse == nil {
		return Object{}, &apiError{op: op, kind: ErrInvalid, detail: "the backend kept no response"}
	}
	if res.Object != objType || res.ID != id {
		return Object{}, &apiError{op: op, kind: ErrInvalid, detail: fmt.Sprintf("answered %q %q instead (request %s)", clip(res.Object), clip(res.ID), res.LastResponse.RequestID)}
	}
	return Object{
		Type:       objType,
		ID:         id,
		JSON:       res.LastResponse.RawJSON,
		ObservedAt: c.observedAt(res.LastResponse.Header),
		RequestID:  res.LastResponse.RequestID,
	}, nil
}

func (c *Client) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Client) observedAt(h http.Header) time.Time {
	if t, err := http.ParseTime(h.Get("Date")); err == nil {
		return t.UTC()
	}
	return c.now().UTC()
}

// classify maps a failed call to one sentinel. resp is the response the
// backend kept when the body failed to decode (a 2xx that is not JSON).
func (c *Client) classify(ctx context.Context, op, key string, timeout time.Duration, err error, resp *stripe.APIResponse) error {
	var se *stripe.Error
	if !errors.As(err, &se) {
		if resp != nil && resp.StatusCode < 400 {
			return &apiError{op: op, kind: ErrInvalid, detail: fmt.Sprintf("HTTP %d, body is not a JSON object (request %s)", resp.StatusCode, resp.RequestID)}
		}
		// Network, timeout, cancellation, refused redirect, or an error
		// answer that is not Stripe's JSON (a proxy's 502 page).
		detail := redact(err.Error(), key)
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			detail = fmt.Sprintf("no answer before the deadline (timeout %s): %s", timeout, detail)
		}
		return &apiError{op: op, kind: ErrUnavailable, detail: detail, cause: err}
	}

	status := se.HTTPStatusCode
	detail := fmt.Sprintf("HTTP %d", status)
	if se.Code != "" {
		detail += " " + string(se.Code)
	}
	if se.RequestID != "" {
		detail += ", request " + se.RequestID
	}
	e, msg := &apiError{op: op}, se.Msg
	switch {
	case status == http.StatusNotFound:
		e.kind = ErrNotFound
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		// Stripe's message quotes part of the key: leave it out.
		e.kind, msg = ErrAuth, ""
	case status == http.StatusTooManyRequests || status == http.StatusConflict || status >= 500:
		e.kind = ErrUnavailable
		if se.LastResponse != nil {
			e.retryAfter, e.hasRetryAfter = parseRetryAfter(se.LastResponse.Header, c.now())
		}
	default:
		e.kind = ErrInvalid
	}
	if msg != "" {
		detail += ": " + msg
	}
	e.detail = redact(detail, key)
	return e
}

func redact(s, key string) string {
	if key == "" {
		return s
	}
	return strings.ReplaceAll(s, key, "[API key]")
}

// parseRetryAfter reads delta-seconds or an HTTP date (against the
// response's own Date when it has one), capped to MaxRetryAfter.
func parseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		d = MaxRetryAfter
		if n < int64(MaxRetryAfter/time.Second) {
			d = time.Duration(n) * time.Second
		}
	} else if at, err := http.ParseTime(v); err == nil {
		if date, err := http.ParseTime(h.Get("Date")); err == nil {
			now = date
		}
		d = max(0, at.Sub(now))
	} else {
		return 0, false
	}
	return min(d, MaxRetryAfter), true
}

// RetryAfter returns how long the server asked us to wait before trying
// again, when err is a Retrieve error whose answer carried a Retry-After
// (at most MaxRetryAfter). Stripe documents none on its 429s: treat it as
// a floor under the caller's own backoff.
func RetryAfter(err error) (time.Duration, bool) {
	var e *apiError
	if errors.As(err, &e) && e.hasRetryAfter {
		return e.retryAfter, true
	}
	return 0, false
}

// apiError is a Retrieve error: what was asked, one sentinel, details
// built (and redacted) when it was made, and for transport failures and a
// failing key source the cause.
type apiError struct {
	op            string
	kind          error
	detail        string
	cause         error
	retryAfter    time.Duration
	hasRetryAfter bool
}

func (e *apiError) Error() string { return e.op + ": " + e.kind.Error() + ": " + e.detail }

func (e *apiError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}
