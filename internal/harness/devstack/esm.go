package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
)

// maxBatch is the event source mapping's batch size.
const maxBatch = 10

// mapping is one SQS event source mapping: a queue and the function it
// invokes.
type mapping struct {
	queue, fn string
	// crash, when set, lets /_dev/crash kill the function's runtime
	// mid-batch (see crash.go).
	crash bool
}

// poll is one event source mapping poller: it long-polls the mapping's
// queue, gathers up to maxBatch messages within the batching window,
// invokes the function, deletes only the successes (one DeleteMessageBatch)
// and leaves failures, and every message of a failed invocation, to the
// visibility timeout (or the one the function set for the message) and the
// redrive policy.
func (s *Stack) poll(ctx context.Context, name string, m mapping) {
	arn := "arn:aws:sqs:" + localaws.Region + ":000000000000:" + filepath.Base(m.queue)
	for ctx.Err() == nil {
		msgs := s.receiveBatch(ctx, name, m.queue)
		if len(msgs) == 0 {
			continue
		}
		ev := events.SQSEvent{}
		for _, m := range msgs {
			ev.Records = append(ev.Records, events.SQSMessage{
				MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body),
				Md5OfBody: aws.ToString(m.MD5OfBody), Attributes: m.Attributes, EventSource: "aws:sqs",
				EventSourceARN: arn, AWSRegion: localaws.Region,
			})
		}
		payload, _ := json.Marshal(ev)
		var during func(*instance)
		var batch *processorBatch
		if m.crash {
			batch = s.startBatch(name, msgs)
			during = batch.during()
		}
		out, err := s.Invoke(ctx, m.fn, payload, during)
		if batch != nil {
			batch.end(ctx)
		}
		if err != nil {
			if ctx.Err() == nil {
				s.logs.Printf(name, "batch of %d: invocation failed, nothing deleted (%v)", len(msgs), err)
			}
			continue
		}
		var resp events.SQSEventResponse
		if err := json.Unmarshal(out, &resp); err != nil {
			s.logs.Printf(name, "batch of %d: unreadable response, nothing deleted", len(msgs))
			continue
		}
		failed := map[string]bool{}
		for _, f := range resp.BatchItemFailures {
			failed[f.ItemIdentifier] = true
		}
		var del []sqstypes.DeleteMessageBatchRequestEntry
		for i, m := range msgs {
			if !failed[aws.ToString(m.MessageId)] {
				del = append(del, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
			}
		}
		if len(del) > 0 {
			if _, err := s.SQS.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(m.queue), Entries: del}); err != nil && ctx.Err() == nil {
				s.logs.Printf(name, "delete batch: %v", err)
			}
		}
		s.logs.Printf(name, "batch of %d: %d done, %d to retry", len(msgs), len(del), len(resp.BatchItemFailures))
	}
}

// receiveBatch long-polls for the first message, then keeps receiving until
// the batch is full or the batching window has passed.
func (s *Stack) receiveBatch(ctx context.Context, name, queueURL string) []sqstypes.Message {
	var msgs []sqstypes.Message
	var deadline time.Time
	for len(msgs) < maxBatch && ctx.Err() == nil {
		wait := int32(1)
		if len(msgs) > 0 {
			if time.Now().After(deadline) {
				break
			}
			wait = 0
		}
		out, err := s.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(queueURL), MaxNumberOfMessages: int32(maxBatch - len(msgs)), WaitTimeSeconds: wait,
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
		})
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				s.logs.Printf(name, "receive: %v", err)
				time.Sleep(time.Second)
			}
			return msgs
		}
		if len(out.Messages) == 0 {
			if len(msgs) == 0 {
				continue // keep long-polling
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if len(msgs) == 0 {
			deadline = time.Now().Add(s.cfg.BatchWindow)
		}
		msgs = append(msgs, out.Messages...)
	}
	return msgs
}

// schedule invokes the reconciler at the configured rate, with an
// EventBridge scheduled event, as the deployed schedule does.
func (s *Stack) schedule(ctx context.Context) {
	if _, ok := s.pools["reconciler"]; !ok {
		s.logs.Printf("schedule", "no reconciler instance; nothing to schedule")
		return
	}
	s.logs.Printf("schedule", "invoking the reconciler every %s", s.cfg.ScheduleRate)
	t := time.NewTicker(s.cfg.ScheduleRate)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			ev := events.EventBridgeEvent{Version: "0", ID: strconv.FormatInt(now.UnixNano(), 36), DetailType: "Scheduled Event", Source: "aws.events",
				AccountID: "000000000000", Time: now.UTC(), Region: localaws.Region, Detail: json.RawMessage(`{}`)}
			payload, _ := json.Marshal(ev)
			if _, err := s.Invoke(ctx, "reconciler", payload, nil); err != nil && ctx.Err() == nil {
				s.logs.Printf("schedule", "reconciler: %v", err)
			}
		}
	}
}
