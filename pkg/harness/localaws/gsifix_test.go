package localaws_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/pkg/harness/localaws"
	"github.com/effectively-once/webhooks/pkg/ledger"
)

// Twenty events created by the ledger's upsert must all be found through
// the due index, as in DynamoDB. Without the index repair, minidyn v0.8.2
// returns one of them.
func TestDueIndexSurvivesUpserts(t *testing.T) {
	ctx := context.Background()
	d := localaws.NewDynamo()
	defer d.Close()
	db := d.Client()
	if err := ledger.CreateTable(ctx, db, "ledger"); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	l, err := ledger.New(db, ledger.Options{Table: "ledger", Clock: ledger.NewManualClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		id := fmt.Sprintf("evt_%02d", i)
		if _, err := l.Accept(ctx, ledger.Delivery{Source: "stripe", EventID: id, EventType: "x", DeliveryID: id, Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	due, err := l.ListDue(ctx, t0.Add(time.Minute), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 20 {
		t.Fatalf("due index returned %d of 20 events", len(due))
	}
}
