package ledger

import "time"

// How the ledger stores time: instants as epoch milliseconds (DynamoDB
// numbers), so that conditions and the due index's sort key compare them
// (lease_expires_at < :now, due_at <= :before); the zero time as 0, which
// the decoders' omitempty fields read back as the zero time. The TTL
// attribute (TTLAttribute) is the exception: epoch seconds, as DynamoDB's
// TTL requires.

// ms is t in epoch milliseconds; 0 for the zero time.
func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// fromMS reads what ms wrote.
func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}
