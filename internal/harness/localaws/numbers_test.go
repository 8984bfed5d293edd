package localaws_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// Integers above 2^53 stay exact through updates, as in DynamoDB: one an
// update sets (plainly, nested in a map, in a transaction), and one an
// update of another attribute merely keeps. minidyn alone writes every
// number of the item back through a float64 (1152921511792670487 becomes
// 1152921511792670500).
func TestUpdatesKeepLargeIntegersExact(t *testing.T) {
	ctx := context.Background()
	d := localaws.NewDynamo()
	defer d.Close()
	db := d.Client()
	if err := ledger.CreateTable(ctx, db, "ledger"); err != nil {
		t.Fatal(err)
	}
	const big, bigger = "1152921511792670487", "1152921511792670489" // both round to the float64 1152921511792670500
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "X#1"}, "sk": &types.AttributeValueMemberS{Value: "X"}}
	n := func(s string) types.AttributeValue { return &types.AttributeValueMemberN{Value: s} }
	if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String("ledger"), Key: key,
		UpdateExpression:          aws.String("SET v = :v, r = :r"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": n(big), ":r": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"version": n(big)}}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String("ledger"), Key: key,
		UpdateExpression:          aws.String("SET extra = :o"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":o": n("1")},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Update: &types.Update{
		TableName: aws.String("ledger"), Key: key,
		UpdateExpression:          aws.String("SET w = :w"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":w": n(bigger)},
	}}}}); err != nil {
		t.Fatal(err)
	}
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("ledger"), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	num := func(v types.AttributeValue) string {
		if x, ok := v.(*types.AttributeValueMemberN); ok {
			return x.Value
		}
		return "not a number"
	}
	r, _ := out.Item["r"].(*types.AttributeValueMemberM)
	if r == nil {
		t.Fatalf("no map r in %v", out.Item)
	}
	if got := [4]string{num(out.Item["v"]), num(r.Value["version"]), num(out.Item["w"]), num(out.Item["extra"])}; got != [4]string{big, big, bigger, "1"} {
		t.Fatalf("stored v, r.version, w, extra = %v; want %s %s %s 1", got, big, big, bigger)
	}
}
