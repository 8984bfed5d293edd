package intake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/intake"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/metrics"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/source"
)

// The partner event sources of the EventBridge fixtures.
const (
	ebStripeSource  = "aws.partner/stripe.com/ed_local_FAKE_0001"
	ebShopifySource = "aws.partner/shopify.com/000000000/local-FAKE-0002"
)

// ebSources: stripe over both paths, shopify over EventBridge only (no
// secret), and an https-only GitHub source.
const ebSources = `{"sources":[
  {"name":"stripe","kind":"stripe","secrets":["env:STRIPE_PRIMARY"],"delivery":"https+eventbridge","event_source":"` + ebStripeSource + `"},
  {"name":"shopify","kind":"shopify","delivery":"eventbridge","event_source":"` + ebShopifySource + `","max_body_bytes":4096},
  {"name":"github","kind":"github","secrets":["env:STRIPE_PRIMARY"]}
]}`

// invokeEB sends an EventBridge event through the bridge's Lambda JSON path.
func invokeEB(t *testing.T, h *intake.Handler, payload []byte) error {
	t.Helper()
	out, err := lambda.NewHandler(h.HandleEventBridge).Invoke(context.Background(), payload)
	if err == nil && string(out) != "null" {
		t.Fatalf("bridge answered %s", out)
	}
	return err
}

// ebEvent loads an EventBridge fixture and applies edits to its envelope.
func ebEvent(t *testing.T, path string, edit func(ev *events.EventBridgeEvent)) []byte {
	t.Helper()
	raw := fixture(t, "eventbridge/"+path)
	if edit == nil {
		return raw
	}
	var ev events.EventBridgeEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	edit(&ev)
	b, _ := json.Marshal(ev)
	return b
}

func detailOf(t *testing.T, raw []byte) []byte {
	t.Helper()
	var ev events.EventBridgeEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	return ev.Detail
}

func TestEventBridgeFixturesAreAcceptedWithTheirIdentityAndEnqueued(t *testing.T) {
	cases := []struct {
		fixture, source, eventID, eventType, subject, deliveryID string
		payload                                                  func(detail []byte) []byte
	}{
		{"stripe-customer.subscription.updated.json", "stripe", "evt_1QfixtureEBSubUpd01", "customer.subscription.updated",
			"sub_1QfixtureEBSub001", "0b1f2e3d-FAKE-4a5b-8c9d-000000000001",
			func(d []byte) []byte { return d }},
		{"shopify-orders-updated.json", "shopify", "ev_test_FAKE_eventbridge_0001", "orders/updated",
			"gid://shopify/Order/820982911946154999", "wh_test_FAKE_eventbridge_0001",
			func(d []byte) []byte {
				var env struct{ Payload json.RawMessage }
				_ = json.Unmarshal(d, &env)
				return env.Payload
			}},
	}
	for _, c := range cases {
		t.Run(c.source, func(t *testing.T) {
			// GIVEN a source that receives its provider's partner event source
			h := pt.New(t, pt.Options{SourcesDoc: ebSources})
			raw := fixture(t, "eventbridge/"+c.fixture)
			// WHEN EventBridge invokes the bridge with the event
			if err := invokeEB(t, h.Intake, raw); err != nil {
				t.Fatalf("bridge: %v", err)
			}
			// THEN the ledger holds the fact under the provider's own id, the
			// identity the HTTPS path would read, marked as an EventBridge delivery
			ev := h.EventOf(c.source, c.eventID)
			if ev.Status != ledger.StatusReceived || ev.EventType != c.eventType || ev.Subject != c.subject || ev.FirstDeliveryID != c.deliveryID {
				t.Fatalf("row %+v", ev)
			}
			if ev.Attributes["via"] != "eventbridge" || ev.Attributes["eventbridge_id"] == "" {
				t.Fatalf("attributes %v", ev.Attributes)
			}
			// AND the stored payload is what the processor reads as a webhook
			// body: Stripe's event object, Shopify's order
			stored, err := h.Ledger.Payload(context.Background(), ev)
			if want := c.payload(detailOf(t, raw)); err != nil || !bytes.Equal(stored, want) {
				t.Fatalf("stored payload %s, want %s (%v)", stored, want, err)
			}
			// AND one pointer waits on the events queue
			if d := h.Depth(h.Queues.Queue); d != 1 {
				t.Fatalf("queue depth %d", d)
			}
		})
	}
}

