package outbox_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/effectively-once/webhooks/internal/harness/downstream"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/queue"
)

// strictVisibility follows SQS's documented rule for
// ChangeMessageVisibility, which goaws does not enforce (it only refuses
// more than 43,200 s): a message may stay invisible at most 12 hours from
// the receive that made it in flight; a call that would keep it
// invisible longer is refused, not shortened. It records every call.
type strictVisibility struct {
	now      func() time.Time
	received map[string]time.Time // receipt handle -> when this receive happened
	mu       sync.Mutex
	calls    []visibilityCall
}

type visibilityCall struct {
	handle  string
	seconds int32
	refused bool
}

func (v *strictVisibility) ChangeMessageVisibility(_ context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	h := aws.ToString(in.ReceiptHandle)
	until := v.now().Add(time.Duration(in.VisibilityTimeout) * time.Second)
	refused := in.VisibilityTimeout < 0 || in.VisibilityTimeout > 43200 || until.After(v.received[h].Add(12*time.Hour))
	v.calls = append(v.calls, visibilityCall{handle: h, seconds: in.VisibilityTimeout, refused: refused})
	if refused {
		return nil, &smithy.GenericAPIError{Code: "InvalidParameterValue", Message: "Value for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]"}
	}
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

// lambdaRecord is an effects-queue record as the Lambda event carries it:
// the first receive as ApproximateFirstReceiveTimestamp (epoch ms).
func lambdaRecord(id, body string, firstReceive time.Time) events.SQSMessage {
	r := record(id, body)
	r.Attributes = map[string]string{"ApproximateFirstReceiveTimestamp": strconv.FormatInt(firstReceive.UnixMilli(), 10), "ApproximateReceiveCount": "1"}
	return r
}

// A waiting intent's message is held only for what SQS accepts and at
// most outbox.MaxHold; a longer wait (a long Retry-After) is acknowledged
// and left to the ledger. Before, the consumer asked for min(wait, 12 h)
// from now, which SQS refuses once any time has passed since the receive,
// and carried any Retry-After in the queue.
func TestConsumerHoldsOnlyWhatSQSAllows(t *testing.T) {
	ptr := queue.IntentPointer{OperationID: op, Reason: "commit"}.Encode()
	for _, tc := range []struct {
		name                  string
		retryAfter            time.Duration
		firstReceive, receive time.Duration // before the dispatch
		held                  int32         // seconds asked for; 0: no call, the message is acknowledged
	}{
		{name: "Retry-After 40 min, received just now", retryAfter: 40 * time.Minute, firstReceive: 5 * time.Second, receive: 5 * time.Second, held: 2400},
		{name: "Retry-After 40 min, received again, first 3 h ago", retryAfter: 40 * time.Minute, firstReceive: 3 * time.Hour, receive: 10 * time.Second, held: 2400},
		{name: "Retry-After 40 min, received 11.5 h ago", retryAfter: 40 * time.Minute, firstReceive: 11*time.Hour + 30*time.Minute, receive: 11*time.Hour + 30*time.Minute},
		{name: "Retry-After 2 h", retryAfter: 2 * time.Hour, firstReceive: 5 * time.Second, receive: 5 * time.Second},
		{name: "Retry-After 13 h", retryAfter: 13 * time.Hour, firstReceive: 5 * time.Second, receive: 5 * time.Second},
		{name: "Retry-After 10 years", retryAfter: 10 * 365 * 24 * time.Hour, firstReceive: 5 * time.Second, receive: 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := setup(t)
			now := e.Clock.Now()
			sq := &strictVisibility{now: e.Clock.Now, received: map[string]time.Time{"rh-m1": now.Add(-tc.receive)}}
			c := &outbox.Consumer{Dispatcher: e.D, SQS: sq, QueueURL: "http://queue.local/effects", ReceiveClock: e.Clock, Log: slog.New(slog.DiscardHandler)}
			e.Down.Then(downstream.Behavior{Mode: downstream.Throttle429, RetryAfter: tc.retryAfter})
			resp, _ := c.HandleSQS(ctx, events.SQSEvent{Records: []events.SQSMessage{lambdaRecord("m1", ptr, now.Add(-tc.firstReceive))}})

			for _, call := range sq.calls {
				if call.refused {
					t.Fatalf("SQS would refuse ChangeMessageVisibility(%d s) %s after the receive (12 h at most)", call.seconds, tc.receive)
				}
			}
			st, err := e.L.GetIntentState(ctx, op)
			// A Retry-After is honoured up to outbox.MaxRetryAfter (a day).
			if err != nil || st.Status != ledger.IntentStatusRetryWait || st.NextAttemptAt.Before(now.Add(min(tc.retryAfter, outbox.MaxRetryAfter))) {
				t.Fatalf("intent %s next %s, want RETRY_WAIT not before the Retry-After (%v)", st.Status, st.NextAttemptAt, err)
			}
			switch {
			case tc.held > 0 && (len(sq.calls) != 1 || sq.calls[0].seconds != tc.held || len(resp.BatchItemFailures) != 1):
				t.Fatalf("want the message held %d s and retried; calls %+v, failures %+v", tc.held, sq.calls, resp.BatchItemFailures)
			case tc.held == 0 && (len(sq.calls) != 0 || len(resp.BatchItemFailures) != 0):
				t.Fatalf("want the message acknowledged, the wait left to the ledger; calls %+v, failures %+v", sq.calls, resp.BatchItemFailures)
			}
		})
	}
}

