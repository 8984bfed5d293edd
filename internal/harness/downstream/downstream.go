// Package downstream provides a fake downstream API for tests and the local
// stack: it deduplicates by Idempotency-Key within a window like a real
// payment or messaging API, counts effective calls per key, answers
// scripted failures (500, 429 and 503 with Retry-After, 400, hangs before
// or after applying), and lists the scripts no call used yet. Per subject
// it keeps the versions and states it applied, in order (a Book), so a test
// can assert the downstream's final view and that it never went back to an
// older version (I7; see docs/architecture.md), and it can refuse older
// versions like a guarding downstream. It keys subjects as a downstream
// must: by the call's scope (X-Effect-Scope) and subject, so one scope's
// versions never order another's. It is a harness: no function links it
// (functions/layout_test.go).
package downstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/effectively-once/webhooks/internal/outbox"
)

// Mode is what Fake does with one request.
type Mode int

// The modes. Apply is the default when nothing is scripted.
const (
	Apply           Mode = iota // apply (or replay a remembered key) and answer 200
	Fail500                     // answer 500 without applying
	Throttle429                 // answer 429 with Retry-After without applying
	Unavailable503              // answer 503 (with Retry-After if set) without applying
	Reject400                   // answer 400 without applying
	HangBeforeApply             // hang until the client gives up; nothing applied
	HangAfterApply              // apply, then hang until the client gives up
)

// Behavior scripts one request.
type Behavior struct {
	Mode       Mode
	RetryAfter time.Duration // for 429 and 503, sent as whole seconds
}

// Call is one request the fake received.
type Call struct {
	Key      string
	Body     []byte
	Replayed bool // answered from the idempotency store
	Mode     Mode
	// Version is the subject version the call carried ("" : none);
	// Scope and Source whose fact it named ("" : none).
	Version       string
	Scope, Source string
	// Refused: RefuseOlder turned the call away (409, nothing applied).
	Refused bool
}

type entry struct {
	at   time.Time
	body []byte
}

// Fake is an http.Handler that behaves like an idempotent
// downstream API: it deduplicates POSTs by Idempotency-Key within Window,
// replaying the stored response without a second effective call, and counts
// effective calls per key. Requests can be scripted to fail or hang. It is
// safe for concurrent use; serve it with httptest.NewServer.
type Fake struct {
	// Window is how long a key is remembered; 0 means forever.
	Window time.Duration
	// Now defaults to time.Now; tests inject their clock to move past Window.
	Now func() time.Time
	// Secret, when set, is the bearer token every request must carry.
	Secret string
	// Conflict makes duplicates answer 409 echoing Idempotency-Key instead
	// of replaying the stored 200.
	Conflict bool
	// HangLimit bounds a hang when the client never disconnects. Default 30s.
	HangLimit time.Duration
	// RefuseOlder makes the fake guard like a careful downstream: a call
	// whose subject version is lower than the last one it applied for that
	// subject in the call's scope is answered 409 without the
	// Idempotency-Key echo (a permanent refusal) and recorded as refused,
	// not applied.
	RefuseOlder bool
	// Book holds the per-subject view; fakes standing for one service
	// share one. Nil: the fake keeps its own.
	Book *Book

	mu        sync.Mutex
	script    []Behavior
	keys      map[string]entry
	effective map[string]int
	calls     []Call
	applied   int
	own       Book
}

var _ http.Handler = (*Fake)(nil)

// Then scripts the next requests, one behavior each, in order; after the
// script runs out requests are applied normally.
func (f *Fake) Then(b ...Behavior) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script = append(f.script, b...)
}

// Pending returns the scripted behaviors no request has used yet, in the
// order they will be used. A behavior scripted for a call that never came
// stays pending and answers the next, unrelated call (ClearScript).
func (f *Fake) Pending() []Behavior {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Behavior(nil), f.script...)
}

// ClearScript drops the scripted behaviors no request has used yet and
// returns how many there were; later requests are applied normally.
func (f *Fake) ClearScript() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.script)
	f.script = nil
	return n
}

// Effective returns how many times the effect for key really happened.
func (f *Fake) Effective(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.effective[key]
}

// EffectiveByKey returns a copy of the effective-call count of every key
// the fake applied at least once.
func (f *Fake) EffectiveByKey() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.effective))
	for k, v := range f.effective {
		out[k] = v
	}
	return out
}

// Calls returns every request received, duplicates and failures included.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// Lookup reports whether key was applied and is still remembered; it makes
// the fake usable behind a StatusLookup.
func (f *Fake) Lookup(key string) (applied, known bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.keys[key]
	if ok && f.expired(e) {
		return false, false
	}
	return ok, true
}

func (f *Fake) book() *Book {
	if f.Book != nil {
		return f.Book
	}
	return &f.own
}

// Subjects returns what the fake applied per scope and subject, for every
// subject a call carrying a subject version reached. Only effective
// applies count: not replays, not failures.
func (f *Fake) Subjects() map[SubjectKey]SubjectView { return f.book().Subjects() }

// Subject returns what the fake applied for scope's subject s.
func (f *Fake) Subject(scope, s string) (SubjectView, bool) { return f.book().Subject(scope, s) }

func (f *Fake) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

func (f *Fake) expired(e entry) bool {
	return f.Window > 0 && f.now().Sub(e.at) >= f.Window
}

