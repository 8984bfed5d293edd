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

// IntentClaim is a lease on one intent. Only the holder of Token can record
// its outcome.
type IntentClaim struct {
	Intent  IntentState // as it is after the claim (DISPATCHING)
	Owner   string
	Token   string
	Expires time.Time
	// From is the status the intent was claimed from. UNCERTAIN, and a
	// takeover from DISPATCHING, mean an earlier attempt may have reached the
	// downstream: the caller must look the outcome up or reuse the same key.
	From IntentStatus
}

// MaybeSent reports whether an earlier attempt may have reached the
// downstream without its outcome being recorded.
func (c IntentClaim) MaybeSent() bool {
	return c.From == IntentStatusUncertain || c.From == IntentStatusDispatching || c.Intent.MaybeSent
}

// IntentNotClaimableError says why an intent could not be claimed, with the
// intent as it stands.
type IntentNotClaimableError struct {
	Intent IntentState
	Why    string
}

func (e *IntentNotClaimableError) Error() string {
	return fmt.Sprintf("intent %s not claimable (%s): %s", e.Intent.OperationID, e.Intent.Status, e.Why)
}

// Is makes errors.Is(err, ErrNotClaimable) true.
func (e *IntentNotClaimableError) Is(target error) bool { return target == ErrNotClaimable }

// ClaimIntent takes the lease on an intent with one conditional UpdateItem
// when it is PENDING. From RETRY_WAIT or UNCERTAIN (when due) or from an
// expired DISPATCHING lease it costs a second request, conditioned on the
// exact state the first one returned, so the audit entry names the
// transition truthfully. Each claim mints a new token.
func (l *Ledger) ClaimIntent(ctx context.Context, op string, o ClaimOptions) (IntentClaim, error) {
	if o.Owner == "" || o.Lease <= 0 {
		return IntentClaim{}, fmt.Errorf("%w: claim needs an owner and a positive lease", ErrInvalid)
	}
	if err := validID("operation id", op, MaxIDLength); err != nil {
		return IntentClaim{}, err
	}
	from := IntentStatusPending
	var old IntentState
	for range 3 {
		c, cur, err := l.claimIntentFrom(ctx, op, from, old, o)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, errCondition) {
			return IntentClaim{}, err
		}
		if cur == nil {
			return IntentClaim{}, fmt.Errorf("claim intent %s: %w", op, ErrNotFound)
		}
		old = *cur
		now := l.now()
		switch old.Status {
		case IntentStatusPending:
		case IntentStatusRetryWait:
			if old.NextAttemptAt.After(now) {
				return IntentClaim{}, &IntentNotClaimableError{Intent: old, Why: "retry not due until " + old.NextAttemptAt.Format(time.RFC3339Nano)}
			}
		case IntentStatusUncertain:
			if old.NextCheckAt.After(now) {
				return IntentClaim{}, &IntentNotClaimableError{Intent: old, Why: "check not due until " + old.NextCheckAt.Format(time.RFC3339Nano)}
			}
		case IntentStatusDispatching:
			if !old.LeaseExpires.Before(now) {
				return IntentClaim{}, &IntentNotClaimableError{Intent: old, Why: "leased by " + old.LeaseOwner + " until " + old.LeaseExpires.Format(time.RFC3339Nano)}
			}
		default:
			return IntentClaim{}, &IntentNotClaimableError{Intent: old, Why: "finished"}
		}
		from = old.Status
	}
	return IntentClaim{}, fmt.Errorf("claim intent %s: state kept changing: %w", op, ErrConflict)
}

