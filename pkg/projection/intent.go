package projection

import "strings"

// MaxIDLength is the longest subject (and operation id) the ledger keys:
// 256 bytes of UTF-8. A longer one is refused by the commit, so a
// projection checks it and returns a Permanent error instead.
const MaxIDLength = 256

// The platform reserves a namespace in intents for its own: the
// warehouse sink's change records (kind "warehouse.record") are intents
// the processor adds to every applied revision, keyed by operation ids
// of their own shape, and the dispatcher writes them to a store that
// serves every scope. A projection's intent can therefore never use a
// kind of the family ReservedFamily ("warehouse", or "warehouse.…", as a
// kind or as a Compensation), nor an operation id that starts with
// ReservedOperationPrefix: Validate refuses the result
// (CodeInvalidResult), and the processor quarantines its event.
const (
	ReservedFamily          = "warehouse"
	ReservedOperationPrefix = ReservedFamily + "."
)

// ReservedKind reports whether kind is in the platform's reserved family.
func ReservedKind(kind string) bool {
	return kind == ReservedFamily || strings.HasPrefix(kind, ReservedFamily+".")
}

// ReservedOperationID reports whether op has the shape of the platform's
// own operation ids.
func ReservedOperationID(op string) bool { return strings.HasPrefix(op, ReservedOperationPrefix) }

// Write is the new state of one projection subject, as computed by
// a projection from an event.
type Write struct {
	Name        string         // projection name, e.g. "stripe_subscription"
	Subject     string         // business entity key, e.g. the subscription id
	Version     int64          // source revision; higher wins
	Fingerprint string         // equal fingerprints mean equal business state
	Terminal    bool           // no later version may change this subject again (a deletion)
	State       map[string]any // the projected business state
	// Note, when set, is added to the event's completion audit (for
	// example where the state came from: "fetched subscription sub_1 from
	// the Stripe API at …").
	Note string
}

// Intent is one business effect to perform later, exactly once.
type Intent struct {
	OperationID string         // stable key: hash(subject, transition, version); the downstream idempotency key
	Kind        string         // e.g. "entitlement.grant"
	Subject     string         // the business entity it concerns
	Payload     map[string]any // what the effect needs
	// Policy says what the dispatcher checks against the current truth
	// before it performs the effect: PolicyOnce (the
	// default), PolicyWhileCurrent or PolicyLatest.
	Policy Policy
	// Condition, for PolicyWhileCurrent, is the projection state the
	// intent's reason needs (field → value, compared as text): a refund
	// for a cancellation needs {"status": "cancelled"}.
	Condition map[string]string
	// Compensation, for PolicyWhileCurrent, is the intent kind that undoes
	// or corrects this one when a newer revision contradicts it after it
	// was performed ("" : none, the intent becomes CONTRADICTED, an
	// attention item for the recovery owner). The compensation intent is
	// written in the same transaction as that revision, keyed
	// CompensationID(OperationID), policy once.
	Compensation string
}

// CompensationID is the operation id of the compensation of intent op:
// stable, so a retried commit never creates two.
func CompensationID(op string) string { return op + "-c" }

// Policy is an intent kind's dispatch policy, declared by the projection
// that emits it.
type Policy string

// The policies.
const (
	// PolicyOnce: the fact must be acted on whatever happens later
	// (suppress an address after a hard bounce). No check.
	PolicyOnce Policy = "once"
	// PolicyWhileCurrent: an action justified by a state (a refund for a
	// cancellation). Performed only if, when the dispatcher claims it, the
	// projection still satisfies the intent's Condition; otherwise the
	// intent ends OBSOLETE without a call.
	PolicyWhileCurrent Policy = "while_current"
	// PolicyLatest: a state sync (an entitlement). Performed only while the
	// projection still holds the state the intent carries (its
	// fingerprint; a newer version with the same state still counts);
	// otherwise a newer intent carries the newer state and this one ends
	// SUPERSEDED without a call.
	PolicyLatest Policy = "latest"
)
