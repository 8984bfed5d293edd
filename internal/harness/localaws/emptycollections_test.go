package localaws_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// emptyCollectionsDB is a ledger table with one item per way of writing
// empty lists and maps, at the top level and nested, and what each item
// must read back as.
func emptyCollectionsDB(t *testing.T) (*dynamodb.Client, map[string]map[string]types.AttributeValue) {
	t.Helper()
	ctx := context.Background()
	d := localaws.NewDynamo()
	t.Cleanup(d.Close)
	db := d.Client()
	if err := ledger.CreateTable(ctx, db, "ledger"); err != nil {
		t.Fatal(err)
	}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	l := func(v ...types.AttributeValue) types.AttributeValue {
		return &types.AttributeValueMemberL{Value: append([]types.AttributeValue{}, v...)}
	}
	m := func(kv ...any) types.AttributeValue {
		out := map[string]types.AttributeValue{}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1].(types.AttributeValue)
		}
		return &types.AttributeValueMemberM{Value: out}
	}
	// state: an empty list and an empty map beside a number, and nested
	// one level further (a list holding an empty list and an empty map).
	state := func() types.AttributeValue {
		return m("price_ids", l(), "meta", m(), "n", n("1"), "deep", m("xs", l(l(), m(), n("2")), "m", m("e", l())))
	}
	item := func(pk string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"pk": s(pk), "sk": s("S"), "state": state(), "top": l(), "topm": m()}
	}
	want := map[string]map[string]types.AttributeValue{}

	put := item("PJ#put")
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("ledger"), Item: put}); err != nil {
		t.Fatal(err)
	}
	want["PJ#put"] = put

	tx := item("PJ#tx")
	if _, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Put: &types.Put{TableName: aws.String("ledger"), Item: tx}}}}); err != nil {
		t.Fatal(err)
	}
	want["PJ#tx"] = tx

	// An update that SETs the empty values, on a new item, then an update
	// of another attribute of the item holding them.
	upKey := map[string]types.AttributeValue{"pk": s("PJ#update"), "sk": s("S")}
	if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String("ledger"), Key: upKey,
		UpdateExpression:          aws.String("SET #state = :state, top = :top, topm = :topm"),
		ExpressionAttributeNames:  map[string]string{"#state": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":state": state(), ":top": l(), ":topm": m()},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String("ledger"), Key: upKey,
		UpdateExpression:          aws.String("SET v = :v"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": n("7")},
	}); err != nil {
		t.Fatal(err)
	}
	up := item("PJ#update")
	up["v"] = n("7")
	want["PJ#update"] = up
	return db, want
}

