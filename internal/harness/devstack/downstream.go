package devstack

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/downstream"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
)

// Downstream is the local stack's fake downstream: one downstream.Fake
// per effect kind, served on one address under the routes the effects
// document names (POST url performs the effect, GET status_url?key= answers
// whether a key was applied, GET status_url?subject= the version last
// applied for a subject). Each fake deduplicates by Idempotency-Key
// within the effect's idempotency window, counts effective calls per key,
// requires the effect's bearer token, and can be scripted per kind. The
// fakes of one kind family (entitlement.grant and entitlement.revoke) share
// one per-subject view, as one service would: the order of the versions
// they apply is checked across them.
type Downstream struct {
	addr    string
	effects []outbox.EffectConfig // the HTTP effects; URLs point at addr
	all     []outbox.EffectConfig // every effect, AWS targets included, in order
	fakes   map[string]*downstream.Fake
	books   map[string]*downstream.Book // by kind family
	srv     *http.Server

	mu       sync.Mutex
	scripted map[string]int // behaviours scripted per kind, for the report
}

// ErrDownstream wraps a bad script or a bad effects document.
var ErrDownstream = errors.New("fake downstream")

// NewDownstream listens on addr and serves a fake for each effect.
// Effect URLs at DefaultDownstreamAddr are pointed at the address it really
// listens on; secret resolves an effect's env: reference to its fake value.
func NewDownstream(addr string, cfgs []outbox.EffectConfig, secret func(ref string) string) (*Downstream, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w on %s: %v (set DEV_DOWNSTREAM_ADDR)", ErrDownstream, addr, err)
	}
	d := &Downstream{addr: l.Addr().String(), fakes: map[string]*downstream.Fake{}, books: map[string]*downstream.Book{}, scripted: map[string]int{}}
	mux := http.NewServeMux()
	routes := map[string]string{}
	route := func(pattern, kind string, h http.Handler) error {
		if other, ok := routes[pattern]; ok {
			return fmt.Errorf("%w: effects %s and %s share the route %s", ErrDownstream, other, kind, pattern)
		}
		routes[pattern] = kind
		mux.Handle(pattern, h)
		return nil
	}
	for _, c := range cfgs {
		if c.Target != "" {
			// An AWS target's: the local targets perform it (Targets).
			d.all = append(d.all, c)
			continue
		}
		c.URL, c.StatusURL = d.rebase(c.URL), d.rebase(c.StatusURL)
		fam := ledger.Family(c.Kind)
		if d.books[fam] == nil {
			d.books[fam] = &downstream.Book{}
		}
		f := &downstream.Fake{Window: c.Window(), Secret: secret(c.Secret), HangLimit: 2 * c.Timeout(), Book: d.books[fam]}
		if u, err := url.Parse(c.URL); err == nil && u.Host == d.addr {
			if err := route("POST "+u.Path, c.Kind, f); err != nil {
				_ = l.Close()
				return nil, err
			}
		}
		if u, err := url.Parse(c.StatusURL); err == nil && c.StatusURL != "" && u.Host == d.addr {
			if err := route("GET "+u.Path, c.Kind, f); err != nil {
				_ = l.Close()
				return nil, err
			}
		}
		d.fakes[c.Kind] = f
		d.effects = append(d.effects, c)
		d.all = append(d.all, c)
	}
	d.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = d.srv.Serve(l) }()
	return d, nil
}

// rebase points a URL at the default downstream address to the real one.
func (d *Downstream) rebase(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || raw == "" || u.Host != DefaultDownstreamAddr {
		return raw
	}
	u.Host = d.addr
	return u.String()
}

// Addr is where the fake downstream listens.
func (d *Downstream) Addr() string { return d.addr }

// Effects is the EFFECTS document the dispatcher gets, with its URLs
// pointing at this downstream (and its AWS targets as configured).
func (d *Downstream) Effects() []byte {
	b, _ := json.Marshal(map[string]any{"effects": d.all})
	return b
}

// Fake returns the fake that performs kind.
func (d *Downstream) Fake(kind string) *downstream.Fake { return d.fakes[kind] }

