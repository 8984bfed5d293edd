package outbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/warehouse"
)

// Errors an Effect returns, and the classification the dispatcher records.
var (
	// ErrPermanent: the downstream refused the call and no retry can help
	// (a 4xx other than 409-same-key, 429 and 408). The intent is FAILED.
	ErrPermanent = errors.New("outbox: permanent failure")
	// ErrUncertain: the request was sent and the answer was lost (a timeout or
	// a dropped connection after writing). The effect may have happened; only
	// the same idempotency key may be used again.
	ErrUncertain = errors.New("outbox: outcome uncertain")
	// ErrNoEffect: no Effect is registered for the intent's kind.
	ErrNoEffect = errors.New("outbox: no effect for kind")
)

// RetryableError says the call did not take effect and may be retried,
// not before RetryAfter when the downstream said so (429/503 Retry-After).
type RetryableError struct {
	RetryAfter time.Duration
	Err        error
}

func (e *RetryableError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("retryable (after %s): %v", e.RetryAfter, e.Err)
	}
	return fmt.Sprintf("retryable: %v", e.Err)
}

func (e *RetryableError) Unwrap() error { return e.Err }

// MisconfiguredError says no retry can help and the effect's owner must
// act: its configuration is wrong (its URL answers a redirect, its AWS
// target refuses the request), or the call cannot be made as configured
// (it is over the target's size limit). The request may or may not have
// been acted on (a redirect), so the intent is QUARANTINED for its owner
// with Code.
type MisconfiguredError struct {
	Code string
	Err  error
}

func (e *MisconfiguredError) Error() string { return e.Code + ": " + e.Err.Error() }
func (e *MisconfiguredError) Unwrap() error { return e.Err }

// Class is what an effect's error means for the intent.
type Class int

// The classes.
const (
	ClassOK            Class = iota // the effect happened (or had already happened under this key)
	ClassPermanent                  // refused; FAILED
	ClassRetryable                  // not applied; RETRY_WAIT
	ClassUncertain                  // maybe applied; UNCERTAIN
	ClassMisconfigured              // the configuration is wrong; QUARANTINED
)

// Classify is the one place that maps an effect's error to a Class. An
// error it does not recognise is uncertain: the dispatcher cannot know
// whether the request left, so it keeps the key and does not give up early.
// The duration is the downstream's Retry-After, if any.
func Classify(err error) (Class, time.Duration) {
	var re *RetryableError
	var me *MisconfiguredError
	switch {
	case err == nil:
		return ClassOK, 0
	case errors.As(err, &me):
		return ClassMisconfigured, 0
	case errors.Is(err, ErrPermanent):
		return ClassPermanent, 0
	case errors.As(err, &re):
		return ClassRetryable, re.RetryAfter
	default:
		return ClassUncertain, 0
	}
}

// Call is one request to perform an intent's effect.
type Call struct {
	Key     string // the operation id: the downstream idempotency key, the same on every attempt
	Kind    string
	Subject string
	Payload map[string]any
	// Version is the version of the projection subject the intent came
	// from, as an exact decimal ("" for intents that do not know it).
	// Versions are ordered within a scope only: two scopes' subjects of
	// the same id are different subjects, each with its own versions.
	Version string
	// Scope owns the fact the call acts on ("" for an unscoped source's
	// intent) and Source delivered it, so the downstream can tell whose
	// order, account or subscription it is.
	Scope  string
	Source string
	// Record, for a warehouse record intent, is its record as the ledger
	// recorded the intent (recordOf): scope, projection, subject,
	// version, source and event from the intent item, never from its
	// payload. nil for every other intent.
	Record *warehouse.Record
}

// Result is what a successful call returned.
type Result struct {
	StatusCode int    // the HTTP status, when the effect is HTTP
	Replayed   bool   // the downstream said it had already applied this key
	Detail     string // short, for the audit trail; never secrets
}

// Effect performs one kind of intent. Do returns nil on success, or an error
// that Classify understands (ErrPermanent, *RetryableError, ErrUncertain).
type Effect interface {
	Kind() string
	Do(ctx context.Context, c Call) (Result, error)
}

// StatusLookup is implemented by effects whose downstream can say whether a
// key was applied. known is false when the downstream does not know (for
// example, it forgot the key).
type StatusLookup interface {
	Lookup(ctx context.Context, key string) (applied bool, known bool, err error)
}

