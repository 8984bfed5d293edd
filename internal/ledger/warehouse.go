package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// scanner is the Scan of a DynamoDB client. It is not part of DynamoDB
// (the ledger's paths are keyed reads and queries); only the warehouse
// drift check uses it, on clients that have it.
type scanner interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// ErrNoScan says the ledger's client cannot scan.
var ErrNoScan = errors.New("ledger: the DynamoDB client cannot Scan")

// ListProjectionsChanged returns projections updated at or after since,
// at most limit, reading at most maxRead items of the table (a Scan with
// a filter: the table has no index of projections by update time, so the
// read is proportional to the table, and bounded here). capped is true
// when a bound left something out: the limit was reached with matches of
// the last page unreturned, or a bound stopped the scan before the end of
// the table.
func (l *Ledger) ListProjectionsChanged(ctx context.Context, since time.Time, limit, maxRead int) (out []Projection, capped bool, err error) {
	sc, ok := l.db.(scanner)
	if !ok {
		return nil, false, ErrNoScan
	}
	var start map[string]types.AttributeValue
	read := 0
	for {
		page := int32(min(maxRead-read, 1000))
		if page <= 0 {
			return out, true, nil
		}
		res, err := sc.Scan(ctx, &dynamodb.ScanInput{
			TableName:                 aws.String(l.opts.Table),
			FilterExpression:          aws.String("#item = :p AND updated_at >= :since"),
			ExpressionAttributeNames:  map[string]string{"#item": "item"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": sv("projection"), ":since": nv(ms(since))},
			ExclusiveStartKey:         start,
			Limit:                     aws.Int32(page),
		})
		if err != nil {
			return out, false, fmt.Errorf("scan projections changed since %s: %w", since.Format(time.RFC3339), translate(err))
		}
		// The bound counts the items asked for: a page reads at most its
		// Limit whatever the store reports as ScannedCount (minidyn
		// reports none), as ScanEvents holds its budget.
		read += int(page)
		for i, it := range res.Items {
			p, err := decodeProjection(it)
			if err != nil {
				return out, false, err
			}
			out = append(out, p)
			if len(out) >= limit {
				// Capped when the limit leaves anything unread: more
				// matches in this page, or more of the table.
				return out, i < len(res.Items)-1 || len(res.LastEvaluatedKey) > 0, nil
			}
		}
		if len(res.LastEvaluatedKey) == 0 {
			return out, false, nil
		}
		start = res.LastEvaluatedKey
	}
}

// PutIntent writes a PENDING intent outside a commit (a repair the
// reconciler decided), for projection p as it is, caused by causation
// ("<source>/<event id>"): put under attribute_not_exists, so a repair
// found twice is written once. created is false when it existed.
func (l *Ledger) PutIntent(ctx context.Context, p Projection, in Intent, source, eventID string) (created bool, err error) {
	if err := validID("operation id", in.OperationID, MaxIDLength); err != nil {
		return false, err
	}
	c := Claim{Event: Event{Source: source, EventID: eventID}}
	w := &ProjectionWrite{Name: p.Name, Subject: p.Subject, Version: p.Version, Fingerprint: p.Fingerprint}
	it := l.intentItem(c, w, in)
	payload, err := attributevalue.MarshalMap(in.Payload)
	if err != nil {
		return false, fmt.Errorf("%w: intent payload: %v", ErrInvalid, err)
	}
	it["payload"] = &types.AttributeValueMemberM{Value: payload}
	_, err = l.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(l.opts.Table), Item: it,
		ConditionExpression: aws.String("attribute_not_exists(pk)")})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("put intent %s: %w", in.OperationID, translate(err))
	}
	return true, nil
}
