package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Claim is a lease on one event. Only the holder of Token can complete it.
type Claim struct {
	Event   Event // the event as it is after the claim (status PROCESSING)
	Owner   string
	Token   string
	Expires time.Time
	// From is the status the event was claimed from; Redrive is true when
	// that was DEAD (the message came back from the DLQ).
	From    Status
	Redrive bool
}

// NotClaimableError says why an event could not be claimed, with the event as
// it stands, so the caller can decide (acknowledge a processed event, retry
// later while another worker holds a live lease).
type NotClaimableError struct {
	Event Event
	Why   string
}

func (e *NotClaimableError) Error() string {
	return fmt.Sprintf("event %s/%s not claimable (%s): %s", e.Event.Source, e.Event.EventID, e.Event.Status, e.Why)
}

// Is makes errors.Is(err, ErrNotClaimable) true.
func (e *NotClaimableError) Is(target error) bool { return target == ErrNotClaimable }

// ClaimOptions tune one claim.
type ClaimOptions struct {
	// Owner names the worker (audit and lease_owner).
	Owner string
	// Lease is how long the claim is exclusive. It must exceed the worker's
	// own deadline (the Lambda timeout) or two workers may overlap; the
	// fencing token keeps even that safe.
	Lease time.Duration
	// AllowRedrive lets a DEAD event be claimed: the message came back from
	// the dead-letter queue by an operator's redrive.
	AllowRedrive bool
}

// Claim takes the lease on an event with one conditional UpdateItem in the
// common case (a RECEIVED event). A retry, a takeover of an expired lease or a
// redrive costs a second request: the first, failed one returns the current
// row, and the second is conditioned on exactly that state so the audit entry
// names the transition truthfully.
func (l *Ledger) Claim(ctx context.Context, source, eventID string, o ClaimOptions) (Claim, error) {
	if o.Owner == "" || o.Lease <= 0 {
		return Claim{}, fmt.Errorf("%w: claim needs an owner and a positive lease", ErrInvalid)
	}
	from := StatusReceived
	var old Event
	for range 3 {
		c, cur, err := l.claimFrom(ctx, source, eventID, from, old, o)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, errCondition) {
			return Claim{}, err
		}
		if cur == nil {
			return Claim{}, fmt.Errorf("claim %s/%s: %w", source, eventID, ErrNotFound)
		}
		old = *cur
		now := l.now()
		switch old.Status {
		case StatusReceived:
			from = StatusReceived
		case StatusRetryWait:
			if old.NextAttemptAt.After(now) {
				return Claim{}, &NotClaimableError{Event: old, Why: "retry not due until " + old.NextAttemptAt.Format(time.RFC3339Nano)}
			}
			from = StatusRetryWait
		case StatusProcessing:
			if !old.LeaseExpires.Before(now) {
				return Claim{}, &NotClaimableError{Event: old, Why: "leased by " + old.LeaseOwner + " until " + old.LeaseExpires.Format(time.RFC3339Nano)}
			}
			from = StatusProcessing
		case StatusDead:
			if !o.AllowRedrive {
				return Claim{}, &NotClaimableError{Event: old, Why: "dead; needs a redrive or replay"}
			}
			from = StatusDead
		default:
			return Claim{}, &NotClaimableError{Event: old, Why: "finished"}
		}
	}
	return Claim{}, fmt.Errorf("claim %s/%s: state kept changing: %w", source, eventID, ErrConflict)
}

// errCondition marks a failed condition inside this package.
var errCondition = errors.New("condition failed")

func (l *Ledger) claimFrom(ctx context.Context, source, eventID string, from Status, old Event, o ClaimOptions) (Claim, *Event, error) {
	now := l.now()
	token := l.opts.Tokens()
	expires := now.Add(o.Lease)
	action, reason := "claim", ""
	vals := map[string]types.AttributeValue{
		":from":  sv(string(from)),
		":proc":  sv(string(StatusProcessing)),
		":owner": sv(truncate(o.Owner, MaxIDLength)),
		":tok":   sv(token),
		":exp":   nv(ms(expires)),
		":one":   nv(1),
		":shard": sv(l.dueShard(source, eventID)),
	}
	cond := "#status = :from"
	attempts := "attempts = attempts + :one"
	switch from {
	case StatusRetryWait:
		cond += " AND next_attempt_at <= :now"
		vals[":now"] = nv(ms(now))
		action = "retry"
	case StatusProcessing:
		cond += " AND lease_token = :oldtok AND lease_expires_at < :now"
		vals[":now"] = nv(ms(now))
		vals[":oldtok"] = sv(old.LeaseToken)
		action, reason = "takeover", "lease of "+old.LeaseOwner+" expired at "+old.LeaseExpires.Format(time.RFC3339Nano)
	case StatusDead:
		attempts = "attempts = :one"
		action, reason = "redrive", "message redriven from the dead-letter queue"
	}
	vals[":audit"] = auditValue(now, from, StatusProcessing, o.Owner, action, reason)

	out, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(l.opts.Table),
		Key:       eventKey(source, eventID),
		UpdateExpression: aws.String("SET #status = :proc, lease_owner = :owner, lease_token = :tok, lease_expires_at = :exp, " +
			"due_shard = :shard, " + attempts + ", total_attempts = total_attempts + :one, " +
			"audit = list_append(audit, :audit) REMOVE next_attempt_at"),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            map[string]string{"#status": "status"},
		ExpressionAttributeValues:           vals,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil {
		if cur, failed := conditionFailed(err); failed {
			return Claim{}, cur, errCondition
		}
		return Claim{}, nil, fmt.Errorf("claim %s/%s: %w", source, eventID, translate(err))
	}
	ev, err := decodeEvent(out.Attributes)
	if err != nil {
		return Claim{}, nil, err
	}
	return Claim{Event: ev, Owner: o.Owner, Token: token, Expires: expires, From: from, Redrive: from == StatusDead}, nil, nil
}