// ScopeGuard is implemented by effects that declare which scopes may use
// them. The dispatcher performs an intent only when its effect is a
// ScopeGuard that allows the intent's scope; any other intent is
// QUARANTINED (scope_not_allowed) without a call. An effect that declares
// nothing allows nothing.
type ScopeGuard interface {
	AllowsScope(scope string) bool
}

// Windowed is implemented by effects that know how long their downstream
// remembers an idempotency key; a positive answer overrides the
// dispatcher's IdempotencyWindow for that effect.
type Windowed interface {
	IdempotencyWindow() time.Duration
}

// DedupWindow is implemented by effects whose target documents its own
// deduplication (the AWS targets): how long it refuses to act twice on
// the same key. Zero is an answer, not a default: the target does not
// deduplicate, so a call that may have reached it is never made again
// unless its StatusLookup says it was not applied; the intent is
// QUARANTINED for its owner instead. It wins over Windowed and the
// dispatcher's IdempotencyWindow.
type DedupWindow interface {
	DedupWindow() time.Duration
}

// Ledger is the part of the ledger the dispatcher uses.
type Ledger interface {
	ClaimIntent(ctx context.Context, op string, o ledger.ClaimOptions) (ledger.IntentClaim, error)
	RecordIntentAs(ctx context.Context, c ledger.IntentClaim, out ledger.IntentOutcome) (ledger.IntentStatus, error)
	GetProjection(ctx context.Context, name, subject string) (ledger.Projection, error)
	LockSubject(ctx context.Context, c ledger.IntentClaim) error
}

var _ Ledger = (*ledger.Ledger)(nil)

// Dispatcher performs intents. Its zero value (with Ledger and Effects set)
// uses the defaults documented on each field.
type Dispatcher struct {
	Ledger  Ledger
	Effects map[string]Effect // by intent kind
	// Clock defaults to the wall clock.
	Clock ledger.Clock
	// Rand returns a number in [0, 1) for jitter; defaults to math/rand/v2.
	Rand func() float64
	// Owner names this dispatcher in leases and audit entries. Default "outbox".
	Owner string
	// Lease must exceed the effect's own timeout. Default 1 minute.
	Lease time.Duration
	// MaxAttempts bounds the attempts of an intent. Default DefaultMaxAttempts.
	MaxAttempts int
	// Base and Cap bound the full-jitter backoff: a wait is uniform in
	// [0, min(Cap, Base·2^(attempts-1))), and never shorter than the
	// downstream's Retry-After. Defaults 1s and 5m.
	Base, Cap time.Duration
	// IdempotencyWindow is how long the downstream remembers a key. An
	// intent whose outcome is uncertain is retried with its key only while
	// the retry can finish inside the window (measured from the first
	// attempt); after that it is QUARANTINED. Default 24h.
	IdempotencyWindow time.Duration
}

// DefaultMaxAttempts is the dispatcher's attempt budget per intent; the
// effects queue's maxReceiveCount (queue.Effects) is above it.
const DefaultMaxAttempts = 8

// Outcome is what one Dispatch did.
type Outcome struct {
	Status   ledger.IntentStatus
	Code     string    // the code the dispatch recorded ("scope_not_allowed", "ok_200", …); a success the ledger turned CONTRADICTED keeps the call's
	Next     time.Time // when a waiting intent is due again
	Attempts int
	Called   bool // the effect was called during this dispatch
	Err      error
	// Kind, Scope and Source are the intent's: whose fact it acted on.
	Kind, Scope, Source string
}

// CodeScopeNotAllowed is the code of an intent QUARANTINED because its
// scope may not use its effect.
const CodeScopeNotAllowed = "scope_not_allowed"

func (d *Dispatcher) now() time.Time {
	if d.Clock == nil {
		return time.Now().UTC()
	}
	return d.Clock.Now().UTC()
}

func (d *Dispatcher) owner() string {
	if d.Owner == "" {
		return "outbox"
	}
	return d.Owner
}

func (d *Dispatcher) maxAttempts() int {
	if d.MaxAttempts <= 0 {
		return DefaultMaxAttempts
	}
	return d.MaxAttempts
}

func (d *Dispatcher) lease() time.Duration {
	if d.Lease <= 0 {
		return time.Minute
	}
	return d.Lease
}

func (d *Dispatcher) window(eff Effect) time.Duration {
	if w, ok := eff.(DedupWindow); ok {
		return w.DedupWindow()
	}
	if w, ok := eff.(Windowed); ok && w.IdempotencyWindow() > 0 {
		return w.IdempotencyWindow()
	}
	if d.IdempotencyWindow <= 0 {
		return 24 * time.Hour
	}
	return d.IdempotencyWindow
}

