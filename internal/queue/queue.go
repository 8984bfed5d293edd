// Package queue provides the SQS side of the pipeline: the small pointer
// message that names an accepted event (never its payload), a sender, and
// the queue specifications (visibility timeout, maxReceiveCount, DLQ) that
// the CDK stack and the local stack both take from here.
package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Errors.
var (
	// ErrBadPointer: a message body that is not a pointer this code wrote.
	ErrBadPointer = errors.New("queue: malformed pointer message")
	// ErrUnavailable: SQS failed or throttled; retryable.
	ErrUnavailable = errors.New("queue: unavailable")
)

// Pointer names one ledger event. It is all a message carries.
type Pointer struct {
	V       int    `json:"v"`
	Source  string `json:"source"`
	EventID string `json:"event_id"`
	// Reason says why it was sent: "accept", "duplicate", "replay", "reconcile".
	Reason string `json:"reason,omitempty"`
	// ID names this one send (Sender mints it when empty). A message SQS
	// moves to the dead-letter queue keeps its body, and a console redrive
	// sends that body back as a new message (new message id): the ledger
	// records the ids of an event's dead letters, so the processor tells a
	// message back from the DLQ, which may reopen a DEAD event, from any
	// other pointer to it, which may not (ledger.ClaimOptions).
	ID string `json:"id,omitempty"`
}

// NewPointerID mints a pointer id: 96 random bits, hex.
func NewPointerID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// MaxPointerBytes bounds what ParsePointer reads.
const MaxPointerBytes = 2048

// Encode renders the pointer as a message body.
func (p Pointer) Encode() string {
	p.V = 1
	b, _ := json.Marshal(p)
	return string(b)
}

// ParsePointer decodes a message body.
func ParsePointer(body string) (Pointer, error) {
	if len(body) > MaxPointerBytes {
		return Pointer{}, fmt.Errorf("%w: %d bytes", ErrBadPointer, len(body))
	}
	var p Pointer
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		return Pointer{}, fmt.Errorf("%w: %v", ErrBadPointer, err)
	}
	if p.V != 1 || p.Source == "" || p.EventID == "" {
		return Pointer{}, fmt.Errorf("%w: missing version, source or event id", ErrBadPointer)
	}
	return p, nil
}

// IntentPointer names one outbox intent by its operation id. It is all an
// effects-queue message carries; the intent itself is in the ledger.
type IntentPointer struct {
	V           int    `json:"v"`
	OperationID string `json:"operation_id"`
	// Reason says why it was sent: "commit", "recover" (a pointer found
	// its event PROCESSED and the intent still PENDING), "reconcile",
	// "drift", "operator".
	Reason string `json:"reason,omitempty"`
}

// Encode renders the pointer as a message body.
func (p IntentPointer) Encode() string {
	p.V = 1
	b, _ := json.Marshal(p)
	return string(b)
}

// ParseIntentPointer decodes an effects-queue message body.
func ParseIntentPointer(body string) (IntentPointer, error) {
	if len(body) > MaxPointerBytes {
		return IntentPointer{}, fmt.Errorf("%w: %d bytes", ErrBadPointer, len(body))
	}
	var p IntentPointer
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		return IntentPointer{}, fmt.Errorf("%w: %v", ErrBadPointer, err)
	}
	if p.V != 1 || p.OperationID == "" {
		return IntentPointer{}, fmt.Errorf("%w: missing version or operation id", ErrBadPointer)
	}
	return p, nil
}

// SQS is the part of the SQS client this package uses.
type SQS interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

var _ SQS = (*sqs.Client)(nil)

// Sender sends pointers to one queue.
type Sender struct {
	Client SQS
	URL    string
}

// Send enqueues one pointer, minting its ID when it has none, and a new ID
// for every attempt after the first (see attempts).
func (s Sender) Send(ctx context.Context, p Pointer) error {
	if p.ID == "" {
		p.ID = NewPointerID()
	}
	err := attempts(ctx, func() { p.ID = NewPointerID() }, func(opt func(*sqs.Options)) error {
		_, err := s.Client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(s.URL), MessageBody: aws.String(p.Encode())}, opt)
		return err
	})
	if err != nil {
		return fmt.Errorf("send %s/%s: %w: %v", p.Source, p.EventID, ErrUnavailable, err)
	}
	return nil
}

