package devstack

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/stripefake"
)

// DefaultStripeAddr is where the fake Stripe API listens unless
// DEV_STRIPE_ADDR or AutoPorts says otherwise. The sources document names
// it in a stripe source's api.url (and truth.url); the stack points those
// URLs at the fake's real address when it moves.
const DefaultStripeAddr = "127.0.0.1:3003"

// StripeKeyEnv names the local secret (scripts/devstack.json "secrets")
// that is the fake Stripe API's only valid key: the stripe source's api
// and truth reference it as env:LOCAL_STRIPE_API_KEY.
const StripeKeyEnv = "LOCAL_STRIPE_API_KEY"

// ErrStripe wraps a bad request to the fake Stripe API's dev endpoints.
var ErrStripe = errors.New("fake stripe api")

// StripeAPI is the local stack's fake Stripe API: a stripefake.Server
// (objects subscriptions, invoices and payment_intents, GET /v1/events,
// Bearer auth, scripted failures, a request log) served on one address.
// The processor fetches the object a thin event names from it; the
// dev endpoints (DevHandler) set Stripe's truth, script its answers and
// show what it was asked. Every request it answers is logged as
// "stripe-api | GET /v1/… → 200".
type StripeAPI struct {
	addr string
	fake *stripefake.Server
	srv  *http.Server
	logs *Logs
}

// NewStripeAPI listens on addr and serves a fake Stripe API that accepts
// key as its only API key (an empty key accepts none). logs may be nil.
func NewStripeAPI(addr, key string, logs *Logs) (*StripeAPI, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w on %s: %v (set DEV_STRIPE_ADDR)", ErrStripe, addr, err)
	}
	a := &StripeAPI{addr: l.Addr().String(), fake: stripefake.New(key), logs: logs}
	a.fake.OnAnswer = a.logAnswer
	a.srv = &http.Server{Handler: a.fake, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = a.srv.Serve(l) }()
	return a, nil
}

// logAnswer logs one answer of the fake (never the key: requests carry
// none).
func (a *StripeAPI) logAnswer(q stripefake.Request) {
	answer := fmt.Sprint(q.Status)
	if q.Status == 0 {
		answer = "no answer (the client gave up)"
	}
	target := q.Path
	if q.RawQuery != "" {
		target += "?" + q.RawQuery
	}
	a.logf("%s %s → %s in %s", q.Method, target, answer, time.Since(q.Time).Round(100*time.Microsecond))
}

func (a *StripeAPI) logf(format string, args ...any) {
	if a.logs != nil {
		a.logs.Printf("stripe-api", format, args...)
	}
}

// Addr is where the fake Stripe API listens.
func (a *StripeAPI) Addr() string { return a.addr }

// Fake is the fake itself, for tests that drive it directly.
func (a *StripeAPI) Fake() *stripefake.Server { return a.fake }

// Close stops the server.
func (a *StripeAPI) Close() {
	if a.srv != nil {
		_ = a.srv.Close()
	}
}

// Sources returns the sources document with every api.url and truth.url
// that names DefaultStripeAddr pointed at the fake's real address, as the
// downstream does for the effect URLs. The document is returned unchanged
// when nothing moved.
func (a *StripeAPI) Sources(doc json.RawMessage) (json.RawMessage, error) {
	if a.addr == DefaultStripeAddr || len(doc) == 0 {
		return doc, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil {
		return nil, fmt.Errorf("%w: sources document: %v", ErrStripe, err)
	}
	var sources []map[string]json.RawMessage
	if raw, ok := top["sources"]; ok {
		if err := json.Unmarshal(raw, &sources); err != nil {
			return nil, fmt.Errorf("%w: sources: %v", ErrStripe, err)
		}
	}
	changed := false
	for _, src := range sources {
		for _, field := range []string{"api", "truth"} {
			raw, ok := src[field]
			if !ok {
				continue
			}
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(raw, &obj); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrStripe, field, err)
			}
			var u string
			if err := json.Unmarshal(obj["url"], &u); err != nil || u == "" {
				continue
			}
			parsed, err := url.Parse(u)
			if err != nil || parsed.Host != DefaultStripeAddr {
				continue
			}
			parsed.Host = a.addr
			obj["url"], _ = json.Marshal(parsed.String())
			src[field], _ = json.Marshal(obj)
			changed = true
		}
	}
	if !changed {
		return doc, nil
	}
	top["sources"], _ = json.Marshal(sources)
	return json.Marshal(top)
}