// Backoff returns the wait before the next attempt after attempts attempts,
// honouring retryAfter as a floor.
func (d *Dispatcher) Backoff(attempts int, retryAfter time.Duration) time.Duration {
	base, ceil := d.Base, d.Cap
	if base <= 0 {
		base = time.Second
	}
	if ceil <= 0 {
		ceil = 5 * time.Minute
	}
	limit := base
	for i := 1; i < attempts && limit < ceil; i++ {
		limit *= 2
	}
	limit = min(limit, ceil)
	r := d.Rand
	if r == nil {
		r = rand.Float64
	}
	wait := time.Duration(r() * float64(limit))
	return max(wait, retryAfter)
}

// Dispatch claims the intent op, performs its effect with the intent's own
// key, and records the outcome under the claim's token. An intent that is
// not claimable now (finished, leased elsewhere, not yet due) returns an
// error matching ledger.ErrNotClaimable without calling anything.
func (d *Dispatcher) Dispatch(ctx context.Context, op string) (Outcome, error) {
	c, err := d.Ledger.ClaimIntent(ctx, op, ledger.ClaimOptions{Owner: d.owner(), Lease: d.lease()})
	if err != nil {
		return Outcome{}, fmt.Errorf("dispatch %s: %w", op, err)
	}
	in := c.Intent
	// A record is an item under the record key shape with the record's
	// kind, and nothing else is: whoever could write the item (the
	// reconciler may put record intents only), it is performed as what
	// its key says or not at all.
	if ledger.IsRecordIntent(in.OperationID) != (in.Kind == WarehouseKind) {
		return d.record(ctx, c, false, notARecordOutcome(in))
	}
	eff, ok := d.Effects[in.Kind]
	if !ok {
		return d.record(ctx, c, false, noEffectOutcome(in.Kind))
	}
	// Whose fact this is decides whether the effect may be used at all,
	// before anything else: a refusal is never silent (not SUPERSEDED or
	// OBSOLETE because the truth moved on meanwhile), and it takes no
	// subject cursor.
	if g, ok := eff.(ScopeGuard); !ok || !g.AllowsScope(in.Scope) {
		return d.refuseScope(ctx, c)
	}
	call := newCall(in)
	if in.Kind == WarehouseKind {
		rec, err := recordOf(in)
		if err != nil {
			return d.record(ctx, c, false, ledger.IntentOutcome{Status: ledger.IntentStatusQuarantined, Code: CodeRecordMismatch, Detail: err.Error()})
		}
		call.Record = &rec
	}
	retryAt := func() time.Time { return d.now().Add(d.Backoff(in.Attempts, 0)) }
	// The truth may have moved on since the commit (I7; see
	// docs/architecture.md).
	if checksTruth(in.Policy) {
		why, current, err := d.stillCurrent(ctx, in)
		if err != nil {
			return d.record(ctx, c, false, truthUnreadableOutcome(err, retryAt()))
		}
		if !current {
			return d.notCurrent(ctx, c, eff, call.Key, why)
		}
	}
	// A state sync is serialized per subject: never an older state after a
	// newer one at the downstream.
	if err := d.Ledger.LockSubject(ctx, c); err != nil {
		why, newer, out := lockRefusal(err, retryAt)
		if newer {
			return d.notCurrent(ctx, c, eff, call.Key, why)
		}
		return d.record(ctx, c, false, out)
	}
	// An earlier attempt may have reached the downstream: call again only
	// under the same key, and only while the downstream still remembers it.
	if c.MaybeSent() {
		ans := d.lookup(ctx, eff, call.Key)
		if out, stop := resendOutcome(ans, firstAttempt(in), d.now(), d.lease(), d.window(eff)); stop {
			return d.record(ctx, c, false, out)
		}
	}
	res, callErr := eff.Do(ctx, call)
	// The backoff draws jitter, so it is asked for only when the intent waits.
	backoff := func(retryAfter time.Duration) time.Duration { return d.Backoff(in.Attempts, retryAfter) }
	o, err := d.record(ctx, c, true, callOutcome(res, callErr, in.Attempts, d.maxAttempts(), d.now(), backoff))
	o.Err = callErr
	return o, err
}

