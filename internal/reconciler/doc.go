// Package reconciler provides the scheduled pass that closes the gaps
// webhooks alone leave open: work that
// nobody picked up, effects whose announcement was lost, dead letters the
// ledger has not heard of, and facts the provider has that we never
// received.
//
// One Run, in order, each step bounded by the run's item and time budget
// and continued by the next run (every query returns the oldest first):
//
//  1. Re-enqueue stuck events: RECEIVED and never claimed, PROCESSING with a
//     lease that expired, RETRY_WAIT that came due, each at least StuckAfter
//     ago (the normal path gets that long first). One pointer per event, in
//     batches; a pointer to an event someone else finishes meanwhile is
//     acknowledged by the processor without effect.
//  2. Re-announce outbox intents PENDING, leased, waiting or UNCERTAIN and
//     due at least StuckAfter ago (outbox.AnnounceDue).
//  3. Sweep the events DLQ (processor.SweepDLQ): an event whose message
//     SQS gave up on but whose row is unfinished becomes DEAD, visible. Sweep
//     the effects DLQ (outbox.SweepDLQ): messages of finished intents are
//     deleted, those of unfinished ones kept (step 2 re-announces them).
//     Sweep the EventBridge bridge's DLQ when there is one
//     (intake.Handler.SweepEventBridgeDLQ): its messages are partner events
//     the bridge never accepted; each that SQS says the bridge's role wrote
//     is fed through the bridge's own accept path (idempotent by event id)
//     and deleted only once accepted; any other is recorded QUARANTINED,
//     with its sender and the reason, never fed, and deleted once recorded
//     (BridgeDLQRefused counts them).
//     Every sweep long-polls (Options.DLQWait, 1 s by default) and ends at
//     MaxItems or at the first empty answer to a long poll: SQS may answer
//     a short poll empty while messages wait.
//  4. Compare with provider truth, for every source with a SourceOfTruth:
//     each fact is projected with the source's own projection and compared
//     with the stored projection. When the store is behind (missing, an
//     older version, or the same version with another state), the fact is
//     fed through the normal pipeline as a reconciliation event — accepted
//     into the ledger under the provider's event id (or a content-derived
//     id) and enqueued — never written into a projection directly. The
//     version guard then decides, exactly as for a webhook.
//  5. Check that the downstream follows the truth (I7; see
//     docs/architecture.md), for
//     latest-policy effects: each subject cursor due on the sync shards
//     (ledger.ListSyncDue; a dispatch puts its cursor there) is compared
//     with its projection's newest intent of the kind family
//     (Projection.Latest). The effect of that intent's kind, when it is an
//     outbox.SubjectStatus, says which version of the subject the
//     downstream last applied. Equal (exact decimals): the cursor is
//     parked until the next dispatch. Different (behind, ahead, or
//     unknown): DownstreamDrift counts it; an unfinished newest intent
//     (PENDING, RETRY_WAIT, UNCERTAIN, or DISPATCHING with an expired
//     lease) is announced again to the effects queue; a finished one
//     (SUCCEEDED while the downstream holds an older version, or ended
//     without a call) is logged as a warning with the operation id, both
//     versions and a reason, for an operator; either way the subject is
//     checked again StuckAfter later. Effects that cannot report a
//     version are skipped and the cursor parked. At most DriftChecks
//     subjects per run.
//  6. With the warehouse sink, check its records (WarehouseCheck): one
//     bounded step of a pass over the whole table per run, resumed from a
//     cursor kept in the ledger (ledger.WarehousePass). A stored cursor,
//     not an index of changed subjects: it adds nothing to the
//     processor's writes, and a pass that meets every subject also finds
//     a record the bucket's retention expired. Drift is reported per
//     complete pass, with the pass's age.
//  7. Gauges: open events by status, the oldest unfinished age, intents by
//     status, CONTRADICTED intents waiting for the recovery owner
//     (CompensationsDue), DLQ depths.
//
// Everything is emitted as one EMF record. Two runs at once are safe: every
// action is idempotent (duplicate pointers are harmless, a reconciliation
// event has a deterministic id so the second Accept is a duplicate, DLQ
// sweeps and give-ups are conditional, a drift check's mark is conditioned
// on the cursor's holder, the warehouse pass's save on its revision). Only
// step 6 scans the table, a bounded step per run; steps 1, 2, 5 and 7
// read the sparse, write-sharded due index, steps 4 and 5 read single
// projection and intent items.
package reconciler
