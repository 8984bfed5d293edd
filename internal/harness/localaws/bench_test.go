package localaws_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// BenchmarkAcceptWithLedgerOf measures ledger.Accept (intake's conditional
// UpdateItem upsert of a new event) on the in-process DynamoDB emulator
// with 1,000, 10,000 and 100,000 events already in the table: the
// emulator's cost per request must not grow with the ledger.
// The table is filled outside the timer by BatchWriteItem, with finished
// events (no due index keys) and, one in ten, events still due.
//
// Run: go test -run '^$' -bench AcceptWithLedgerOf ./internal/harness/localaws/
func BenchmarkAcceptWithLedgerOf(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			ctx := context.Background()
			db := emptyLedger(b)
			fill(b, db, n)
			t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
			l, err := ledger.New(db, ledger.Options{Table: "ledger", Clock: ledger.NewManualClock(t0)})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				id := fmt.Sprintf("evt_bench_%08d", i)
				if _, err := l.Accept(ctx, ledger.Delivery{Source: "stripe", EventID: id, EventType: "x", DeliveryID: id, Payload: []byte(`{}`)}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func fill(b *testing.B, db *dynamodb.Client, n int) {
	b.Helper()
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	putAll(b, db, n, func(j int) map[string]types.AttributeValue {
		item := map[string]types.AttributeValue{
			"pk":     s(fmt.Sprintf("stripe#evt_fill_%08d", j)),
			"sk":     s("event"),
			"status": s("PROCESSED"),
		}
		if j%10 == 0 {
			item["due_shard"] = s(fmt.Sprintf("%d", j%4))
			item["due_at"] = &types.AttributeValueMemberN{Value: fmt.Sprintf("%d", 1_700_000_000+j)}
		}
		return item
	})
}

// putAll writes item(0) … item(n-1) into the ledger table, 25 per
// BatchWriteItem.
func putAll(b *testing.B, db *dynamodb.Client, n int, item func(j int) map[string]types.AttributeValue) {
	b.Helper()
	for i := 0; i < n; i += 25 {
		var reqs []types.WriteRequest
		for j := i; j < min(i+25, n); j++ {
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item(j)}})
		}
		if _, err := db.BatchWriteItem(context.Background(), &dynamodb.BatchWriteItemInput{
			RequestItems: map[string][]types.WriteRequest{"ledger": reqs},
		}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQueryWithLedgerOf is the reconciler's kind of query (one due
// shard, due_at up to now, Limit 100) on a table where 50 items wait on
// that shard and 1,000, 10,000 or 100,000 more sit on other shards of the
// index (finished events on their done shards, cursors on sync shards):
// DynamoDB reads only the queried partition's range, and so must the
// emulator (query.go); before it, minidyn sorted and evaluated every entry
// of the index for each query.
func BenchmarkQueryWithLedgerOf(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			ctx := context.Background()
			db := emptyLedger(b)
			s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
			num := func(v int) types.AttributeValue { return &types.AttributeValueMemberN{Value: fmt.Sprint(v)} }
			putAll(b, db, n+50, func(j int) map[string]types.AttributeValue {
				shard := fmt.Sprintf("done#%d", j%4)
				if j%3 == 0 {
					shard = fmt.Sprintf("sync#%d", j%4)
				}
				if j >= n {
					shard = "0"
				}
				return map[string]types.AttributeValue{
					"pk": s(fmt.Sprintf("EV#stripe#evt_fill_%08d", j)), "sk": s("EV"), "item": s("event"), "status": s("RECEIVED"),
					"due_shard": s(shard), "due_at": num(1_796_000_000_000 + j),
				}
			})
			in := &dynamodb.QueryInput{TableName: aws.String("ledger"), IndexName: aws.String(ledger.DueIndex),
				KeyConditionExpression: aws.String("due_shard = :s AND due_at <= :b"), FilterExpression: aws.String("#item = :ev"),
				ExpressionAttributeNames:  map[string]string{"#item": "item"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":s": s("0"), ":b": num(1_797_000_000_000), ":ev": s("event")},
				Limit:                     aws.Int32(100)}
			// The first query of a table builds its partitions (then every
			// write keeps them): on a stack, that happens while it is small.
			if _, err := db.Query(ctx, in); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				out, err := db.Query(ctx, in)
				if err != nil {
					b.Fatal(err)
				}
				if len(out.Items) != 50 {
					b.Fatalf("%d items, want the shard's 50", len(out.Items))
				}
			}
		})
	}
}

// emptyLedger starts an emulator, closed with b, holding an empty ledger
// table, and returns a client of it.
func emptyLedger(b *testing.B) *dynamodb.Client {
	d := localaws.NewDynamo()
	b.Cleanup(d.Close)
	db := d.Client()
	if err := ledger.CreateTable(context.Background(), db, "ledger"); err != nil {
		b.Fatal(err)
	}
	return db
}