// StripeBehavior is one scripted answer of the fake Stripe API. Mode is
// one of apply (answer normally), rate_limited (429 rate_limit, with
// Retry-After when RetryAfterSeconds > 0), lock_timeout (429
// lock_timeout), server_error (Status, default 500, type api_error) and
// hang (no answer until the client gives up).
type StripeBehavior struct {
	Mode              string `json:"mode"`
	RetryAfterSeconds int    `json:"retry_after_seconds,omitempty"`
	Status            int    `json:"status,omitempty"`
}

// StripeScript is the body of POST /_dev/stripe/script: the next answers
// for requests whose path starts with Path ("/v1/subscriptions/sub_x", or
// "/v1/" for every request), in order, after authentication.
type StripeScript struct {
	Path string           `json:"path"`
	Then []StripeBehavior `json:"then"`
}

// Script queues the next answers for a path prefix.
func (a *StripeAPI) Script(s StripeScript) error {
	if !strings.HasPrefix(s.Path, "/v1/") {
		return fmt.Errorf("%w: path %q must start with /v1/", ErrStripe, s.Path)
	}
	if len(s.Then) == 0 {
		return fmt.Errorf("%w: script for %s has no behaviour", ErrStripe, s.Path)
	}
	answers := make([]stripefake.Answer, 0, len(s.Then))
	for _, b := range s.Then {
		if b.RetryAfterSeconds < 0 || b.RetryAfterSeconds > 3600 {
			return fmt.Errorf("%w: retry_after_seconds must be between 0 and 3600", ErrStripe)
		}
		switch b.Mode {
		case "apply":
			answers = append(answers, stripefake.Apply())
		case "rate_limited":
			answers = append(answers, stripefake.RateLimited(time.Duration(b.RetryAfterSeconds)*time.Second))
		case "lock_timeout":
			answers = append(answers, stripefake.LockTimeout())
		case "server_error":
			status := b.Status
			if status == 0 {
				status = http.StatusInternalServerError
			}
			if status < 500 || status > 599 {
				return fmt.Errorf("%w: server_error status must be 5xx, got %d", ErrStripe, status)
			}
			answers = append(answers, stripefake.ServerError(status))
		case "hang":
			answers = append(answers, stripefake.Hang())
		default:
			return fmt.Errorf("%w: unknown mode %q (apply, rate_limited, lock_timeout, server_error, hang)", ErrStripe, b.Mode)
		}
	}
	a.fake.Script(s.Path, answers...)
	return nil
}

// StripeRequest is one request the fake Stripe API received.
type StripeRequest struct {
	Method string    `json:"method"`
	Path   string    `json:"path"`
	Query  string    `json:"query,omitempty"`
	At     time.Time `json:"at"`
	// Status answered; 0 while it is being answered or when the client
	// gave up before an answer (a hang).
	Status int `json:"status"`
}

// StripeRequests is the answer of GET /_dev/stripe/requests.
type StripeRequests struct {
	Addr     string          `json:"addr"`
	Count    int             `json:"count"`
	Requests []StripeRequest `json:"requests"`
}

