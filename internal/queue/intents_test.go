package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/queue"
)

func TestIntentPointerRoundTripAndBadBodies(t *testing.T) {
	got, err := queue.ParseIntentPointer(queue.IntentPointer{OperationID: "op-1", Reason: "commit"}.Encode())
	if err != nil || got.OperationID != "op-1" || got.V != 1 || got.Reason != "commit" {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for name, body := range map[string]string{
		"not json":      "{",
		"no version":    `{"operation_id":"op-1"}`,
		"no op":         `{"v":1}`,
		"event pointer": queue.Pointer{Source: "stripe", EventID: "evt_1"}.Encode(),
	} {
		if _, err := queue.ParseIntentPointer(body); !errors.Is(err, queue.ErrBadPointer) {
			t.Fatalf("%s: err %v", name, err)
		}
	}
}

func TestEffectsSpecFollowsAWSGuidance(t *testing.T) {
	s := queue.Effects("dev-")
	if s.VisibilityTimeout < 6*queue.DispatcherTimeout || s.Name != "dev-effects" || s.DLQName() != "dev-effects-dlq" {
		t.Fatalf("spec %+v", s)
	}
	if s.MaxReceiveCount <= 8 {
		t.Fatalf("maxReceiveCount %d must exceed the dispatcher's 8 attempts", s.MaxReceiveCount)
	}
}

// 23 intents go out in 3 batch requests, each exactly once; a queue that
// does not exist leaves every one unsent, named, for the reconciler.
func TestSendIntentsBatchesAndReportsUnsent(t *testing.T) {
	ctx := context.Background()
	sq, err := localaws.StartSQS("")
	if err != nil {
		t.Fatal(err)
	}
	urls, err := queue.Create(ctx, sq.Client(), queue.Spec{Name: localaws.UniqueName("fx"), VisibilityTimeout: 30e9, MaxReceiveCount: 3, DLQRetention: 3600e9})
	if err != nil {
		t.Fatal(err)
	}
	rec := &awstrace.Recorder{}
	s := queue.Sender{Client: sq.Client(rec.APIOption), URL: urls.Queue}
	var ps []queue.IntentPointer
	for i := range 23 {
		ps = append(ps, queue.IntentPointer{OperationID: fmt.Sprintf("op-%02d", i), Reason: "commit"})
	}
	if unsent, err := s.SendIntents(ctx, ps); err != nil || unsent != nil {
		t.Fatalf("send: %v %v", unsent, err)
	}
	if n := rec.Count("SQS.SendMessageBatch"); n != 3 {
		t.Fatalf("SendMessageBatch requests = %d, want 3", n)
	}
	msgs, err := localaws.Drain(ctx, sq.Client(), urls.Queue)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		p, err := queue.ParseIntentPointer(aws.ToString(m.Body))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.OperationID)
	}
	sort.Strings(got)
	if len(got) != 23 || got[0] != "op-00" || got[22] != "op-22" {
		t.Fatalf("received %v", got)
	}

	bad := queue.Sender{Client: sq.Client(), URL: urls.Queue + "-missing"}
	unsent, err := bad.SendIntents(ctx, ps[:12])
	if !errors.Is(err, queue.ErrUnavailable) || len(unsent) != 12 {
		t.Fatalf("missing queue: unsent %d, err %v", len(unsent), err)
	}
}