// attempts runs send with the SDK's standard retry policy (its attempts,
// backoff and retryable errors) but not with the SDK's retry loop: send gets
// an option that turns that off, and fresh is called before every attempt
// after the first.
//
// The SDK's loop resends the same body. When an attempt reached SQS but
// its answer was lost (a reset connection; the SDK retries it), the queue
// then holds two messages with one pointer ID, and a pointer ID names one
// send: the ledger records the IDs of an event's dead letters, so the second
// message, arriving after the event went DEAD through the first, would look
// like a console redrive of it and reopen the event. With a new ID per
// attempt, a duplicate is just another pointer.
//
// The policy is one for the process, as a client's retryer is: its retry
// quota (a token bucket) stops retries when most calls fail, and a success
// after a retry gives the token back.
func attempts(ctx context.Context, fresh func(), send func(opt func(*sqs.Options)) error) error {
	once := func(o *sqs.Options) { o.RetryMaxAttempts = 1 }
	release := func(error) error { return nil }
	for attempt := 1; ; attempt++ {
		err := send(once)
		if err == nil {
			_ = release(nil)
			return nil
		}
		if attempt >= sendPolicy.MaxAttempts() || !sendPolicy.IsErrorRetryable(err) {
			return err
		}
		rel, qerr := sendPolicy.GetRetryToken(ctx, err)
		if qerr != nil {
			return err // the retry quota is spent: no retry, as the SDK would
		}
		release = rel
		wait, derr := sendPolicy.RetryDelay(attempt, err)
		if derr != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		fresh()
	}
}

// sendPolicy is the SDK's standard retry policy, for attempts.
var sendPolicy = retry.NewStandard()

// MaxBatch is SQS's limit of entries per SendMessageBatch.
const MaxBatch = 10

// SendIntents announces intents, up to MaxBatch per request. It returns the
// operation ids that were not sent (SQS failed or refused the entry) with an
// error; the intents stay PENDING in the ledger and the reconciler announces
// them later, so a failure here delays an effect but never loses it.
func (s Sender) SendIntents(ctx context.Context, ps []IntentPointer) (unsent []string, err error) {
	bodies, ids := make([]string, len(ps)), make([]string, len(ps))
	for i, p := range ps {
		bodies[i], ids[i] = p.Encode(), p.OperationID
	}
	return s.sendBatches(ctx, bodies, ids, nil, "intents")
}

// SendEvents enqueues event pointers in batches (the reconciler's
// re-enqueue), minting the ID of each that has none, and new IDs for every
// attempt of a batch after the first (see attempts). It returns
// "source/event_id" of each pointer not sent.
func (s Sender) SendEvents(ctx context.Context, ps []Pointer) (unsent []string, err error) {
	bodies, ids := make([]string, len(ps)), make([]string, len(ps))
	for i, p := range ps {
		if p.ID == "" {
			p.ID = NewPointerID()
		}
		bodies[i], ids[i] = p.Encode(), p.Source+"/"+p.EventID
	}
	remint := func(i int) string {
		p := ps[i]
		p.ID = NewPointerID()
		return p.Encode()
	}
	return s.sendBatches(ctx, bodies, ids, remint, "events")
}

// sendBatches sends bodies MaxBatch at a time; remint, when not nil, gives
// body i anew for a batch's next attempt.
func (s Sender) sendBatches(ctx context.Context, bodies, ids []string, remint func(i int) string, what string) (unsent []string, err error) {
	var errs []error
	for start := 0; start < len(bodies); start += MaxBatch {
		end := min(start+MaxBatch, len(bodies))
		entries := make([]sqstypes.SendMessageBatchRequestEntry, 0, end-start)
		for i := start; i < end; i++ {
			entries = append(entries, sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i - start)), MessageBody: aws.String(bodies[i])})
		}
		fresh := func() {
			for i := start; i < end && remint != nil; i++ {
				entries[i-start].MessageBody = aws.String(remint(i))
			}
		}
		var out *sqs.SendMessageBatchOutput
		serr := attempts(ctx, fresh, func(opt func(*sqs.Options)) error {
			var err error
			out, err = s.Client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(s.URL), Entries: entries}, opt)
			return err
		})
		if serr != nil {
			unsent = append(unsent, ids[start:end]...)
			errs = append(errs, serr)
			continue
		}
		for _, f := range out.Failed {
			if i, perr := strconv.Atoi(aws.ToString(f.Id)); perr == nil && i >= 0 && start+i < end {
				unsent = append(unsent, ids[start+i])
			}
			errs = append(errs, fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message)))
		}
	}
	if len(unsent) > 0 {
		return unsent, fmt.Errorf("send %d %s: %w: %w", len(unsent), what, ErrUnavailable, errors.Join(errs...))
	}
	return nil, nil
}

