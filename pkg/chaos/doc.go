// Package chaos provides model-based chaos testing of the whole pipeline
// (issue 8, "Chaos, model-based"): a seeded generator of random schedules,
// an executor that plays a schedule through the real intake, processor,
// dispatcher and reconciler handlers (pkg/pipelinetest over minidyn and
// goaws), a reference model with a checker for the invariants of
// DESIGN.md §5, and a greedy shrinker that turns a failing schedule into a
// short reproducer to paste into a test.
//
// A Schedule is plain data: order events (subject, revision, status),
// deliveries of them (duplicates under the same delivery id, the same
// event under a new id, any order), and steps that interleave 1-3
// processor workers and 1-3 dispatchers one poll at a time, crash an
// instance right before or after its nth DynamoDB or SQS call, pause one
// in the middle of a call while the world moves on (its lease expires,
// another worker takes over), advance the manual clock, run the
// reconciler, script the downstream (429, 500, hang before or after
// applying) and replay DEAD or QUARANTINED events as an operator.
//
// The same schedules run against naive designs (package naive): the
// checker then measures what the seeds warn about instead of asserting it.
//
// Redelivery follows the manual clock (pipelinetest.Virtual), so a run does
// not wait for real visibility timeouts and depends on the machine's speed
// only through the downstream's real-time call timeout.
package chaos
