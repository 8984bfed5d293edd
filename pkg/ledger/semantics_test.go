package ledger_test

import (
	"context"
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
