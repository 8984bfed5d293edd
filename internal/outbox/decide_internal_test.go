package outbox

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestNewCall(t *testing.T) {
	payload := map[string]any{"a": 1}
	base := ledger.IntentState{OperationID: "op1", Kind: "k", Subject: "s", Payload: payload, Scope: "sc", Source: "src", Version: 42}
	withProj := base
	withProj.Projection = "orders"
	tests := []struct {
		name string
		in   ledger.IntentState
		want Call
	}{
		{"no projection: no version", base, Call{Key: "op1", Kind: "k", Subject: "s", Payload: payload, Scope: "sc", Source: "src"}},
		{"projection: decimal version", withProj, Call{Key: "op1", Kind: "k", Subject: "s", Payload: payload, Scope: "sc", Source: "src", Version: "42"}},
	}
	for _, tt := range tests {
		if got := newCall(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: newCall = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestChecksTruth(t *testing.T) {
	for p, want := range map[ledger.Policy]bool{
		"": false, ledger.PolicyOnce: false, ledger.PolicyWhileCurrent: true, ledger.PolicyLatest: true,
	} {
		if got := checksTruth(p); got != want {
			t.Errorf("checksTruth(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestLockRefusal(t *testing.T) {
	until := t0.Add(time.Minute)
	retry := t0.Add(3 * time.Second)
	newer := &ledger.SubjectBusyError{Cursor: ledger.SubjectCursor{Projection: "p", ProjSubject: "s", Family: "f", HolderOp: "op2", HolderVersion: 7}, Newer: true}
	busy := &ledger.SubjectBusyError{Cursor: ledger.SubjectCursor{Projection: "p", ProjSubject: "s", Family: "f", HolderOp: "op2", HolderVersion: 7, HolderUntil: until}}
	other := errors.New("throttled")
	tests := []struct {
		name       string
		err        error
		why        string
		notCurrent bool
		out        ledger.IntentOutcome
	}{
		{"newer holder: not current", fmt.Errorf("lock: %w", newer), newer.Error(), true, ledger.IntentOutcome{}},
		{"busy: wait for the holder's lease", busy, "", false,
			ledger.IntentOutcome{Status: ledger.IntentStatusRetryWait, Code: "subject_busy", Detail: busy.Error(), Next: until}},
		{"other: back off", other, "", false,
			ledger.IntentOutcome{Status: ledger.IntentStatusRetryWait, Code: "cursor_unavailable", Detail: "throttled", Next: retry}},
	}
	for _, tt := range tests {
		asked := 0
		why, nc, out := lockRefusal(tt.err, func() time.Time { asked++; return retry })
		if why != tt.why || nc != tt.notCurrent || !reflect.DeepEqual(out, tt.out) {
			t.Errorf("%s: lockRefusal = (%q, %v, %+v), want (%q, %v, %+v)", tt.name, why, nc, out, tt.why, tt.notCurrent, tt.out)
		}
		// The backoff draws jitter: it is asked for only when it is used.
		if wantAsked := map[bool]int{true: 1, false: 0}[tt.out.Code == "cursor_unavailable"]; asked != wantAsked {
			t.Errorf("%s: retryAt asked %d times, want %d", tt.name, asked, wantAsked)
		}
	}
}

func TestResendOutcome(t *testing.T) {
	first := t0
	lease := time.Minute
	window := time.Hour
	inside := first.Add(window - lease - time.Second) // now+lease before first+window
	edge := first.Add(window - lease)                 // now+lease == first+window: too late
	unknownSince := "outcome unknown since 2026-01-02T03:04:05Z and "
	passed := ledger.IntentOutcome{Status: ledger.IntentStatusQuarantined, Code: "idempotency_window_passed",
		Detail: unknownSince + "the downstream's 1h0m0s idempotency window has passed; an operator must check"}
	applied := ledger.IntentOutcome{Status: ledger.IntentStatusSucceeded, Code: "lookup_applied", Detail: "the downstream reports the key as applied"}
	tests := []struct {
		name   string
		ans    lookupAnswer
		now    time.Time
		window time.Duration
		out    ledger.IntentOutcome
		stop   bool
	}{
		{"no lookup, inside the window: call", lookupAnswer{}, inside, window, ledger.IntentOutcome{}, false},
		{"no lookup, at the window's edge: quarantine", lookupAnswer{}, edge, window, passed, true},
		{"applied: succeed without a call", lookupAnswer{Asked: true, Applied: true, Known: true}, edge, window, applied, true},
		{"applied even inside the window", lookupAnswer{Asked: true, Applied: true, Known: true}, inside, window, applied, true},
		{"not applied: call even after the window", lookupAnswer{Asked: true, Known: true}, edge.Add(time.Hour), window, ledger.IntentOutcome{}, false},
		{"unknown: the window decides", lookupAnswer{Asked: true, Applied: true}, edge, window, passed, true},
		{"lookup error: the window decides", lookupAnswer{Asked: true, Applied: true, Known: true, Err: errors.New("x")}, inside, window, ledger.IntentOutcome{}, false},
		{"zero window: never again without a lookup", lookupAnswer{}, first, 0, ledger.IntentOutcome{Status: ledger.IntentStatusQuarantined, Code: "idempotency_window_passed",
			Detail: unknownSince + "the target does not deduplicate calls and cannot say whether it acted, so a second call could act twice; an operator must check"}, true},
		{"zero window, not applied: call", lookupAnswer{Asked: true, Known: true}, inside, 0, ledger.IntentOutcome{}, false},
	}
	for _, tt := range tests {
		out, stop := resendOutcome(tt.ans, first, tt.now, lease, tt.window)
		if stop != tt.stop || !reflect.DeepEqual(out, tt.out) {
			t.Errorf("%s: resendOutcome = (%+v, %v), want (%+v, %v)", tt.name, out, stop, tt.out, tt.stop)
		}
	}
}

func TestFirstAttempt(t *testing.T) {
	if got := firstAttempt(ledger.IntentState{CreatedAt: t0}); !got.Equal(t0) {
		t.Errorf("no first attempt: %v, want the creation %v", got, t0)
	}
	later := t0.Add(time.Hour)
	if got := firstAttempt(ledger.IntentState{CreatedAt: t0, FirstAttemptAt: later}); !got.Equal(later) {
		t.Errorf("first attempt: %v, want %v", got, later)
	}
}

func TestNotCurrentOutcome(t *testing.T) {
	const why = "p/s moved"
	wc, latest := ledger.PolicyWhileCurrent, ledger.PolicyLatest
	noLookup := "p/s moved; an earlier attempt may have reached the downstream and it has no status lookup: the recovery owner must check"
	unknown := "p/s moved; an earlier attempt may have reached the downstream and its status is unknown: the recovery owner must check"
	q := ledger.IntentStatusQuarantined
	tests := []struct {
		name      string
		policy    ledger.Policy
		maybeSent bool
		ans       lookupAnswer
		want      ledger.IntentOutcome
	}{
		{"while_current, never sent", wc, false, lookupAnswer{}, ledger.IntentOutcome{Status: ledger.IntentStatusObsolete, Code: "obsolete", Detail: why}},
		{"latest, never sent", latest, false, lookupAnswer{}, ledger.IntentOutcome{Status: ledger.IntentStatusSuperseded, Code: "superseded", Detail: why}},
		{"never sent: an answer is ignored", latest, false, lookupAnswer{Asked: true, Applied: true, Known: true}, ledger.IntentOutcome{Status: ledger.IntentStatusSuperseded, Code: "superseded", Detail: why}},
		{"while_current, maybe sent, no lookup", wc, true, lookupAnswer{}, ledger.IntentOutcome{Status: q, Code: "obsolete_maybe_performed", Detail: noLookup}},
		{"latest, maybe sent, no lookup", latest, true, lookupAnswer{}, ledger.IntentOutcome{Status: q, Code: "superseded_maybe_performed", Detail: noLookup}},
		{"lookup error", wc, true, lookupAnswer{Asked: true, Applied: true, Known: true, Err: errors.New("x")}, ledger.IntentOutcome{Status: q, Code: "obsolete_maybe_performed", Detail: unknown}},
		{"lookup does not know", latest, true, lookupAnswer{Asked: true}, ledger.IntentOutcome{Status: q, Code: "superseded_maybe_performed", Detail: unknown}},
		{"while_current applied: contradicted", wc, true, lookupAnswer{Asked: true, Applied: true, Known: true}, ledger.IntentOutcome{Status: ledger.IntentStatusContradicted, Code: "performed_then_obsolete",
			Detail: "the downstream applied it and the truth moved on: p/s moved; the recovery owner must decide what to do"}},
		{"latest applied: succeeded", latest, true, lookupAnswer{Asked: true, Applied: true, Known: true}, ledger.IntentOutcome{Status: ledger.IntentStatusSucceeded, Code: "performed_before_superseded",
			Detail: "the downstream applied it before the truth moved on: p/s moved"}},
		{"while_current not applied: obsolete", wc, true, lookupAnswer{Asked: true, Known: true}, ledger.IntentOutcome{Status: ledger.IntentStatusObsolete, Code: "obsolete", Detail: why}},
		{"latest not applied: superseded", latest, true, lookupAnswer{Asked: true, Known: true}, ledger.IntentOutcome{Status: ledger.IntentStatusSuperseded, Code: "superseded", Detail: why}},
	}
	for _, tt := range tests {
		if got := notCurrentOutcome(tt.policy, tt.maybeSent, tt.ans, why); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: notCurrentOutcome = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestCallOutcome(t *testing.T) {
	retryable := &RetryableError{RetryAfter: 7 * time.Second, Err: errors.New("429")}
	misconf := &MisconfiguredError{Code: "redirect", Err: errors.New("302")}
	uncertain := fmt.Errorf("post: %w", ErrUncertain)
	permanent := fmt.Errorf("400: %w", ErrPermanent)
	tests := []struct {
		name     string
		res      Result
		err      error
		attempts int
		want     ledger.IntentOutcome
		asked    []time.Duration // the Retry-After floors backoff was asked with
	}{
		{"ok", Result{StatusCode: 204, Detail: "d"}, nil, 1, ledger.IntentOutcome{Status: ledger.IntentStatusSucceeded, Code: "ok_204", Detail: "d"}, nil},
		{"replayed", Result{StatusCode: 200, Replayed: true, Detail: "d"}, nil, 1, ledger.IntentOutcome{Status: ledger.IntentStatusSucceeded, Code: "replayed", Detail: "d"}, nil},
		{"permanent", Result{}, permanent, 1, ledger.IntentOutcome{Status: ledger.IntentStatusFailed, Code: "permanent", Detail: permanent.Error()}, nil},
		{"misconfigured: its code", Result{}, fmt.Errorf("call: %w", misconf), 1, ledger.IntentOutcome{Status: ledger.IntentStatusQuarantined, Code: "redirect", Detail: "call: redirect: 302"}, nil},
		{"retryable: wait, Retry-After as floor", Result{}, retryable, 2, ledger.IntentOutcome{Status: ledger.IntentStatusRetryWait, Code: "retryable", Detail: retryable.Error(), Next: t0.Add(10 * time.Second)}, []time.Duration{7 * time.Second}},
		{"retryable, last attempt: failed", Result{}, retryable, 3, ledger.IntentOutcome{Status: ledger.IntentStatusFailed, Code: "attempts_exhausted", Detail: retryable.Error()}, nil},
		{"uncertain: wait with the same key", Result{}, uncertain, 2, ledger.IntentOutcome{Status: ledger.IntentStatusUncertain, Code: "uncertain", Detail: uncertain.Error(), Next: t0.Add(10 * time.Second)}, []time.Duration{0}},
		{"unrecognised error: uncertain", Result{}, errors.New("eof"), 1, ledger.IntentOutcome{Status: ledger.IntentStatusUncertain, Code: "uncertain", Detail: "eof", Next: t0.Add(10 * time.Second)}, []time.Duration{0}},
		{"uncertain, last attempt: quarantined", Result{}, uncertain, 4, ledger.IntentOutcome{Status: ledger.IntentStatusQuarantined, Code: "uncertain_attempts_exhausted", Detail: uncertain.Error()}, nil},
	}
	for _, tt := range tests {
		var asked []time.Duration
		backoff := func(ra time.Duration) time.Duration { asked = append(asked, ra); return 10 * time.Second }
		got := callOutcome(tt.res, tt.err, tt.attempts, 3, t0, backoff)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: callOutcome = %+v, want %+v", tt.name, got, tt.want)
		}
		if !reflect.DeepEqual(asked, tt.asked) {
			t.Errorf("%s: backoff asked with %v, want %v", tt.name, asked, tt.asked)
		}
	}
}

func TestOutcomesForUnreadableTruthAndMissingEffect(t *testing.T) {
	next := t0.Add(time.Second)
	if got, want := truthUnreadableOutcome(errors.New("read projection p/s: boom"), next), (ledger.IntentOutcome{Status: ledger.IntentStatusRetryWait, Code: "truth_unreadable", Detail: "read projection p/s: boom", Next: next}); !reflect.DeepEqual(got, want) {
		t.Errorf("truthUnreadableOutcome = %+v, want %+v", got, want)
	}
	if got, want := noEffectOutcome("mail"), (ledger.IntentOutcome{Status: ledger.IntentStatusQuarantined, Code: "no_effect", Detail: `outbox: no effect for kind "mail"`}); !reflect.DeepEqual(got, want) {
		t.Errorf("noEffectOutcome = %+v, want %+v", got, want)
	}
}