func TestEventBridgeDuplicatesFollowTheHTTPSRules(t *testing.T) {
	h := pt.New(t, pt.Options{SourcesDoc: ebSources})
	raw := fixture(t, "eventbridge/stripe-customer.subscription.updated.json")
	ctx := context.Background()
	// GIVEN an accepted event whose pointer was lost before any worker saw it
	if err := invokeEB(t, h.Intake, raw); err != nil {
		t.Fatal(err)
	}
	for _, m := range h.Receive(h.Queues.Queue) {
		_, _ = h.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(h.Queues.Queue), ReceiptHandle: m.ReceiptHandle})
	}
	// WHEN EventBridge (or Lambda's retry) delivers it again
	if err := invokeEB(t, h.Intake, raw); err != nil {
		t.Fatal(err)
	}
	// THEN the waiting duplicate is re-enqueued, and the ledger counts two deliveries
	if d := h.Depth(h.Queues.Queue); d != 1 {
		t.Fatalf("waiting duplicate not re-enqueued: depth %d", d)
	}
	if ev := h.Event("evt_1QfixtureEBSubUpd01"); ev.DeliveryCount != 2 {
		t.Fatalf("delivery count %d", ev.DeliveryCount)
	}
	// AND once the event is processed, another delivery enqueues nothing
	h.Drain(10*time.Second, time.Second, h.NewWorker("w"))
	if ev := h.Event("evt_1QfixtureEBSubUpd01"); ev.Status != ledger.StatusProcessed {
		t.Fatalf("setup: %s", ev.Status)
	}
	if err := invokeEB(t, h.Intake, raw); err != nil {
		t.Fatal(err)
	}
	if d := h.Depth(h.Queues.Queue); d != 0 {
		t.Fatalf("duplicate of a processed event enqueued: depth %d", d)
	}
}

func TestEventBridgeUnknownEventSourceIsAnErrorAndTouchesNothing(t *testing.T) {
	h := pt.New(t, pt.Options{SourcesDoc: ebSources})
	for _, es := range []string{"aws.partner/stripe.com/ed_test_FAKE_other", "", "aws.partner/github.com/x/y", strings.ToUpper(ebStripeSource)} {
		t.Run(es, func(t *testing.T) {
			h.IntakeRec.Reset()
			// GIVEN an event from an event source no source receives
			raw := ebEvent(t, "stripe-customer.subscription.updated.json", func(ev *events.EventBridgeEvent) { ev.Source = es })
			// WHEN the bridge gets it
			err := invokeEB(t, h.Intake, raw)
			// THEN it fails (Lambda retries, then the bridge DLQ keeps it) and
			// nothing is written or sent
			if err == nil || !strings.Contains(err.Error(), "no source receives") {
				t.Fatalf("err %v", err)
			}
			if n := h.IntakeRec.Total(""); n != 0 {
				t.Fatalf("%d AWS calls: %s", n, h.IntakeRec)
			}
		})
	}
	// AND the handler's own error is the sentinel
	var ev events.EventBridgeEvent
	_ = json.Unmarshal(fixture(t, "eventbridge/shopify-orders-updated.json"), &ev)
	ev.Source = "aws.partner/shopify.com/1/other"
	if err := h.Intake.HandleEventBridge(context.Background(), ev); !errors.Is(err, intake.ErrUnknownEventSource) {
		t.Fatalf("err %v", err)
	}
}