// Close stops the server.
func (d *Downstream) Close() {
	if d.srv != nil {
		_ = d.srv.Close()
	}
}

// fakeModes names the scriptable behaviours.
var fakeModes = map[string]downstream.Mode{
	"apply":             downstream.Apply,
	"fail_500":          downstream.Fail500,
	"throttle_429":      downstream.Throttle429,
	"unavailable_503":   downstream.Unavailable503,
	"reject_400":        downstream.Reject400,
	"hang_before_apply": downstream.HangBeforeApply,
	"hang_after_apply":  downstream.HangAfterApply,
}

func modeName(m downstream.Mode) string {
	for name, v := range fakeModes {
		if v == m {
			return name
		}
	}
	return fmt.Sprintf("mode_%d", m)
}

// Behavior is one scripted answer: Mode is one of apply, fail_500,
// throttle_429, unavailable_503, reject_400, hang_before_apply,
// hang_after_apply; RetryAfterSeconds goes with 429 and 503.
type Behavior struct {
	Mode              string `json:"mode"`
	RetryAfterSeconds int    `json:"retry_after_seconds,omitempty"`
}

// Script is the body of POST /_dev/downstream/script: the next answers of
// the fake for Kind, in order.
type Script struct {
	Kind string     `json:"kind"`
	Then []Behavior `json:"then"`
}

// Script queues the next behaviours of one kind's fake.
func (d *Downstream) Script(s Script) error {
	f := d.fakes[s.Kind]
	if f == nil {
		return fmt.Errorf("%w: no effect kind %q (have %s)", ErrDownstream, s.Kind, strings.Join(d.kinds(), ", "))
	}
	if len(s.Then) == 0 {
		return fmt.Errorf("%w: script for %s has no behaviour", ErrDownstream, s.Kind)
	}
	bs := make([]downstream.Behavior, 0, len(s.Then))
	for _, b := range s.Then {
		m, ok := fakeModes[b.Mode]
		if !ok {
			return fmt.Errorf("%w: unknown mode %q", ErrDownstream, b.Mode)
		}
		if b.RetryAfterSeconds < 0 || b.RetryAfterSeconds > 3600 {
			return fmt.Errorf("%w: retry_after_seconds must be between 0 and 3600", ErrDownstream)
		}
		bs = append(bs, downstream.Behavior{Mode: m, RetryAfter: time.Duration(b.RetryAfterSeconds) * time.Second})
	}
	f.Then(bs...)
	d.mu.Lock()
	d.scripted[s.Kind] += len(bs)
	d.mu.Unlock()
	return nil
}

// ClearScript drops the scripted answers no request has used yet, of one
// kind or (kind "") of every kind, and returns how many it dropped per kind
// that had any. An answer scripted for a call that never came would
// otherwise answer the next, unrelated one.
func (d *Downstream) ClearScript(kind string) (map[string]int, error) {
	kinds := d.kinds()
	if kind != "" {
		if d.fakes[kind] == nil {
			return nil, fmt.Errorf("%w: no effect kind %q (have %s)", ErrDownstream, kind, strings.Join(kinds, ", "))
		}
		kinds = []string{kind}
	}
	cleared := map[string]int{}
	for _, k := range kinds {
		if n := d.fakes[k].ClearScript(); n > 0 {
			cleared[k] = n
		}
	}
	return cleared, nil
}

func (d *Downstream) kinds() []string { return slices.Sorted(maps.Keys(d.fakes)) }

// behaviors renders scripted behaviours as the script's JSON has them.
func behaviors(bs []downstream.Behavior) []Behavior {
	out := make([]Behavior, len(bs))
	for i, b := range bs {
		out[i] = Behavior{Mode: modeName(b.Mode), RetryAfterSeconds: int(b.RetryAfter / time.Second)}
	}
	return out
}

// DownstreamRequest is one request a fake received.
type DownstreamRequest struct {
	Key      string `json:"key"`
	Mode     string `json:"mode"`
	Replayed bool   `json:"replayed,omitempty"`
}

