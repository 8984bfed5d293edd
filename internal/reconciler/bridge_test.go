package reconciler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// bridgeRole is the bridge function's role here: the one principal, with
// EventBridge for the rules, that may write the bridge DLQ.
var bridgeRole = localaws.FunctionRole("bridge", "webhooks-test-bridge")

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
	// (Lambda puts a failed event there with the bridge function's role)
	sq, err := localaws.StartSQS("")
	if err != nil {
		t.Fatal(err)
	}
	asBridge := sq.ClientAs(bridgeRole)
	for _, body := range []string{string(raw), strings.Replace(string(raw), ev.Source, "aws.partner/stripe.com/ed_test_FAKE_nobody", 1)} {
		if _, err := asBridge.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: dlq.QueueUrl, MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	r := f.reconciler(nil)
	r.Sources = sources
	r.Bridge = &intake.Handler{Sources: sources, Ledger: f.L, Queue: queue.Sender{Client: f.SQS, URL: f.Q.Events}, Now: f.Clock.Now, Log: quiet(),
		DLQSenders: queue.Senders{bridgeRole.ID}}
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

// Anyone in the account with sqs:SendMessage on the bridge DLQ could write
// a made-up partner event there, and the sweep fed it through the partner
// path, which has no signature: an attacker's role granted its own account
// an entitlement. The sweep now asks SQS who sent each letter: one from a
// principal that is not the bridge is recorded QUARANTINED, with the
// sender and the reason, under a ledger source of its own (never the
// partner source's, so it takes no event id from a real event), and
// deleted; nothing of it is applied. The bridge's own letter is still
// redelivered.
func TestTheBridgeSweepRefusesADeadLetterFromAnotherSender(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
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
	sq, err := localaws.StartSQS("")
	if err != nil {
		t.Fatal(err)
	}
	// GIVEN a role that is not the bridge writes the bridge DLQ a made-up
	// Stripe event that activates a subscription for the attacker's account,
	// under an event id of its own and under the id of a real event
	attacker := localaws.Role{ID: "AROALOCALATTACKER", Session: "someone"}
	forged := strings.NewReplacer("evt_1QfixtureEBSubUpd01", "evt_forged_0001", "sub_1QfixtureEBSub001", "sub_forged_0001",
		"acct_fixture_eb_7", "acct_attacker").Replace(string(raw))
	squat := strings.NewReplacer("sub_1QfixtureEBSub001", "sub_forged_0002", "acct_fixture_eb_7", "acct_attacker").Replace(string(raw))
	// (dressed as EventBridge's: the message attributes it adds to a letter)
	ruleArn := "arn:aws:events:us-east-1:000000000000:rule/" + ev.Source + "/webhooks-test-bridge-stripe"
	for _, body := range []string{forged, squat} {
		if _, err := sq.ClientAs(attacker).SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: dlq.QueueUrl, MessageBody: aws.String(body),
			MessageAttributes: map[string]sqstypes.MessageAttributeValue{
				"RULE_ARN":   {DataType: aws.String("String"), StringValue: aws.String(ruleArn)},
				"ERROR_CODE": {DataType: aws.String("String"), StringValue: aws.String("NO_PERMISSIONS")},
			}}); err != nil {
			t.Fatal(err)
		}
	}
	// AND the bridge's own dead letter of the real event
	if _, err := sq.ClientAs(bridgeRole).SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: dlq.QueueUrl, MessageBody: aws.String(string(raw))}); err != nil {
		t.Fatal(err)
	}
	r := f.reconciler(nil)
	r.Sources = sources
	r.Bridge = &intake.Handler{Sources: sources, Ledger: f.L, Queue: queue.Sender{Client: f.SQS, URL: f.Q.Events}, Now: f.Clock.Now, Log: quiet(),
		DLQSenders: queue.Senders{bridgeRole.ID}}
	// WHEN the reconciler sweeps the DLQ and the processor drains the events queue
	rep, err := r.Run(ctx)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	f.process()
	// THEN the attacker's letters were refused and the bridge's redelivered,
	// and the DLQ is empty: a refused letter is deleted once recorded
	if rep.BridgeDLQ.Seen != 3 || rep.BridgeDLQ.Refused != 2 || rep.BridgeDLQ.Accepted != 1 {
		t.Fatalf("report %+v", rep.BridgeDLQ)
	}
	attrs, err := f.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages}})
	if err != nil || attrs.Attributes["ApproximateNumberOfMessages"] != "0" {
		t.Fatalf("bridge DLQ keeps %v messages, want none (%v)", attrs.Attributes, err)
	}
	// AND no event of the forgery exists under the partner source; the real
	// event is the bridge's letter, processed once
	if _, err := f.L.Get(ctx, "stripe", "evt_forged_0001"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the forged event was accepted: %v", err)
	}
	real := f.event("stripe", "evt_1QfixtureEBSubUpd01")
	if real.Status != ledger.StatusProcessed || real.DeliveryCount != 1 {
		t.Fatalf("real event %s, %d deliveries", real.Status, real.DeliveryCount)
	}
	// AND nothing of the forgeries was applied: no projection, no intent
	snap, err := ledger.TakeSnapshot(ctx, f.DB, "ledger")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range snap.Projections {
		if strings.Contains(p.Subject, "forged") || p.LastEvent != "stripe/evt_1QfixtureEBSubUpd01" {
			t.Errorf("projection %s/%s from %s", p.Name, p.Subject, p.LastEvent)
		}
	}
	for _, in := range snap.Intents {
		if strings.Contains(in.Subject, "forged") || strings.Contains(fmt.Sprint(in.Payload), "attacker") || in.Causation != "stripe/evt_1QfixtureEBSubUpd01" {
			t.Errorf("intent %s %s for %s from %s", in.Kind, in.OperationID, in.Subject, in.Causation)
		}
	}
	if len(snap.Projections) == 0 || len(snap.Intents) == 0 {
		t.Fatalf("the real event applied nothing: %d projections, %d intents", len(snap.Projections), len(snap.Intents))
	}
	// AND each refused letter is on record for an operator: QUARANTINED,
	// naming its sender and why, with the letter as its payload and what
	// it says of itself (message attributes prove nothing: anyone sets them)
	refused := 0
	for _, e := range snap.Events {
		if e.Source != intake.RefusedDLQSource {
			continue
		}
		refused++
		full := f.event(e.Source, e.EventID)
		body, err := f.L.Payload(ctx, full)
		if err != nil {
			t.Fatal(err)
		}
		if full.Status != ledger.StatusQuarantined || full.ErrorCode != intake.CodeDLQSenderRefused ||
			full.Attributes["sender_id"] != attacker.SenderID() || !strings.Contains(full.Attributes["reason"], attacker.SenderID()) ||
			full.Attributes["event_source"] != ev.Source || full.Attributes["letter_rule_arn"] != ruleArn ||
			(string(body) != forged && string(body) != squat) {
			t.Errorf("refusal record %+v, payload %d bytes", full, len(body))
		}
	}
	if refused != 2 {
		t.Fatalf("%d refusal records, want 2", refused)
	}
	// AND the run's metrics count the refusals
	if !strings.Contains(f.EMF.String(), `"BridgeDLQRefused":2`) {
		t.Fatalf("EMF %s", f.EMF.String())
	}
}
