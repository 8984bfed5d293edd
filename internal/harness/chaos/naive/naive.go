// Package naive provides naive processing cores, common in webhook
// handlers and each wrong in its own way, for the chaos harness to measure
// against ours. They share everything else with the product (the intake,
// the ledger rows it accepts, the queues, the reconciler, the DynamoDB
// emulator) and differ only in how a processor decides that it may apply
// an event:
//
//   - CheckThenInsert reads a dedup marker (GetItem) and, when there is
//     none, does the work and then writes the marker with a PutItem that
//     has no condition. Two workers that read before either writes both
//     do the work.
//   - SplitCommit inserts the dedup marker (conditional PutItem) in its own
//     write, then does the business write in another. A crash between the
//     two leaves the marker without the work: every retry sees the marker
//     and skips, and the effect is lost.
//   - NoLease keeps a dedup row with a status but no lease: a worker may
//     take any event that is not DONE, so a slow (or paused) worker and the
//     one that picked up the redelivered message both do the work.
//
// Their business write is the same read-then-write a naive order service
// does: read the order, skip an older revision, skip the same revision
// with the same state, quarantine a same-revision contradiction, else put
// the new state and, for a cancellation, perform the refund and the
// notification. The effect is recorded as a counter per operation id
// (what a downstream without idempotency keys would do), because these
// designs rely on their dedup for once-ness; nothing deduplicates below.
package naive

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Kind names a naive design.
type Kind string

// The naive designs.
const (
	CheckThenInsert Kind = "checkthen"
	SplitCommit     Kind = "split"
	NoLease         Kind = "nolease"
)

// Kinds lists them.
var Kinds = []Kind{CheckThenInsert, SplitCommit, NoLease}

// DynamoDB is the client a naive processor uses.
type DynamoDB interface {
	ledger.DynamoDB
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// Processor is one naive processor instance.
type Processor struct {
	Kind   Kind
	DB     DynamoDB
	Ledger *ledger.Ledger // reads the accepted event and its payload
	Table  string
	Owner  string
	Now    func() time.Time
	orders *builtin.Orders
}

// New returns a processor of kind k.
func New(k Kind, db DynamoDB, l *ledger.Ledger, table, owner string, now func() time.Time) *Processor {
	return &Processor{Kind: k, DB: db, Ledger: l, Table: table, Owner: owner, Now: now, orders: builtin.NewOrders(builtin.OrderOptions{})}
}

// HandleSQS is the Lambda handler: every message on its own, failures
// reported as batch item failures.
func (p *Processor) HandleSQS(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	var resp events.SQSEventResponse
	for _, m := range ev.Records {
		if err := p.handle(ctx, m.Body); err != nil {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
		}
	}
	return resp, nil
}

func (p *Processor) handle(ctx context.Context, body string) error {
	ptr, err := queue.ParsePointer(body)
	if err != nil {
		return nil
	}
	ev, err := p.Ledger.Get(ctx, ptr.Source, ptr.EventID)
	if err != nil {
		if errors.Is(err, ledger.ErrNotFound) {
			return nil
		}
		return err
	}
	if ev.Status == ledger.StatusProcessed || ev.Status == ledger.StatusQuarantined {
		return nil
	}
	payload, err := p.Ledger.Payload(ctx, ev)
	if err != nil {
		return err
	}
	res, err := p.orders.Project(projection.Event{Source: ev.Source, Kind: "standard-webhooks", EventID: ev.EventID, Type: ev.EventType, Payload: payload, ReceivedAt: ev.ReceivedAt})
	if err != nil {
		return p.mark(ctx, ev, ledger.StatusQuarantined, "", "malformed")
	}
	// Owned by the source, as ours does: the naive designs
	// differ only in their dedup and leases.
	res = projection.Scoped(ev.Source, res)
	marker := map[string]types.AttributeValue{"pk": sv("DEDUP#" + ev.Source + "#" + ev.EventID), "sk": sv("DD")}

	// Each design: a dedup step before the work (seen: skip it) and one
	// after it.
	var before func() (seen bool, err error)
	var after func() error
	switch p.Kind {
	case CheckThenInsert:
		before = func() (bool, error) {
			out, err := p.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: &p.Table, Key: marker, ConsistentRead: aws.Bool(true)})
			return err == nil && len(out.Item) > 0, err
		}
		after = func() error {
			_, err := p.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: &p.Table, Item: marker})
			return err
		}
	case SplitCommit:
		before = func() (bool, error) {
			_, err := p.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: &p.Table, Item: marker, ConditionExpression: aws.String("attribute_not_exists(pk)")})
			if isCondition(err) {
				return true, nil
			}
			return false, err
		}
		after = func() error { return nil }
	default: // NoLease
		before = func() (bool, error) {
			_, err := p.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &p.Table, Key: marker,
				UpdateExpression:          aws.String("SET st = :proc"),
				ConditionExpression:       aws.String("attribute_not_exists(pk) OR st <> :done"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":proc": sv("PROCESSING"), ":done": sv("DONE")}})
			if isCondition(err) {
				return true, nil
			}
			return false, err
		}
		after = func() error {
			_, err := p.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &p.Table, Key: marker,
				UpdateExpression: aws.String("SET st = :done"), ExpressionAttributeValues: map[string]types.AttributeValue{":done": sv("DONE")}})
			return err
		}
	}
	seen, err := before()
	if err != nil {
		return err
	}
	if seen {
		return p.mark(ctx, ev, ledger.StatusProcessed, "duplicate", "")
	}
	outcome, err := p.business(ctx, res)
	if err != nil {
		return err
	}
	if err := after(); err != nil {
		return err
	}
	return p.finish(ctx, ev, outcome)
}

