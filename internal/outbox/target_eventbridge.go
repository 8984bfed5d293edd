package outbox

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/effectively-once/webhooks/internal/config"
)

// EventPutter is the part of the EventBridge client EventBridgeEffect uses.
type EventPutter interface {
	PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, opts ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error)
}

var _ EventPutter = (*eventbridge.Client)(nil)

// EventBridgeSource is the source of the events an EventBridgeEffect puts
// when its Source is empty (the dispatcher's OUTBOX_EVENT_SOURCE unset);
// their detail-type is the intent kind.
const EventBridgeSource = config.DefaultEventSource

// EventBridgeEffect puts the call as one event on an event bus (PutEvents,
// one entry): source Source (EventBridgeSource when empty), detail-type the intent kind,
// detail the call (TargetCall, with operation_id). Rules on the bus match
// it like any event.
//
// EventBridge does not deduplicate (DedupWindow 0) and cannot say whether
// an event was put: a rule's targets must be idempotent by
// detail.operation_id.
//
// Classification: the entry's EventId is success. A failed entry
// (FailedEntryCount, the entry's ErrorCode) was not put, so it is decided
// by its code as the API reference sorts them: InternalFailure and
// ThrottlingException are retryable; AccessDeniedException,
// NotAuthorizedForSourceException and NotAuthorizedForDetailTypeException
// are QUARANTINED (target_refused: the bus's policy or the role must
// change), as is ResourceNotFoundException (no such bus); InvalidAccountIdException, InvalidArgument, MalformedDetail and
// RedactionFailure are permanent (FAILED); a code the reference does not
// list is retryable (the entry was not put, and attempts are bounded).
// For the request as a whole: a throttle is retryable, another 4xx (the
// bus does not exist, access denied) is QUARANTINED (target_refused), and
// a 5xx or a timeout or lost connection after the request was written is
// uncertain, with no lookup: the intent is QUARANTINED at its next claim.
// An entry of 1 MB or more is QUARANTINED (payload_too_large).
type EventBridgeEffect struct {
	Name   string
	Target Target // an event bus ARN
	Client EventPutter
	// Timeout bounds one PutEvents.
	Timeout time.Duration
	Scopes  []string
	// Source is the events' source: one per pipeline and stage, so a rule
	// on a shared bus can tell them apart (config.CheckEventSource's rule).
	Source string
}

var (
	_ Effect      = (*EventBridgeEffect)(nil)
	_ ScopeGuard  = (*EventBridgeEffect)(nil)
	_ DedupWindow = (*EventBridgeEffect)(nil)
)

// Kind returns the intent kind.
func (e *EventBridgeEffect) Kind() string { return e.Name }

// AllowsScope: see HTTPEffect.AllowsScope.
func (e *EventBridgeEffect) AllowsScope(scope string) bool { return allowsScope(e.Scopes, scope) }

// DedupWindow is 0: EventBridge puts every entry it accepts.
func (e *EventBridgeEffect) DedupWindow() time.Duration { return 0 }

// EntrySize is a PutEvents entry's size as EventBridge calculates it:
// Source, DetailType, Detail and each of Resources in UTF-8 bytes, and 14
// bytes for Time when it is set.
func EntrySize(en ebtypes.PutEventsRequestEntry) int {
	n := len(aws.ToString(en.Source)) + len(aws.ToString(en.DetailType)) + len(aws.ToString(en.Detail))
	for _, r := range en.Resources {
		n += len(r)
	}
	if en.Time != nil {
		n += 14
	}
	return n
}

// Do puts the event once.
func (e *EventBridgeEffect) Do(ctx context.Context, c Call) (Result, error) {
	detail, err := targetJSON(c)
	if err != nil {
		return Result{}, fmt.Errorf("%w: encode %s: %v", ErrPermanent, c.Key, err)
	}
	src := e.Source
	if src == "" {
		src = EventBridgeSource
	}
	entry := ebtypes.PutEventsRequestEntry{EventBusName: aws.String(e.Target.ARN), Source: aws.String(src),
		DetailType: aws.String(c.Kind), Detail: aws.String(string(detail))}
	if size := EntrySize(entry); size >= MaxEventBridgeEntry {
		return Result{}, tooLarge(c.Key, size, MaxEventBridgeEntry-1, "a PutEvents entry")
	}
	var a awsCall
	cctx, cancel := a.context(ctx, e.Timeout)
	defer cancel()
	out, err := e.Client.PutEvents(cctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{entry}},
		func(o *eventbridge.Options) { o.Retryer = aws.NopRetryer{} })
	if err != nil {
		return Result{}, e.requestFailed(&a, c.Key, err)
	}
	if len(out.Entries) != 1 {
		return Result{}, fmt.Errorf("%w: %s: PutEvents answered %d entries for 1 (FailedEntryCount %d)", ErrUncertain, c.Key, len(out.Entries), out.FailedEntryCount)
	}
	r := out.Entries[0]
	if r.ErrorCode == nil && r.EventId != nil && out.FailedEntryCount == 0 {
		return Result{StatusCode: http.StatusOK, Detail: "event " + aws.ToString(r.EventId) + " on " + e.Target.Name}, nil
	}
	return Result{}, entryFailed(c.Key, aws.ToString(r.ErrorCode), aws.ToString(r.ErrorMessage))
}

// entryFailed classifies a failed PutEvents entry: it was not put.
func entryFailed(key, code, msg string) error {
	err := fmt.Errorf("%s: the entry was not put: %s: %s", key, code, truncate(msg, MaxDetail))
	switch code {
	case "AccessDeniedException", "NotAuthorizedForSourceException", "NotAuthorizedForDetailTypeException",
		"ResourceNotFoundException": // the bus does not exist (a code the reference does not list for entries)
		return &MisconfiguredError{Code: CodeTargetRefused, Err: err}
	case "InvalidAccountIdException", "InvalidArgument", "MalformedDetail", "RedactionFailure":
		return fmt.Errorf("%w: %v", ErrPermanent, err)
	default: // InternalFailure, ThrottlingException, and codes the reference does not list
		return &RetryableError{Err: err}
	}
}

func (e *EventBridgeEffect) requestFailed(a *awsCall, key string, err error) error {
	code, status, ok := apiError(err)
	switch {
	case !ok:
		return a.transportError(key, "eventbridge put", err)
	case isThrottle(code) || status == http.StatusTooManyRequests:
		return &RetryableError{Err: fmt.Errorf("%s: %s", key, errText(err))}
	case status >= 400 && status < 500:
		return &MisconfiguredError{Code: CodeTargetRefused, Err: fmt.Errorf("%s: eventbridge refused PutEvents (%s, HTTP %d); nothing was put: %s", key, code, status, errText(err))}
	default:
		return fmt.Errorf("%w: %s: eventbridge answered %s (HTTP %d): the event may have been put: %s", ErrUncertain, key, code, status, errText(err))
	}
}
