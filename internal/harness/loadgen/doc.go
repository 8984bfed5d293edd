// Package loadgen provides the load generator behind scripts/load: it sends
// signed webhook deliveries to a running local stack (`make dev`, or one a
// test starts in-process) at a fixed offered rate, and reports what the
// system did with them in business terms.
//
// # Open loop
//
// Send i is scheduled at start + i/rate whatever happened to the sends
// before it; responses never slow the schedule down. Concurrency is bounded
// (Options.MaxInFlight): when every slot is busy at a send's scheduled time
// the send is skipped and counted (Result.Skipped), so an overloaded stack
// shows up as skips and as latency, never as a quietly lower offered rate.
// A run is bounded by Options.Duration and Options.Count, whichever comes
// first, and the target must be a loopback address (ErrNotLoopback).
//
// # What is sent
//
// A mix of Stripe customer.subscription.* events (source "stripe") and
// order events (source "orders", Standard Webhooks, builtin.Orders), each
// signed with the local stack's visibly fake secrets. Subjects move through
// their lifecycle one event at a time (a subscription trialing → active →
// past_due → canceled, an order created → confirmed → cancelled), several
// subjects interleaved, so events of one subject are in flight together and
// may be processed out of order. A fraction of the sends
// (Options.DuplicateRatio) re-send an earlier event: the same event id and
// body, re-signed at the send's time, sometimes with other headers (a
// Stripe signature that also carries the rotation secret's v1, Standard
// Webhooks' svix-* headers).
//
// # What is measured
//
//   - intake latency: request start to response end of every send
//     (p50/p95/p99/max), and the answers' status codes;
//   - throughput: 2xx answers per second of the send phase;
//   - end to end: from an event's first send to its processed_at in the
//     ledger (read with ledger.Get through DynamoDB, after the send phase,
//     so polling does not load the stack while it is measured);
//   - lost: an event answered 2xx that is not PROCESSED by the drain
//     deadline (I1; see docs/architecture.md);
//   - effects: the model knows which intents each applied event must create
//     (projection.OperationID of the same parts the projections use); the
//     fake downstream (GET /_dev/downstream) must show exactly one
//     effective call for each. Missing = an expected intent never applied,
//     doubled = a key applied more than once (I2). The latest revision of
//     every subject must end applied (I3: an older event never wins);
//   - drift: in a run of at least 2,000 deliveries (a soak), the intake
//     latency and the time to PROCESSED of the last 1,000 against the
//     first 1,000 (Result.Drift), which shows a stack whose cost grows with
//     what it has stored.
//
// Sweep runs several offered rates one after the other, each run drained
// before the next starts, and LatencyChart turns the results into a
// plot.Chart of intake latency percentiles against offered rate.
package loadgen
