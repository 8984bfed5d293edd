package downstream

import (
	"errors"
	"maps"
	"math/big"
	"slices"
	"sync"
	"time"
)

// ErrBadVersion: a subject version that is not a decimal integer.
var ErrBadVersion = errors.New("downstream: subject version is not a decimal integer")

// Applied is one effective apply of a call that carried a subject version
// (or one refused by RefuseOlder, in SubjectView.Refused).
type Applied struct {
	Version string         `json:"version"` // exact decimal, as the call carried it
	Kind    string         `json:"kind"`
	Key     string         `json:"key"`
	State   map[string]any `json:"state,omitempty"` // the payload's entitled, status and state fields, when present
	At      time.Time      `json:"at"`
}

// SubjectView is what the downstream applied for one subject, in the order
// it applied it: the downstream's own view, to compare with the canonical
// truth (I7; see docs/architecture.md).
type SubjectView struct {
	Last     string    `json:"last"`      // the version of the last apply
	LastKind string    `json:"last_kind"` // the kind of the last apply
	History  []Applied `json:"history"`
	// Regressions counts the applies whose version was lower than one
	// applied before for the subject: the proof that ordering broke.
	Regressions int `json:"regressions"`
	// Refused lists the calls RefuseOlder turned away (nothing applied).
	Refused []Applied `json:"refused,omitempty"`
}

// SubjectKey names a subject as a careful downstream keys it: the scope
// that owns it (the call's X-Effect-Scope, "" for none) and its id. The
// same id in two scopes is two subjects, each with its own versions: a
// vendor's order O-42 at revision 999 says nothing about the operator's
// O-42, and must not make the operator's revision 13 look old.
type SubjectKey struct {
	Scope   string `json:"scope,omitempty"`
	Subject string `json:"subject"`
}

// String is "<scope>/<subject>", or the subject alone without a scope.
func (k SubjectKey) String() string {
	if k.Scope == "" {
		return k.Subject
	}
	return k.Scope + "/" + k.Subject
}

// Book is the per-subject view of what a downstream applied, keyed by
// scope and subject. Fakes that stand for one service with several
// endpoints (entitlement grant and revoke) share a Book, so the order of
// versions is checked across them. It is safe for concurrent use; the
// zero value is ready.
type Book struct {
	mu sync.Mutex
	m  map[SubjectKey]*SubjectView
	// max is the highest version applied per subject (Last may be lower
	// after a regression).
	max map[SubjectKey]*big.Int
}

// parseVersion reads an exact decimal integer; it never goes through float64.
func parseVersion(s string) (*big.Int, error) {
	if s == "" || len(s) > 64 {
		return nil, ErrBadVersion
	}
	n, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return nil, ErrBadVersion
	}
	return n, nil
}

// CompareVersions compares two exact decimal versions as integers (-1, 0,
// +1); either not being a decimal integer is an error.
func CompareVersions(a, b string) (int, error) {
	x, err := parseVersion(a)
	if err != nil {
		return 0, err
	}
	y, err := parseVersion(b)
	if err != nil {
		return 0, err
	}
	return x.Cmp(y), nil
}

// apply records a as applied to subject, unless refuseOlder is set and its
// version is lower than the subject's last applied one: then it is
// recorded as refused and apply reports false. a.Version must be valid.
func (b *Book) apply(subject SubjectKey, a Applied, refuseOlder bool) bool {
	v, err := parseVersion(a.Version)
	if err != nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[SubjectKey]*SubjectView{}
		b.max = map[SubjectKey]*big.Int{}
	}
	sv := b.m[subject]
	if sv == nil {
		sv = &SubjectView{}
		b.m[subject] = sv
	}
	if refuseOlder && sv.Last != "" {
		if last, err := parseVersion(sv.Last); err == nil && v.Cmp(last) < 0 {
			sv.Refused = append(sv.Refused, a)
			return false
		}
	}
	if hi := b.max[subject]; hi != nil && v.Cmp(hi) < 0 {
		sv.Regressions++
	} else {
		b.max[subject] = v
	}
	sv.Last, sv.LastKind = a.Version, a.Kind
	sv.History = append(sv.History, a)
	return true
}

// Subject returns a copy of the view of scope's subject s; false when
// nothing carrying a version was applied (or refused) for it.
func (b *Book) Subject(scope, s string) (SubjectView, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sv, ok := b.m[SubjectKey{Scope: scope, Subject: s}]
	if !ok {
		return SubjectView{}, false
	}
	return sv.clone(), true
}

// Subjects returns a copy of every subject's view.
func (b *Book) Subjects() map[SubjectKey]SubjectView {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[SubjectKey]SubjectView, len(b.m))
	for k, sv := range b.m {
		out[k] = sv.clone()
	}
	return out
}

func (sv *SubjectView) clone() SubjectView {
	c := *sv
	c.History = cloneApplied(sv.History)
	c.Refused = cloneApplied(sv.Refused)
	return c
}

func cloneApplied(as []Applied) []Applied {
	if as == nil {
		return nil
	}
	out := slices.Clone(as)
	for i := range out {
		out[i].State = maps.Clone(out[i].State)
	}
	return out
}

// stateKeys are the payload fields kept in a subject's history.
var stateKeys = []string{"entitled", "status", "state"}

func stateOf(payload map[string]any) map[string]any {
	var st map[string]any
	for _, k := range stateKeys {
		if v, ok := payload[k]; ok {
			if st == nil {
				st = map[string]any{}
			}
			st[k] = v
		}
	}
	return st
}
