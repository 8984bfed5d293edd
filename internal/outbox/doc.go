// Package outbox provides the dispatcher that performs outbox intents
// exactly once as far as the downstream can tell (DESIGN.md §5 I2, §6).
//
// An intent is claimed in the ledger (a lease with a fencing token), its
// Effect is called with the intent's operation id as the idempotency key,
// and the outcome is recorded under the same token:
//
//	success                      -> SUCCEEDED
//	ErrPermanent                 -> FAILED
//	RetryableError               -> RETRY_WAIT (full-jitter backoff, Retry-After as a floor)
//	ErrUncertain (or unknown)    -> UNCERTAIN (checked again later)
//	attempts exhausted           -> FAILED
//
// Before anything else the intent's scope (whose fact it acts on) must be
// one its effect allows (ScopeGuard; EffectConfig.Scopes): otherwise it is
// QUARANTINED with code scope_not_allowed and nothing is called. Every call
// names its scope and source (body and X-Effect-Scope / X-Effect-Source),
// and its subject version orders versions within that scope only.
//
// An intent that may already have reached the downstream (UNCERTAIN, or a
// lease taken over from a dispatcher that died) is first looked up through
// the effect's StatusLookup when it has one; otherwise it is retried with
// the same key while the downstream still remembers that key
// (IdempotencyWindow, measured from the first attempt), and QUARANTINED for
// an operator after that. A new key is never minted.
//
// Errors are classified in one place, Classify, which drives the ledger
// status. HTTPEffect is the generic webhook-style effect. The fake
// downstream the tests and the local stack call is a harness, in
// internal/harness/downstream.
package outbox
