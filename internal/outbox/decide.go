package outbox

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// The pure parts of a dispatch: what to call, and what each answer the
// dispatcher reads (the truth, the subject lock, the status lookup, the
// effect's result) means for the intent. Dispatch does the reading and
// the recording; these decide, so each decision is tested on its own.

// newCall is the request an intent's effect receives: the intent's own
// operation id as the idempotency key, and the projection version only
// when the intent came from a projection.
func newCall(in ledger.IntentState) Call {
	call := Call{Key: in.OperationID, Kind: in.Kind, Subject: in.Subject, Payload: in.Payload, Scope: in.Scope, Source: in.Source}
	if in.Projection != "" {
		call.Version = strconv.FormatInt(in.Version, 10)
	}
	return call
}

// checksTruth reports whether the policy needs the current truth read
// before the call: once performs whatever happened since; while_current
// and latest act only while the truth still justifies them.
func checksTruth(p ledger.Policy) bool {
	return p == ledger.PolicyWhileCurrent || p == ledger.PolicyLatest
}

// noEffectOutcome quarantines an intent whose kind has no Effect.
func noEffectOutcome(kind string) ledger.IntentOutcome {
	return ledger.IntentOutcome{Status: ledger.IntentStatusQuarantined, Code: "no_effect",
		Detail: fmt.Sprintf("%v %q", ErrNoEffect, kind)}
}

// truthUnreadableOutcome waits and retries an intent whose truth could not
// be read: it cannot be performed or ended without knowing it.
func truthUnreadableOutcome(err error, next time.Time) ledger.IntentOutcome {
	return ledger.IntentOutcome{Status: ledger.IntentStatusRetryWait, Code: "truth_unreadable", Detail: err.Error(), Next: next}
}

// lockRefusal decides what a refused subject lock means. When a newer
// state holds the subject, the intent is no longer current (notCurrent
// is true and why says so). Otherwise the intent waits: for the holder's
// lease when another dispatch holds the subject (it is usually done
// sooner; the next claim finds out), or for a backoff (retryAt) when the
// cursor could not be read. Neither is an attempt at the downstream.
func lockRefusal(err error, retryAt func() time.Time) (why string, notCurrent bool, out ledger.IntentOutcome) {
	var busy *ledger.SubjectBusyError
	switch {
	case errors.As(err, &busy) && busy.Newer:
		return busy.Error(), true, ledger.IntentOutcome{}
	case errors.As(err, &busy):
		return "", false, ledger.IntentOutcome{Status: ledger.IntentStatusRetryWait, Code: "subject_busy",
			Detail: busy.Error(), Next: busy.Cursor.HolderUntil}
	default:
		return "", false, ledger.IntentOutcome{Status: ledger.IntentStatusRetryWait, Code: "cursor_unavailable",
			Detail: err.Error(), Next: retryAt()}
	}
}

// lookupAnswer is what an effect's StatusLookup said about a key.
// Asked is false when the effect has none.
type lookupAnswer struct {
	Asked          bool
	Applied, Known bool
	Err            error
}

// applied reports a definite "the downstream applied the key".
func (a lookupAnswer) applied() bool { return a.Asked && a.Err == nil && a.Known && a.Applied }

// notApplied reports a definite "the downstream did not apply the key".
func (a lookupAnswer) notApplied() bool { return a.Asked && a.Err == nil && a.Known && !a.Applied }

// resendOutcome decides whether an intent whose earlier attempt may have
// reached the downstream may be called again with its key. stop is false
// when it may. It may not when the downstream says it applied the key
// (SUCCEEDED), nor when no lookup said it did not and the retry, bounded
// by the lease, could end after the downstream forgets the key: first
// plus the window (QUARANTINED; a zero window means the target does not
// deduplicate at all).
func resendOutcome(ans lookupAnswer, first, now time.Time, lease, window time.Duration) (out ledger.IntentOutcome, stop bool) {
	if ans.applied() {
		return ledger.IntentOutcome{Status: ledger.IntentStatusSucceeded, Code: "lookup_applied",
			Detail: "the downstream reports the key as applied"}, true
	}
	if ans.notApplied() || now.Add(lease).Before(first.Add(window)) {
		return ledger.IntentOutcome{}, false
	}
	why := fmt.Sprintf("the downstream's %s idempotency window has passed", window)
	if window == 0 {
		why = "the target does not deduplicate calls and cannot say whether it acted, so a second call could act twice"
	}
	return ledger.IntentOutcome{Status: ledger.IntentStatusQuarantined, Code: "idempotency_window_passed",
		Detail: fmt.Sprintf("outcome unknown since %s and %s; an operator must check", first.Format(time.RFC3339), why)}, true
}

