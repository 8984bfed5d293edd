package ledger

import (
	"context"
	"encoding/base64"
	"encoding/json"
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
	return l.putIntent(ctx, p, in, source, eventID, nil)
}

// BackfillIntent is PutIntent for an operator (webhookctl's warehouse
// backfill): the intent starts its audit trail with the action
// "backfill", the operator's actor and reason, as every operator write
// does (see Hold).
func (l *Ledger) BackfillIntent(ctx context.Context, p Projection, in Intent, source, eventID, actor, reason string) (created bool, err error) {
	if actor == "" || reason == "" {
		return false, fmt.Errorf("%w: a backfill needs an actor and a reason", ErrInvalid)
	}
	return l.putIntent(ctx, p, in, source, eventID, auditValue(l.now(), "", Status(IntentPending), actor, "backfill", reason))
}

func (l *Ledger) putIntent(ctx context.Context, p Projection, in Intent, source, eventID string, audit types.AttributeValue) (created bool, err error) {
	if err := validID("operation id", in.OperationID, MaxIDLength); err != nil {
		return false, err
	}
	c := Claim{Event: Event{Source: source, EventID: eventID}}
	w := &ProjectionWrite{Name: p.Name, Subject: p.Subject, Version: p.Version, Fingerprint: p.Fingerprint}
	it := l.intentItem(c, w, in)
	if audit != nil {
		it["audit"] = audit
	}
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

// ProjectionPage is one page of ScanProjections.
type ProjectionPage struct {
	Projections []Projection
	// Read is how many items the page read, matching or not (DynamoDB
	// bills these).
	Read int
	// Next resumes the scan after this page; "" at the end of the table.
	Next string
}

// ErrCursor says a scan cursor is not one ScanProjections gave.
var ErrCursor = errors.New("ledger: not a scan cursor")

// ScanProjections reads one page of the table's projection items, those
// named name when it is not "" (a ledger name, "<scope>/<projection>"):
// a Scan reading at most limit items from cursor ("" for the start of the
// table). Its Next resumes it, in a later run too, so a walk over every
// projection is bounded per call and resumable. It is costly as every
// scan is: nothing on the hot path may call it. db is the table's client.
func (l *Ledger) ScanProjections(ctx context.Context, db Scanner, name, cursor string, limit int) (ProjectionPage, error) {
	var page ProjectionPage
	start, err := decodeScanCursor(cursor)
	if err != nil {
		return page, err
	}
	if limit <= 0 {
		limit = 100
	}
	filter := "#item = :p"
	names := map[string]string{"#item": "item"}
	vals := map[string]types.AttributeValue{":p": sv("projection")}
	if name != "" {
		filter += " AND #name = :name"
		names["#name"] = "name"
		vals[":name"] = sv(name)
	}
	out, err := db.Scan(ctx, &dynamodb.ScanInput{
		TableName:                 aws.String(l.opts.Table),
		FilterExpression:          aws.String(filter),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: vals,
		ExclusiveStartKey:         start,
		Limit:                     aws.Int32(int32(min(limit, 1000))),
	})
	if err != nil {
		return page, fmt.Errorf("scan %s for projections: %w", l.opts.Table, translate(err))
	}
	page.Read = max(int(out.ScannedCount), len(out.Items))
	for _, it := range out.Items {
		p, err := decodeProjection(it)
		if err != nil {
			return page, err
		}
		page.Projections = append(page.Projections, p)
	}
	if len(out.LastEvaluatedKey) > 0 {
		if page.Next, err = encodeScanCursor(out.LastEvaluatedKey); err != nil {
			return page, err
		}
	}
	return page, nil
}

// encodeScanCursor renders a scan's LastEvaluatedKey (the table's keys, both
// strings) as one token: base64url of {"pk":…,"sk":…}.
func encodeScanCursor(key map[string]types.AttributeValue) (string, error) {
	pk, ok1 := key[attrPK].(*types.AttributeValueMemberS)
	sk, ok2 := key[attrSK].(*types.AttributeValueMemberS)
	if !ok1 || !ok2 || len(key) != 2 {
		return "", fmt.Errorf("ledger: unexpected scan key %v", key)
	}
	b, err := json.Marshal(map[string]string{attrPK: pk.Value, attrSK: sk.Value})
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func decodeScanCursor(cursor string) (map[string]types.AttributeValue, error) {
	if cursor == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCursor, err)
	}
	var key map[string]string
	if err := json.Unmarshal(b, &key); err != nil || len(key) != 2 || key[attrPK] == "" || key[attrSK] == "" {
		return nil, fmt.Errorf("%w: %q", ErrCursor, cursor)
	}
	return map[string]types.AttributeValue{attrPK: sv(key[attrPK]), attrSK: sv(key[attrSK])}, nil
}