func TestEventBridgeWithoutIdentityOrOverTheLimitIsQuarantinedUnderItsContentHash(t *testing.T) {
	big := `{"payload":{"id":1,"pad":"` + strings.Repeat("x", 5000) + `"},"metadata":{"X-Shopify-Event-Id":"ev_big"}}`
	cases := []struct {
		name, fixture, detail, source, code string
	}{
		{"stripe detail without an evt_ id", "stripe-customer.subscription.updated.json", `{"object":"event","type":"x"}`, "stripe", "no_identity"},
		{"shopify detail without ids", "shopify-orders-updated.json", `{"payload":{"id":1},"metadata":{}}`, "shopify", "no_identity"},
		{"shopify detail over max_body_bytes", "shopify-orders-updated.json", big, "shopify", "too_large"},
		{"empty detail", "shopify-orders-updated.json", `{}`, "shopify", "no_identity"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := pt.New(t, pt.Options{SourcesDoc: ebSources})
			raw := ebEvent(t, c.fixture, func(ev *events.EventBridgeEvent) { ev.Detail = json.RawMessage(c.detail) })
			// WHEN a trusted event carries no usable identity
			if err := invokeEB(t, h.Intake, raw); err != nil {
				t.Fatalf("bridge: %v", err)
			}
			// THEN it is kept QUARANTINED under the hash of its detail, nothing enqueued
			ev := h.EventOf(c.source, ledger.ContentID(detailOf(t, raw)))
			if ev.Status != ledger.StatusQuarantined || ev.ErrorCode != c.code || ev.Attributes["via"] != "eventbridge" {
				t.Fatalf("row %+v", ev)
			}
			if d := h.Depth(h.Queues.Queue); d != 0 {
				t.Fatalf("depth %d", d)
			}
		})
	}
}

func TestEventBridgeStoreFailuresReturnAnErrorSoLambdaRetries(t *testing.T) {
	raw := fixture(t, "eventbridge/stripe-customer.subscription.updated.json")
	for _, c := range []struct {
		name  string
		crash awstrace.Crash
		row   bool
	}{
		{"DynamoDB unavailable", awstrace.Crash{Op: "DynamoDB.UpdateItem", Nth: 1, When: awstrace.Before}, false},
		{"the put's answer lost", awstrace.Crash{Op: "DynamoDB.UpdateItem", Nth: 1, When: awstrace.After}, true},
		{"SQS unavailable after the put", awstrace.Crash{Op: "SQS.SendMessage", Nth: 1, When: awstrace.Before}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := pt.New(t, pt.Options{SourcesDoc: ebSources})
			h.IntakeRec.Arm(c.crash)
			// WHEN the ledger or the queue fails during the invocation
			if err := invokeEB(t, h.Intake, raw); err == nil {
				t.Fatal("a failed accept answered success: EventBridge would consider the event delivered")
			}
			_, err := h.Ledger.Get(context.Background(), "stripe", "evt_1QfixtureEBSubUpd01")
			if c.row != (err == nil) {
				t.Fatalf("row present = %v, want %v", err == nil, c.row)
			}
			// THEN Lambda's retry (same event) completes the accept and the enqueue
			h.IntakeRec.Reset()
			if err := invokeEB(t, h.Intake, raw); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if ev := h.Event("evt_1QfixtureEBSubUpd01"); ev.Status != ledger.StatusReceived || h.Depth(h.Queues.Queue) != 1 {
				t.Fatalf("after retry: %s, depth %d", ev.Status, h.Depth(h.Queues.Queue))
			}
		})
	}
}

func TestEventBridgeOnlySourceHasNoWebhookURL(t *testing.T) {
	h := pt.New(t, pt.Options{SourcesDoc: ebSources})
	// GIVEN shopify, whose delivery is eventbridge only (no secret)
	body := []byte(`{"id":1}`)
	// WHEN someone POSTs to /webhooks/shopify
	resp := h.DeliverTo("shopify", body, map[string]string{"x-shopify-hmac-sha256": "AAAA", "x-shopify-webhook-id": "wh"})
	// THEN it does not exist for HTTPS, and nothing is touched
	if resp.Status != 404 || h.IntakeRec.Total("") != 0 {
		t.Fatalf("status %d, %d AWS calls", resp.Status, h.IntakeRec.Total(""))
	}
}

