// Package chaos provides model-based chaos testing of the whole pipeline
// (issue 8, "Chaos, model-based"): a seeded generator of random schedules,
// an executor that plays a schedule through the real intake, processor,
// dispatcher and reconciler handlers (pkg/harness/pipelinetest over minidyn and
// goaws, Lambda JSON paths), a reference model with a checker for the
// invariants of DESIGN.md §5, and a greedy shrinker that turns a failing
// schedule into a short reproducer to paste into a test.
//
// # Schedules
//
// A Schedule is plain data (Generate(seed) with math/rand/v2 PCG; it
// prints as Go with %#v): 2-4 subjects, each an order or (Config.
// StripePercent, default 40%) a Stripe subscription, and 3-8 events of
// them. An order event has a revision 1-5 and a status created/confirmed/
// cancelled (a cancellation half the time). A Stripe event is a
// customer.subscription.created (created at second 0-1), .updated (0-5)
// or .deleted (3-5, so usually last, but an update stamped after it by
// clock skew happens) with a status that entitles or not (active,
// trialing, past_due / incomplete, canceled, unpaid), signed by the real
// Stripe verifier's scheme with the harness's fake secret. A fifth of the
// Stripe events are thin events with no snapshot twin, and a third of the
// deliveries of the others send the thin twin (snapshot_event = the
// event's id) instead of the snapshot: the processor then fetches the
// subscription from a fake Stripe API (pkg/harness/stripefake) that holds each
// subscription's truth once its events have happened (StripeTruth). Either kind
// gets a same-version contradiction now and then and the same fact
// re-sent under a new id. Deliveries are shuffled, some twice under the
// same id, some forged with a wrong secret; and steps that interleave 1-3
// processor workers and 1-3 dispatchers one queue cycle at a time, crash
// the intake, a worker or a dispatcher right before or after its nth next
// DynamoDB or SQS call (the instance is then replaced, as Lambda would),
// pause a worker right before a call while the world moves on (the clock
// passes its lease, another worker takes the event, maybe pauses in the
// same call too) and resume it later, advance the manual clock, run the
// reconciler, script the downstream's next call (429 with Retry-After,
// 500, hang after or before applying) and replay an event as an operator.
//
// # Running one
//
// Redelivery follows the manual clock (pipelinetest.Virtual): a message
// its handler did not acknowledge comes back 2 s of manual time later, and
// a dispatcher's hold is kept on the manual clock too. After the steps the
// run settles: paused workers resume, both queues are drained while the
// clock moves 31 s per idle round (leases, backoffs and the reconciler's
// 5 min StuckAfter pass) and the reconciler runs every idle round, until
// no message is visible or in flight and every event and intent is
// finished. DEAD events are then replayed by the operator (twice at most),
// since the schedules hold no permanent failure. Projections are sampled
// after every step and every busy settling round.
//
// # The model and the invariants
//
//   - I1: every accepted (2xx) event has a row that ends PROCESSED, or
//     QUARANTINED with a code and an audited reason; none stays DEAD after
//     the replays; every intent ends finished; the run settles.
//   - I2: no operation id is effective downstream more than once; every
//     event that applied a cancellation has its refund and notification
//     effective exactly once, every Stripe event that applied a
//     subscription transition its entitlement.grant or .revoke (keyed by
//     subscription, kind and version) exactly once (0 is allowed only for
//     an intent an operator owns: QUARANTINED or FAILED); no effect
//     without its intent or without a cancellation or an applied
//     transition behind it (a noop, stale or quarantined Stripe event's
//     operation is never effective); a SUCCEEDED intent was effective.
//   - I3: no sampled projection ever goes back a revision or changes state
//     at the same revision; at the end each order is at the highest
//     accepted revision with the state of the event applied there; at a
//     revision sent with two states at most one is applied, and only such
//     a contradiction is quarantined (version_conflict).
//   - I3 for a Stripe subscription (version = created×4 + rank of
//     created/updated/deleted, see projection.StripeSubscriptions): the
//     processing order is the chaos's, so the model is checked as a
//     serialization of the recorded outcomes. At most one deletion
//     applies; if one did, the projection ends at its version, terminal
//     and canceled, and every event of a newer version (a skewed update)
//     is stale; otherwise the projection ends, not terminal, at the
//     highest processed version with the state applied there (a newest
//     deletion that did not apply is lost). The applied events in version
//     order are the history: each changes the state of the one before it;
//     a noop event has the state of the applied event of the highest
//     version at or below its own (not a deletion); a stale one had a
//     deletion or a newer version ahead of it; quarantine only for a
//     same-version contradiction. A sampled subscription that was
//     terminal never changes again.
//   - Thin events: a fact whose row holds a thin event is checked as
//     what the fetch returned: Stripe's truth (canceled is a deletion)
//     at version observed×4 + 2 (+ the deletion tier and rank 3), where
//     observed is the time of one of the fake's answered retrievals of
//     that subscription; then as any other fact in the serialization
//     above, and its intent's operation id follows from that version. A
//     thin twin never gets a row of its own.
//     The guards were broken on purpose (seeds 1-200 each): versioning
//     fetched state by the thin event's own created instead of Stripe's
//     clock at the fetch fails 88 schedules (I2 51, I3 87); keying a thin
//     twin by its own id instead of snapshot_event fails 98 (I1 88, I2
//     68, I3 67). Ours: 0 of 300.
//   - I4: a forged delivery gets 401 and leaves no ledger row.
//   - I5: only the lease holder completes (a completion from PROCESSING by
//     an actor other than the last claimer, or after the event already
//     finished, is a violation).
//   - I6: each audit starts with the accept, each transition starts where
//     the previous ended, the last ends in the event's status, and every
//     effect and PROCESSED outcome says which event did what.
//
// # Naive designs
//
// The same schedules run against the naive cores of package naive; the
// checker then measures what the seeds warn about instead of asserting it.
// The naive cores implement only the orders business write, so their runs
// skip the schedule's Stripe events (Design.OrdersOnly: not delivered,
// forged or replayed, hence expected nowhere).
//
// # Not covered
//
// Orders (seed 003, Standard Webhooks) and Stripe subscriptions are
// generated; Stripe's other event types (invoices, payment intents), the
// other providers, metadata without an account (unknown_subject),
// malformed bodies and the rotated Stripe secret are covered by
// pipelinetest's own tests. The Stripe bodies differ only in type,
// created and status (one customer, one price), so two updates with the
// same status have the same fingerprint. Concurrency is
// produced by pausing a worker at a call and letting others run, not by
// free-running goroutines, so a schedule replays the same way; the
// dispatcher runs one message per invocation for the same reason.
package chaos
