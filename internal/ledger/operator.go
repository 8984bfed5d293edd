package ledger

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Operator actions: the writes an operator tool (scripts/webhookctl) makes
// besides Replay. Each is one conditional UpdateItem on the state the
// operator just read, and appends an audit entry naming the operator and
// their reason: every change an operator makes is attributed and explained.

// ErrRefused: an operator action asked for a transition the item's current
// state does not allow (a finished item, a live lease). The returned
// *RefusedError says which state and why.
var ErrRefused = errors.New("ledger: operator action refused in this state")

// RefusedError says why an operator action was refused, with the state the
// item was in.
type RefusedError struct {
	Action string // "hold" or "resolve"
	Item   string // "stripe/evt_1" or "intent op-1"
	Status Status
	Why    string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s %s refused: it is %s (%s)", e.Action, e.Item, e.Status, e.Why)
}

// Is makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// HoldErrorCode is the error code an operator hold records on the event.
const HoldErrorCode = "operator_hold"

// Hold puts an event on an operator hold: RECEIVED, RETRY_WAIT, DEAD, or
// PROCESSING whose lease has expired, becomes QUARANTINED with the audit
// action "hold" (actor, reason). Like Quarantine, the event moves to the
// attention shards of the due index (due_shard "A"+shard, due_at now), so
// ListOpen finds it and the reconciler's work queries never do. A live
// lease, a PROCESSED event and one already QUARANTINED are refused
// (*RefusedError). It reads the event first and conditions the write on the
// exact state it read (and, for an expired lease, on that lease's token), so
// the audit names the real from-state; if the event moves in between, the
// write fails with ErrConflict and nothing changes. Release it with Replay.
func (l *Ledger) Hold(ctx context.Context, source, eventID, actor, reason string) (Event, error) {
	if actor == "" || reason == "" {
		return Event{}, fmt.Errorf("%w: a hold needs an actor and a reason", ErrInvalid)
	}
	cur, err := l.Get(ctx, source, eventID)
	if err != nil {
		return Event{}, err
	}
	now := l.now()
	refuse := func(why string) (Event, error) {
		return cur, &RefusedError{Action: "hold", Item: source + "/" + eventID, Status: cur.Status, Why: why}
	}
	vals := map[string]types.AttributeValue{":from": sv(string(cur.Status))}
	cond := "#status = :from"
	switch cur.Status {
	case StatusReceived, StatusRetryWait, StatusDead:
	case StatusProcessing:
		if !cur.LeaseExpires.Before(now) {
			return refuse("leased by " + cur.LeaseOwner + " until " + cur.LeaseExpires.Format(time.RFC3339) + "; wait for the worker to finish or the lease to expire")
		}
		cond += " AND lease_token = :oldtok AND lease_expires_at < :now"
		vals[":oldtok"] = sv(cur.LeaseToken)
	case StatusQuarantined:
		return refuse("already quarantined")
	default:
		return refuse("finished; nothing to hold")
	}
	vals[":quar"] = sv(string(StatusQuarantined))
	vals[":code"] = sv(HoldErrorCode)
	vals[":msg"] = sv(truncate(reason, MaxErrorMessageLen))
	vals[":ashard"] = sv(attentionPrefix + l.dueShard(source, eventID))
	vals[":now"] = nv(ms(now))
	vals[":audit"] = auditValue(now, cur.Status, StatusQuarantined, actor, "hold", reason)
	out, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(l.opts.Table),
		Key:       eventKey(source, eventID),
		UpdateExpression: aws.String("SET #status = :quar, error_code = :code, error_message = :msg, due_shard = :ashard, due_at = :now, " +
			"audit = list_append(audit, :audit) REMOVE lease_owner, lease_token, lease_expires_at, next_attempt_at"),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            map[string]string{"#status": "status"},
		ExpressionAttributeValues:           vals,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			if item, own := l.appliedBefore(ctx, ccf, eventKey(source, eventID), vals[":audit"]); own {
				// This very hold, applied by an earlier attempt whose
				// answer was lost (see appliedBefore).
				return decodeEvent(item)
			}
			return Event{}, fmt.Errorf("hold %s/%s: it changed since it was read (%s): %w", source, eventID, cur.Status, ErrConflict)
		}
		return Event{}, fmt.Errorf("hold %s/%s: %w", source, eventID, translate(err))
	}
	return decodeEvent(out.Attributes)
}