// firstAttempt is when the intent's key was first sent, or could have
// been: its first attempt, or its creation for an intent that does not
// record one.
func firstAttempt(in ledger.IntentState) time.Time {
	if in.FirstAttemptAt.IsZero() {
		return in.CreatedAt
	}
	return in.FirstAttemptAt
}

// notCurrentOutcome ends an intent the truth no longer justifies, without
// a call: OBSOLETE (while_current) or SUPERSEDED (latest). If an earlier
// attempt may have reached the downstream (maybeSent), that is never
// silent: the status lookup decides (applied: a state sync SUCCEEDED, a
// newer intent carries the newer state; an action CONTRADICTED, performed
// and then its reason removed, for the recovery owner; not applied: the
// same terminal state), and without an answer the intent is QUARANTINED
// for its owner.
func notCurrentOutcome(policy ledger.Policy, maybeSent bool, ans lookupAnswer, why string) ledger.IntentOutcome {
	status, code := ledger.IntentStatusObsolete, "obsolete"
	if policy == ledger.PolicyLatest {
		status, code = ledger.IntentStatusSuperseded, "superseded"
	}
	if maybeSent {
		switch {
		case !ans.Asked:
			return ledger.IntentOutcome{Status: ledger.IntentStatusQuarantined, Code: code + "_maybe_performed",
				Detail: why + "; an earlier attempt may have reached the downstream and it has no status lookup: the recovery owner must check"}
		case ans.Err != nil || !ans.Known:
			return ledger.IntentOutcome{Status: ledger.IntentStatusQuarantined, Code: code + "_maybe_performed",
				Detail: why + "; an earlier attempt may have reached the downstream and its status is unknown: the recovery owner must check"}
		case ans.Applied && policy == ledger.PolicyWhileCurrent:
			return ledger.IntentOutcome{Status: ledger.IntentStatusContradicted, Code: "performed_then_" + code,
				Detail: "the downstream applied it and the truth moved on: " + why + "; the recovery owner must decide what to do"}
		case ans.Applied:
			return ledger.IntentOutcome{Status: ledger.IntentStatusSucceeded, Code: "performed_before_" + code,
				Detail: "the downstream applied it before the truth moved on: " + why}
		}
	}
	return ledger.IntentOutcome{Status: status, Code: code, Detail: why}
}

// callOutcome is the record of an effect's call, from its result or its
// error as Classify reads it. attempts counts this one; once it reaches
// maxAttempts a retryable intent FAILS and an uncertain one is
// QUARANTINED (it may have acted, so it is not given up silently).
// backoff is the wait before the next attempt, given the downstream's
// Retry-After as a floor; it is asked only for an intent that waits.
func callOutcome(res Result, callErr error, attempts, maxAttempts int, now time.Time, backoff func(retryAfter time.Duration) time.Duration) ledger.IntentOutcome {
	class, retryAfter := Classify(callErr)
	switch class {
	case ClassOK:
		out := ledger.IntentOutcome{Status: ledger.IntentStatusSucceeded, Code: fmt.Sprintf("ok_%d", res.StatusCode), Detail: res.Detail}
		if res.Replayed {
			out.Code = "replayed"
		}
		return out
	case ClassPermanent:
		return ledger.IntentOutcome{Status: ledger.IntentStatusFailed, Code: "permanent", Detail: callErr.Error()}
	case ClassMisconfigured:
		var me *MisconfiguredError
		errors.As(callErr, &me)
		return ledger.IntentOutcome{Status: ledger.IntentStatusQuarantined, Code: me.Code, Detail: callErr.Error()}
	case ClassRetryable:
		if attempts >= maxAttempts {
			return ledger.IntentOutcome{Status: ledger.IntentStatusFailed, Code: "attempts_exhausted", Detail: callErr.Error()}
		}
		return ledger.IntentOutcome{Status: ledger.IntentStatusRetryWait, Code: "retryable", Detail: callErr.Error(),
			Next: now.Add(backoff(retryAfter))}
	default:
		if attempts >= maxAttempts {
			return ledger.IntentOutcome{Status: ledger.IntentStatusQuarantined, Code: "uncertain_attempts_exhausted", Detail: callErr.Error()}
		}
		return ledger.IntentOutcome{Status: ledger.IntentStatusUncertain, Code: "uncertain", Detail: callErr.Error(),
			Next: now.Add(backoff(0))}
	}
}
