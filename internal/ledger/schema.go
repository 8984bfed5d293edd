package ledger

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TableSchema is the table the ledger expects: string keys pk/sk, the sparse
// GSI "due" (due_shard S, due_at N) projecting only what the sweeps read, on-demand
// billing. The CDK stack declares the same keys; the local stack and the
// tests create it with CreateTable.
func TableSchema(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(attrPK), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(attrSK), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(attrDueShard), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(attrDueAt), AttributeType: types.ScalarAttributeTypeN},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(attrSK), KeyType: types.KeyTypeRange},
		},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{
			IndexName: aws.String(DueIndex),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(attrDueShard), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(attrDueAt), KeyType: types.KeyTypeRange},
			},
			// Only what ListDue and the reconciler read: GSI writes are billed by
			// the projected size, and an inline payload must not be copied.
			Projection: &types.Projection{
				ProjectionType:   types.ProjectionTypeInclude,
				NonKeyAttributes: DueIndexAttributes,
			},
		}},
	}
}

// TTLAttribute is the table's TTL attribute (epoch seconds): DynamoDB
// deletes an item some time after it.
const TTLAttribute = "expires_at"

// DueIndexAttributes are the non-key attributes the due index projects
// (INCLUDE): what ListDue, ListDueIntents and ListOpen read. The CDK stack
// declares the same list.
var DueIndexAttributes = []string{"item", "source", "event_id", "status", "received_at", "operation_id", "event_type", "kind", "attempts", "error_code", "lease_expires_at"}

// CreateTable creates the ledger table (for tests and the local stack; in AWS
// the CDK stack owns it).
func CreateTable(ctx context.Context, db interface {
	CreateTable(context.Context, *dynamodb.CreateTableInput, ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
}, name string) error {
	if _, err := db.CreateTable(ctx, TableSchema(name)); err != nil {
		return fmt.Errorf("create table %s: %w", name, err)
	}
	return nil
}