// stillCurrent reads the intent's projection (strongly consistent: one
// GetItem) and reports whether the intent is still justified by it: for
// latest, the projection holds the state the intent carries; for
// while_current, its state satisfies the intent's condition. why says
// what changed when it is not.
func (d *Dispatcher) stillCurrent(ctx context.Context, in ledger.IntentState) (why string, current bool, err error) {
	if in.Projection == "" {
		return "", true, nil // written before intents knew their truth
	}
	p, err := d.Ledger.GetProjection(ctx, in.Projection, in.ProjectionSubject)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return "", true, nil // an operator removed it; nothing to compare with
	case err != nil:
		return "", false, fmt.Errorf("read projection %s/%s: %w", in.Projection, in.ProjectionSubject, err)
	}
	at := fmt.Sprintf("%s/%s at version %d (the intent's: %d)", in.Projection, in.ProjectionSubject, p.Version, in.Version)
	if in.Policy == ledger.PolicyLatest {
		if p.Fingerprint != in.Fingerprint {
			return at + " holds a newer state; a newer intent carries it", false, nil
		}
		return "", true, nil
	}
	if ok, why := ledger.ConditionHolds(in.Condition, p.State); !ok {
		return at + " says " + why, false, nil
	}
	if in.ContradictedBy != 0 {
		// A revision between the intent's and now removed its reason; a
		// later one restored the state and carries its own intents. This
		// one's reason is gone for good (the chaos checker found it).
		return fmt.Sprintf("%s/%s version %d removed its reason (the intent's: %d); the state that holds now came with its own intents",
			in.Projection, in.ProjectionSubject, in.ContradictedBy, in.Version), false, nil
	}
	return "", true, nil
}

// notCurrent ends an intent the truth no longer justifies, without a
// call, asking the effect's status lookup first when an earlier attempt
// may have reached the downstream; notCurrentOutcome decides.
func (d *Dispatcher) notCurrent(ctx context.Context, c ledger.IntentClaim, eff Effect, key, why string) (Outcome, error) {
	var ans lookupAnswer
	if c.MaybeSent() {
		ans = d.lookup(ctx, eff, key)
	}
	return d.record(ctx, c, false, notCurrentOutcome(c.Intent.Policy, c.MaybeSent(), ans, why))
}

// lookup asks the effect's StatusLookup, if it has one, whether key was
// applied: one request to the downstream.
func (d *Dispatcher) lookup(ctx context.Context, eff Effect, key string) lookupAnswer {
	lk, ok := eff.(StatusLookup)
	if !ok {
		return lookupAnswer{}
	}
	applied, known, err := lk.Lookup(ctx, key)
	return lookupAnswer{Asked: true, Applied: applied, Known: known, Err: err}
}

// refuseScope ends an intent whose scope may not use its effect:
// QUARANTINED for the effect's owner, without a call. When an earlier
// attempt may have reached the downstream (the effect's scopes changed
// since), the reason says so.
func (d *Dispatcher) refuseScope(ctx context.Context, c ledger.IntentClaim) (Outcome, error) {
	in := c.Intent
	why := fmt.Sprintf("scope %q (source %q) may not use effect %q: the effect's scopes do not include it; the call was not made", in.Scope, in.Source, in.Kind)
	if in.Scope == "" {
		why = fmt.Sprintf("the intent has no scope (source %q: an unscoped source, or written before ownership existed) and effect %q is not open to every scope (\"*\"); the call was not made", in.Source, in.Kind)
	}
	if c.MaybeSent() {
		why += "; an earlier attempt may have reached the downstream before the effect's scopes changed: the owner must check"
	}
	return d.record(ctx, c, false, ledger.IntentOutcome{Status: ledger.IntentStatusQuarantined, Code: CodeScopeNotAllowed, Detail: why})
}

func (d *Dispatcher) record(ctx context.Context, c ledger.IntentClaim, called bool, out ledger.IntentOutcome) (Outcome, error) {
	o := Outcome{Status: out.Status, Code: out.Code, Next: out.Next, Attempts: c.Intent.Attempts, Called: called,
		Kind: c.Intent.Kind, Scope: c.Intent.Scope, Source: c.Intent.Source}
	st, err := d.Ledger.RecordIntentAs(ctx, c, out)
	if err != nil {
		return o, fmt.Errorf("dispatch %s: %w", c.Intent.OperationID, err)
	}
	o.Status = st
	return o, nil
}

// SubjectStatus is implemented by effects whose downstream can say which
// version of a subject it last applied (for latest-policy effects: the
// reconciler's drift check: the downstream follows the truth). The subject is scope's: the
// same id in another scope is another subject.
type SubjectStatus interface {
	SubjectVersion(ctx context.Context, scope, subject string) (version string, known bool, err error)
}
