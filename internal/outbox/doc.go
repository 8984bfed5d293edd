// Package outbox provides the dispatcher that performs outbox intents
// exactly once as far as the downstream can tell: one effective call per
// operation id, and an effect that is still right when it is performed.
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
// # AWS targets
//
// An effect names an HTTP endpoint (url, HTTPEffect) or an AWS target
// (target, an ARN; EffectConfig): a Lambda function (LambdaEffect), an SQS
// queue (SQSEffect), an EventBridge event bus (EventBridgeEffect) or a
// STANDARD Step Functions state machine (StepFunctionsEffect). The ARN is
// checked when the dispatcher starts (ParseEffectsIn, with its region):
// its service, its shape and its region, and that no HTTP-only key
// (status_url, secret, idempotency_window_hours) is set. Every target
// receives the call as one JSON object (TargetCall): operation_id, kind,
// scope, source, subject, version, payload. The dispatcher's machinery is
// the same as for HTTP; what differs is what the target documents about
// itself, which the effect states (DedupWindow, StatusLookup), never the
// configuration:
//
//	target                  dedup window            status lookup          what the consumer must do
//	Lambda (Invoke)         none                    none                   be idempotent by operation_id; answer {"status":"applied"|"retry"|"rejected"}
//	SQS standard queue      none                    none                   be idempotent by operation_id (message attribute and body)
//	SQS FIFO queue          5 minutes               none                   be idempotent by operation_id after 5 minutes; one subject's messages come in order (MessageGroupId)
//	EventBridge (PutEvents) none                    none                   rule targets idempotent by detail.operation_id
//	Step Functions STANDARD 90 days (the name)      DescribeExecution      nothing for the start; the workflow's own failures are redriven in Step Functions
//
// A call that may have reached a target (a timeout or lost answer after
// the request was written, a 5xx, a dispatcher that died mid-call) is
// UNCERTAIN. It is called again with the same key only while the target
// still deduplicates that key, or when its lookup says it was not
// applied; otherwise it is QUARANTINED (idempotency_window_passed) for
// its owner at its next claim, with no second call: with no window and no
// lookup (Lambda, SQS standard, EventBridge) that is always the case. A
// request refused before it was acted on (a throttle, a failed
// EventBridge entry, a Lambda error status, which means the function did
// not run) is retryable; a refusal only the owner can fix (no such
// target, access denied) is QUARANTINED (target_refused); a call larger
// than the target accepts is QUARANTINED (payload_too_large), never
// truncated. The SDK's own retries are off for every target call, so each
// attempt is the dispatcher's and is in the ledger.
//
// Errors are classified in one place, Classify, which drives the ledger
// status. HTTPEffect is the generic webhook-style effect. The fake
// downstream the tests and the local stack call is a harness, in
// internal/harness/downstream.
package outbox
