package ledger_test

import (
	"context"
	"errors"
	"testing"

	"github.com/effectively-once/webhooks/pkg/ledger"
)

// Rules AWS applies that the emulators may not (issue 14).

// §6: an empty payload is stored (as no attribute: DynamoDB accepts an
// empty Binary outside keys, minidyn refuses one) and read back empty; a
// duplicate finds the row.
func TestEmptyPayloadIsStored(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	d := ledger.Delivery{Source: "github", EventID: ledger.ContentID(nil), EventType: "unidentified", DeliveryID: "gh-1", Quarantine: "no_identity"}
	if _, err := f.L.Accept(ctx, d); err != nil {
		t.Fatalf("accept an empty payload: %v", err)
	}
	dup, err := f.L.Accept(ctx, d)
	if err != nil || !dup.Duplicate || dup.PayloadMismatch || dup.Event.PayloadSize != 0 || dup.Event.Status != ledger.StatusQuarantined {
		t.Fatalf("duplicate %+v: %v", dup, err)
	}
	raw, err := f.L.Payload(ctx, dup.Event)
	if err != nil || len(raw) != 0 {
		t.Fatalf("payload %q: %v", raw, err)
	}
}

// §7: an event id is what every component accepts: a DynamoDB key, an SQS
// message body (SendMessage allows #x9 | #xA | #xD | #x20-#xD7FF |
// #xE000-#xFFFD | #x10000-#x10FFFF) and a log line. Accept refuses the
// rest with ErrInvalid, as CheckEventID says beforehand.
func TestEventIDsAreWhatSQSAndDynamoDBCarry(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	for _, c := range []struct {
		id string
		ok bool
	}{
		{"evt_1", true},
		{"evt_\ufffd", true},       // the replacement character itself is allowed
		{"evt_\U0001F600", true},   // supplementary planes are allowed
		{"evt_\ud7ff\ue000", true}, // the edges of the allowed ranges
		{"evt_\ufffe", false},
		{"evt_\uffff", false},
		{"evt_\x85", false},   // not UTF-8
		{"evt_\u0085", false}, // C1 control
		{"evt_\t", false},     // SQS allows a tab; a key and a log line should not have one
		{"evt_\x00", false},
		{"evt_\xed\xa0\x80", false}, // an encoded surrogate is not UTF-8
	} {
		err := ledger.CheckEventID(c.id)
		_, aerr := f.L.Accept(ctx, delivery(c.id, `{}`))
		if (err == nil) != c.ok || (aerr == nil) != c.ok || (!c.ok && (!errors.Is(err, ledger.ErrInvalid) || !errors.Is(aerr, ledger.ErrInvalid))) {
			t.Errorf("%q: CheckEventID %v, Accept %v; want usable=%v", c.id, err, aerr, c.ok)
		}
	}
}
