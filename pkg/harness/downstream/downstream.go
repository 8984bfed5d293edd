// Package downstream provides a fake downstream API for tests and the local
// stack: it deduplicates by Idempotency-Key within a window like a real
// payment or messaging API, counts effective calls per key, answers
// scripted failures (500, 429 and 503 with Retry-After, 400, hangs before
// or after applying), and lists the scripts no call used yet. It is a
// harness: no function links it (functions/layout_test.go).
package downstream

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/effectively-once/webhooks/pkg/outbox"
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

	mu        sync.Mutex
	script    []Behavior
	keys      map[string]entry
	effective map[string]int
	calls     []Call
	applied   int
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
// known.
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
		key := r.URL.Query().Get("key")
		if key == "" {
			http.Error(w, "missing key", http.StatusBadRequest)
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

	f.mu.Lock()
	b := Behavior{Mode: Apply}
	if len(f.script) > 0 {
		b, f.script = f.script[0], f.script[1:]
	}
	call := Call{Key: key, Body: body, Mode: b.Mode}
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
	if seen && !f.expired(e) {
		call.Replayed = true
	} else {
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
