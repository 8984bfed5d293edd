package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// fencedUpdate runs an update whose condition includes the claim's lease
// token; a failed condition means the lease was lost.
func (l *Ledger) fencedUpdate(ctx context.Context, c Claim, u *types.Update) error {
	_, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 u.TableName,
		Key:                       u.Key,
		UpdateExpression:          u.UpdateExpression,
		ConditionExpression:       u.ConditionExpression,
		ExpressionAttributeNames:  u.ExpressionAttributeNames,
		ExpressionAttributeValues: u.ExpressionAttributeValues,
		// The item comes back with a refusal, for lastAuditIs.
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if _, own := l.appliedBefore(ctx, ccf, u.Key, u.ExpressionAttributeValues[":audit"]); own {
			// This very update, applied by an earlier attempt whose
			// answer was lost: not a lost lease.
			return nil
		}
		return fmt.Errorf("%s/%s by %s: %w", c.Event.Source, c.Event.EventID, c.Owner, ErrLeaseLost)
	}
	return fmt.Errorf("update %s/%s: %w", c.Event.Source, c.Event.EventID, translate(err))
}

func (l *Ledger) leaveProcessing(c Claim, to Status, action, code, msg string, extraSet string, extraVals map[string]types.AttributeValue, remove string) *types.Update {
	now := l.now()
	vals := map[string]types.AttributeValue{
		":to": sv(string(to)), ":proc": sv(string(StatusProcessing)), ":tok": sv(c.Token),
		":code": sv(truncate(code, MaxErrorCodeLen)), ":msg": sv(truncate(msg, MaxErrorMessageLen)),
		":audit": auditValue(now, StatusProcessing, to, c.Owner, action, truncate(code+": "+msg, MaxReasonLen)),
	}
	for k, v := range extraVals {
		vals[k] = v
	}
	set := "SET #status = :to, error_code = :code, error_message = :msg, audit = list_append(audit, :audit)"
	if extraSet != "" {
		set += ", " + extraSet
	}
	return &types.Update{
		TableName:                 aws.String(l.opts.Table),
		Key:                       eventKey(c.Event.Source, c.Event.EventID),
		UpdateExpression:          aws.String(set + " REMOVE lease_owner, lease_token, lease_expires_at" + remove),
		ConditionExpression:       aws.String("#status = :proc AND lease_token = :tok"),
		ExpressionAttributeNames:  map[string]string{"#status": "status"},
		ExpressionAttributeValues: vals,
	}
}

// RetryLater releases a claim after a transient failure: RETRY_WAIT until
// next, findable through the due index at that time.
func (l *Ledger) RetryLater(ctx context.Context, c Claim, code, msg string, next time.Time) error {
	u := l.leaveProcessing(c, StatusRetryWait, "retry_later", code, msg,
		"next_attempt_at = :next, due_at = :next", map[string]types.AttributeValue{":next": nv(ms(next))}, "")
	return l.fencedUpdate(ctx, c, u)
}

// AwaitPayload releases a claim on an event whose payload was never stored
// (Payload returned ErrPayloadMissing): RETRY_WAIT until next with the code
// CodePayloadMissing, and the claim's attempt given back, so that waiting
// for the provider's retry never exhausts the attempts nor sends the
// event to the DLQ. The reconciler re-enqueues it when next comes (a
// look for the payload again), and the provider's retry reopens it at
// once (acceptDuplicate). The caller acknowledges the message.
func (l *Ledger) AwaitPayload(ctx context.Context, c Claim, msg string, next time.Time) error {
	u := l.leaveProcessing(c, StatusRetryWait, "await_payload", CodePayloadMissing, msg,
		"next_attempt_at = :next, due_at = :next, attempts = attempts - :one",
		map[string]types.AttributeValue{":next": nv(ms(next)), ":one": nv(1)}, "")
	return l.fencedUpdate(ctx, c, u)
}

// Dead records that the attempts are exhausted. The event moves from the
// work shards of the due index to its attention shards (see ListOpen), so
// operators find it without a scan, and its message goes on to the DLQ.
// The claim's message is recorded: its pointer id as a dead letter (a
// console redrive of it may reopen the event), and its message id, which
// is received again until SQS moves it on (see ClaimOptions).
func (l *Ledger) Dead(ctx context.Context, c Claim, code, msg string) error {
	set, vals, remove := "due_shard = :ashard, due_at = :anow", l.attentionVals(c.Event.Source, c.Event.EventID), ", next_attempt_at"
	if c.Message != "" {
		set += ", " + attrDeadMessage + " = :dmsg"
		vals[":dmsg"] = sv(truncate(c.Message, MaxIDLength))
	} else {
		remove += ", " + attrDeadMessage
	}
	u := l.leaveProcessing(c, StatusDead, "dead", code, msg, set, vals, remove)
	if c.Letter != "" {
		u.UpdateExpression = aws.String(aws.ToString(u.UpdateExpression) + " ADD " + attrDeadLetters + " :dletter")
		u.ExpressionAttributeValues[":dletter"] = &types.AttributeValueMemberSS{Value: []string{c.Letter}}
	}
	return l.fencedUpdate(ctx, c, u)
}

