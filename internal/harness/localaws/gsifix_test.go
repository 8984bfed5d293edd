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

// An update that REMOVEs an index key attribute takes the item out of the
// sparse index and the attribute out of the item, as in DynamoDB (minidyn
// alone ignores REMOVE).
func TestRemoveLeavesSparseIndex(t *testing.T) {
	ctx := context.Background()
	d := localaws.NewDynamo()
	defer d.Close()
	db := d.Client()
	if err := ledger.CreateTable(ctx, db, "ledger"); err != nil {
		t.Fatal(err)
	}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	key := func(id string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"pk": s(id), "sk": s("event")}
	}
	for _, id := range []string{"a", "b", "c"} {
		if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String("ledger"), Key: key(id),
			UpdateExpression:          aws.String("SET due_shard = :s, due_at = :t"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":s": s("0"), ":t": &types.AttributeValueMemberN{Value: "5"}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String("ledger"), Key: key("b"),
		UpdateExpression:          aws.String("SET #st = :d REMOVE #ds, due_at"),
		ExpressionAttributeNames:  map[string]string{"#st": "status", "#ds": "due_shard"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":d": s("PROCESSED")},
	}); err != nil {
		t.Fatal(err)
	}
	out, err := db.Query(ctx, &dynamodb.QueryInput{
		TableName: aws.String("ledger"), IndexName: aws.String(ledger.DueIndex),
		KeyConditionExpression:    aws.String("due_shard = :s"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": s("0")},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range out.Items {
		got = append(got, it["pk"].(*types.AttributeValueMemberS).Value)
	}
	if fmt.Sprint(got) != "[a c]" {
		t.Fatalf("due index holds %v, want [a c]", got)
	}
	item, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("ledger"), Key: key("b")})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := item.Item["due_shard"]; ok {
		t.Fatalf("due_shard still on the item after REMOVE: %v", item.Item)
	}
	if _, ok := item.Item["status"]; !ok {
		t.Fatalf("SET lost: %v", item.Item)
	}
}
