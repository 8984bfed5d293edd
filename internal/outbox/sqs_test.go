package outbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/harness/downstream"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/metrics"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/queue"
)

// visibilitySpy records ChangeMessageVisibility calls; the queue itself is
// exercised by the pipeline tests on goaws.
type visibilitySpy struct {
	mu    sync.Mutex
	calls map[string]int32
}

func (v *visibilitySpy) ChangeMessageVisibility(_ context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.calls == nil {
		v.calls = map[string]int32{}
	}
	v.calls[aws.ToString(in.ReceiptHandle)] = in.VisibilityTimeout
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

func record(id, body string) events.SQSMessage {
	return events.SQSMessage{MessageId: id, ReceiptHandle: "rh-" + id, Body: body}
}

// The consumer acknowledges finished intents and junk, keeps waiting ones
// with their message hidden until the intent is due, and performs one
// effective call however many pointers name the intent.
func TestConsumerAcksFinishedRetriesWaiting(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	spy := &visibilitySpy{}
	var emf bytes.Buffer
	c := &outbox.Consumer{Dispatcher: e.D, SQS: spy, QueueURL: "http://queue.local/effects", Log: slog.New(slog.DiscardHandler),
		Metrics: metrics.New(&emf, "EffectivelyOnce/test", e.Clock.Now)}
	ptr := queue.IntentPointer{OperationID: op, Reason: "commit"}.Encode()

	// 1. 429 with Retry-After 40s: RETRY_WAIT, message kept, hidden ≥ 40 s.
	e.Down.Then(downstream.Behavior{Mode: downstream.Throttle429, RetryAfter: 40 * time.Second})
	resp, _ := c.HandleSQS(ctx, events.SQSEvent{Records: []events.SQSMessage{record("m1", ptr), record("junk", `{"hello":1}`)}})
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "m1" {
		t.Fatalf("failures %+v: want only m1 (junk is acknowledged)", resp.BatchItemFailures)
	}
	if got := spy.calls["rh-m1"]; got < 40 || got > 41 {
		t.Fatalf("visibility %d s, want the Retry-After (40 s)", got)
	}
	// 2. A duplicate pointer before it is due: not claimable, kept, hidden
	// for the remaining wait; nothing is sent downstream.
	e.Clock.Advance(10 * time.Second)
	resp, _ = c.HandleSQS(ctx, events.SQSEvent{Records: []events.SQSMessage{record("m2", ptr)}})
	if len(resp.BatchItemFailures) != 1 || spy.calls["rh-m2"] < 29 || spy.calls["rh-m2"] > 31 || len(e.Down.Calls()) != 1 {
		t.Fatalf("early duplicate: failures %+v visibility %d calls %d", resp.BatchItemFailures, spy.calls["rh-m2"], len(e.Down.Calls()))
	}
	// 3. Due: three copies of the pointer in one batch (dispatched
	// concurrently): one effective call, every copy acknowledged or
	// retried without a second call.
	e.Clock.Advance(31 * time.Second)
	resp, _ = c.HandleSQS(ctx, events.SQSEvent{Records: []events.SQSMessage{record("m3", ptr), record("m4", ptr), record("m5", ptr)}})
	st, err := e.L.GetIntentState(ctx, op)
	if err != nil || st.Status != ledger.IntentStatusSucceeded {
		t.Fatalf("intent %+v %v", st, err)
	}
	if got := e.Down.Effective(op); got != 1 {
		t.Fatalf("effective calls %d, want 1", got)
	}
	// Copies that found the intent leased by the winner are retried; once it
	// is finished every copy is acknowledged.
	for range 3 {
		if len(resp.BatchItemFailures) == 0 {
			break
		}
		var again []events.SQSMessage
		for _, f := range resp.BatchItemFailures {
			again = append(again, record(f.ItemIdentifier, ptr))
		}
		resp, _ = c.HandleSQS(ctx, events.SQSEvent{Records: again})
	}
	if len(resp.BatchItemFailures) != 0 || e.Down.Effective(op) != 1 || len(e.Down.Calls()) != 2 {
		t.Fatalf("after finish: failures %+v effective %d requests %d", resp.BatchItemFailures, e.Down.Effective(op), len(e.Down.Calls()))
	}
	// One record per dispatch that recorded an outcome: the 429 and the success.
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(emf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%v %v %v", rec["intent_status"], rec["EffectsRetryWait"], rec["EffectsSucceeded"]))
	}
	if strings.Join(got, ",") != "RETRY_WAIT 1 0,SUCCEEDED 0 1" {
		t.Fatalf("metrics records %v", got)
	}
}

// A pointer to an operation the ledger does not hold is dropped, not
// retried forever; a panic in an effect fails only its own message.
func TestConsumerDropsUnknownAndSurvivesPanics(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	e.D.Effects[kind] = panicky{}
	c := &outbox.Consumer{Dispatcher: e.D, Log: slog.New(slog.DiscardHandler)}
	resp, err := c.HandleSQS(ctx, events.SQSEvent{Records: []events.SQSMessage{
		record("unknown", queue.IntentPointer{OperationID: "op_nobody"}.Encode()),
		record("boom", queue.IntentPointer{OperationID: op}.Encode()),
	}})
	if err != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "boom" {
		t.Fatalf("resp %+v err %v", resp, err)
	}
}

type panicky struct{}

func (panicky) Kind() string            { return kind }
func (panicky) AllowsScope(string) bool { return true }
func (panicky) Do(context.Context, outbox.Call) (outbox.Result, error) {
	panic("effect bug")
}
