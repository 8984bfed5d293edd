package localaws_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/queue"
)

// The local SQS names each message's sender as SQS does: a role session
// as "<role id>:<session>", a user by its key (locally, one key is one
// user), whoever sent it, through SendMessage or SendMessageBatch; only to
// a receive that asks for SenderId; and a message goaws moves to its
// dead-letter queue keeps its sender.
func TestSQSNamesEachMessagesSenderOnlyWhenAsked(t *testing.T) {
	ctx := context.Background()
	sq, err := localaws.StartSQS("")
	if err != nil {
		t.Fatal(err)
	}
	bridge := localaws.FunctionRole("bridge", "local-bridge")
	other := localaws.Role{ID: "AROALOCALSOMEONEELSE", Session: "laptop"}
	urls, err := queue.Create(ctx, sq.Client(), queue.Spec{Name: localaws.UniqueName("sender"), VisibilityTimeout: time.Second, MaxReceiveCount: 1, DLQRetention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// GIVEN a message from each of three principals, one in a batch
	if _, err := sq.ClientAs(bridge).SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(urls.DLQ), MessageBody: aws.String("from-bridge")}); err != nil {
		t.Fatal(err)
	}
	if _, err := sq.ClientAs(other).SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(urls.DLQ), Entries: []sqstypes.SendMessageBatchRequestEntry{
		{Id: aws.String("0"), MessageBody: aws.String("from-other")}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sq.Client().SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(urls.DLQ), MessageBody: aws.String("from-user")}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"from-bridge": "AROALOCALBRIDGE:local-bridge", "from-other": "AROALOCALSOMEONEELSE:laptop", "from-user": localaws.FakeAccessKey}
	if bridge.SenderID() != want["from-bridge"] {
		t.Fatalf("bridge role's SenderID %q", bridge.SenderID())
	}
	// WHEN a receive does not ask for SenderId THEN no message has one
	out, err := localaws.Receive(ctx, sq.Client(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(urls.DLQ), MaxNumberOfMessages: 10, VisibilityTimeout: 1})
	if err != nil || len(out.Messages) != 3 {
		t.Fatalf("%d messages, %v", len(out.Messages), err)
	}
	for _, m := range out.Messages {
		if id, ok := m.Attributes["SenderId"]; ok {
			t.Errorf("%s: SenderId %q without asking", aws.ToString(m.Body), id)
		}
	}
	time.Sleep(1200 * time.Millisecond)
	// WHEN it asks THEN each message names its own sender
	out, err = localaws.Receive(ctx, sq.Client(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(urls.DLQ), MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameSenderId}})
	if err != nil || len(out.Messages) != 3 {
		t.Fatalf("%d messages, %v", len(out.Messages), err)
	}
	for _, m := range out.Messages {
		if got := m.Attributes["SenderId"]; got != want[aws.ToString(m.Body)] {
			t.Errorf("%s: SenderId %q, want %q", aws.ToString(m.Body), got, want[aws.ToString(m.Body)])
		}
		if _, err := sq.Client().DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(urls.DLQ), ReceiptHandle: m.ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
	}
	// GIVEN the bridge's message in the source queue, received and never
	// deleted, so goaws moves it to the dead-letter queue
	if _, err := sq.ClientAs(bridge).SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(urls.Queue), MessageBody: aws.String("redriven")}); err != nil {
		t.Fatal(err)
	}
	if out, err := localaws.Receive(ctx, sq.Client(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(urls.Queue), VisibilityTimeout: 1}); err != nil || len(out.Messages) != 1 {
		t.Fatalf("%v %v", out, err)
	}
	// THEN in the dead-letter queue it still names the bridge (asked with All)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := localaws.Receive(ctx, sq.Client(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(urls.DLQ),
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 1 {
			if got := out.Messages[0].Attributes["SenderId"]; got != bridge.SenderID() {
				t.Fatalf("dead letter's SenderId %q, want %q", got, bridge.SenderID())
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the message never reached the dead-letter queue")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