func (l *Ledger) claimIntentFrom(ctx context.Context, op string, from IntentStatus, old IntentState, o ClaimOptions) (IntentClaim, *IntentState, error) {
	now := l.now()
	token := l.opts.Tokens()
	expires := now.Add(o.Lease)
	action, reason := "claim", ""
	vals := map[string]types.AttributeValue{
		":from":  sv(string(from)),
		":disp":  sv(string(IntentStatusDispatching)),
		":owner": sv(truncate(o.Owner, MaxIDLength)),
		":tok":   sv(token),
		":exp":   nv(ms(expires)),
		":one":   nv(1),
		":zero":  nv(0),
		":now":   nv(ms(now)),
		":shard": sv(l.dueShard("OP", op)),
		":empty": &types.AttributeValueMemberL{Value: []types.AttributeValue{}},
		":item":  sv("intent"),
	}
	cond := "#item = :item AND #status = :from"
	switch from {
	case IntentStatusRetryWait:
		cond += " AND next_attempt_at <= :now"
		action = "retry"
	case IntentStatusUncertain:
		cond += " AND next_check_at <= :now"
		action, reason = "recheck", "outcome of an earlier attempt unknown"
	case IntentStatusDispatching:
		cond += " AND lease_token = :oldtok AND lease_expires_at < :now"
		vals[":oldtok"] = sv(old.LeaseToken)
		action, reason = "takeover", "lease of "+old.LeaseOwner+" expired at "+old.LeaseExpires.Format(time.RFC3339Nano)
	}
	maybe := ""
	if from == IntentStatusDispatching || from == IntentStatusUncertain {
		maybe = "maybe_sent = :maybe, "
		vals[":maybe"] = &types.AttributeValueMemberBOOL{Value: true}
	}
	vals[":audit"] = auditValue(now, Status(from), Status(IntentStatusDispatching), o.Owner, action, reason)

	out, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(l.opts.Table),
		Key:       intentKey(op),
		UpdateExpression: aws.String("SET #status = :disp, lease_owner = :owner, lease_token = :tok, lease_expires_at = :exp, " + maybe +
			"due_shard = :shard, attempts = if_not_exists(attempts, :zero) + :one, " +
			"first_attempt_at = if_not_exists(first_attempt_at, :now), " +
			"audit = list_append(if_not_exists(audit, :empty), :audit) REMOVE next_attempt_at, next_check_at"),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            map[string]string{"#status": "status", "#item": "item"},
		ExpressionAttributeValues:           vals,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			if _, ok := ccf.Item["status"]; !ok {
				return IntentClaim{}, nil, errCondition
			}
			cur, derr := decodeIntent(ccf.Item)
			if derr != nil {
				return IntentClaim{}, nil, derr
			}
			if cur.Status == IntentStatusDispatching && cur.LeaseToken == token {
				// This very request took the lease in an earlier attempt
				// whose answer was lost, and the SDK sent it again (see
				// ownClaim for events): the claim is ours.
				return IntentClaim{Intent: cur, Owner: o.Owner, Token: token, Expires: cur.LeaseExpires, From: from}, nil, nil
			}
			return IntentClaim{}, &cur, errCondition
		}
		return IntentClaim{}, nil, fmt.Errorf("claim intent %s: %w", op, translate(err))
	}
	in, err := decodeIntent(out.Attributes)
	if err != nil {
		return IntentClaim{}, nil, err
	}
	return IntentClaim{Intent: in, Owner: o.Owner, Token: token, Expires: expires, From: from}, nil, nil
}

// IntentOutcome is what one dispatch attempt learned.
type IntentOutcome struct {
	// Status is where the intent goes: SUCCEEDED, FAILED, QUARANTINED,
	// OBSOLETE, SUPERSEDED, CONTRADICTED, RETRY_WAIT or UNCERTAIN. A
	// SUCCEEDED outcome for an intent a newer revision marked contradicted
	// is recorded as CONTRADICTED.
	Status IntentStatus
	// Next is when a waiting intent (RETRY_WAIT, UNCERTAIN) is due again.
	Next time.Time
	// Code is a short machine-readable reason ("http_503", "timeout").
	Code string
	// Detail is a human-readable explanation; it is truncated to
	// MaxErrorMessageLen and must not carry secrets or whole payloads.
	Detail string
}

// RecordIntent ends a claim with its outcome. It is fenced on the claim's
// token: if another dispatcher took the intent over, it returns ErrLeaseLost
// and writes nothing.
func (l *Ledger) RecordIntent(ctx context.Context, c IntentClaim, out IntentOutcome) error {
	_, err := l.RecordIntentAs(ctx, c, out)
	return err
}