// ServeHTTP handles one call.
//
// A GET with ?key=<operation id> is the status endpoint HTTPEffect.StatusURL
// expects: {"key":…, "applied":bool, "known":bool}; a key past Window is not
// known. A GET with ?subject=<s>&scope=<scope> answers the version last
// applied for the scope's subject: {"subject":…, "scope":…,
// "version":"<exact decimal>", "known":bool, "kind":…} (known false, 200,
// for a subject never reached).
//
// A POST carries its subject version in X-Subject-Version, or else in the
// body's subject_version; one that is not a decimal integer is answered
// 400 without applying. Its scope is X-Effect-Scope, or else the body's
// scope; the version orders the subject in that scope only.
func (f *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost && r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if f.Secret != "" && r.Header.Get("Authorization") != "Bearer "+f.Secret {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if r.Method == http.MethodGet {
		q := r.URL.Query()
		if q.Has("subject") {
			f.serveSubject(w, q.Get("scope"), q.Get("subject"))
			return
		}
		key := q.Get("key")
		if key == "" {
			http.Error(w, "missing key or subject", http.StatusBadRequest)
			return
		}
		applied, known := f.Lookup(key)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(outbox.StatusAnswer{Key: key, Applied: applied, Known: known})
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, "missing Idempotency-Key", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	wc, err := parseCall(body, r.Header.Get("X-Subject-Version"), r.Header.Get("X-Effect-Scope"), r.Header.Get("X-Effect-Source"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}

	f.mu.Lock()
	b := Behavior{Mode: Apply}
	if len(f.script) > 0 {
		b, f.script = f.script[0], f.script[1:]
	}
	call := Call{Key: key, Body: body, Mode: b.Mode, Version: wc.version, Scope: wc.Scope, Source: wc.Source}
	switch b.Mode {
	case Fail500, Throttle429, Unavailable503, Reject400, HangBeforeApply:
		f.calls = append(f.calls, call)
		f.mu.Unlock()
		f.fail(w, r, b)
		return
	}
	if f.keys == nil {
		f.keys = map[string]entry{}
		f.effective = map[string]int{}
	}
	e, seen := f.keys[key]
	switch {
	case seen && !f.expired(e):
		call.Replayed = true
	case wc.version != "" && wc.Subject != "" &&
		!f.book().apply(SubjectKey{Scope: wc.Scope, Subject: wc.Subject}, Applied{Version: wc.version, Kind: wc.Kind, Key: key, State: stateOf(wc.Payload), At: f.now()}, f.RefuseOlder):
		call.Refused = true
		f.calls = append(f.calls, call)
		f.mu.Unlock()
		http.Error(w, "an older version of subject "+SubjectKey{Scope: wc.Scope, Subject: wc.Subject}.String()+" than the one applied", http.StatusConflict)
		return
	default:
		f.applied++
		f.effective[key]++
		resp, _ := json.Marshal(map[string]any{"applied": true, "key": key, "effect_id": f.applied})
		e = entry{at: f.now(), body: resp}
		f.keys[key] = e
	}
	f.calls = append(f.calls, call)
	f.mu.Unlock()

	if b.Mode == HangAfterApply {
		f.hang(r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if call.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
		if f.Conflict {
			w.Header().Set("Idempotency-Key", key)
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write(e.body)
			return
		}
	}
	_, _ = w.Write(e.body)
}

func (f *Fake) fail(w http.ResponseWriter, r *http.Request, b Behavior) {
	if b.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((b.RetryAfter+time.Second-1)/time.Second)))
	}
	switch b.Mode {
	case Fail500:
		http.Error(w, "internal error", http.StatusInternalServerError)
	case Throttle429:
		http.Error(w, "slow down", http.StatusTooManyRequests)
	case Unavailable503:
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	case Reject400:
		http.Error(w, "invalid request", http.StatusBadRequest)
	case HangBeforeApply:
		f.hang(r)
	}
}

// hang blocks until the client disconnects or HangLimit passes, and then
// answers nothing useful.
func (f *Fake) hang(r *http.Request) {
	limit := f.HangLimit
	if limit <= 0 {
		limit = 30 * time.Second
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-r.Context().Done():
	case <-t.C:
	}
}

// serveSubject answers the subject status endpoint.
func (f *Fake) serveSubject(w http.ResponseWriter, scope, subject string) {
	if subject == "" {
		http.Error(w, "missing subject", http.StatusBadRequest)
		return
	}
	a := outbox.SubjectAnswer{Subject: subject, Scope: scope}
	if sv, ok := f.Subject(scope, subject); ok && sv.Last != "" {
		a.Version, a.Known, a.Kind = sv.Last, true, sv.LastKind
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(a)
}

// wireCall is what the fake reads of a POST body (outbox.HTTPEffect's).
type wireCall struct {
	Kind    string          `json:"kind"`
	Subject string          `json:"subject"`
	Payload map[string]any  `json:"payload"`
	Version json.RawMessage `json:"subject_version"`
	Scope   string          `json:"scope"`
	Source  string          `json:"source"`

	version string // the exact decimal the call carries, "" for none
}

// parseCall reads the subject, scope, source, kind, payload and version of
// a call. A body that is not a JSON object carries no subject (the call is
// still applied); a version that is not a decimal integer, in the header
// or the body, is an error. Headers win over the body.
func parseCall(body []byte, header, scope, source string) (wireCall, error) {
	var wc wireCall
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&wc); err != nil {
		wc = wireCall{}
	}
	v := header
	if v == "" && len(wc.Version) > 0 && string(wc.Version) != "null" {
		v = strings.Trim(string(wc.Version), `"`)
	}
	if v != "" {
		if _, err := parseVersion(v); err != nil {
			return wireCall{}, fmt.Errorf("subject version %q: %w", v, err)
		}
	}
	wc.version = v
	if scope != "" {
		wc.Scope = scope
	}
	if source != "" {
		wc.Source = source
	}
	return wc, nil
}