func TestEventBridgeEmitsOneMetricsRecordPerEvent(t *testing.T) {
	h := pt.New(t, pt.Options{SourcesDoc: ebSources})
	var buf bytes.Buffer
	h.Intake.Metrics = metrics.New(&buf, "EffectivelyOnce/test", h.Clock.Now)
	raw := fixture(t, "eventbridge/shopify-orders-updated.json")
	_ = invokeEB(t, h.Intake, raw)
	_ = invokeEB(t, h.Intake, raw)
	_ = invokeEB(t, h.Intake, ebEvent(t, "shopify-orders-updated.json", func(ev *events.EventBridgeEvent) { ev.Source = "aws.partner/shopify.com/9/x" }))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []struct {
		outcome, source                string
		accepted, duplicates, rejected float64
	}{{"accepted", "shopify", 1, 0, 0}, {"duplicate", "shopify", 0, 1, 0}, {"unknown_event_source", "", 0, 0, 1}}
	if len(lines) != len(want) {
		t.Fatalf("%d records: %s", len(lines), buf.String())
	}
	for i, w := range want {
		var rec map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &rec); err != nil {
			t.Fatal(err)
		}
		if rec["function"] != "intake-eventbridge" || rec["outcome"] != w.outcome || rec["source"] != w.source || rec["Received"] != 1.0 ||
			rec["Accepted"] != w.accepted || rec["Duplicates"] != w.duplicates || rec["Rejected"] != w.rejected {
			t.Fatalf("record %d: %v", i, rec)
		}
		if _, ok := rec["IntakeLatencyMs"].(float64); !ok || strings.Contains(lines[i], "total_price") {
			t.Fatalf("record %d: no latency, or it carries the payload: %s", i, lines[i])
		}
	}
}

func TestSweepEventBridgeDLQRedeliversOnlyWhatCanBeAccepted(t *testing.T) {
	ctx := context.Background()
	h := pt.New(t, pt.Options{SourcesDoc: ebSources})
	dlq, err := h.SQS.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(localaws.UniqueName("bridge-dlq"))})
	if err != nil {
		t.Fatal(err)
	}
	url := aws.ToString(dlq.QueueUrl)
	// (Lambda writes the bridge DLQ with the bridge function's role)
	send := func(body string) {
		if _, err := h.BridgeSQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	stripeEv := string(fixture(t, "eventbridge/stripe-customer.subscription.updated.json"))
	unknown := string(ebEvent(t, "shopify-orders-updated.json", func(ev *events.EventBridgeEvent) {
		ev.Source = "aws.partner/shopify.com/000000000/test-FAKE-later"
	}))
	// GIVEN the bridge DLQ holds: an event the rule's target could not deliver
	// (the raw event), one whose invocations all failed (a Lambda
	// destination record around it), one from a source not configured yet,
	// and something that is not an event
	send(stripeEv)
	send(`{"version":"1.0","requestContext":{"condition":"RetriesExhausted","approximateInvokeCount":3},"requestPayload":` +
		string(fixture(t, "eventbridge/shopify-orders-updated.json")) + `,"responsePayload":{"errorMessage":"ledger unavailable"}}`)
	send(unknown)
	send(`not an event`)
	// WHEN the reconciler sweeps it
	rep, err := h.Intake.SweepEventBridgeDLQ(ctx, h.SQS, url, 100)
	if err != nil {
		t.Fatal(err)
	}
	// THEN the two deliverable events are in the ledger and enqueued, and deleted
	if rep.Seen != 4 || rep.Accepted != 2 || rep.UnknownSource != 1 || rep.Unreadable != 1 {
		t.Fatalf("report %+v", rep)
	}
	h.Event("evt_1QfixtureEBSubUpd01")
	h.EventOf("shopify", "ev_test_FAKE_eventbridge_0001")
	if d := h.Depth(h.Queues.Queue); d != 2 {
		t.Fatalf("events queue depth %d", d)
	}
	// AND the other two stay in the DLQ for the next sweep or an operator
	if d := h.Depth(url); d != 2 {
		t.Fatalf("DLQ depth %d", d)
	}
	// AND once SOURCES names the missing event source, a later sweep accepts
	// it, and sweeping an event the ledger already has again is harmless
	later, err := source.Parse([]byte(`{"sources":[{"name":"shopify","kind":"shopify","delivery":"eventbridge","event_source":"aws.partner/shopify.com/000000000/test-FAKE-later"},
	  {"name":"stripe","kind":"stripe","secrets":["env:STRIPE_PRIMARY"],"delivery":"https+eventbridge","event_source":"` + ebStripeSource + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	fixed := &intake.Handler{Sources: later, Ledger: h.Intake.Ledger, Queue: h.Intake.Queue, Now: h.Intake.Now, Log: slog.New(slog.DiscardHandler),
		DLQSenders: h.Intake.DLQSenders}
	dlq2, err := h.SQS.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(localaws.UniqueName("bridge-dlq"))})
	if err != nil {
		t.Fatal(err)
	}
	url = aws.ToString(dlq2.QueueUrl)
	send(unknown)
	send(stripeEv)
	if rep, err := fixed.SweepEventBridgeDLQ(ctx, h.SQS, url, 100); err != nil || rep.Accepted != 2 || h.Depth(url) != 0 {
		t.Fatalf("report %+v, DLQ depth %d, %v", rep, h.Depth(url), err)
	}
	if ev := h.Event("evt_1QfixtureEBSubUpd01"); ev.DeliveryCount != 2 {
		t.Fatalf("stripe event after two sweeps: %+v", ev)
	}
	if ev := h.EventOf("shopify", "ev_test_FAKE_eventbridge_0001"); ev.Status != ledger.StatusReceived {
		t.Fatalf("shopify event: %+v", ev)
	}
}

