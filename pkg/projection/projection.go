package projection

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Event is what a projection sees: the identity and the verified raw bytes.
type Event struct {
	Source     string // configured source name
	Kind       string // provider kind, e.g. "stripe"
	EventID    string
	Type       string
	Payload    []byte
	ReceivedAt time.Time
}

// Result is a projection's answer for one event. Write nil means the event
// does not change any projected state (outcome ignored).
type Result struct {
	Write   *Write
	Intents []Intent
}

// Projection turns events into versioned state.
type Projection interface {
	Name() string
	Project(ev Event) (Result, error)
}

// PermanentError marks input no retry can fix. Code is a short stable
// identifier stored in the ledger ("malformed", "unknown_subject").
type PermanentError struct {
	Code string
	Err  error
}

func (e *PermanentError) Error() string { return e.Code + ": " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err as a permanent failure with a code.
func Permanent(code string, err error) error { return &PermanentError{Code: code, Err: err} }

// AsPermanent reports whether err is permanent, and its code.
func AsPermanent(err error) (string, bool) {
	var p *PermanentError
	if errors.As(err, &p) {
		return p.Code, true
	}
	return "", false
}

// Registry maps (provider kind, event type) to a projection.
type Registry struct {
	mu sync.RWMutex
	m  map[string]Projection
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{m: map[string]Projection{}} }

// Register adds p for each event type of kind. Registering a pair twice panics:
// it is a wiring bug found at cold start, never at request time.
func (r *Registry) Register(kind string, types []string, p Projection) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range types {
		k := kind + "\x00" + t
		if _, dup := r.m[k]; dup {
			panic(fmt.Sprintf("projection: %s/%s registered twice", kind, t))
		}
		r.m[k] = p
	}
}

// Lookup finds the projection for an event type, if any.
func (r *Registry) Lookup(kind, eventType string) (Projection, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.m[kind+"\x00"+eventType]
	return p, ok
}

// Names returns the names of the registered projections, sorted, each
// once (a projection registered for several event types is one name).
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	seen := map[string]bool{}
	var out []string
	for _, p := range r.m {
		if n := p.Name(); !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Fingerprint hashes a state canonically (sorted keys): equal business state,
// equal fingerprint.
func Fingerprint(state map[string]any) string {
	b, _ := json.Marshal(state) // encoding/json sorts map keys
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// OperationID derives the stable key of one business intent from its parts,
// e.g. (subject, transition, version). The same parts always give the same
// key, which is also the downstream idempotency key.
func OperationID(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