// ResolveIntent records an outcome an operator verified with the downstream
// (SUCCEEDED or FAILED) for an intent the dispatcher could not settle:
// UNCERTAIN, RETRY_WAIT, QUARANTINED, or DISPATCHING whose lease expired;
// or closes a CONTRADICTED one the recovery owner has handled.
// The audit entry has the action "resolve" with the operator and reason; the
// intent leaves the due index and gets the retention TTL RecordIntent gives
// a finished intent. It reads the intent first and conditions the write on
// that state (status, attempts and, for an expired lease, its token), so a
// dispatcher that moved it in between makes the write fail (ErrConflict)
// instead of being overwritten. A finished, PENDING or live-leased intent is
// refused (*RefusedError).
func (l *Ledger) ResolveIntent(ctx context.Context, op string, to IntentStatus, actor, reason string) (IntentState, error) {
	if actor == "" || reason == "" {
		return IntentState{}, fmt.Errorf("%w: resolve needs an actor and a reason", ErrInvalid)
	}
	if to != IntentStatusSucceeded && to != IntentStatusFailed {
		return IntentState{}, fmt.Errorf("%w: an operator resolves an intent to SUCCEEDED or FAILED, not %q", ErrInvalid, to)
	}
	cur, err := l.GetIntentState(ctx, op)
	if err != nil {
		return IntentState{}, err
	}
	now := l.now()
	refuse := func(why string) (IntentState, error) {
		return cur, &RefusedError{Action: "resolve", Item: "intent " + op, Status: Status(cur.Status), Why: why}
	}
	vals := map[string]types.AttributeValue{":from": sv(string(cur.Status)), ":item": sv("intent")}
	cond := "#item = :item AND #status = :from"
	switch cur.Status {
	case IntentStatusUncertain, IntentStatusRetryWait, IntentStatusQuarantined:
	case IntentStatusContradicted:
		// The recovery owner contained it (reversed the refund, told the
		// customer) and says how: it leaves the attention shards.
	case IntentStatusDispatching:
		if !cur.LeaseExpires.Before(now) {
			return refuse("leased by " + cur.LeaseOwner + " until " + cur.LeaseExpires.Format(time.RFC3339) + "; a dispatcher is working on it")
		}
		cond += " AND lease_token = :oldtok AND lease_expires_at < :now"
		vals[":oldtok"] = sv(cur.LeaseToken)
	case IntentStatusPending:
		return refuse("not attempted yet; the dispatcher will send it")
	default:
		return refuse("finished")
	}
	if cur.Attempts > 0 {
		cond += " AND attempts = :att"
		vals[":att"] = nv(int64(cur.Attempts))
	} else {
		cond += " AND attribute_not_exists(attempts)"
	}
	vals[":to"] = sv(string(to))
	vals[":code"] = sv("operator_resolved")
	vals[":detail"] = sv(truncate(reason, MaxErrorMessageLen))
	vals[":now"] = nv(ms(now))
	vals[":ttl"] = nv(now.Add(l.opts.Retention).Unix())
	vals[":empty"] = &types.AttributeValueMemberL{Value: []types.AttributeValue{}}
	vals[":audit"] = auditValue(now, Status(cur.Status), Status(to), actor, "resolve", reason)
	out, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(l.opts.Table),
		Key:       intentKey(op),
		UpdateExpression: aws.String("SET #status = :to, error_code = :code, detail = :detail, finished_at = :now, " + TTLAttribute + " = :ttl, " +
			"audit = list_append(if_not_exists(audit, :empty), :audit) " +
			"REMOVE lease_owner, lease_token, lease_expires_at, due_shard, due_at, next_attempt_at, next_check_at"),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            map[string]string{"#status": "status", "#item": "item"},
		ExpressionAttributeValues:           vals,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			if item, own := l.appliedBefore(ctx, ccf, intentKey(op), vals[":audit"]); own {
				// This very resolution, applied by an earlier attempt
				// whose answer was lost (see appliedBefore).
				return decodeIntent(item)
			}
			return IntentState{}, fmt.Errorf("resolve intent %s: it changed since it was read (%s, %d attempts): %w", op, cur.Status, cur.Attempts, ErrConflict)
		}
		return IntentState{}, fmt.Errorf("resolve intent %s: %w", op, translate(err))
	}
	return decodeIntent(out.Attributes)
}

