// Package ledger is the event ledger: one DynamoDB table that holds every
// accepted webhook event, its processing state (Status) and audit, its
// payload, the projections derived from it and the outbox intents it
// produced (IntentStatus).
//
// # Items
//
// The table's keys are the strings "pk" and "sk" (built in keys.go):
//
//	EV#<source>#<event_id>       EV            an event: identity, status, lease, audit (small, mutable)
//	EV#<source>#<event_id>       PL#<hash>#<n> a chunk of an event's payload too large to keep inline (immutable)
//	PJ#<name>#<subject>          PJ            a projection: state, version, fingerprint
//	OP#<operation_id>            OP            an outbox intent
//	OP#warehouse.<hash>          OP            a warehouse record intent (IsRecordIntent: a shape no business intent has)
//	CUR#<proj>#<subject>#<fam>   CUR           a subject cursor (LockSubject)
//	CUR#warehouse                CHECK         the warehouse drift check's pass (SaveWarehousePass)
//	BH#<source>#<payload hash>   BH            the event id a body first arrived under (ClaimBody)
//
// Items that wait for something carry due_shard and due_at, the keys of the
// sparse, write-sharded GSI "due" (due.go): the reconciler and operators
// find work by querying it, never by scanning. A finished item drops them
// and gains the TTL attribute expires_at.
//
// The table outlives every deployment, so attributes are only added: one
// keeps its name, its DynamoDB type and its meaning, and a reader supplies
// what an absent one means (an intent without "scope" takes its
// projection's). golden_test.go reads the items of each schema version.
//
// # Emulators
//
// The tests run on minidyn, and the stored format bends to it in four
// places, each harmless on DynamoDB: an empty payload is stored as no
// attribute (minidyn refuses an empty Binary); an intent's empty payload
// as NULL (it cannot rewrite an item that holds an empty map); an intent's
// version also as text, version_s (it turns every number of an item it
// updates into a float64); and a dead event's dead_letters set is never
// pruned (it would leave an empty set that it then refuses). Two answers
// are read defensively: a refused conditional write should return the item
// (ALL_OLD), and from a store that returns none (dynalite) the ledger
// reads it, on that path only; and an upsert's old image may hold a new
// item's key (minidyn), so a row is new when the old image has no status.
package ledger