// announcements records what AnnounceDue sends.
type announcements struct{ ops []string }

func (a *announcements) SendIntents(_ context.Context, ps []queue.IntentPointer) ([]string, error) {
	for _, p := range ps {
		a.ops = append(a.ops, p.OperationID)
	}
	return nil, nil
}

// The later life of a message whose wait is too long for the queue: it is
// acknowledged, the intent waits in the ledger, the reconciler's
// AnnounceDue announces it again once due (not before), and the new
// pointer performs the effect once.
func TestLongWaitIsCarriedByTheLedgerAndAnnouncedWhenDue(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	sq := &strictVisibility{now: e.Clock.Now, received: map[string]time.Time{"rh-m1": e.Clock.Now()}}
	c := &outbox.Consumer{Dispatcher: e.D, SQS: sq, QueueURL: "http://queue.local/effects", ReceiveClock: e.Clock, Log: slog.New(slog.DiscardHandler)}
	ptr := queue.IntentPointer{OperationID: op, Reason: "commit"}.Encode()

	e.Down.Then(downstream.Behavior{Mode: downstream.Throttle429, RetryAfter: 3 * time.Hour})
	resp, _ := c.HandleSQS(ctx, events.SQSEvent{Records: []events.SQSMessage{lambdaRecord("m1", ptr, e.Clock.Now())}})
	if len(resp.BatchItemFailures) != 0 || len(sq.calls) != 0 {
		t.Fatalf("a 3 h wait: failures %+v visibility calls %+v; want the message acknowledged", resp.BatchItemFailures, sq.calls)
	}
	stuckAfter := 5 * time.Minute // the reconciler's default
	announce := func() []string {
		t.Helper()
		a := &announcements{}
		if _, err := outbox.AnnounceDue(ctx, e.L, a, e.Clock.Now().Add(-stuckAfter), 100, "reconcile"); err != nil {
			t.Fatal(err)
		}
		return a.ops
	}
	e.Clock.Advance(2 * time.Hour)
	if got := announce(); len(got) != 0 {
		t.Fatalf("announced before its Retry-After: %v", got)
	}
	e.Clock.Advance(time.Hour + stuckAfter + time.Second)
	got := announce()
	if len(got) != 1 || got[0] != op {
		t.Fatalf("announced once due: %v, want [%s]", got, op)
	}
	again := queue.IntentPointer{OperationID: op, Reason: "reconcile"}.Encode()
	resp, _ = c.HandleSQS(ctx, events.SQSEvent{Records: []events.SQSMessage{lambdaRecord("m2", again, e.Clock.Now())}})
	st, err := e.L.GetIntentState(ctx, op)
	if err != nil || st.Status != ledger.IntentStatusSucceeded || len(resp.BatchItemFailures) != 0 || e.Down.Effective(op) != 1 {
		t.Fatalf("after the announcement: intent %s (%v), failures %+v, effective calls %d", st.Status, err, resp.BatchItemFailures, e.Down.Effective(op))
	}
}