// FuzzHandleEventBridge: any event, from any source, never panics, and
// succeeds only after the ledger accepted something.
func FuzzHandleEventBridge(f *testing.F) {
	f.Add(ebStripeSource, []byte(`{"id":"evt_1","object":"event","type":"x","data":{"object":{}}}`))
	f.Add(ebShopifySource, []byte(`{"payload":{"id":1},"metadata":{"X-Shopify-Event-Id":"e"}}`))
	f.Add(ebShopifySource, []byte(`null`))
	f.Add("aws.partner/x", []byte(`{}`))
	f.Fuzz(func(t *testing.T, es string, detail []byte) {
		l := &fakeLedger{}
		h := &intake.Handler{Sources: mustSources(t), Ledger: l, Queue: fakeQueue{}, Log: slog.New(slog.DiscardHandler)}
		err := h.HandleEventBridge(context.Background(), events.EventBridgeEvent{Source: es, ID: "id", Detail: detail})
		if err == nil && l.n == 0 {
			t.Fatalf("success without a ledger write for %q %q", es, detail)
		}
	})
}

type fakeLedger struct{ n int }

func (l *fakeLedger) Accept(_ context.Context, d ledger.Delivery) (ledger.Accepted, error) {
	l.n++
	return ledger.Accepted{Event: ledger.Event{Source: d.Source, EventID: d.EventID, Status: ledger.StatusReceived}}, nil
}

// ClaimBody: the EventBridge path never asks (its ids come from AWS).
func (l *fakeLedger) ClaimBody(_ context.Context, _, _, eventID string) (string, error) {
	return eventID, nil
}

type fakeQueue struct{}

func (fakeQueue) Send(context.Context, queue.Pointer) error { return nil }

