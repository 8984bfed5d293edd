package ledger

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Snapshot is the whole table, decoded: for operator tools, the demo and
// tests. It scans the table, so nothing on the hot path may call it.
type Snapshot struct {
	Events      []Event
	Projections []Projection
	Intents     []StoredIntent
}

// Scanner is the part of the DynamoDB client Snapshot needs.
type Scanner interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// TakeSnapshot reads every item of the table (paginated, consistent reads).
func TakeSnapshot(ctx context.Context, db Scanner, table string) (Snapshot, error) {
	var snap Snapshot
	var start map[string]types.AttributeValue
	for {
		out, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table), ExclusiveStartKey: start, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return snap, fmt.Errorf("scan %s: %w", table, translate(err))
		}
		for _, it := range out.Items {
			sk, _ := it[attrSK].(*types.AttributeValueMemberS)
			if sk == nil {
				continue
			}
			switch {
			case sk.Value == skEvent:
				ev, err := decodeEvent(it)
				if err != nil {
					return snap, err
				}
				snap.Events = append(snap.Events, ev)
			case sk.Value == skProjection:
				p, err := decodeProjection(it)
				if err != nil {
					return snap, err
				}
				snap.Projections = append(snap.Projections, p)
			case sk.Value == skIntent:
				var in StoredIntent
				if err := unmarshalExact(it, &in); err != nil {
					return snap, fmt.Errorf("decode intent: %w", err)
				}
				if in.Payload != nil {
					in.Payload = exactNumbers(in.Payload).(map[string]any)
				}
				snap.Intents = append(snap.Intents, in)
			}
			// Payload chunks (PL#...) are not part of the snapshot.
		}
		if start = out.LastEvaluatedKey; len(start) == 0 {
			return snap, nil
		}
	}
}
