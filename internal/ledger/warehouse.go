package ledger

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/projection"
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

// PutIntent writes a PENDING warehouse record intent outside a commit (a
// repair the reconciler decided); any other intent is ErrInvalid, for projection p as it is, caused by causation
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
	// Outside a commit only warehouse records are written (the
	// reconciler's credentials may put record intents and nothing else).
	if !IsRecordIntent(in.OperationID) || in.Kind != warehouse.Kind {
		return false, fmt.Errorf("%w: intent %s of kind %q: only a warehouse record (kind %s, a record's operation id) is written outside a commit",
			ErrInvalid, in.OperationID, in.Kind, warehouse.Kind)
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

// MaxRecordRepairs is how many repair intents one warehouse record may
// get before the record is left to an operator.
const MaxRecordRepairs = 5

// What a warehouse record missing from the store needs (RecordNeed.Action).
const (
	// RecordWrite: the version has no record intent; Intent is it, written
	// from the projection as it is, as the processor would have.
	RecordWrite = "write"
	// RecordRepair: the record intent (or its last repair) ended without
	// the object being there; Intent is repair number Repair, the
	// original's payload (so the same bytes).
	RecordRepair = "repair"
	// RecordAnnounce: the intent is waiting (PENDING, RETRY_WAIT,
	// UNCERTAIN, …): it needs announcing again, nothing written.
	RecordAnnounce = "announce"
	// RecordOperator: the intent is QUARANTINED, or every repair ended
	// without the object: nothing the pipeline can do.
	RecordOperator = "operator"
)

// RecordNeed is what a projection version whose warehouse record is
// missing needs, decided from its record intent and repairs (MissingRecord).
type RecordNeed struct {
	Action      string // RecordWrite, RecordRepair, RecordAnnounce or RecordOperator
	OperationID string // the intent to write, announce, or left to an operator ("" when the repairs ran out)
	// Intent is the intent to write (RecordWrite, RecordRepair), caused by
	// Source/Event.
	Intent        Intent
	Source, Event string
	Status        IntentStatus // the intent found (RecordAnnounce, RecordOperator)
	ErrorCode     string       // a quarantined intent's code
	Repair        int          // RecordRepair: which repair, 1 to MaxRecordRepairs
	Original      IntentState  // RecordRepair, and RecordOperator after the repairs: the record intent
}

// MissingRecord decides what p's current version needs when its warehouse
// record is not in the store: the one decision of the reconciler's drift
// check and the operator's backfill, which then act on it (the reconciler
// writes and announces; the backfill writes audited, or only reports).
// maxState bounds the state of a record intent written anew
// (warehouse.Intent).
func (l *Ledger) MissingRecord(ctx context.Context, p Projection, maxState int) (RecordNeed, error) {
	scope, base := projection.SplitScoped(p.Name)
	op := warehouse.OperationID(scope, base, p.Subject, p.Version)
	in, err := l.GetIntentState(ctx, op)
	switch {
	case errors.Is(err, ErrNotFound):
		source, event, _ := strings.Cut(p.LastEvent, "/")
		wi := warehouse.Intent(projection.Write{Name: p.Name, Subject: p.Subject, Version: p.Version, State: p.State},
			source, event, time.UnixMilli(p.UpdatedAt), maxState)
		return RecordNeed{Action: RecordWrite, OperationID: op, Intent: wi, Source: source, Event: event}, nil
	case err != nil:
		return RecordNeed{}, err
	}
	switch in.Status {
	case IntentStatusSucceeded, IntentStatusFailed:
		return l.recordRepair(ctx, in)
	case IntentStatusQuarantined:
		return RecordNeed{Action: RecordOperator, OperationID: op, Status: in.Status, ErrorCode: in.ErrorCode}, nil
	default:
		return RecordNeed{Action: RecordAnnounce, OperationID: op, Status: in.Status}, nil
	}
}

// recordRepair finds the first repair of orig that is not over, or the
// next one to write: warehouse.RepairID(op, n).
func (l *Ledger) recordRepair(ctx context.Context, orig IntentState) (RecordNeed, error) {
	source, event, _ := strings.Cut(orig.Causation, "/")
	for n := 1; n <= MaxRecordRepairs; n++ {
		id := warehouse.RepairID(orig.OperationID, n)
		in, err := l.GetIntentState(ctx, id)
		switch {
		case errors.Is(err, ErrNotFound):
			return RecordNeed{Action: RecordRepair, OperationID: id, Repair: n, Original: orig, Source: source, Event: event,
				Intent: Intent{OperationID: id, Kind: warehouse.Kind, Subject: orig.Subject, Payload: orig.Payload, Policy: PolicyOnce}}, nil
		case err != nil:
			return RecordNeed{}, err
		case in.Status == IntentStatusSucceeded || in.Status == IntentStatusFailed:
			continue // that repair's object is gone too: the next one
		case in.Status == IntentStatusQuarantined:
			return RecordNeed{Action: RecordOperator, OperationID: id, Status: in.Status, ErrorCode: in.ErrorCode, Original: orig}, nil
		default:
			return RecordNeed{Action: RecordAnnounce, OperationID: id, Status: in.Status, Original: orig}, nil
		}
	}
	return RecordNeed{Action: RecordOperator, Original: orig}, nil
}