func mustSources(t *testing.T) *source.Set {
	set, err := source.Parse([]byte(ebSources))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// stubDLQ hands out its letters on the first receive, then none, and
// notes what each receive asked for and which letters were deleted.
type stubDLQ struct {
	letters []sqstypes.Message
	asked   [][]sqstypes.MessageSystemAttributeName
	deleted []string
}

func (d *stubDLQ) ReceiveMessage(_ context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	d.asked = append(d.asked, in.MessageSystemAttributeNames)
	out := &sqs.ReceiveMessageOutput{Messages: d.letters}
	d.letters = nil
	return out, nil
}

func (d *stubDLQ) DeleteMessage(_ context.Context, in *sqs.DeleteMessageInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	d.deleted = append(d.deleted, aws.ToString(in.ReceiptHandle))
	return &sqs.DeleteMessageOutput{}, nil
}

// failingLedger refuses every write.
type failingLedger struct{}

func (failingLedger) Accept(context.Context, ledger.Delivery) (ledger.Accepted, error) {
	return ledger.Accepted{}, errors.New("ledger unavailable")
}

func (failingLedger) ClaimBody(context.Context, string, string, string) (string, error) {
	return "", errors.New("ledger unavailable")
}

// The sweep fails closed: it asks SQS for each letter's sender, and a
// letter SQS names no sender for, or any letter when no sender is allowed,
// is refused and recorded, never redelivered; a letter whose refusal
// cannot be recorded stays in the DLQ and ends the sweep with the error.
func TestBridgeDLQSweepRefusesALetterWithoutAnAllowedSender(t *testing.T) {
	ctx := context.Background()
	h := pt.New(t, pt.Options{SourcesDoc: ebSources})
	stripeEv := string(fixture(t, "eventbridge/stripe-customer.subscription.updated.json"))
	letters := func() []sqstypes.Message {
		return []sqstypes.Message{
			{MessageId: aws.String("m-none"), ReceiptHandle: aws.String("rh-none"), Body: aws.String(stripeEv)},
			{MessageId: aws.String("m-bridge"), ReceiptHandle: aws.String("rh-bridge"), Body: aws.String(stripeEv),
				Attributes: map[string]string{"SenderId": pt.BridgeRole.SenderID()}},
		}
	}
	// GIVEN a handler that allows no sender, and a letter SQS names no sender for
	nobody := &intake.Handler{Sources: h.Sources, Ledger: h.Intake.Ledger, Queue: h.Intake.Queue, Now: h.Intake.Now, Log: slog.New(slog.DiscardHandler)}
	d := &stubDLQ{letters: letters()}
	// WHEN it sweeps
	rep, err := nobody.SweepEventBridgeDLQ(ctx, d, "bridge-dlq", 10)
	// THEN it asked for SenderId, refused both letters, recorded and deleted them
	if err != nil || rep.Refused != 2 || rep.Accepted != 0 || len(d.deleted) != 2 {
		t.Fatalf("report %+v, deleted %v, %v", rep, d.deleted, err)
	}
	if len(d.asked) == 0 || !slices.Equal(d.asked[0], []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameSenderId}) {
		t.Fatalf("receives asked for %v", d.asked)
	}
	if _, err := h.Ledger.Get(ctx, "stripe", "evt_1QfixtureEBSubUpd01"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a refused letter was accepted: %v", err)
	}
	open, err := h.Ledger.ListOpen(ctx, "event", 10, ledger.StatusQuarantined)
	if err != nil || len(open) != 2 {
		t.Fatalf("quarantined %+v %v", open, err)
	}
	for _, o := range open {
		ev := h.EventOf(o.Source, o.EventID)
		if ev.Source != intake.RefusedDLQSource || ev.ErrorCode != intake.CodeDLQSenderRefused || !strings.Contains(ev.Attributes["reason"], ev.Attributes["sender_id"]) {
			t.Errorf("record %+v", ev)
		}
	}
	// GIVEN a refusal the ledger cannot record
	broken := &intake.Handler{Sources: h.Sources, Ledger: failingLedger{}, Queue: h.Intake.Queue, Log: slog.New(slog.DiscardHandler), DLQSenders: h.Intake.DLQSenders}
	d = &stubDLQ{letters: letters()[:1]}
	// THEN the letter stays and the sweep says why
	if rep, err := broken.SweepEventBridgeDLQ(ctx, d, "bridge-dlq", 10); err == nil || len(d.deleted) != 0 || rep.Refused != 0 {
		t.Fatalf("report %+v, deleted %v, %v", rep, d.deleted, err)
	}
}