// Quarantine records a permanent failure (malformed payload, unknown subject,
// same-version conflict): no retry helps; an operator must look. Like Dead,
// the event stays findable on the attention shards.
func (l *Ledger) Quarantine(ctx context.Context, c Claim, code, msg string) error {
	u := l.leaveProcessing(c, StatusQuarantined, "quarantine", code, msg, "due_shard = :ashard, due_at = :anow",
		l.attentionVals(c.Event.Source, c.Event.EventID), ", next_attempt_at")
	return l.fencedUpdate(ctx, c, u)
}

// attentionVals are the due-index keys of an item that waits for an
// operator: its attention shard, and the time it started waiting.
func (l *Ledger) attentionVals(a, b string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{":ashard": sv(attentionPrefix + l.dueShard(a, b)), ":anow": nv(ms(l.now()))}
}

// Replay moves a DEAD or QUARANTINED event back to RECEIVED with the same
// identity, resetting the round's attempts and recording who asked and why.
// The caller then enqueues it.
func (l *Ledger) Replay(ctx context.Context, source, eventID, actor, reason string) (Event, error) {
	return l.reopen(ctx, source, eventID, actor, reason, "replay", StatusDead, StatusQuarantined)
}

// Release is Replay for a QUARANTINED event only (an operator's hold, or a
// permanent failure whose cause was fixed), audited as "release". A DEAD
// event is refused with ErrNotReplayable: that is what Replay is for.
func (l *Ledger) Release(ctx context.Context, source, eventID, actor, reason string) (Event, error) {
	return l.reopen(ctx, source, eventID, actor, reason, "release", StatusQuarantined)
}

// reopen moves an event in one of from back to RECEIVED, audited as action
// with the status it left. The write is conditioned on one status at a
// time, so the audit names it truthfully: the first try assumes from[0];
// when the row is in another of the allowed statuses, the refused write
// returned it (ALL_OLD) and a second write is conditioned on that status.
func (l *Ledger) reopen(ctx context.Context, source, eventID, actor, reason, action string, from ...Status) (Event, error) {
	if actor == "" || reason == "" {
		return Event{}, fmt.Errorf("%w: %s needs an actor and a reason", ErrInvalid, action)
	}
	try := from[0]
	for range len(from) + 1 {
		now := l.now()
		audit := auditValue(now, try, StatusReceived, actor, action, reason)
		out, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(l.opts.Table),
			Key:       eventKey(source, eventID),
			UpdateExpression: aws.String("SET #status = :recv, attempts = :zero, due_shard = :shard, due_at = :now, " +
				"audit = list_append(audit, :audit) REMOVE next_attempt_at, expires_at"),
			ConditionExpression:      aws.String("#status = :from"),
			ExpressionAttributeNames: map[string]string{"#status": "status"},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":recv": sv(string(StatusReceived)), ":from": sv(string(try)),
				":zero": nv(0), ":shard": sv(l.dueShard(source, eventID)), ":now": nv(ms(now)),
				":audit": audit,
			},
			ReturnValues:                        types.ReturnValueAllNew,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return decodeEvent(out.Attributes)
		}
		if ccf := (*types.ConditionalCheckFailedException)(nil); errors.As(err, &ccf) {
			if item, own := l.appliedBefore(ctx, ccf, eventKey(source, eventID), audit); own {
				// This very request, applied by an earlier attempt whose
				// answer was lost: done, not "not replayable in RECEIVED".
				return decodeEvent(item)
			}
		}
		cur, failed := conditionFailed(err)
		if failed && cur == nil {
			// The refusal returned no item (see the package doc): read it.
			got, gerr := l.Get(ctx, source, eventID)
			if errors.Is(gerr, ErrNotFound) {
				return Event{}, fmt.Errorf("%s %s/%s: %w", action, source, eventID, ErrNotFound)
			}
			if gerr != nil {
				return Event{}, fmt.Errorf("%s %s/%s: %w", action, source, eventID, gerr)
			}
			cur = &got
		}
		switch {
		case failed && slices.Contains(from, cur.Status) && cur.Status != try:
			try = cur.Status // it is in another allowed state: reopen from that one
			continue
		case failed:
			return *cur, fmt.Errorf("%s %s/%s in %s: %w", action, source, eventID, cur.Status, ErrNotReplayable)
		}
		return Event{}, fmt.Errorf("%s %s/%s: %w", action, source, eventID, translate(err))
	}
	return Event{}, fmt.Errorf("%s %s/%s: state kept changing: %w", action, source, eventID, ErrConflict)
}

