package outbox

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// SQSSender is the part of the SQS client SQSEffect uses.
type SQSSender interface {
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

var _ SQSSender = (*sqs.Client)(nil)

// SQSOperationAttribute is the message attribute (String) that carries
// the operation id on every message an SQSEffect sends.
const SQSOperationAttribute = "operation_id"

// SQSEffect sends the call (TargetCall, JSON) as one SQS message with the
// operation id as the message attribute operation_id.
//
// A standard queue does not deduplicate (DedupWindow 0): the consumer must
// be idempotent by operation_id. A FIFO queue (its name ends in .fifo)
// gets MessageDeduplicationId = the operation id (DeduplicationID) and
// MessageGroupId = scope and subject (MessageGroupID): SQS accepts a
// second message with the same deduplication id without delivering it
// for 5 minutes (DedupWindow), and delivers one subject's messages in
// order while other subjects' proceed. Neither has a status lookup.
//
// The queue's URL (GetQueueUrl, by name and owner account) and its
// MaximumMessageSize (GetQueueAttributes) are read on first use and again
// every QueueAttributesTTL; a call whose message (body plus attributes)
// is over that size is QUARANTINED (payload_too_large), never truncated.
//
// Classification: success is success; a throttle is retryable; any other
// 4xx (the queue does not exist, access or its KMS key is denied, the
// message is refused) is QUARANTINED (target_refused); a 5xx, or a
// timeout or lost connection after the request was written, is uncertain:
// SQS may have stored the message.
type SQSEffect struct {
	Name   string
	Target Target // an SQS queue ARN
	Client SQSSender
	// Timeout bounds the requests of one call together.
	Timeout time.Duration
	Scopes  []string
	// Now is the clock of the queue attributes' cache; default wall clock.
	Now func() time.Time

	mu       sync.Mutex
	url      string
	maxBytes int
	readAt   time.Time
}

// QueueAttributesTTL is how long SQSEffect trusts the queue's URL and
// MaximumMessageSize it read.
const QueueAttributesTTL = 5 * time.Minute

var (
	_ Effect      = (*SQSEffect)(nil)
	_ ScopeGuard  = (*SQSEffect)(nil)
	_ DedupWindow = (*SQSEffect)(nil)
)

// Kind returns the intent kind.
func (e *SQSEffect) Kind() string { return e.Name }

// AllowsScope: see HTTPEffect.AllowsScope.
func (e *SQSEffect) AllowsScope(scope string) bool { return allowsScope(e.Scopes, scope) }

// DedupWindow is SQS's 5-minute deduplication interval on a FIFO queue,
// 0 on a standard queue.
func (e *SQSEffect) DedupWindow() time.Duration {
	if e.Target.FIFO() {
		return SQSFIFODedupWindow
	}
	return 0
}

func (e *SQSEffect) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// queue returns the queue's URL and its largest message, reading them
// when not known or older than QueueAttributesTTL. Nothing is sent to the
// queue before they are known, so a failure here is retryable (or the
// queue's owner must act).
func (e *SQSEffect) queue(ctx context.Context, key string) (string, int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.url != "" && e.now().Sub(e.readAt) < QueueAttributesTTL {
		return e.url, e.maxBytes, nil
	}
	noRetries := func(o *sqs.Options) { o.Retryer = aws.NopRetryer{} }
	var a awsCall
	cctx, cancel := a.context(ctx, 0)
	defer cancel()
	u, err := e.Client.GetQueueUrl(cctx, &sqs.GetQueueUrlInput{QueueName: aws.String(e.Target.Name),
		QueueOwnerAWSAccountId: aws.String(e.Target.Account)}, noRetries)
	if err != nil {
		return "", 0, e.lookupFailed(key, "GetQueueUrl", err)
	}
	attrs, err := e.Client.GetQueueAttributes(cctx, &sqs.GetQueueAttributesInput{QueueUrl: u.QueueUrl,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameMaximumMessageSize}}, noRetries)
	if err != nil {
		return "", 0, e.lookupFailed(key, "GetQueueAttributes", err)
	}
	limit, err := strconv.Atoi(attrs.Attributes[string(sqstypes.QueueAttributeNameMaximumMessageSize)])
	if err != nil || limit <= 0 {
		return "", 0, &RetryableError{Err: fmt.Errorf("%s: queue %s answered MaximumMessageSize %q", key, e.Target.Name, attrs.Attributes[string(sqstypes.QueueAttributeNameMaximumMessageSize)])}
	}
	e.url, e.maxBytes, e.readAt = aws.ToString(u.QueueUrl), min(limit, MaxSQSMessage), e.now()
	return e.url, e.maxBytes, nil
}

