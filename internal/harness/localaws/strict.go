package localaws

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// StrictTransactions is a DynamoDB client for contract tests that need
// both emulators at once: minidyn has transactions but accepts
// expressions, values and sizes that DynamoDB refuses; dynalite follows
// DynamoDB's validation but has no transactions. Every call goes to DB
// (minidyn). Each part of a TransactWriteItems is first sent to Strict
// (dynalite), on StrictTable (an empty table with the ledger's schema), as
// the single write it describes with its condition made impossible:
// dynalite then validates the whole request (syntax, reserved words,
// unused or missing names and values, value types and sizes) and answers
// ConditionalCheckFailed without writing anything, or a ValidationException
// that fails the transaction here, before minidyn runs it.
//
// What it does not check: the transaction's own rules (at most 100 items,
// one action per item, the 4 MB total), which minidyn checks in part, and
// anything dynalite itself gets wrong.
type StrictTransactions struct {
	DB          ledger.DynamoDB
	Strict      *dynamodb.Client
	StrictTable string
}

var _ ledger.DynamoDB = StrictTransactions{}

// StrictFromEnv returns a client for the dynalite named by env (a URL, as
// scripts/dynalite sets it) with a fresh table of the given schema
// creator, or nil when env is unset.
func StrictFromEnv(ctx context.Context, env string, create func(ctx context.Context, db *dynamodb.Client, table string) error) (*dynamodb.Client, string, error) {
	url := os.Getenv(env)
	if url == "" {
		return nil, "", nil
	}
	strict := dynamodb.NewFromConfig(Config(), func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(url) })
	table := UniqueName(fmt.Sprintf("strict-%d", time.Now().UnixNano()))
	if err := create(ctx, strict, table); err != nil {
		return nil, "", err
	}
	w := dynamodb.NewTableExistsWaiter(strict, func(o *dynamodb.TableExistsWaiterOptions) { o.MinDelay = 50 * time.Millisecond })
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, time.Minute); err != nil {
		return nil, "", err
	}
	return strict, table, nil
}

// GetItem, PutItem, UpdateItem, Query, DeleteItem and Scan go to DB.
func (s StrictTransactions) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return s.DB.GetItem(ctx, in, opts...)
}

// PutItem goes to DB.
func (s StrictTransactions) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return s.DB.PutItem(ctx, in, opts...)
}

// UpdateItem goes to DB.
func (s StrictTransactions) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return s.DB.UpdateItem(ctx, in, opts...)
}

// Query goes to DB.
func (s StrictTransactions) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return s.DB.Query(ctx, in, opts...)
}

// TransactWriteItems validates every part on Strict, then runs the
// transaction on DB.
func (s StrictTransactions) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	for i, it := range in.TransactItems {
		if err := s.validate(ctx, it); err != nil {
			return nil, fmt.Errorf("localaws strict: transaction part %d refused by dynalite (DynamoDB would cancel the transaction with a ValidationError): %w", i, err)
		}
	}
	return s.DB.TransactWriteItems(ctx, in, opts...)
}

// never is an attribute no item has: a condition that requires it cannot
// hold, so the validated write never happens.
const never = "#localaws_strict_never"

func impossible(cond *string, names map[string]string) (*string, map[string]string) {
	out := maps.Clone(names)
	if out == nil {
		out = map[string]string{}
	}
	out[never] = "localaws_strict_never"
	c := "attribute_exists(" + never + ")"
	if cond != nil && *cond != "" {
		c = "(" + *cond + ") AND " + c
	}
	return aws.String(c), out
}

func (s StrictTransactions) validate(ctx context.Context, it types.TransactWriteItem) error {
	var err error
	switch {
	case it.Put != nil:
		p := it.Put
		cond, names := impossible(p.ConditionExpression, p.ExpressionAttributeNames)
		_, err = s.Strict.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.StrictTable), Item: p.Item,
			ConditionExpression: cond, ExpressionAttributeNames: names, ExpressionAttributeValues: p.ExpressionAttributeValues})
	case it.Update != nil:
		u := it.Update
		cond, names := impossible(u.ConditionExpression, u.ExpressionAttributeNames)
		_, err = s.Strict.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(s.StrictTable), Key: u.Key, UpdateExpression: u.UpdateExpression,
			ConditionExpression: cond, ExpressionAttributeNames: names, ExpressionAttributeValues: u.ExpressionAttributeValues})
	case it.Delete != nil:
		d := it.Delete
		cond, names := impossible(d.ConditionExpression, d.ExpressionAttributeNames)
		_, err = s.Strict.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.StrictTable), Key: d.Key,
			ConditionExpression: cond, ExpressionAttributeNames: names, ExpressionAttributeValues: d.ExpressionAttributeValues})
	case it.ConditionCheck != nil:
		c := it.ConditionCheck
		cond, names := impossible(c.ConditionExpression, c.ExpressionAttributeNames)
		_, err = s.Strict.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.StrictTable), Key: c.Key,
			ConditionExpression: cond, ExpressionAttributeNames: names, ExpressionAttributeValues: c.ExpressionAttributeValues})
	default:
		return errors.New("an empty transaction item")
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil // valid, and (as intended) not written
	}
	if err == nil {
		return errors.New("the impossible condition held: dynalite wrote the part")
	}
	return err
}