// itemText is an item in DynamoDB JSON, for comparing items exactly.
func itemText(t *testing.T, item map[string]types.AttributeValue) string {
	t.Helper()
	j, err := localaws.ItemJSON(item)
	if err != nil {
		return "unreadable item: " + err.Error()
	}
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Empty lists and maps (L and M with no elements) are stored and read back
// exactly, as DynamoDB does, however they were written and read: minidyn
// alone answers each as {}, a value of no type, which the SDK decodes as
// nil or as a neighbouring value (an empty list read back as the map
// beside it, a projection's [] as its number "1").
func TestEmptyListsAndMapsReadBackExactly(t *testing.T) {
	ctx := context.Background()
	db, want := emptyCollectionsDB(t)
	for pk, w := range want {
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("ledger"), Key: map[string]types.AttributeValue{"pk": w["pk"], "sk": w["sk"]}, ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		if got, w := itemText(t, out.Item), itemText(t, w); got != w {
			t.Errorf("GetItem %s:\n got %s\nwant %s", pk, got, w)
		}
		q, err := db.Query(ctx, &dynamodb.QueryInput{
			TableName: aws.String("ledger"), KeyConditionExpression: aws.String("pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": w["pk"]},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(q.Items) != 1 {
			t.Fatalf("Query %s: %d items", pk, len(q.Items))
		}
		if got, w := itemText(t, q.Items[0]), itemText(t, w); got != w {
			t.Errorf("Query %s:\n got %s\nwant %s", pk, got, w)
		}
	}
	var keys []map[string]types.AttributeValue
	for _, w := range want {
		keys = append(keys, map[string]types.AttributeValue{"pk": w["pk"], "sk": w["sk"]})
	}
	bg, err := db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{"ledger": {Keys: keys, ConsistentRead: aws.Bool(true)}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(bg.Responses["ledger"]) != len(want) {
		t.Fatalf("BatchGetItem: %d items, want %d", len(bg.Responses["ledger"]), len(want))
	}
	for _, it := range bg.Responses["ledger"] {
		pk := it["pk"].(*types.AttributeValueMemberS).Value
		if got, w := itemText(t, it), itemText(t, want[pk]); got != w {
			t.Errorf("BatchGetItem %s:\n got %s\nwant %s", pk, got, w)
		}
	}
	sc, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String("ledger")})
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Items) != len(want) {
		t.Fatalf("Scan: %d items, want %d", len(sc.Items), len(want))
	}
	for _, it := range sc.Items {
		pk := it["pk"].(*types.AttributeValueMemberS).Value
		if got, w := itemText(t, it), itemText(t, want[pk]); got != w {
			t.Errorf("Scan %s:\n got %s\nwant %s", pk, got, w)
		}
	}
}

// The items a write returns (ReturnValues ALL_NEW and ALL_OLD, and the old
// item of a refused condition) hold their empty lists and maps too: minidyn
// alone answers them as {} and, for a refused condition, as NULL.
func TestWritesReturnEmptyListsAndMapsExactly(t *testing.T) {
	ctx := context.Background()
	db, want := emptyCollectionsDB(t)
	w := want["PJ#put"]
	key := map[string]types.AttributeValue{"pk": w["pk"], "sk": w["sk"]}
	up, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String("ledger"), Key: key,
		UpdateExpression:          aws.String("SET v = :v"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": &types.AttributeValueMemberN{Value: "8"}},
		ReturnValues:              types.ReturnValueAllNew,
	})
	if err != nil {
		t.Fatal(err)
	}
	w["v"] = &types.AttributeValueMemberN{Value: "8"}
	if got, w := itemText(t, up.Attributes), itemText(t, w); got != w {
		t.Errorf("UpdateItem ALL_NEW:\n got %s\nwant %s", got, w)
	}
	old, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String("ledger"), Key: key,
		UpdateExpression:          aws.String("SET v = :v"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": &types.AttributeValueMemberN{Value: "9"}},
		ReturnValues:              types.ReturnValueAllOld,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, w := itemText(t, old.Attributes), itemText(t, w); got != w {
		t.Errorf("UpdateItem ALL_OLD:\n got %s\nwant %s", got, w)
	}
	w["v"] = &types.AttributeValueMemberN{Value: "9"}
	// UPDATED_NEW answers the attributes the update set, without the key.
	fresh, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String("ledger"), Key: key,
		UpdateExpression:          aws.String("SET fresh = :l"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":l": &types.AttributeValueMemberL{Value: []types.AttributeValue{}}},
		ReturnValues:              types.ReturnValueUpdatedNew,
	})
	if err != nil {
		t.Fatal(err)
	}
	w["fresh"] = &types.AttributeValueMemberL{Value: []types.AttributeValue{}}
	if got, w := itemText(t, fresh.Attributes), itemText(t, map[string]types.AttributeValue{"fresh": w["fresh"]}); got != w {
		t.Errorf("UpdateItem UPDATED_NEW:\n got %s\nwant %s", got, w)
	}
	del, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String("ledger"), Key: key, ReturnValues: types.ReturnValueAllOld})
	if err != nil {
		t.Fatal(err)
	}
	if got, w := itemText(t, del.Attributes), itemText(t, w); got != w {
		t.Errorf("DeleteItem ALL_OLD:\n got %s\nwant %s", got, w)
	}

	w = want["PJ#tx"]
	_, err = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String("ledger"), Key: map[string]types.AttributeValue{"pk": w["pk"], "sk": w["sk"]},
		UpdateExpression:                    aws.String("SET v = :v"),
		ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":v": &types.AttributeValueMemberN{Value: "9"}},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		t.Fatalf("conditional update: %v, want ConditionalCheckFailedException", err)
	}
	if got, w := itemText(t, ccf.Item), itemText(t, w); got != w {
		t.Errorf("ConditionalCheckFailed's item:\n got %s\nwant %s", got, w)
	}
}

// A transaction that is cancelled leaves the items it named as they were:
// minidyn alone puts back a copy of its tables in which every empty list
// and map has lost its type, and every later update of such an item fails
// ("unsupported expression or attribute type").
func TestCancelledTransactionKeepsEmptyListsAndMaps(t *testing.T) {
	ctx := context.Background()
	db, want := emptyCollectionsDB(t)
	w := want["PJ#tx"]
	key := map[string]types.AttributeValue{"pk": w["pk"], "sk": w["sk"]}
	_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Update: &types.Update{
		TableName: aws.String("ledger"), Key: key,
		UpdateExpression:          aws.String("SET v = :v"),
		ConditionExpression:       aws.String("attribute_not_exists(pk)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": &types.AttributeValueMemberN{Value: "1"}},
	}}}})
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		t.Fatalf("transaction: %v, want TransactionCanceledException", err)
	}
	if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String("ledger"), Key: key,
		UpdateExpression:          aws.String("SET v = :v"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": &types.AttributeValueMemberN{Value: "2"}},
	}); err != nil {
		t.Fatalf("update after the cancelled transaction: %v", err)
	}
	w["v"] = &types.AttributeValueMemberN{Value: "2"}
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("ledger"), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if got, w := itemText(t, out.Item), itemText(t, w); got != w {
		t.Errorf("GetItem:\n got %s\nwant %s", got, w)
	}
}