// DownstreamEffect is one kind's fake as GET /_dev/downstream shows it.
type DownstreamEffect struct {
	Kind       string              `json:"kind"`
	URL        string              `json:"url"`
	StatusURL  string              `json:"status_url,omitempty"`
	Window     string              `json:"idempotency_window"`
	Scripted   int                 `json:"scripted_so_far"`
	Pending    []Behavior          `json:"pending_script"` // scripted answers no request has used yet, next first
	NRequests  int                 `json:"request_count"`
	NEffective int                 `json:"effective_count"`
	MaxPerKey  int                 `json:"max_effective_per_key"`
	Effective  map[string]int      `json:"effective"` // idempotency key → times really applied
	Requests   []DownstreamRequest `json:"requests"`
}

// DownstreamState is the answer of GET /_dev/downstream.
type DownstreamState struct {
	Addr    string             `json:"addr"`
	Effects []DownstreamEffect `json:"effects"`
	// Totals over every kind.
	Requests  int `json:"requests"`
	Keys      int `json:"keys"`
	Effective int `json:"effective"`
	MaxPerKey int `json:"max_effective_per_key"` // must be 1
	// Pending counts the scripted answers no request has used yet
	// (DELETE /_dev/downstream/script clears them).
	Pending int `json:"pending_script"`
	// Subjects is the downstream's own view, per kind family and subject
	// ("<scope>/<subject>", downstream.SubjectKey, or the subject alone for
	// a call without a scope): the versions and states it applied, in
	// order, the last one, and how many applies went back to an older
	// version (must be 0). Only calls carrying a subject version appear.
	Subjects map[string]map[string]downstream.SubjectView `json:"subjects"`
}

// State reports every fake's requests and effective calls per key, and
// the per-subject view; with key set, only that key's (only the kinds that
// saw it, and only the subjects it reached, with their whole history).
func (d *Downstream) State(key string) DownstreamState {
	st := DownstreamState{Addr: d.addr, Effects: []DownstreamEffect{}, Subjects: d.subjects(key)}
	d.mu.Lock()
	scripted := maps.Clone(d.scripted)
	d.mu.Unlock()
	for _, c := range d.effects {
		f := d.fakes[c.Kind]
		e := DownstreamEffect{Kind: c.Kind, URL: c.URL, StatusURL: c.StatusURL, Window: strings.TrimSuffix(c.Window().String(), "0m0s"),
			Scripted: scripted[c.Kind], Pending: behaviors(f.Pending()), Effective: map[string]int{}, Requests: []DownstreamRequest{}}
		for k, n := range f.EffectiveByKey() {
			if key != "" && k != key {
				continue
			}
			e.Effective[k] = n
			e.NEffective += n
			e.MaxPerKey = max(e.MaxPerKey, n)
		}
		for _, call := range f.Calls() {
			if key != "" && call.Key != key {
				continue
			}
			e.Requests = append(e.Requests, DownstreamRequest{Key: call.Key, Mode: modeName(call.Mode), Replayed: call.Replayed})
		}
		e.NRequests = len(e.Requests)
		if key != "" && e.NRequests == 0 {
			continue
		}
		st.Requests += e.NRequests
		st.Keys += len(e.Effective)
		st.Effective += e.NEffective
		st.MaxPerKey = max(st.MaxPerKey, e.MaxPerKey)
		st.Pending += len(e.Pending)
		st.Effects = append(st.Effects, e)
	}
	return st
}

// subjects is every family's per-subject view; with key set, only the
// subjects a call with that key reached (applied or refused).
func (d *Downstream) subjects(key string) map[string]map[string]downstream.SubjectView {
	out := map[string]map[string]downstream.SubjectView{}
	for fam, b := range d.books {
		for subj, sv := range b.Subjects() {
			if key != "" && !reached(sv, key) {
				continue
			}
			if out[fam] == nil {
				out[fam] = map[string]downstream.SubjectView{}
			}
			out[fam][subj.String()] = sv
		}
	}
	return out
}

func reached(sv downstream.SubjectView, key string) bool {
	for _, as := range [][]downstream.Applied{sv.History, sv.Refused} {
		for _, a := range as {
			if a.Key == key {
				return true
			}
		}
	}
	return false
}
