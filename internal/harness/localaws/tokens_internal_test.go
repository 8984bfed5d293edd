package localaws

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// A TransactWriteItems is idempotent by its ClientRequestToken, as the API
// reference says DynamoDB's is: within 10 minutes of its first success the
// same request answers success and applies nothing, the same token with
// other parameters is refused, and after 10 minutes it is a new request.
func TestTransactionTokensAreIdempotent(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	srv := httptest.NewServer(dynamoHandlerWith(newIndexRepair(), newClientTokens(clock)))
	defer srv.Close()
	db := DynamoAt(srv.URL)
	if err := ledger.CreateTable(ctx, db, "ledger"); err != nil {
		t.Fatal(err)
	}
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "T#1"}, "sk": &types.AttributeValueMemberS{Value: "T"}}
	bump := func(token string, by string) error {
		_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
			ClientRequestToken: aws.String(token),
			TransactItems: []types.TransactWriteItem{{Update: &types.Update{
				TableName: aws.String("ledger"), Key: key,
				UpdateExpression:          aws.String("ADD n :by"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":by": &types.AttributeValueMemberN{Value: by}},
			}}},
		})
		return err
	}
	count := func() string {
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("ledger"), Key: key, ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		n, _ := out.Item["n"].(*types.AttributeValueMemberN)
		if n == nil {
			return ""
		}
		return n.Value
	}

	if err := bump("tok-1", "1"); err != nil || count() != "1" {
		t.Fatalf("first: n=%s %v", count(), err)
	}
	// WHEN the SDK sends the same request again (its answer was lost)
	if err := bump("tok-1", "1"); err != nil || count() != "1" {
		t.Fatalf("same token, same request: n=%s %v; want success and nothing applied", count(), err)
	}
	// the same token with other parameters is refused, and applies nothing
	var mismatch *types.IdempotentParameterMismatchException
	if err := bump("tok-1", "5"); !errors.As(err, &mismatch) || count() != "1" {
		t.Fatalf("same token, other request: n=%s %v; want IdempotentParameterMismatchException", count(), err)
	}
	// another token is another request
	if err := bump("tok-2", "1"); err != nil || count() != "2" {
		t.Fatalf("new token: n=%s %v", count(), err)
	}
	// after the 10-minute window the token is forgotten
	mu.Lock()
	now = now.Add(tokenWindow + time.Second)
	mu.Unlock()
	if err := bump("tok-1", "1"); err != nil || count() != "3" {
		t.Fatalf("after the window: n=%s %v; want a new request", count(), err)
	}
}

// A cancelled transaction applied nothing and is not remembered: its token,
// sent again once the condition holds, runs.
func TestCancelledTransactionTokenRunsAgain(t *testing.T) {
	ctx := context.Background()
	srv := httptest.NewServer(dynamoHandler(newIndexRepair()))
	defer srv.Close()
	db := DynamoAt(srv.URL)
	if err := ledger.CreateTable(ctx, db, "ledger"); err != nil {
		t.Fatal(err)
	}
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "T#2"}, "sk": &types.AttributeValueMemberS{Value: "T"}}
	in := &dynamodb.TransactWriteItemsInput{
		ClientRequestToken: aws.String("tok-c"),
		TransactItems: []types.TransactWriteItem{{Update: &types.Update{
			TableName: aws.String("ledger"), Key: key,
			UpdateExpression:          aws.String("SET done = :t"),
			ConditionExpression:       aws.String("attribute_exists(pk)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberBOOL{Value: true}},
		}}},
	}
	var tce *types.TransactionCanceledException
	if _, err := db.TransactWriteItems(ctx, in); !errors.As(err, &tce) {
		t.Fatalf("on a missing item: %v, want a cancellation", err)
	}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("ledger"), Item: key}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.TransactWriteItems(ctx, in); err != nil {
		t.Fatalf("again once the item exists: %v", err)
	}
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("ledger"), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil || out.Item["done"] == nil {
		t.Fatalf("item %v %v", out.Item, err)
	}
}
