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
	// Message and Letter are ClaimOptions' own: the message the claim
	// came from, which Dead records (see ClaimOptions).
	Message, Letter string
}

// NotClaimableError says why an event could not be claimed, with the event as
// it stands, so the caller can decide (acknowledge a processed event, retry
// later while another worker holds a live lease).
type NotClaimableError struct {
	Event Event
	Why   string
	// InFlightToDLQ: the event is DEAD and this is the very message Dead
	// recorded, received again before SQS moved it to the dead-letter
	// queue. Not acknowledging it lets it go on there, where a console
	// redrive can bring it back.
	InFlightToDLQ bool
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
	// Message is the SQS message id the claim comes from, and Letter the
	// pointer id its body carries (queue.Pointer.ID, minted once per send).
	// They decide what a DEAD event does with the message:
	//
	//   - a redrive: Letter is one of the event's dead letters (the pointer
	//     ids Dead and GiveUp recorded of messages that went to the DLQ)
	//     and Message is not the one Dead recorded. A console redrive
	//     sends a dead letter's body back as a new message with a new
	//     message id (SQS: "All redriven messages are considered new
	//     messages and are assigned a new messageID"), so that is what a
	//     message back from the DLQ looks like. The claim starts a new
	//     round, audited as a redrive naming the letter. (The letters
	//     stay on the row, one per message that ever reached the DLQ;
	//     see the package doc.)
	//   - Message is the one Dead recorded: the dead event's own message,
	//     received again before SQS moved it on (NotClaimableError with
	//     InFlightToDLQ).
	//   - anything else (a second pointer: an intake duplicate, a
	//     reconciler re-enqueue, a replay's pointer that arrives late, a
	//     pointer without an id): NotClaimableError; the
	//     event stays DEAD and its audit unchanged. Only a redrive or an
	//     operator's Replay reopens it.
	Message, Letter string
	// AllowRedrive claims a DEAD event whatever the message, audited as a
	// redrive: for a caller that vouches for the redrive itself (tests,
	// tools). The processor never sets it.
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
		c, raw, err := l.claimFrom(ctx, source, eventID, from, old, o)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, errCondition) {
			return Claim{}, err
		}
		if _, ok := raw["status"]; !ok {
			// The refusal returned no item (see the package doc): read it.
			if raw, err = l.getItem(ctx, eventKey(source, eventID), "event "+source+"/"+eventID); err != nil {
				return Claim{}, fmt.Errorf("claim %s/%s: %w", source, eventID, err)
			}
		}
		if old, err = decodeEvent(raw); err != nil {
			return Claim{}, fmt.Errorf("claim %s/%s: %w", source, eventID, err)
		}
		if own, ok := ownClaim(old, c.Token, from, o); ok {
			return own, nil
		}
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
			letters, dying := deadLetters(raw)
			switch {
			case o.AllowRedrive:
			case o.Message != "" && o.Message == dying:
				return Claim{}, &NotClaimableError{Event: old, InFlightToDLQ: true,
					Why: "dead; this is its own message, on its way to the dead-letter queue"}
			case o.Letter == "" || !slices.Contains(letters, o.Letter):
				return Claim{}, &NotClaimableError{Event: old,
					Why: "dead; a message that did not come back from the dead-letter queue does not reopen it (a redrive of its dead letter or a replay does)"}
			}
			from = StatusDead
		default:
			return Claim{}, &NotClaimableError{Event: old, Why: "finished"}
		}
	}
	return Claim{}, fmt.Errorf("claim %s/%s: state kept changing: %w", source, eventID, ErrConflict)
}

// ownClaim recognizes a claim refused because it was already applied: an
// earlier attempt of the same request took the lease, its answer was lost,
// and the SDK sent the request again (it retries a reset connection or a
// 500, and a write may have been applied before either). The lease token is
// new for every claim request and the SDK resends the same request, so the
// item holding that token in PROCESSING proves it. Without this the worker
// would take its own lease for someone else's, leave the message, and wait
// for its own lease to expire.
func ownClaim(cur Event, tried string, from Status, o ClaimOptions) (Claim, bool) {
	if tried == "" || cur.Status != StatusProcessing || cur.LeaseToken != tried {
		return Claim{}, false
	}
	return Claim{Event: cur, Owner: o.Owner, Token: tried, Expires: cur.LeaseExpires, From: from, Redrive: from == StatusDead,
		Message: o.Message, Letter: o.Letter}, true
}

// errCondition marks a failed condition inside this package.
var errCondition = errors.New("condition failed")

// deadLetters reads what Dead and GiveUp recorded on an event item: the
// pointer ids of its messages that went to the DLQ, and the message id
// Dead left to go there.
func deadLetters(item map[string]types.AttributeValue) (letters []string, message string) {
	if v, ok := item[attrDeadLetters].(*types.AttributeValueMemberSS); ok {
		letters = v.Value
	}
	if v, ok := item[attrDeadMessage].(*types.AttributeValueMemberS); ok {
		message = v.Value
	}
	return letters, message
}

// The attributes of a DEAD event's dead letters (see ClaimOptions): a
// string set of pointer ids, and one message id.
const (
	attrDeadLetters = "dead_letters"
	attrDeadMessage = "dead_message"
)

// claimFrom tries one claim, conditioned on the event being in from (and,
// from DEAD, on the message being one of its dead letters). A refused
// claim returns errCondition and the item as the store sent it back.
func (l *Ledger) claimFrom(ctx context.Context, source, eventID string, from Status, old Event, o ClaimOptions) (Claim, map[string]types.AttributeValue, error) {
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
	names := map[string]string{"#status": "status"}
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
		if !o.AllowRedrive {
			// Only a dead letter, and not the message Dead left to go
			// there.
			cond += " AND contains(#letters, :letter)"
			names["#letters"] = attrDeadLetters
			vals[":letter"] = sv(o.Letter)
			if o.Message != "" {
				cond += " AND (attribute_not_exists(#dying) OR #dying <> :mid)"
				names["#dying"] = attrDeadMessage
				vals[":mid"] = sv(o.Message)
			}
			reason = fmt.Sprintf("message redriven from the dead-letter queue (dead letter %s, now message %s)", truncate(o.Letter, 64), truncate(o.Message, 128))
		}
	}
	vals[":audit"] = auditValue(now, from, StatusProcessing, o.Owner, action, reason)

	out, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(l.opts.Table),
		Key:       eventKey(source, eventID),
		UpdateExpression: aws.String("SET #status = :proc, lease_owner = :owner, lease_token = :tok, lease_expires_at = :exp, " +
			"due_shard = :shard, " + attempts + ", total_attempts = total_attempts + :one, " +
			"audit = list_append(audit, :audit) REMOVE next_attempt_at"),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           vals,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			// The token tried, for Claim to recognize this very request
			// in the item (see ownClaim).
			return Claim{Token: token}, ccf.Item, errCondition
		}
		return Claim{}, nil, fmt.Errorf("claim %s/%s: %w", source, eventID, translate(err))
	}
	ev, err := decodeEvent(out.Attributes)
	if err != nil {
		return Claim{}, nil, err
	}
	return Claim{Event: ev, Owner: o.Owner, Token: token, Expires: expires, From: from, Redrive: from == StatusDead,
		Message: o.Message, Letter: o.Letter}, nil, nil
}
