package reconciler_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/intake"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/source"
)

func TestRunRedeliversTheBridgeDLQ(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	// GIVEN a Stripe source that receives a partner event source, and the
	// bridge's DLQ holding an event from it that the bridge never accepted
	// (its invocations failed) and one from an event source nobody configured
	raw, err := os.ReadFile("../../events/eventbridge/stripe-customer.subscription.updated.json")
	if err != nil {
		t.Fatal(err)
	}
	var ev struct {
		Source string `json:"source"`
	}
	_ = json.Unmarshal(raw, &ev)
	sources, err := source.Parse([]byte(`{"sources":[{"name":"stripe","kind":"stripe","delivery":"eventbridge","event_source":"` + ev.Source + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	dlq, err := f.SQS.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(localaws.UniqueName("bridge-dlq"))})
	if err != nil {
		t.Fatal(err)
	}
	f.Q.BridgeDLQ = aws.ToString(dlq.QueueUrl)
	for _, body := range []string{string(raw), strings.Replace(string(raw), ev.Source, "aws.partner/stripe.com/ed_test_FAKE_nobody", 1)} {
		if _, err := f.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: dlq.QueueUrl, MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	r := f.reconciler(nil)
	r.Sources = sources
	r.Bridge = &intake.Handler{Sources: sources, Ledger: f.L, Queue: queue.Sender{Client: f.SQS, URL: f.Q.Events}, Now: f.Clock.Now, Log: quiet()}
	// WHEN the reconciler runs
	rep, err := r.Run(ctx)
	// THEN the configured event is in the ledger, enqueued for the processor,
	// and gone from the DLQ; the other stays there, counted, and the run
	// does not fail for it (the DLQ's alarm is what calls an operator)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	// (goaws counts an in-flight message as visible and in flight at once,
	// so the gauge is only checked for seeing the kept one)
	if rep.BridgeDLQ.Accepted != 1 || rep.BridgeDLQ.UnknownSource != 1 || rep.BridgeDLQDepth < 1 {
		t.Fatalf("report %+v depth %d", rep.BridgeDLQ, rep.BridgeDLQDepth)
	}
	attrs, err := f.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages}})
	if err != nil || attrs.Attributes["ApproximateNumberOfMessages"] != "1" {
		t.Fatalf("bridge DLQ keeps %v messages, want 1 (%v)", attrs.Attributes, err)
	}
	got, err := f.L.Get(ctx, "stripe", "evt_1QfixtureEBSubUpd01")
	if err != nil || got.Status != ledger.StatusReceived || got.Attributes["via"] != "eventbridge" {
		t.Fatalf("row %+v %v", got, err)
	}
	out, err := localaws.Receive(ctx, f.SQS, &sqs.ReceiveMessageInput{QueueUrl: aws.String(f.Q.Events), MaxNumberOfMessages: 10})
	if err != nil || len(out.Messages) != 1 || !strings.Contains(aws.ToString(out.Messages[0].Body), "evt_1QfixtureEBSubUpd01") {
		t.Fatalf("events queue %v", out.Messages)
	}
	// AND the run's metrics record counts the redelivery and the depth
	if !strings.Contains(f.EMF.String(), `"BridgeRedelivered":1`) || !strings.Contains(f.EMF.String(), `"BridgeDLQDepth":`) {
		t.Fatalf("EMF %s", f.EMF.String())
	}
}