// Requests lists what the fake was asked, oldest first; with prefix set,
// only the requests whose path starts with it.
func (a *StripeAPI) Requests(prefix string) StripeRequests {
	out := StripeRequests{Addr: a.addr, Requests: []StripeRequest{}}
	for _, r := range a.fake.Requests() {
		if !strings.HasPrefix(r.Path, prefix) {
			continue
		}
		out.Requests = append(out.Requests, StripeRequest{Method: r.Method, Path: r.Path, Query: r.RawQuery, At: r.Time, Status: r.Status})
	}
	out.Count = len(out.Requests)
	return out
}

// maxStripeObjectBytes bounds a PUT object body.
const maxStripeObjectBytes = 1 << 20

// DevHandler serves the dev-only endpoints the local HTTP API mounts
// under /_dev/stripe/:
//
//	PUT    /_dev/stripe/objects/{type}/{id}   set Stripe's truth (body: the object JSON)
//	DELETE /_dev/stripe/objects/{type}/{id}   retrieving it is then a 404
//	GET    /_dev/stripe/requests[?path=]      what the fake was asked, with statuses
//	POST   /_dev/stripe/script                its next answers for a path (StripeScript)
func (a *StripeAPI) DevHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /_dev/stripe/objects/{type}/{id}", a.putObject)
	mux.HandleFunc("DELETE /_dev/stripe/objects/{type}/{id}", func(w http.ResponseWriter, r *http.Request) {
		typ, id := r.PathValue("type"), r.PathValue("id")
		if err := a.fake.DeleteObject(typ, id); err != nil {
			writeMessage(w, http.StatusBadRequest, err.Error())
			return
		}
		a.logf("deleted %s %s", typ, id)
		writeMessage(w, http.StatusOK, "deleted")
	})
	mux.HandleFunc("GET /_dev/stripe/requests", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(a.Requests(r.URL.Query().Get("path")))
	})
	mux.HandleFunc("POST /_dev/stripe/script", func(w http.ResponseWriter, r *http.Request) {
		var sc StripeScript
		dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&sc); err != nil {
			writeMessage(w, http.StatusBadRequest, `want {"path":"/v1/subscriptions/sub_x","then":[{"mode":"rate_limited","retry_after_seconds":1}]}`)
			return
		}
		if err := a.Script(sc); err != nil {
			writeMessage(w, http.StatusBadRequest, err.Error())
			return
		}
		modes := make([]string, len(sc.Then))
		for i, b := range sc.Then {
			modes[i] = b.Mode
			if b.RetryAfterSeconds > 0 {
				modes[i] += fmt.Sprintf(" (Retry-After %d s)", b.RetryAfterSeconds)
			}
		}
		a.logf("scripted %s: next %s", sc.Path, strings.Join(modes, ", "))
		writeMessage(w, http.StatusAccepted, "scripted")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotFound, `{"message":"Not Found"}`)
	})
	return mux
}

func (a *StripeAPI) putObject(w http.ResponseWriter, r *http.Request) {
	typ, id := r.PathValue("type"), r.PathValue("id")
	body, err := io.ReadAll(io.LimitReader(r.Body, maxStripeObjectBytes+1))
	if err != nil || len(body) > maxStripeObjectBytes {
		writeMessage(w, http.StatusBadRequest, "the object must be at most 1 MiB of JSON")
		return
	}
	var head struct {
		ID     string `json:"id"`
		Object string `json:"object"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(body, &head); err != nil {
		writeMessage(w, http.StatusBadRequest, "the body must be the object's JSON: "+err.Error())
		return
	}
	if head.ID != id || head.Object != typ {
		writeMessage(w, http.StatusBadRequest, fmt.Sprintf("the body is %s %q; the path names %s %q", head.Object, head.ID, typ, id))
		return
	}
	if err := a.fake.PutObject(typ, id, body); err != nil {
		writeMessage(w, http.StatusBadRequest, err.Error())
		return
	}
	a.logf("put %s %s (status %s)", typ, id, orNone(head.Status))
	writeMessage(w, http.StatusOK, "stored")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func writeMessage(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(map[string]string{"message": msg})
	writeJSON(w, status, string(b))
}
