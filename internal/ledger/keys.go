package ledger

import (
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// The table's keys: a string partition key "pk" and sort key "sk". Every
// item's key is built here, and nowhere else (the package doc lists the
// items).
const (
	attrPK = "pk"
	attrSK = "sk"

	// Partition key prefixes, one per kind of item.
	pkEvent      = "EV#" // EV#<source>#<event id>: the event and its payload chunks
	pkProjection = "PJ#" // PJ#<name>#<subject>
	pkIntent     = "OP#" // OP#<operation id>
	// pkRecordIntent is the shape of the warehouse sink's record intents,
	// OP#warehouse.<hash> (warehouse.OperationID): no business intent has
	// it (projection.Validate refuses the prefix, a scoped operation id
	// is hex), so an IAM dynamodb:LeadingKeys condition can grant the
	// reconciler PutItem on record intents alone, and the dispatcher
	// performs a record under this shape only (IsRecordIntent).
	pkRecordIntent = pkIntent + projection.ReservedOperationPrefix
	pkCursor       = "CUR#" // CUR#<projection>#<subject>#<kind family>
	pkBody         = "BH#"  // BH#<source>#<payload hash>: which event id first delivered a body

	// Sort keys.
	skEvent      = "EV"
	skProjection = "PJ"
	skIntent     = "OP"
	skCursor     = "CUR"
	skBody       = "BH"
	skCheck      = "CHECK" // CUR#warehouse CHECK: the warehouse drift check's pass
	skChunk      = "PL#"   // PL#<payload hash>#<n>: chunk n of an out-of-line payload
)

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: sv(pk), attrSK: sv(sk)}
}

func eventPK(source, eventID string) string { return pkEvent + source + "#" + eventID }

func eventKey(source, eventID string) map[string]types.AttributeValue {
	return key(eventPK(source, eventID), skEvent)
}

// chunkKey is the key of chunk i of an event's out-of-line payload: under
// the event's partition, named by the payload's hash, so a rewrite of the
// same bytes lands on the same items.
func chunkKey(source, eventID, hash string, i int) map[string]types.AttributeValue {
	return key(eventPK(source, eventID), skChunk+hash+"#"+strconv.Itoa(i))
}

func projectionKey(name, subject string) map[string]types.AttributeValue {
	return key(pkProjection+name+"#"+subject, skProjection)
}

func intentKey(op string) map[string]types.AttributeValue {
	return key(pkIntent+op, skIntent)
}

// IsRecordIntent reports whether the intent op is keyed as a warehouse
// record intent (pkRecordIntent).
func IsRecordIntent(op string) bool { return strings.HasPrefix(pkIntent+op, pkRecordIntent) }

func cursorKey(projection, subject, family string) map[string]types.AttributeValue {
	return key(pkCursor+projection+"#"+subject+"#"+family, skCursor)
}

// warehousePassKey is the warehouse drift check's one item. Under the
// cursors' prefix, which the reconciler may update; a subject cursor's
// sort key is always CUR, so no cursor can take it.
func warehousePassKey() map[string]types.AttributeValue {
	return key(pkCursor+"warehouse", skCheck)
}

func bodyKey(source, hash string) map[string]types.AttributeValue {
	return key(pkBody+source+"#"+hash, skBody)
}
