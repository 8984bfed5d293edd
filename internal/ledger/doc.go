// Package ledger provides the event ledger: one DynamoDB table that holds every
// accepted webhook event, its processing state, its payload, the projections
// derived from it and the outbox intents it produced.
//
// # State machine (DESIGN.md §4)
//
//	RECEIVED ──claim──> PROCESSING(lease_owner, lease_token, lease_expires_at, attempts+1)
//	PROCESSING ──commit──> PROCESSED(outcome: applied | stale | noop | ignored)
//	PROCESSING ──transient error──> RETRY_WAIT(next_attempt_at) ──claim──> PROCESSING
//	PROCESSING, lease expired ──claim by another worker──> PROCESSING (new token)
//	PROCESSING ──attempts exhausted──> DEAD
//	PROCESSING ──permanent error──> QUARANTINED
//	DEAD ──redrive from the DLQ──> PROCESSING (audited as a redrive)
//	DEAD, QUARANTINED ──operator replay(reason, actor)──> RECEIVED (same identity)
//
// Every transition is one conditional write that also appends an audit entry
// (when, what, who, why) to the event item, so the trail can never disagree
// with the status.
//
// # Items
//
// The table has a string partition key "pk" and sort key "sk":
//
//	EV#<source>#<event_id>  EV            the event: identity, status, lease, audit (small, mutable)
//	EV#<source>#<event_id>  PL#<hash>#<n> payload chunks when the payload does not fit inline (immutable)
//	PJ#<name>#<subject>     PJ            a projection: state, version, fingerprint
//	OP#<operation_id>       OP            an outbox intent
//
// Unfinished events (RECEIVED, PROCESSING, RETRY_WAIT) carry "due_shard" and
// "due_at", the keys of the sparse, write-sharded GSI "due": the reconciler
// finds stuck work by querying it, never by scanning. DEAD and QUARANTINED
// events move to its attention shards ("A<n>"), which only operators list.
// A PROCESSED event drops the keys, gains the TTL attribute "expires_at",
// and keeps "done_shard" ("done#<n>"): if a duplicate arrives later, Accept
// puts the event on that shard, which no query reads (see Accept). Every
// query names the shards it reads, so the three families never mix.
//
// # Cost (DESIGN.md §9)
//
// DynamoDB bills an update by the size of the whole item. The payload is
// therefore kept inline only when it is tiny (InlinePayloadMax, 256 bytes
// after compression), so the event item stays within one 1 KB write unit;
// otherwise it is written once, right after the event item is created, as
// immutable chunk items keyed by the payload hash (at most 350 KB each), and
// status changes never touch it. Payloads are gzip-compressed above 1 KB.
//
// Measured per new event (pipelinetest.TestRequestBudgetPerEvent): an inline
// payload costs intake 1 UpdateItem + 1 SendMessage and the processor 1 claim
// + 1 transaction, DESIGN.md §9's budget; an out-of-line payload adds one
// PutItem at intake and one GetItem in the processor per chunk (one chunk
// up to 350 KB compressed). For a 4 KB event that extra request saves about
// 6 write units: at ~2 KB an inline item would bill 2-3 units on each of its
// five writes. A duplicate of a processed event costs one request either way:
// the UpdateItem that records it (billed by the item's size, 1 unit below
// 1 KB, as a write refused by a condition would be), plus, for its first
// duplicate only, one index write putting it on its done shard
// (internal/harness/capacity measures both).
//
// The chunks are written after the event item so that a duplicate delivery
// of a processed event needs nothing but the one conditional update. If the
// intake dies between the two writes it has not answered 2xx, so the
// provider retries; the retry finds the row RECEIVED and rewrites the
// (identical, hash-keyed) chunks before enqueueing. A processor that finds a
// chunk missing treats it as transient.
//
// # Compatibility
//
// An upgrade never loses or misreads what an older version wrote: the
// table outlives every deployment, and a new version reads items an older
// one wrote (events still retained, projections forever, intents waiting
// on the attention shards). The rule: attributes are only added. An
// attribute keeps its name, its DynamoDB type and its meaning; a new one
// may be absent from older items, and the reader supplies what it meant
// before it existed (an intent without "scope" takes its projection's; an
// audit entry stored as a map decodes like one stored as text).
//
// How it is checked (golden_test.go): testdata/golden holds one fixture
// per schema version, the items a real pipeline run on the manual clock
// wrote (events, payload chunks, projections, intents, a subject cursor),
// as DynamoDB JSON. TestGoldenItemsReadByThisVersion loads every fixture
// into a fresh table (minidyn; dynalite under make test-dynalite) and
// reads it through this version's paths (Get, Payload, GetProjection,
// GetIntentState, GetCursor, the due index's queries, package state),
// asserting the decoded values. TestThisVersionWritesEveryGoldenAttribute
// runs the newest fixture's scenario again and requires every attribute it
// holds, with its type. A golden fixture is never edited (its SHA-256 is
// pinned in the test); a schema change adds a new one, written by
// `go test ./internal/ledger -run TestWriteGoldenFixture -update` under a
// new name, with its own checks. Formats older than the first fixture are
// checked by tests that build those items by hand: TestAuditEntryEncodings
// (audit entries as maps), TestAnIntentWrittenWithoutScopeIsReadWithTheProjectionsScope
// (intents without scope and source) and
// TestEveryDeadOrQuarantinedRowIsOnTheAttentionShards (dead and
// quarantined rows left on their work shards). docs/state.md documents
// the attributes a reader outside this package may rely on.
//
// # Where this differs from DESIGN.md §6, and why
//
// DESIGN.md asks for acceptance by a conditional PutItem whose failure returns
// the existing row. Accept instead uses one UpdateItem "upsert" with
// ReturnValues=ALL_OLD: it is the same single-request, atomic test-and-set
// (exactly one concurrent caller sees no old item, every other caller learns
// the existing row from the same response, no second read), and it also
// records the duplicate delivery itself (delivery_count and a bounded
// history that holds the last delivery's time and id), for an unfinished and a finished
// event alike, which a failed PutItem cannot do without a second write. Every
// other field is written with if_not_exists, so a duplicate never changes
// the event's identity, status, payload, result or audit.
package ledger
