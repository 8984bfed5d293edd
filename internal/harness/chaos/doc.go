// Package chaos provides model-based chaos testing of the whole pipeline:
// a seeded generator of random schedules, an executor that plays a
// schedule through the real intake, processor, dispatcher and reconciler
// handlers (internal/harness/pipelinetest over minidyn and goaws, Lambda
// JSON paths), a reference model with a checker for the invariants (see
// docs/architecture.md), and a greedy shrinker that turns a failing
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
// subscription from a fake Stripe API (internal/harness/stripefake) that holds each
// subscription's truth once its events have happened (StripeTruth). Either kind
// gets a same-version contradiction now and then and the same fact
// re-sent under a new id. Deliveries are shuffled, some twice under the
// same id, some forged with a wrong secret; and steps that interleave 1-3
// processor workers and 1-3 dispatchers one queue cycle at a time, crash
// the intake, a worker or a dispatcher right before or after its nth next
// DynamoDB or SQS call (the instance is then replaced, as Lambda would;
// a delivery the intake's crash answered 5xx is retried by the provider
// ProviderRetryAfter later, so a row left without its payload's chunks
// meets the reconciler and the workers first, and must wait for that
// retry without going DEAD),
// pause a worker right before a call while the world moves on (the clock
// passes its lease, another worker takes the event, maybe pauses in the
// same call too) and resume it later, pause a dispatcher (mostly right
// before its downstream call, after its claim and its check of the truth;
// else before a DynamoDB call) and resume it later, advance the manual
// clock, run the reconciler, script the downstream's next call (429 or
// 503 with Retry-After, 500, hang after or before applying) and replay an
// event as an operator.
//
// Stories: for each subject, two times in five, a story adds
// an older fact with effects and a newer revision that takes away their
// reason or their state: for an order, its cancellation (one is added if
// it has none) and an operator's override, confirmed 1-3 revisions
// higher; for a subscription, two updates a few seconds apart, one
// entitled and one not (grant then revoke, or the reverse). Their events
// are delivered only by the story's steps: the older fact is delivered
// and processed, then its effects are held up while the newer revision is
// delivered and processed and another dispatcher goes on: the downstream
// fails the next two calls (503, 500 or 429) while a dispatcher tries
// them (half the stories), a dispatcher is paused between its check and
// its call and resumed after the newer revision is committed (a third),
// or the effects are simply still queued (a sixth). A dispatcher paused
// longer than its lease (DispatcherLease, manual clock) is stopped, not
// resumed: a Lambda whose timeout is below its lease cannot outlive it.
//
// How often (ours, seeds 1-1000, default Config; Stats counts them and
// the chaos table prints them): in 33% of the schedules an effect's call
// failed and a newer revision of its subject was committed before it was
// performed; in 45% an order's cancellation was overridden while its
// refund or notice was not performed yet, in 7% after one was; in 12% a
// dispatcher was held between its check and its call while a newer
// revision of that intent's subject was committed; in 61% intents of one
// subject were claimed by two dispatchers (two thirds of the schedules
// have two or three).
//
// # Effects through an AWS target
//
// A share of the schedules (Config.StepFunctionsPercent; scripts/chaos
// -sfn, 25% by default) performs every effect through a Step Functions
// target instead (Schedule.EffectTarget): the dispatcher starts one
// execution of a local STANDARD state machine per operation
// (outbox.StepFunctionsEffect), whose workflow makes the call on the same
// fake downstream before the start is answered. The downstream's scripted
// failures become the target's (a throttle, a 500 or 503 not acted on,
// an answer held past the call's timeout after or before the start), and
// a third of the dispatcher's crash steps hit its StartExecution. Step
// Functions deduplicates by execution name and answers DescribeExecution,
// so the reference model is unchanged: the effects the checker counts are
// the executions started per operation id.
//
// # The warehouse sink
//
// A share of the schedules (Config.WarehousePercent; scripts/chaos
// -warehouse, 50% by default) runs with the warehouse sink on
// (Schedule.Warehouse): every applied revision's commit writes a
// warehouse.record intent, and the dispatchers write the records to a
// local S3 (localaws.S3), each with its own S3 client, so a crash step
// hits the sink's PutObject like any of the dispatcher's calls. The sink's
// own random stream adds its failures: the store down for a stretch of
// manual time (20 s to 10 min: longer, sometimes, than the dispatcher's
// attempts on one record, which then ends FAILED), a PutObject held past
// the writer's timeout after or before the write, one refused as a
// concurrent write (409), and 0-2 dispatcher crash steps right before or
// after a PutObject or losing its answer; a third of the other dispatcher
// crash steps move to S3.PutObject. The reconciler runs with its warehouse
// check (its errors while the store is down are expected), and a settled
// run ends with one more check, whose re-drives are settled in turn. The
// store being down counts as not settled.
//
// # A rule that reuses an operation id
//
// A share of the schedules (Config.ReusePercent; scripts/chaos -reuse,
// 20% by default, its own random stream) runs the orders under a rule
// with a bug a team can write: besides the order's own intents, each
// applied revision emits a state sync "order.sync" (policy latest, its
// payload the status) keyed by subject and kind without the revision
// (ReuseOp), so every revision after the first reuses the first one's
// operation id (Schedule.ReuseIDs).
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
// after every step, and in every busy settling round after the workers
// and after the dispatchers; each sample and each downstream arrival takes
// a number from one sequence (pipelinetest.Outbox.Tick), so the checker
// knows whether an effect reached the downstream before or after a
// revision was committed. Nothing runs concurrently with a dispatch (a
// paused worker waits at its gate), so that order is exact.
//
// # The model and the invariants
//
//   - I1: every accepted (2xx) event has a row that ends PROCESSED, or
//     QUARANTINED with a code and an audited reason; none stays DEAD after
//     the replays; every intent ends finished; the run settles.
//   - I2: no operation id is effective downstream more than once; every
//     event that applied a cancellation that no newer revision took back
//     (see I7) has its refund and notification effective exactly once,
//     every Stripe event that applied a
//     subscription transition its entitlement.grant or .revoke (keyed by
//     subscription, kind and version) exactly once (0 is allowed only for
//     an intent an operator owns: QUARANTINED or FAILED); no effect
//     without its intent or without a cancellation or an applied
//     transition behind it (a noop, stale or quarantined Stripe event's
//     operation is never effective; a compensation is I7's); a SUCCEEDED
//     intent was effective; an intent that ended OBSOLETE or SUPERSEDED
//     has a newer applied state of its subject behind it.
//   - I3: no sampled projection ever goes back a revision or changes state
//     at the same revision; at the end each order is at the highest
//     accepted revision with the state of the event applied there; at a
//     revision sent with two states at most one is applied, and only such
//     a contradiction is quarantined (version_conflict).
//   - I3 for a Stripe subscription (version = created×4 + rank of
//     created/updated/deleted, see builtin.StripeSubscriptions): the
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
//   - I4: a forged delivery gets 401 and leaves no ledger row.
//   - I5: only the lease holder completes (a completion from PROCESSING by
//     an actor other than the last claimer, or after the event already
//     finished, is a violation).
//   - I6: each audit starts with the accept, each transition starts where
//     the previous ended, the last ends in the event's status, and every
//     effect and PROCESSED outcome says which event did what.
//   - I7 (truth.go): the downstream follows the truth, judged from the
//     business rules, the schedule and the recorded processing order,
//     never from the intents' statuses (they are read only to find the
//     records the rules require and the intents an operator owns).
//     latest: per subscription, the model's versions of the entitlement
//     calls the downstream applied, in arrival order, never decrease; once
//     settled, the downstream's last applied entitlement (grant: entitled)
//     is what the final projection implies (active, trialing or past_due
//     and not deleted), unless the newest applied fact's intent is
//     QUARANTINED or FAILED. while_current: an order's cancellation at r
//     is taken back when a newer revision with another status applied;
//     not taken back, its refund and notice are exactly once (I2); taken
//     back, each is effective at most once, and if it was, the ledger
//     records it (the intent CONTRADICTED, by a revision that took the
//     cancellation back; or it names its compensation, op+"-c", effective
//     exactly once; or an operator owns it); an effect that reached the
//     downstream after the revision that took its reason back was
//     committed is a violation whatever the ledger says, unless its
//     dispatcher checked before that commit and was held between its check
//     and its call (the window no local transaction closes; see
//     docs/effects.md). Taken back
//     and never effective: not CONTRADICTED, no compensation effective. A
//     cancellation that held has no compensation and is not
//     CONTRADICTED. once (a compensation): exactly once when due, never
//     otherwise. Every call carries the model's version of its truth in
//     X-Subject-Version and as the body's subject_version string, exactly
//     (a Stripe deletion's is above 2^53).
//   - I10 (reuse.go): an operation id names one action. Under the
//     reusing rule, derived from the rule and the schedule: each order's
//     truth is its highest accepted revision; once settled, the
//     downstream's last applied order.sync of the subject is of a
//     revision with that status, or an operator was told (an event of
//     the subject QUARANTINED operation_id_reused whose error names the
//     id). A told event wrote nothing, so I1-I9 leave it out of the model
//     (its revision was never applied); a quarantine with that code
//     outside the rule, or naming another id, is a violation.
//   - I9 (warehouse.go): the warehouse follows the truth, judged from the
//     same model as I3 (the schedule, the business rules and the recorded
//     processing order), never from the ledger's projections. Every record
//     in the store is of a version the model says the subject reached
//     (applied there, found there, or advanced to with the same state),
//     carries that version's state and an event that made it, and each
//     (subject, version) appears at most once; a stale, quarantined or
//     never-sent revision has none. Once settled, the store's current row
//     of each subject (its highest version, as localwarehouse's
//     current_state reads it) is the model's final version and state,
//     unless that record's intent (or latest repair) is QUARANTINED; every
//     revision an event applied has its record unless its intent is
//     QUARANTINED or FAILED (the reconciler repairs the current version's
//     only); and a SUCCEEDED record intent has its record at its key,
//     byte for byte (SUCCEEDED means the store answered).
//
// # Naive designs
//
// The same schedules run against the naive cores of package naive; the
// checker then measures how often their mistakes break an invariant
// instead of asserting that nothing does.
// The naive cores implement only the orders business write, so their runs
// skip the schedule's Stripe events (Design.OrdersOnly: not delivered,
// forged or replayed, hence expected nowhere). dispatch-everything is ours
// with a dispatcher blind to the truth, which performs every intent
// (naive.TruthBlind: the projection is hidden from it and no subject
// cursor is taken), Stripe included.
// warehouse-overwrite and warehouse-unobserved are ours with a naive
// warehouse writer (every schedule with the sink on): one object per
// subject overwritten by each record, so the last write, not the highest
// version, is the current row (naive.Overwrite; its drift check asks for
// the subject's object); and a writer that counts a record written
// whatever the store answered (naive.Unobserved). I9 catches both, the
// first by a late older revision as the current row, the second by
// SUCCEEDED intents without their records. reuse-drop is ours with a
// commit that drops an intent whose operation id exists, silently
// (naive.ReuseDrop: the behaviour before a reused id was told from a
// retry), every schedule under the reusing rule: I10 catches it, the
// downstream left at an older revision's status and nobody told.
//
// # Not covered
//
// Orders (builtin.Orders, Standard Webhooks) and Stripe subscriptions are
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
