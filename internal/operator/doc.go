// Package operator provides webhookctl, the operator's tool for the
// effectively-once webhook platform: list and inspect events and outbox
// intents, replay DEAD or QUARANTINED events (one, or many by filter with a
// rate limit and a resumable checkpoint), put an event on hold and release
// it, record the outcome of an uncertain effect that an operator verified
// downstream, and print the dashboard and the dead-letter queues.
// With the warehouse sink's bucket (WAREHOUSE_BUCKET, --warehouse-bucket,
// --local), the dashboard counts the subjects whose canonical revision
// has no record in the warehouse, projections show puts a subject's
// warehouse version and record status next to its canonical version, and
// warehouse backfill rebuilds the warehouse from the canonical state
// (warehouse.go).
//
// Every write goes through the ledger's conditional transitions, so it is
// refused when the state moved on, and appends an audit entry with the
// operator and their --reason (I6; see docs/architecture.md). The operator
// is the name they give (--actor, default $USER@host) beside the identity
// of the credentials that sign the write: their ARN, from the region's STS
// (GetCallerIdentity; no endpoint override is honoured for it), or the
// local user with --local (identity.go, which also says what that does
// not prove). A write whose caller cannot be verified is refused. Replays
// keep the event's identity (source, event id) and enqueue the usual
// pointer message with reason "replay"; if that send fails, the event
// stays RECEIVED and the reconciler re-enqueues it.
//
// The core is App: it takes its clients, an io.Writer and a clock, so tests
// run it against the emulators (package localaws) with a manual clock. Run
// parses a command line (standard library flag, one FlagSet per command) and
// returns the exit status: 0 done, 1 failed or refused, 2 bad usage or
// configuration. scripts/webhookctl is the thin main; its README documents
// the commands.
//
// Reads stay off table scans: open events and intents come from the sparse
// due index (ledger.ListOpen), with every count capped and the cap said
// aloud. Only `events list --scan` scans, bounded by --limit and a read
// budget, because PROCESSED events are not on the index.
//
// An event's or intent's lease and due times are shown only in the status
// they belong to (a lease while PROCESSING or DISPATCHING, a next attempt
// while waiting): an emulator that ignores REMOVE in updates (minidyn)
// leaves them on the item after the status moved on.
package operator