// outcome of the business write: a ledger outcome, or a quarantine code.
type outcome struct {
	result     ledger.Result
	quarantine string
}

func (p *Processor) finish(ctx context.Context, ev ledger.Event, o outcome) error {
	if o.quarantine != "" {
		return p.mark(ctx, ev, ledger.StatusQuarantined, "", o.quarantine)
	}
	return p.markResult(ctx, ev, o.result)
}

// business is the naive order service: read, compare, write, effect.
func (p *Processor) business(ctx context.Context, res projection.Result) (outcome, error) {
	w := res.Write
	if w == nil {
		return outcome{result: ledger.Result{Outcome: ledger.OutcomeIgnored}}, nil
	}
	r := ledger.Result{Projection: w.Name, Subject: w.Subject, Version: w.Version}
	key := map[string]types.AttributeValue{"pk": sv("PJ#" + w.Name + "#" + w.Subject), "sk": sv("PJ")}
	out, err := p.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: &p.Table, Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return outcome{}, err
	}
	if len(out.Item) > 0 {
		var cur ledger.Projection
		if err := attributevalue.UnmarshalMap(out.Item, &cur); err != nil {
			return outcome{}, err
		}
		switch {
		case cur.Version > w.Version:
			r.Outcome = ledger.OutcomeStale
			return outcome{result: r}, nil
		case cur.Version == w.Version && cur.Fingerprint == w.Fingerprint:
			r.Outcome = ledger.OutcomeNoop
			return outcome{result: r}, nil
		case cur.Version == w.Version:
			return outcome{quarantine: "version_conflict"}, nil
		}
	}
	state, err := attributevalue.MarshalMap(w.State)
	if err != nil {
		return outcome{}, err
	}
	item := map[string]types.AttributeValue{"pk": key["pk"], "sk": key["sk"], "item": sv("projection"), "name": sv(w.Name), "subject": sv(w.Subject),
		"version": nv(w.Version), "fingerprint": sv(w.Fingerprint), "terminal": &types.AttributeValueMemberBOOL{Value: w.Terminal},
		"state": &types.AttributeValueMemberM{Value: state}, "updated_at": nv(p.Now().UnixMilli())}
	if _, err := p.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: &p.Table, Item: item}); err != nil {
		return outcome{}, err
	}
	for _, in := range res.Intents {
		// The effect itself: nothing below deduplicates it.
		if _, err := p.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &p.Table,
			Key:                       map[string]types.AttributeValue{"pk": sv("NAIVEFX#" + in.OperationID), "sk": sv("FX")},
			UpdateExpression:          aws.String("ADD applied :one SET op = :op"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": nv(1), ":op": sv(in.OperationID)}}); err != nil {
			return outcome{}, err
		}
	}
	r.Outcome, r.Intents = ledger.OutcomeApplied, len(res.Intents)
	return outcome{result: r}, nil
}

