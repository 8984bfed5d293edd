package localaws

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// The partition fast path answers every query exactly as minidyn's full
// walk does: the same items in the same order, the same Count and the same
// LastEvaluatedKey, page after page, forwards and backwards, with sort key
// conditions it narrows on and ones it does not understand, a filter and a
// projection, after random puts, updates that move items between
// partitions or out of the sparse index, and deletes.
func TestQueryFastPathAgreesWithTheFullWalk(t *testing.T) {
	ctx := context.Background()
	fast, full := newIndexRepair(), newIndexRepair()
	full.fullQuery = true
	var dbs []*dynamodb.Client
	for _, f := range []*indexRepair{fast, full} {
		srv := httptest.NewServer(dynamoHandler(f))
		defer srv.Close()
		db := DynamoAt(srv.URL)
		if err := ledger.CreateTable(ctx, db, "ledger"); err != nil {
			t.Fatal(err)
		}
		dbs = append(dbs, db)
	}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v int) types.AttributeValue { return &types.AttributeValueMemberN{Value: fmt.Sprint(v)} }
	r := rand.New(rand.NewPCG(1, 2))
	shards := []string{"0", "1", "A0", "sync#0", "done#0"}
	for step := 0; step < 600; step++ {
		pk := fmt.Sprintf("EV#stripe#evt_%03d", r.IntN(150))
		var write func(*dynamodb.Client) error
		switch x := r.IntN(10); {
		case x < 5:
			item := map[string]types.AttributeValue{"pk": s(pk), "sk": s("EV"), "item": s("event"), "status": s([]string{"RECEIVED", "PROCESSED"}[r.IntN(2)])}
			if r.IntN(4) > 0 {
				item["due_shard"], item["due_at"] = s(shards[r.IntN(len(shards))]), n(1_700_000_000_000+r.IntN(50))
			}
			write = func(db *dynamodb.Client) error {
				_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("ledger"), Item: item})
				return err
			}
		case x < 8:
			shard, at := s(shards[r.IntN(len(shards))]), n(1_700_000_000_000+r.IntN(50))
			expr := "SET due_shard = :s, due_at = :a"
			if r.IntN(3) == 0 {
				expr = "SET #st = :p REMOVE due_shard, due_at"
			}
			write = func(db *dynamodb.Client) error {
				in := &dynamodb.UpdateItemInput{TableName: aws.String("ledger"), Key: map[string]types.AttributeValue{"pk": s(pk), "sk": s("EV")}, UpdateExpression: aws.String(expr)}
				if expr[4] == 'd' {
					in.ExpressionAttributeValues = map[string]types.AttributeValue{":s": shard, ":a": at}
				} else {
					in.ExpressionAttributeNames = map[string]string{"#st": "status"}
					in.ExpressionAttributeValues = map[string]types.AttributeValue{":p": s("PROCESSED")}
				}
				_, err := db.UpdateItem(ctx, in)
				return err
			}
		default:
			write = func(db *dynamodb.Client) error {
				_, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String("ledger"), Key: map[string]types.AttributeValue{"pk": s(pk), "sk": s("EV")}})
				return err
			}
		}
		for _, db := range dbs {
			if err := write(db); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
		if step%50 != 49 {
			continue
		}
		for _, q := range []struct {
			cond   string
			vals   map[string]types.AttributeValue
			filter string
		}{
			{"due_shard = :s", nil, ""},
			{"due_shard = :s AND due_at <= :b", map[string]types.AttributeValue{":b": n(1_700_000_000_020)}, ""},
			{"due_shard = :s AND due_at < :b", map[string]types.AttributeValue{":b": n(1_700_000_000_020)}, ""},
			{"due_shard = :s AND due_at > :b", map[string]types.AttributeValue{":b": n(1_700_000_000_010)}, "#st = :st"},
			{"due_at >= :b AND due_shard = :s", map[string]types.AttributeValue{":b": n(1_700_000_000_010)}, ""},
			{"due_shard = :s AND due_at BETWEEN :a AND :b", map[string]types.AttributeValue{":a": n(1_700_000_000_005), ":b": n(1_700_000_000_030)}, ""},
			{"due_shard = :s AND due_at = :b", map[string]types.AttributeValue{":b": n(1_700_000_000_007)}, ""},
		} {
			for _, shard := range shards {
				for _, forward := range []bool{true, false} {
					vals := map[string]types.AttributeValue{":s": s(shard)}
					for k, v := range q.vals {
						vals[k] = v
					}
					in := dynamodb.QueryInput{TableName: aws.String("ledger"), IndexName: aws.String(ledger.DueIndex), KeyConditionExpression: aws.String(q.cond),
						ExpressionAttributeValues: vals, Limit: aws.Int32(7), ScanIndexForward: aws.Bool(forward)}
					if q.filter != "" {
						in.FilterExpression = aws.String(q.filter)
						in.ExpressionAttributeNames = map[string]string{"#st": "status"}
						vals[":st"] = s("RECEIVED")
					}
					pages := [2][]*dynamodb.QueryOutput{}
					for i, db := range dbs {
						page := in
						for range 50 {
							out, err := db.Query(ctx, &page)
							if err != nil {
								t.Fatalf("%s on %s: %v", q.cond, shard, err)
							}
							pages[i] = append(pages[i], out)
							if len(out.LastEvaluatedKey) == 0 {
								break
							}
							page.ExclusiveStartKey = out.LastEvaluatedKey
						}
					}
					if q.filter != "" {
						// With a filter, minidyn's full walk ends its pages on
						// items of other partitions (it evaluates every key of
						// the index against Limit and LastEvaluatedKey), where
						// DynamoDB, like the fast path, reads only the range:
						// the pages differ, their items together must not.
						var items [2][]map[string]types.AttributeValue
						for i := range pages {
							for _, pg := range pages[i] {
								if pg.Count > 7 {
									t.Fatalf("a page of %d items, Limit 7", pg.Count)
								}
								items[i] = append(items[i], pg.Items...)
							}
						}
						if !reflect.DeepEqual(items[0], items[1]) {
							t.Fatalf("step %d, %s on %s (forward %v):\nfast %v\nfull %v", step, q.cond, shard, forward, items[0], items[1])
						}
						continue
					}
					if len(pages[0]) != len(pages[1]) {
						t.Fatalf("step %d, %s on %s (forward %v): %d pages fast, %d full", step, q.cond, shard, forward, len(pages[0]), len(pages[1]))
					}
					for p := range pages[0] {
						a, b := pages[0][p], pages[1][p]
						if a.Count != b.Count || !reflect.DeepEqual(a.Items, b.Items) || !reflect.DeepEqual(a.LastEvaluatedKey, b.LastEvaluatedKey) {
							t.Fatalf("step %d, %s on %s (forward %v), page %d:\nfast %d %v %v\nfull %d %v %v", step, q.cond, shard, forward, p, a.Count, a.Items, a.LastEvaluatedKey, b.Count, b.Items, b.LastEvaluatedKey)
						}
					}
				}
			}
		}
		// The table itself, by partition key.
		for i := 0; i < 5; i++ {
			key := fmt.Sprintf("EV#stripe#evt_%03d", r.IntN(150))
			var outs [2]*dynamodb.QueryOutput
			for j, db := range dbs {
				out, err := db.Query(ctx, &dynamodb.QueryInput{TableName: aws.String("ledger"), KeyConditionExpression: aws.String("pk = :pk"),
					ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s(key)}})
				if err != nil {
					t.Fatal(err)
				}
				outs[j] = out
			}
			if !reflect.DeepEqual(outs[0].Items, outs[1].Items) {
				t.Fatalf("table query %s: fast %v, full %v", key, outs[0].Items, outs[1].Items)
			}
		}
	}
	if fast.parts == nil || full.parts != nil {
		t.Fatal("the fast path did not run, or the full walk did")
	}
}
