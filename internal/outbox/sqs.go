package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/metrics"
	"github.com/effectively-once/webhooks/internal/queue"
)

// Visibility is the part of the SQS client the consumer uses to hold back a
// waiting intent's message until the intent is due.
type Visibility interface {
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

var _ Visibility = (*sqs.Client)(nil)

// Consumer is the dispatcher Lambda's handler for the effects queue.
//
// Per message: a finished intent (SUCCEEDED, FAILED, QUARANTINED) or a
// message that is not an intent pointer is acknowledged; a waiting intent
// (RETRY_WAIT, UNCERTAIN, not yet due, or leased by another dispatcher) is
// reported as a batch item failure and its message is made invisible until
// the intent is due, so the queue carries the backoff. Messages are
// dispatched concurrently: every effect has its own timeout, and a batch
// must finish inside the function's timeout.
//
// The queue carries a wait of at most MaxHold, and never past what SQS
// allows for the message (MaxVisibility from its receive). A longer wait
// (a Retry-After of hours, say) is not carried by the message: it is
// acknowledged, and the intent waits in the ledger (RETRY_WAIT or
// UNCERTAIN on the due index, due at its next time), where the
// reconciler finds it once due (AnnounceDue, run with `before` StuckAfter
// in the past: so such an intent is announced again up to StuckAfter plus
// one schedule period after its time). Held for hours instead, the
// message would come back again and again, each receive counting towards
// maxReceiveCount, and could not be held past 12 hours from a receive
// anyway.
type Consumer struct {
	Dispatcher *Dispatcher
	// SQS and QueueURL are optional; without them a waiting message comes
	// back after the queue's visibility timeout instead.
	SQS      Visibility
	QueueURL string
	// ReceiveClock is compared with the message's receive timestamp, which
	// SQS stamps with its own clock (the wall clock); the dispatcher's clock
	// says when an intent is due. Default: the wall clock.
	ReceiveClock ledger.Clock
	Log          *slog.Logger
	// Metrics receives one EMF record per dispatch that recorded an
	// outcome: EffectsSucceeded, EffectsFailed, EffectsUncertain,
	// EffectsRetryWait, EffectsQuarantined, EffectsSuperseded,
	// EffectsObsolete (ended without a call: the truth moved on),
	// EffectsContradicted (performed while a newer revision removed its
	// reason: an attention item), EffectsScopeRefused (QUARANTINED without
	// a call because the intent's scope may not use its effect: another
	// source's fact tried to reach the endpoint) and DispatchLatencyMs.
	// The record's properties name the intent's kind, scope and source.
	Metrics *metrics.Emitter
}

// MaxVisibility is SQS's limit on a message's visibility: 12 hours
// counted from the receive, not from the ChangeMessageVisibility call. A
// call that would keep the message invisible past that is refused (SQS
// does not shorten it to what is left).
const MaxVisibility = 12 * time.Hour

// MaxHold is the longest wait a waiting intent's message carries (its
// visibility timeout, whatever the downstream's Retry-After or the
// backoff asked). A longer wait is left to the ledger: see Consumer.
const MaxHold = time.Hour

// receiveSkew is taken off what is left of MaxVisibility: the receive
// timestamp is SQS's clock, the hold is computed with ours.
const receiveSkew = time.Minute

// HandleSQS processes a batch and reports the messages to retry. It never
// returns an error: that would redeliver the whole batch.
func (c *Consumer) HandleSQS(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	retry := make([]bool, len(ev.Records))
	var wg sync.WaitGroup
	for i, r := range ev.Records {
		wg.Add(1)
		go func() {
			defer wg.Done()
			retry[i] = !c.handle(ctx, r)
		}()
	}
	wg.Wait()
	var resp events.SQSEventResponse
	for i, r := range ev.Records {
		if retry[i] {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.MessageId})
		}
	}
	return resp, nil
}

func (c *Consumer) log() *slog.Logger {
	if c.Log == nil {
		return slog.Default()
	}
	return c.Log
}