// GiveUp marks an unfinished event DEAD without holding its lease: the queue
// has given up on its message (it reached the dead-letter queue) while the
// ledger still counted attempts left. It never overrides a live lease.
// letter is the pointer id the dead letter carries (queue.Pointer.ID, ""
// for a pointer without one): it is recorded as one of the event's dead
// letters, so that a console redrive of that message may reopen the event
// (see ClaimOptions). On an event that is DEAD already GiveUp records the
// letter only (a second request, once per letter) and still answers with
// a NotClaimableError.
func (l *Ledger) GiveUp(ctx context.Context, source, eventID, actor, reason, letter string) (Event, error) {
	now := l.now()
	update := "SET #status = :dead, error_code = :code, error_message = :msg, audit = list_append(audit, :audit), " +
		"due_shard = :ashard, due_at = :now REMOVE lease_owner, lease_token, lease_expires_at, next_attempt_at"
	vals := map[string]types.AttributeValue{
		":dead": sv(string(StatusDead)), ":recv": sv(string(StatusReceived)), ":retry": sv(string(StatusRetryWait)),
		":proc": sv(string(StatusProcessing)), ":now": nv(ms(now)),
		":code": sv("queue_exhausted"), ":msg": sv(truncate(reason, MaxErrorMessageLen)),
		":ashard": sv(attentionPrefix + l.dueShard(source, eventID)),
		":audit":  auditValue(now, "", StatusDead, actor, "give_up", reason),
	}
	if letter != "" {
		update += " ADD " + attrDeadLetters + " :dletter"
		vals[":dletter"] = &types.AttributeValueMemberSS{Value: []string{letter}}
	}
	out, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(l.opts.Table),
		Key:                                 eventKey(source, eventID),
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String("#status IN (:recv, :retry) OR (#status = :proc AND lease_expires_at < :now)"),
		ExpressionAttributeNames:            map[string]string{"#status": "status"},
		ExpressionAttributeValues:           vals,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return decodeEvent(out.Attributes)
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return Event{}, fmt.Errorf("give up %s/%s: %w", source, eventID, translate(err))
	}
	raw := ccf.Item
	if _, ok := raw["status"]; !ok {
		// The refusal returned no item (see the package doc): read it.
		if raw, err = l.getItem(ctx, eventKey(source, eventID), "event "+source+"/"+eventID); err != nil {
			return Event{}, fmt.Errorf("give up %s/%s: %w", source, eventID, err)
		}
	}
	cur, err := decodeEvent(raw)
	if err != nil {
		return Event{}, fmt.Errorf("give up %s/%s: %w", source, eventID, err)
	}
	// GiveUp does not look for its own retried write (appliedBefore): the
	// sweep gives up on two dead letters of one event, or on one message
	// it received twice, with the same words in the same millisecond at
	// times, and told apart from a lost answer they would be miscounted.
	// A lost answer here costs only the report: the event is DEAD and
	// the letter recorded either way.
	if letters, _ := deadLetters(raw); cur.Status == StatusDead && letter != "" && !slices.Contains(letters, letter) {
		// Dead already (its own message went there, or another one did
		// first): this message is a dead letter too.
		_, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(l.opts.Table),
			Key:                       eventKey(source, eventID),
			UpdateExpression:          aws.String("ADD " + attrDeadLetters + " :dletter"),
			ConditionExpression:       aws.String("#status = :dead"),
			ExpressionAttributeNames:  map[string]string{"#status": "status"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":dead": sv(string(StatusDead)), ":dletter": vals[":dletter"]},
		})
		var again *types.ConditionalCheckFailedException
		if err != nil && !errors.As(err, &again) {
			return Event{}, fmt.Errorf("record dead letter of %s/%s: %w", source, eventID, translate(err))
		}
	}
	return cur, &NotClaimableError{Event: cur, Why: "finished or leased"}
}

// conditionFailed reports whether err is a failed condition and returns the
// event as it stood when the store sent it back (nil when there was no item
// or it could not be decoded).
func conditionFailed(err error) (*Event, bool) {
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return nil, false
	}
	if _, ok := ccf.Item["status"]; !ok {
		return nil, true
	}
	cur, derr := decodeEvent(ccf.Item)
	if derr != nil {
		return nil, true
	}
	return &cur, true
}