// Spec describes a queue with its dead-letter queue.
type Spec struct {
	Name string
	// VisibilityTimeout is at least 6x the consumer's timeout, as AWS advises
	// for Lambda event source mappings.
	VisibilityTimeout time.Duration
	// MaxReceiveCount is how many receives before SQS moves a message to the
	// DLQ; the processor's attempt budget equals it.
	MaxReceiveCount int
	// DLQRetention keeps dead letters for operators (SQS maximum: 14 days).
	DLQRetention time.Duration
}

// DLQName is the dead-letter queue's name.
func (s Spec) DLQName() string { return s.Name + "-dlq" }

// The processor Lambda's timeout; the events queue's visibility is 6x it.
const ProcessorTimeout = 30 * time.Second

// Events is the events queue as deployed (names get a stage prefix).
func Events(prefix string) Spec {
	return Spec{Name: prefix + "events", VisibilityTimeout: 6 * ProcessorTimeout, MaxReceiveCount: 5, DLQRetention: 14 * 24 * time.Hour}
}

// The dispatcher Lambda's timeout: the HTTP effect's own timeout (10 s) plus
// the ledger writes around it, with room to spare. The effects queue's
// visibility is 6x it.
const DispatcherTimeout = 30 * time.Second

// Effects is the effects (outbox) queue as deployed. Its maxReceiveCount is
// above the dispatcher's attempt budget (8) because a receive that finds the
// intent leased elsewhere or not yet due also counts; a message that still
// reaches the DLQ leaves its intent unfinished in the ledger, where the
// reconciler finds it.
func Effects(prefix string) Spec {
	return Spec{Name: prefix + "effects", VisibilityTimeout: 6 * DispatcherTimeout, MaxReceiveCount: 10, DLQRetention: 14 * 24 * time.Hour}
}

// Admin is the part of the SQS client that creates queues.
type Admin interface {
	CreateQueue(ctx context.Context, in *sqs.CreateQueueInput, opts ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// URLs of a created queue pair.
type URLs struct{ Queue, DLQ string }

// Create makes the DLQ and the queue with its redrive policy (for the local
// stack and tests; in AWS the CDK stack owns the queues).
func Create(ctx context.Context, c Admin, s Spec) (URLs, error) {
	dlq, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(s.DLQName()), Attributes: map[string]string{
		"MessageRetentionPeriod": strconv.Itoa(int(s.DLQRetention.Seconds())),
	}})
	if err != nil {
		return URLs{}, fmt.Errorf("create queue %s: %w", s.DLQName(), err)
	}
	attrs, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		return URLs{}, fmt.Errorf("queue arn of %s: %w", s.DLQName(), err)
	}
	policy, _ := json.Marshal(map[string]any{"deadLetterTargetArn": attrs.Attributes["QueueArn"], "maxReceiveCount": s.MaxReceiveCount})
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(s.Name), Attributes: map[string]string{
		"VisibilityTimeout": strconv.Itoa(int(s.VisibilityTimeout.Seconds())),
		"RedrivePolicy":     string(policy),
	}})
	if err != nil {
		return URLs{}, fmt.Errorf("create queue %s: %w", s.Name, err)
	}
	return URLs{Queue: aws.ToString(q.QueueUrl), DLQ: aws.ToString(dlq.QueueUrl)}, nil
}

// DLQClient is the part of the SQS client a dead-letter sweep uses.
type DLQClient interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
}

var _ DLQClient = (*sqs.Client)(nil)