// markResult records the event PROCESSED with its result, as the naive
// design sees it: no lease, so no fence.
func (p *Processor) markResult(ctx context.Context, ev ledger.Event, r ledger.Result) error {
	rv, err := attributevalue.Marshal(r)
	if err != nil {
		return err
	}
	return p.update(ctx, ev, ledger.StatusProcessed, "complete", "outcome "+string(r.Outcome), "", "#result = :res, ", map[string]types.AttributeValue{":res": rv})
}

func (p *Processor) mark(ctx context.Context, ev ledger.Event, to ledger.Status, outcomeName, code string) error {
	if to == ledger.StatusProcessed {
		return p.markResult(ctx, ev, ledger.Result{Outcome: ledger.Outcome(outcomeName)})
	}
	return p.update(ctx, ev, to, "quarantine", code+": naive quarantine", code, "", nil)
}

func (p *Processor) update(ctx context.Context, ev ledger.Event, to ledger.Status, action, reason, code, extraSet string, extra map[string]types.AttributeValue) error {
	audit := map[string]types.AttributeValue{"at": nv(p.Now().UnixMilli()), "from": sv(string(ev.Status)), "to": sv(string(to)),
		"actor": sv(p.Owner), "action": sv(action), "reason": sv(reason)}
	vals := map[string]types.AttributeValue{":to": sv(string(to)), ":audit": &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberM{Value: audit}}}}
	set := "SET " + extraSet + "#status = :to, audit = list_append(audit, :audit)"
	if code != "" {
		set += ", error_code = :code"
		vals[":code"] = sv(code)
	}
	for k, v := range extra {
		vals[k] = v
	}
	names := map[string]string{"#status": "status"}
	if extraSet != "" {
		names["#result"] = "result"
	}
	_, err := p.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &p.Table,
		Key:              map[string]types.AttributeValue{"pk": sv("EV#" + ev.Source + "#" + ev.EventID), "sk": sv("EV")},
		UpdateExpression: aws.String(set + " REMOVE due_shard, due_at"), ExpressionAttributeNames: names,
		ExpressionAttributeValues: vals})
	if err != nil {
		return fmt.Errorf("naive mark %s/%s: %w", ev.Source, ev.EventID, err)
	}
	return nil
}

// Effects counts the naive effects per operation id.
func Effects(ctx context.Context, db DynamoDB, table string) (map[string]int, error) {
	out := map[string]int{}
	var start map[string]types.AttributeValue
	for {
		page, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: &table, ExclusiveStartKey: start, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, err
		}
		for _, it := range page.Items {
			sk, _ := it["sk"].(*types.AttributeValueMemberS)
			op, _ := it["op"].(*types.AttributeValueMemberS)
			n, _ := it["applied"].(*types.AttributeValueMemberN)
			if sk == nil || sk.Value != "FX" || op == nil || n == nil {
				continue
			}
			v, _ := strconv.Atoi(n.Value)
			out[op.Value] = v
		}
		if start = page.LastEvaluatedKey; len(start) == 0 {
			return out, nil
		}
	}
}

func isCondition(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

func sv(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func nv(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
