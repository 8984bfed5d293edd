package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
)

// OpenItem is one item of the due index: an unfinished event or intent, or
// one waiting for an operator. Since is when it became due (work) or started
// waiting (attention).
type OpenItem struct {
	Kind        string // "event" or "intent"
	Source      string // events
	EventID     string // events
	EventType   string // events
	OperationID string // intents
	IntentKind  string // intents
	Status      string
	ReceivedAt  time.Time // events: when intake accepted it
	Since       time.Time
	Attempts    int
	ErrorCode   string
}

// OpenStatuses are the states ListOpen can return.
var (
	OpenEventStatuses  = []Status{StatusReceived, StatusProcessing, StatusRetryWait, StatusDead, StatusQuarantined}
	OpenIntentStatuses = []Status{Status(IntentStatusPending), Status(IntentStatusDispatching), Status(IntentStatusRetryWait), Status(IntentStatusUncertain), Status(IntentStatusQuarantined), Status(IntentStatusContradicted)}
)

// ListOpen returns up to limit open items of kind ("event" or "intent") in
// the given statuses (all open statuses when none), oldest first, from both
// the work and the attention shards of the due index: no table scan. It is
// what operators and the reconciler's gauges read.
func (l *Ledger) ListOpen(ctx context.Context, kind string, limit int, statuses ...Status) ([]OpenItem, error) {
	if kind != "event" && kind != "intent" {
		return nil, fmt.Errorf("%w: kind must be event or intent, got %q", ErrInvalid, kind)
	}
	if len(statuses) == 0 {
		statuses = OpenEventStatuses
		if kind == "intent" {
			statuses = OpenIntentStatuses
		}
	}
	var work, attention []Status
	for _, st := range statuses {
		switch st {
		case StatusDead, StatusQuarantined, Status(IntentStatusContradicted): // IntentStatusQuarantined has the same value as StatusQuarantined
			attention = append(attention, st)
		default:
			work = append(work, st)
		}
	}
	far := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	var items []dueItem
	for _, part := range []struct {
		prefix string
		sts    []Status
	}{{"", work}, {attentionPrefix, attention}} {
		if len(part.sts) == 0 {
			continue
		}
		got, err := l.queryShards(ctx, part.prefix, far, limit, kind, part.sts...)
		if err != nil {
			return nil, err
		}
		items = append(items, got...)
	}
	sortDue(items)
	if len(items) > limit {
		items = items[:limit]
	}
	out := make([]OpenItem, 0, len(items))
	for _, it := range items {
		var r struct {
			Source      string `dynamodbav:"source"`
			EventID     string `dynamodbav:"event_id"`
			EventType   string `dynamodbav:"event_type"`
			OperationID string `dynamodbav:"operation_id"`
			Kind        string `dynamodbav:"kind"`
			Status      string `dynamodbav:"status"`
			Attempts    int    `dynamodbav:"attempts"`
			ErrorCode   string `dynamodbav:"error_code"`
			ReceivedAt  int64  `dynamodbav:"received_at"`
		}
		if err := attributevalue.UnmarshalMap(it.item, &r); err != nil {
			return nil, fmt.Errorf("decode open item: %w", err)
		}
		oi := OpenItem{Kind: kind, Status: r.Status, Since: it.dueAt, Attempts: r.Attempts, ErrorCode: r.ErrorCode}
		if kind == "event" {
			oi.Source, oi.EventID, oi.EventType = r.Source, r.EventID, r.EventType
			if r.ReceivedAt > 0 {
				oi.ReceivedAt = fromMS(r.ReceivedAt)
			}
		} else {
			oi.OperationID, oi.IntentKind = r.OperationID, r.Kind
		}
		out = append(out, oi)
	}
	return out, nil
}