// DefaultDLQWait is how long each receive of a dead-letter sweep
// long-polls (SQS WaitTimeSeconds). Any wait (1 s is SQS's minimum) makes
// SQS look at all its servers for the queue, so an empty answer means the
// DLQ holds no visible message; a short poll (no wait) samples some of
// them and may answer empty while messages wait. A longer wait would only
// wait for letters arriving meanwhile, which the next sweep takes: an
// empty DLQ costs a sweep this long, once.
const DefaultDLQWait = time.Second

// DLQWait is a DLQClient whose sweeps long-poll for Wait instead of
// DefaultDLQWait (whole seconds, 1 to 20, SQS's range). A negative Wait
// short-polls: only for an emulator whose short poll sees every message
// (goaws), never for SQS.
type DLQWait struct {
	DLQClient
	Wait time.Duration
}

// pollWait is the WaitTimeSeconds of one sweep receive: the client's wait
// (DefaultDLQWait unless it is a DLQWait), cut to what the context's
// deadline leaves with a second to spare for the answer. It is an error
// when that leaves less than the one second a long poll needs.
func pollWait(ctx context.Context, c DLQClient) (int32, error) {
	wait := DefaultDLQWait
	if w, ok := c.(DLQWait); ok && w.Wait != 0 {
		wait = w.Wait
	}
	if wait < 0 {
		return 0, nil
	}
	secs := min(max(int32((wait+time.Second-1)/time.Second), 1), 20)
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl) - time.Second
		if left < time.Second {
			return 0, fmt.Errorf("%w: %s left, too little for a long poll", context.DeadlineExceeded, max(time.Until(dl), 0).Round(time.Millisecond))
		}
		secs = min(secs, int32(left/time.Second))
	}
	return secs, nil
}

// SweepDLQ reads up to maxMessages dead letters and asks decide about each
// body: true deletes the message (nothing left to redrive), false keeps it.
// A kept message is hidden for 30 s, so one sweep never sees it twice, and
// then waits for an operator's console redrive. Every receive long-polls
// (see DefaultDLQWait, DLQWait), and the sweep ends at maxMessages or at
// the first empty answer to a long poll: SQS may answer a short poll
// empty while messages wait. It returns how many messages it saw; an
// error from decide or SQS, or a deadline too close for a long poll, ends
// the sweep.
func SweepDLQ(ctx context.Context, c DLQClient, dlqURL string, maxMessages int, decide func(ctx context.Context, body string) (del bool, err error)) (seen int, err error) {
	return SweepDLQMessages(ctx, c, dlqURL, maxMessages, Ask{}, func(ctx context.Context, m sqstypes.Message) (bool, error) {
		return decide(ctx, aws.ToString(m.Body))
	})
}

// Ask names the attributes a sweep's receives ask SQS for; SQS returns
// only those a receive names.
type Ask struct {
	// System are system attributes (SenderId, for one).
	System []sqstypes.MessageSystemAttributeName
	// Message are message attributes, the sender's own.
	Message []string
}

// SweepDLQMessages is SweepDLQ for a decide that needs more than the body:
// each receive asks SQS for the attributes ask names, and decide gets the
// whole message.
func SweepDLQMessages(ctx context.Context, c DLQClient, dlqURL string, maxMessages int, ask Ask, decide func(ctx context.Context, m sqstypes.Message) (del bool, err error)) (seen int, err error) {
	for seen < maxMessages {
		wait, err := pollWait(ctx, c)
		if err != nil {
			return seen, fmt.Errorf("sweep DLQ %s: %w", dlqURL, err)
		}
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(dlqURL), MaxNumberOfMessages: int32(min(10, maxMessages-seen)), VisibilityTimeout: 30,
			WaitTimeSeconds: wait, MessageSystemAttributeNames: ask.System, MessageAttributeNames: ask.Message,
		})
		if err != nil {
			return seen, fmt.Errorf("receive from DLQ %s: %w", dlqURL, err)
		}
		if len(out.Messages) == 0 {
			return seen, nil
		}
		for _, m := range out.Messages {
			seen++
			del, err := decide(ctx, m)
			if err != nil {
				return seen, err
			}
			if !del {
				continue
			}
			if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(dlqURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
				return seen, fmt.Errorf("delete from DLQ %s: %w", dlqURL, err)
			}
		}
	}
	return seen, nil
}