func (e *SQSEffect) lookupFailed(key, op string, err error) error {
	code, status, ok := apiError(err)
	if ok && status >= 400 && status < 500 && !isThrottle(code) && status != http.StatusTooManyRequests {
		return &MisconfiguredError{Code: CodeTargetRefused, Err: fmt.Errorf("%s: %s of queue %s refused (%s, HTTP %d): %s", key, op, e.Target.ARN, code, status, errText(err))}
	}
	return &RetryableError{Err: fmt.Errorf("%s: %s of queue %s (nothing was sent): %s", key, op, e.Target.ARN, errText(err))}
}

// Do sends the message once.
func (e *SQSEffect) Do(ctx context.Context, c Call) (Result, error) {
	body, err := targetJSON(c)
	if err != nil {
		return Result{}, fmt.Errorf("%w: encode %s: %v", ErrPermanent, c.Key, err)
	}
	// Timeout bounds the call's requests together (the queue's attributes
	// when they are read, and the send), so a dispatch stays inside the
	// dispatcher's lease.
	if e.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.Timeout)
		defer cancel()
	}
	url, maxBytes, err := e.queue(ctx, c.Key)
	if err != nil {
		return Result{}, err
	}
	// Every part of a message attribute (name, type and value) counts
	// towards the message's size, with the body.
	size := len(body) + len(SQSOperationAttribute) + len("String") + len(c.Key)
	if size > maxBytes {
		return Result{}, tooLarge(c.Key, size, maxBytes, "queue "+e.Target.Name+" (its MaximumMessageSize)")
	}
	in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(string(body)),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{
			SQSOperationAttribute: {DataType: aws.String("String"), StringValue: aws.String(c.Key)}}}
	if e.Target.FIFO() {
		in.MessageDeduplicationId = aws.String(DeduplicationID(c.Key))
		in.MessageGroupId = aws.String(MessageGroupID(c.Scope, c.Subject))
	}
	var a awsCall
	cctx, cancel := a.context(ctx, 0)
	defer cancel()
	out, err := e.Client.SendMessage(cctx, in, func(o *sqs.Options) { o.Retryer = aws.NopRetryer{} })
	if err != nil {
		return Result{}, e.sendFailed(&a, c.Key, err)
	}
	return Result{StatusCode: http.StatusOK, Detail: "sqs " + e.Target.Name + " message " + aws.ToString(out.MessageId)}, nil
}

func (e *SQSEffect) sendFailed(a *awsCall, key string, err error) error {
	code, status, ok := apiError(err)
	switch {
	case !ok:
		return a.transportError(key, "sqs send", err)
	case isThrottle(code) || status == http.StatusTooManyRequests || code == "KmsThrottled":
		return &RetryableError{Err: fmt.Errorf("%s: %s", key, errText(err))}
	case status >= 400 && status < 500:
		return &MisconfiguredError{Code: CodeTargetRefused, Err: fmt.Errorf("%s: sqs refused the message (%s, HTTP %d); it was not stored: %s", key, code, status, errText(err))}
	default:
		return fmt.Errorf("%w: %s: sqs answered %s (HTTP %d): the message may have been stored: %s", ErrUncertain, key, code, status, errText(err))
	}
}
