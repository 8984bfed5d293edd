package ledger_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// A walk of the table (ScanProjectionsChanged from "" to Done), one
// bounded step at a time, returns every matching projection exactly
// once, never reads more than a step's bound, and takes about
// items / MaxRead steps. The table holds 10,000 items: 2,000 projections
// (one in four changed recently) and 8,000 other items. The figures it
// logs are BENCHMARKS.md's "The warehouse drift check" at 10^4 items.
func TestScanProjectionsChangedWalksTheTableOnceInBoundedSteps(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a table of 10,000 items")
	}
	ctx := context.Background()
	f, db := fixtureWithClient(t)
	const items, projections, maxRead, limit = 10000, 2000, 1000, 100
	since := t0.Add(-time.Hour)
	want := map[string]bool{}
	for i := range items {
		it := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: fmt.Sprintf("EV#src#evt_%d", i)}, "sk": &types.AttributeValueMemberS{Value: "EV"},
			"item": &types.AttributeValueMemberS{Value: "event"}}
		if i < projections {
			subject := fmt.Sprintf("S-%d", i)
			updated := t0.Add(-48 * time.Hour)
			if i%4 == 0 {
				updated = t0
				want[subject] = true
			}
			it = map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "PJ#orders/order#" + subject}, "sk": &types.AttributeValueMemberS{Value: "PJ"},
				"item": &types.AttributeValueMemberS{Value: "projection"}, "name": &types.AttributeValueMemberS{Value: "orders/order"},
				"subject": &types.AttributeValueMemberS{Value: subject}, "version": &types.AttributeValueMemberN{Value: "1"},
				"updated_at": &types.AttributeValueMemberN{Value: strconv.FormatInt(updated.UnixMilli(), 10)}}
		}
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("ledger"), Item: it}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]int{}
	q := ledger.ChangedScan{Since: since, Limit: limit, MaxRead: maxRead}
	steps, read, maxStep := 0, 0, 0
	for {
		steps++
		page, err := f.L.ScanProjectionsChanged(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if page.Read > maxRead || len(page.Projections) > limit {
			t.Fatalf("step %d read %d items and returned %d projections, over its bounds", steps, page.Read, len(page.Projections))
		}
		read += page.Read
		maxStep = max(maxStep, page.Read)
		for _, p := range page.Projections {
			got[p.Subject]++
		}
		if page.Done {
			break
		}
		if steps > 100 {
			t.Fatal("the walk did not end in 100 steps")
		}
		q.Cursor = page.Next
	}
	for s := range want {
		if got[s] != 1 {
			t.Fatalf("projection %s returned %d times by the walk", s, got[s])
		}
	}
	if len(got) != len(want) {
		t.Fatalf("the walk returned %d projections, want the %d changed", len(got), len(want))
	}
	// Each step reads at most maxRead items and returns at most limit
	// matches: at least items/maxRead steps, more when matches bind.
	if steps < items/maxRead || steps > items/maxRead+len(want)/limit+1 {
		t.Fatalf("%d steps for %d items", steps, items)
	}
	t.Logf("%d items, %d changed projections: %d steps of at most %d items and %d subjects; %d items read in all, at most %d in a step",
		items, len(want), steps, maxRead, limit, read, maxStep)
}