// RecordIntentAs is RecordIntent, and says which status it recorded:
// out.Status, or CONTRADICTED for a success a newer revision contradicted
// while the call was in flight.
func (l *Ledger) RecordIntentAs(ctx context.Context, c IntentClaim, out IntentOutcome) (IntentStatus, error) {
	now := l.now()
	op := c.Intent.OperationID
	vals := map[string]types.AttributeValue{
		":to": sv(string(out.Status)), ":disp": sv(string(IntentStatusDispatching)), ":tok": sv(c.Token),
		":code": sv(truncate(out.Code, MaxErrorCodeLen)), ":detail": sv(truncate(out.Detail, MaxErrorMessageLen)),
		":empty": &types.AttributeValueMemberL{Value: []types.AttributeValue{}},
		":audit": auditValue(now, Status(IntentStatusDispatching), Status(out.Status), c.Owner, "record",
			truncate(out.Code+": "+out.Detail, MaxReasonLen)),
	}
	set := "SET #status = :to, error_code = :code, detail = :detail, audit = list_append(if_not_exists(audit, :empty), :audit)"
	remove := " REMOVE lease_owner, lease_token, lease_expires_at"
	switch out.Status {
	case IntentStatusSucceeded, IntentStatusFailed, IntentStatusObsolete, IntentStatusSuperseded:
		// A finished intent expires with the events: its projection's
		// version guard, not this item, stops the effect from being created
		// again, so keeping it longer only costs storage.
		set += ", finished_at = :now, " + TTLAttribute + " = :ttl"
		vals[":now"] = nv(ms(now))
		vals[":ttl"] = nv(now.Add(l.opts.Retention).Unix())
		remove += ", due_shard, due_at, next_attempt_at, next_check_at"
	case IntentStatusQuarantined, IntentStatusContradicted:
		// Kept, on the attention shards of the due index, until an operator
		// resolves it, like a quarantined event.
		set += ", finished_at = :now, due_shard = :ashard, due_at = :now"
		vals[":now"] = nv(ms(now))
		vals[":ashard"] = sv(attentionPrefix + l.dueShard("OP", op))
		remove += ", next_attempt_at, next_check_at"
	case IntentStatusRetryWait, IntentStatusUncertain:
		if out.Next.IsZero() {
			return "", fmt.Errorf("%w: %s needs a next time", ErrInvalid, out.Status)
		}
		attr, other := "next_attempt_at", "next_check_at"
		if out.Status == IntentStatusUncertain {
			attr, other = other, attr
		}
		set += ", " + attr + " = :next, due_at = :next"
		vals[":next"] = nv(ms(out.Next))
		remove += ", " + other
	default:
		return "", fmt.Errorf("%w: cannot record intent status %q", ErrInvalid, out.Status)
	}
	cond := "#status = :disp AND lease_token = :tok"
	if out.Status == IntentStatusSucceeded {
		// A newer revision that removed the reason of this intent while it
		// was in flight marked it (contradicted_by, see Commit): performed
		// now means CONTRADICTED, never a silent success.
		cond += " AND attribute_not_exists(contradicted_by)"
	}
	_, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(l.opts.Table),
		Key:                                 intentKey(op),
		UpdateExpression:                    aws.String(set + remove),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            map[string]string{"#status": "status"},
		ExpressionAttributeValues:           vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return out.Status, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if _, own := l.appliedBefore(ctx, ccf, intentKey(op), vals[":audit"]); own {
			// This very record, applied by an earlier attempt whose
			// answer was lost: not a lost lease.
			return out.Status, nil
		}
		if out.Status == IntentStatusSucceeded {
			if cur, derr := decodeIntent(ccf.Item); derr == nil && cur.Status == IntentStatusDispatching && cur.LeaseToken == c.Token && cur.ContradictedBy != 0 {
				return l.RecordIntentAs(ctx, c, IntentOutcome{Status: IntentStatusContradicted, Code: "contradicted",
					Detail: truncate(fmt.Sprintf("performed (%s) while version %d of %s/%s removed its reason; the recovery owner must decide what to do",
						out.Code, cur.ContradictedBy, cur.Projection, cur.ProjectionSubject), MaxErrorMessageLen)})
			}
		}
		return "", fmt.Errorf("record intent %s by %s: %w", op, c.Owner, ErrLeaseLost)
	}
	return "", fmt.Errorf("record intent %s: %w", op, translate(err))
}

// IntentDueRef names an unfinished intent found through the due index.
type IntentDueRef struct {
	OperationID string
	Status      IntentStatus
	DueAt       time.Time
}

// ListDueIntents returns unfinished intents due at or before `before`
// (PENDING since then, leases expired, retries and checks due), oldest first,
// at most limit. Like ListDue it queries each shard of the sparse due index;
// reads are eventually consistent and ClaimIntent re-checks.
func (l *Ledger) ListDueIntents(ctx context.Context, before time.Time, limit int) ([]IntentDueRef, error) {
	items, err := l.queryDue(ctx, before, limit, "intent",
		Status(IntentStatusPending), Status(IntentStatusDispatching), Status(IntentStatusRetryWait), Status(IntentStatusUncertain))
	if err != nil {
		return nil, err
	}
	refs := make([]IntentDueRef, 0, len(items))
	for _, it := range items {
		var r struct {
			OperationID string       `dynamodbav:"operation_id"`
			Status      IntentStatus `dynamodbav:"status"`
		}
		if err := attributevalue.UnmarshalMap(it.item, &r); err != nil {
			return nil, fmt.Errorf("decode due intent: %w", err)
		}
		refs = append(refs, IntentDueRef{OperationID: r.OperationID, Status: r.Status, DueAt: it.dueAt})
	}
	return refs, nil
}