// handle returns true to acknowledge (delete) the message.
func (c *Consumer) handle(ctx context.Context, r events.SQSMessage) (ack bool) {
	start := c.Dispatcher.now()
	log := c.log().With("message_id", r.MessageId)
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		log = log.With("request_id", lc.AwsRequestID)
	}
	defer func() {
		if p := recover(); p != nil {
			log.Error("panic while dispatching; message will be retried", "panic", fmt.Sprint(p))
			ack = false
		}
	}()
	ptr, err := queue.ParseIntentPointer(r.Body)
	if err != nil {
		// Not a message this system wrote. The ledger, not the queue, is the
		// record of intents, so nothing is lost by dropping it.
		log.Error("dropping malformed message", "err", err)
		return true
	}
	log = log.With("operation_id", ptr.OperationID, "reason", ptr.Reason)
	o, err := c.Dispatcher.Dispatch(ctx, ptr.OperationID)
	var nc *ledger.IntentNotClaimableError
	switch {
	case errors.As(err, &nc) && nc.Intent.Status.Terminal():
		log.Info("intent already finished; acknowledging", "intent_status", nc.Intent.Status)
		return true
	case errors.As(err, &nc):
		due := nc.Intent.NextAttemptAt
		switch nc.Intent.Status {
		case ledger.IntentStatusUncertain:
			due = nc.Intent.NextCheckAt
		case ledger.IntentStatusDispatching:
			due = nc.Intent.LeaseExpires
		}
		log.Info("intent not claimable now; will retry", "why", nc.Why)
		return c.delay(ctx, r, due, log)
	case errors.Is(err, ledger.ErrNotFound):
		log.Error("pointer to an intent the ledger does not hold; dropping", "err", err)
		return true
	case errors.Is(err, ledger.ErrLeaseLost):
		log.Warn("lease lost while recording; the new holder finishes the intent", "err", err)
		return false
	case err != nil:
		log.Warn("dispatch failed; will retry", "err", err)
		return false
	}
	took := c.Dispatcher.now().Sub(start)
	attrs := []any{"intent_status", o.Status, "code", o.Code, "kind", o.Kind, "scope", o.Scope, "source", o.Source,
		"attempts", o.Attempts, "called", o.Called, "duration_ms", took.Milliseconds()}
	is := func(st ledger.IntentStatus) int {
		if o.Status == st {
			return 1
		}
		return 0
	}
	refused := 0
	if o.Status == ledger.IntentStatusQuarantined && o.Code == CodeScopeNotAllowed {
		refused = 1
	}
	c.Metrics.Emit(map[string]any{"function": "dispatcher", "operation_id": ptr.OperationID, "intent_status": string(o.Status), "code": o.Code,
		"kind": o.Kind, "scope": o.Scope, "source": o.Source, "called": o.Called},
		metrics.N("EffectsSucceeded", is(ledger.IntentStatusSucceeded)), metrics.N("EffectsFailed", is(ledger.IntentStatusFailed)),
		metrics.N("EffectsUncertain", is(ledger.IntentStatusUncertain)), metrics.N("EffectsRetryWait", is(ledger.IntentStatusRetryWait)),
		metrics.N("EffectsQuarantined", is(ledger.IntentStatusQuarantined)),
		metrics.N("EffectsSuperseded", is(ledger.IntentStatusSuperseded)), metrics.N("EffectsObsolete", is(ledger.IntentStatusObsolete)),
		metrics.N("EffectsContradicted", is(ledger.IntentStatusContradicted)),
		metrics.N("EffectsScopeRefused", refused),
		metrics.Latency("DispatchLatencyMs", took))
	if refused == 1 {
		log.Error("an intent's scope may not use its effect; quarantined without a call", attrs...)
		return true
	}
	if o.Err != nil {
		attrs = append(attrs, "err", o.Err)
	}
	if o.Status.Terminal() {
		log.Info("dispatched", attrs...)
		return true
	}
	log.Warn("dispatched; waiting", append(attrs, "next", o.Next)...)
	return c.delay(ctx, r, o.Next, log)
}

// delay makes the message invisible until due, when the queue can carry
// that wait (at most MaxHold, and within MaxVisibility of the receive),
// and returns false: retry the message then. A longer wait returns true:
// acknowledge the message, the intent waits in the ledger (see Consumer).
// Holding is best effort: on failure the queue's own visibility timeout
// applies and the intent re-checks its time.
func (c *Consumer) delay(ctx context.Context, r events.SQSMessage, due time.Time, log *slog.Logger) (ack bool) {
	if due.IsZero() {
		return false
	}
	wait := due.Sub(c.Dispatcher.now())
	if limit := c.holdLimit(r); wait > limit {
		log.Info("wait longer than the message may be held; acknowledged, the intent waits in the ledger until the reconciler announces it",
			"due", due, "wait_s", int64(wait/time.Second), "hold_limit_s", int64(limit/time.Second))
		return true
	}
	if c.SQS == nil || c.QueueURL == "" || r.ReceiptHandle == "" {
		return false
	}
	secs := int32(max((wait+time.Second-1)/time.Second, 1))
	if _, err := c.SQS.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(c.QueueURL), ReceiptHandle: aws.String(r.ReceiptHandle), VisibilityTimeout: secs,
	}); err != nil {
		log.Warn("could not delay the message; the queue's visibility timeout applies", "err", err)
	}
	return false
}

// holdLimit is the longest this message may be kept invisible from now:
// MaxHold, or less when the message's MaxVisibility runs out sooner.
//
// SQS counts MaxVisibility from the receive that made the message in
// flight, and the Lambda event does not carry that time: it carries
// ApproximateFirstReceiveTimestamp, the message's first receive, which is
// no later than this one. Counting from it overestimates the time since
// this receive, so the limit errs on the short side (a message first
// received 11.5 hours ago is not held for an hour even if it was received
// again a minute ago: it is acknowledged and the ledger carries the wait).
// Without the attribute (not a Lambda event) the message is taken as just
// received: MaxHold still leaves 11 hours between the receive and this
// call, which happens while the receipt is in flight (within the queue's
// visibility timeout, minutes).
func (c *Consumer) holdLimit(r events.SQSMessage) time.Duration {
	limit := MaxHold
	ms, err := strconv.ParseInt(r.Attributes["ApproximateFirstReceiveTimestamp"], 10, 64)
	if err != nil {
		return limit
	}
	var clock ledger.Clock = ledger.SystemClock{}
	if c.ReceiveClock != nil {
		clock = c.ReceiveClock
	}
	since := max(clock.Now().Sub(time.UnixMilli(ms)), 0)
	return min(limit, MaxVisibility-since-receiveSkew)
}