// EventFilter selects events for ScanEvents. Empty fields match everything.
type EventFilter struct {
	Statuses  []Status
	Source    string
	EventType string
	// ReceivedBefore keeps events received strictly before it (zero: any).
	ReceivedBefore time.Time
	// Limit is the most events returned (default 100).
	Limit int
	// Budget is the most items the scan may read, matching or not (default
	// 10,000): the bound on what one call costs.
	Budget int
}

// ScanResult is what ScanEvents found.
type ScanResult struct {
	Events []Event // oldest received first
	// Read is how many items the scan read, as DynamoDB reports it
	// (ScannedCount; it bills these, not the matches). Requests is how
	// many Scan requests it took.
	Read, Requests int
	// More is true when the scan stopped at Limit or Budget before the end
	// of the table: more events may match.
	More bool
}

// ScanEvents reads the table page by page, filtered server-side, and
// returns up to f.Limit events that match: the only way to list PROCESSED
// events, which the due index does not hold. It is costly: DynamoDB bills
// every item read (eventually consistent: 0.5 read unit per 4 KB), matching
// or not, so it stops after f.Budget items, and nothing on the hot path may
// call it. The events returned are the first matches in the table's order,
// sorted by reception; they are not the oldest of all matches. db is the
// table's client (the ledger's own DynamoDB interface does not scan).
func (l *Ledger) ScanEvents(ctx context.Context, db Scanner, f EventFilter) (ScanResult, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	if f.Budget <= 0 {
		f.Budget = 10000
	}
	names := map[string]string{"#item": "item"}
	vals := map[string]types.AttributeValue{":ev": sv("event"), ":sk": sv(skEvent)}
	filter := "#item = :ev AND sk = :sk"
	if len(f.Statuses) > 0 {
		var in []string
		for i, st := range f.Statuses {
			k := ":st" + strconv.Itoa(i)
			vals[k] = sv(string(st))
			in = append(in, k)
		}
		names["#status"] = "status"
		filter += " AND #status IN (" + join(in) + ")"
	}
	if f.Source != "" {
		names["#source"] = "source"
		vals[":source"] = sv(f.Source)
		filter += " AND #source = :source"
	}
	if f.EventType != "" {
		vals[":etype"] = sv(f.EventType)
		filter += " AND event_type = :etype"
	}
	if !f.ReceivedBefore.IsZero() {
		vals[":before"] = nv(ms(f.ReceivedBefore))
		filter += " AND received_at < :before"
	}
	var res ScanResult
	var start map[string]types.AttributeValue
	// Each request reads at most `page` items, so the budget holds whatever
	// the store reports as ScannedCount.
	asked := 0
	for {
		page := min(f.Budget-asked, 1000)
		asked += page
		res.Requests++
		out, err := db.Scan(ctx, &dynamodb.ScanInput{
			TableName:                 aws.String(l.opts.Table),
			FilterExpression:          aws.String(filter),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: vals,
			ExclusiveStartKey:         start,
			Limit:                     aws.Int32(int32(page)),
		})
		if err != nil {
			return res, fmt.Errorf("scan %s for events: %w", l.opts.Table, translate(err))
		}
		res.Read += int(out.ScannedCount)
		for _, it := range out.Items {
			ev, err := decodeEvent(it)
			if err != nil {
				return res, err
			}
			res.Events = append(res.Events, ev)
		}
		start = out.LastEvaluatedKey
		if len(start) == 0 {
			break
		}
		if len(res.Events) >= f.Limit || asked >= f.Budget {
			res.More = true
			break
		}
	}
	if len(res.Events) > f.Limit {
		res.Events, res.More = res.Events[:f.Limit], true
	}
	sort.SliceStable(res.Events, func(i, j int) bool { return res.Events[i].ReceivedAt.Before(res.Events[j].ReceivedAt) })
	return res, nil
}
