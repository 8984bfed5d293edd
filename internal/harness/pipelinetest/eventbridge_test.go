package pipelinetest_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/intake"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
)

// The partner event sources of the EventBridge fixtures, and a Stripe and
// a Shopify source that receive both paths under one name.
const (
	ebStripe  = "aws.partner/stripe.com/ed_local_FAKE_0001"
	ebShopify = "aws.partner/shopify.com/000000000/local-FAKE-0002"
	ebSecret  = "shpss_test_FAKE_pipeline_eventbridge"
	ebSources = `{"sources":[
	  {"name":"stripe","kind":"stripe","secrets":["env:STRIPE_PRIMARY"],"delivery":"https+eventbridge","event_source":"` + ebStripe + `"},
	  {"name":"shopify","kind":"shopify","secrets":["env:SHOPIFY_SECRET"],"delivery":"https+eventbridge","event_source":"` + ebShopify + `"}]}`
)

func ebHarness(t *testing.T) *pt.Harness {
	return pt.New(t, pt.Options{SourcesDoc: ebSources, Secrets: map[string]string{"SHOPIFY_SECRET": ebSecret}})
}

// bridge invokes the bridge's handler through its Lambda JSON path, as
// EventBridge's asynchronous invocation of the function does.
func bridge(t *testing.T, h *pt.Harness, raw []byte) error {
	t.Helper()
	_, err := lambda.NewHandler(h.Intake.HandleEventBridge).Invoke(context.Background(), raw)
	return err
}

func ebFixture(t *testing.T, name string) (raw []byte, ev events.EventBridgeEvent) {
	t.Helper()
	raw, err := os.ReadFile("../../../events/eventbridge/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	return raw, ev
}

// webhookOf turns an EventBridge fixture into the signed HTTPS delivery of
// the same fact: Stripe's detail is the webhook body; Shopify's detail
// holds the body and the headers.
func webhookOf(t *testing.T, h *pt.Harness, src string, ev events.EventBridgeEvent) func() intake.Response {
	t.Helper()
	if src == "stripe" {
		body := []byte(ev.Detail)
		return func() intake.Response { return h.Deliver(body, h.Sign(body, pt.SecretPrimary)) }
	}
	var d struct {
		Payload  json.RawMessage   `json:"payload"`
		Metadata map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(ev.Detail, &d); err != nil {
		t.Fatal(err)
	}
	headers := map[string]string{}
	for k, v := range d.Metadata {
		headers[strings.ToLower(k)] = v
	}
	mac := hmac.New(sha256.New, []byte(ebSecret))
	mac.Write(d.Payload)
	headers["x-shopify-hmac-sha256"] = base64.StdEncoding.EncodeToString(mac.Sum(nil))
	return func() intake.Response { return h.DeliverTo("shopify", d.Payload, headers) }
}

// One provider fact delivered by a signed webhook and through the partner
// event bus, in either order, is one ledger row, processed once, with one
// projection and one set of intents; later deliveries on either path
// change nothing and enqueue nothing.
func TestOneFactByHTTPSAndEventBridgeIsOneLedgerRow(t *testing.T) {
	for _, p := range []struct {
		source, fixture, eventID, intentKind string
	}{
		{"stripe", "stripe-customer.subscription.updated.json", "evt_1QfixtureEBSubUpd01", "entitlement.grant"},
		{"shopify", "shopify-orders-updated.json", "ev_test_FAKE_eventbridge_0001", "order.cancelled"},
	} {
		for _, eventBridgeFirst := range []bool{false, true} {
			name := p.source + "/https first"
			if eventBridgeFirst {
				name = p.source + "/eventbridge first"
			}
			t.Run(name, func(t *testing.T) {
				h := ebHarness(t)
				raw, ev := ebFixture(t, p.fixture)
				https := webhookOf(t, h, p.source, ev)
				deliverHTTPS := func(want int) {
					t.Helper()
					if r := https(); r.Status != want {
						t.Fatalf("https: %d %s, want %d", r.Status, r.Body, want)
					}
				}
				deliverBus := func() {
					t.Helper()
					if err := bridge(t, h, raw); err != nil {
						t.Fatalf("eventbridge: %v", err)
					}
				}
				// GIVEN the fact arrives both ways before any worker runs
				if eventBridgeFirst {
					deliverBus()
					deliverHTTPS(202)
				} else {
					deliverHTTPS(202)
					deliverBus()
				}
				// THEN the ledger has one row for it, delivered twice
				snap, err := ledger.TakeSnapshot(context.Background(), h.DB, h.Table)
				if err != nil {
					t.Fatal(err)
				}
				if len(snap.Events) != 1 || snap.Events[0].EventID != p.eventID || snap.Events[0].DeliveryCount != 2 {
					t.Fatalf("ledger rows %+v", snap.Events)
				}
				// WHEN the processor drains the queue (one pointer per delivery)
				h.Drain(20*time.Second, time.Second, h.NewWorker("w1"), h.NewWorker("w2"))
				// THEN the fact was processed once: one claim, one completion,
				// one projection, one intent
				got := h.EventOf(p.source, p.eventID)
				acts := pt.Actions(got)
				if got.Status != ledger.StatusProcessed || got.Result == nil || got.Result.Outcome != ledger.OutcomeApplied ||
					count(acts, "claim") != 1 || count(acts, "complete") != 1 {
					t.Fatalf("event %s %+v, audit %v", got.Status, got.Result, acts)
				}
				intents := h.Intents()
				if len(intents) != 1 || intents[0].Kind != p.intentKind || h.Projections() != 1 {
					t.Fatalf("intents %+v, projections %d", intents, h.Projections())
				}
				// AND the row's attributes are the first delivery's: Shopify's
				// webhook carries its headers, a Stripe snapshot webhook its
				// format, so the bus's are kept only when it came first
				if via := got.Attributes["via"]; (via == "eventbridge") != eventBridgeFirst {
					t.Fatalf("via %q, attributes %v", via, got.Attributes)
				}
				// WHEN both paths deliver it again
				deliverHTTPS(200)
				deliverBus()
				// THEN nothing is enqueued and nothing more is written
				if d := h.Depth(h.Queues.Queue); d != 0 {
					t.Fatalf("a duplicate of a processed fact was enqueued: depth %d", d)
				}
				if again := h.EventOf(p.source, p.eventID); !slices.Equal(pt.Actions(again), acts) || len(h.Intents()) != 1 {
					t.Fatalf("audit %v, intents %d", pt.Actions(again), len(h.Intents()))
				}
			})
		}
	}
}

// A thin Stripe event (an event destination's thin payload) through the
// partner bus is accepted under its identity and enqueued. Its processing
// fetches the object from the Stripe API, which is not this test's
// concern. Its thin twin of a snapshot event that came by webhook is the
// same fact: one row.
func TestThinStripeEventThroughEventBridge(t *testing.T) {
	h := ebHarness(t)
	thin := func(id, snapshot string) []byte {
		detail := `{"id":"` + id + `","object":"v2.core.event","type":"v1.customer.subscription.updated","livemode":false,` +
			`"created":"2026-11-30T12:00:00.000Z","context":null,` +
			`"related_object":{"id":"sub_test_FAKE_thin_0001","type":"subscription","url":"/v1/subscriptions/sub_test_FAKE_thin_0001"}`
		if snapshot != "" {
			detail += `,"snapshot_event":"` + snapshot + `"`
		}
		detail += `}`
		b, _ := json.Marshal(events.EventBridgeEvent{Version: "0", ID: "ffffffff-FAKE-0000-0000-" + id[len(id)-4:],
			DetailType: "v1.customer.subscription.updated", Source: ebStripe, Time: pt.Start, Detail: json.RawMessage(detail)})
		return b
	}
	// GIVEN a thin event with no snapshot twin
	if err := bridge(t, h, thin("evt_test_FAKE_thin_0001", "")); err != nil {
		t.Fatal(err)
	}
	// THEN it is one row under its own id, naming the object it is about
	ev := h.Event("evt_test_FAKE_thin_0001")
	if ev.Status != ledger.StatusReceived || ev.EventType != "v1.customer.subscription.updated" || ev.Subject != "sub_test_FAKE_thin_0001" ||
		ev.Attributes["format"] != "thin" || ev.Attributes["via"] != "eventbridge" {
		t.Fatalf("row %+v", ev)
	}
	// AND a pointer to it waits for the processor
	msgs := h.Receive(h.Queues.Queue)
	if len(msgs) != 1 {
		t.Fatalf("%d pointers", len(msgs))
	}
	if ptr, err := queue.ParsePointer(*msgs[0].Body); err != nil || ptr.Source != "stripe" || ptr.EventID != "evt_test_FAKE_thin_0001" {
		t.Fatalf("pointer %+v %v", ptr, err)
	}

	// GIVEN a snapshot event delivered by webhook, and its thin twin by the bus
	_, snap := ebFixture(t, "stripe-customer.subscription.updated.json")
	if r := webhookOf(t, h, "stripe", snap)(); r.Status != 202 {
		t.Fatalf("https %d", r.Status)
	}
	if err := bridge(t, h, thin("evt_test_FAKE_thin_0002", "evt_1QfixtureEBSubUpd01")); err != nil {
		t.Fatal(err)
	}
	// THEN they are one row, the snapshot's, which kept its first payload
	twin := h.Event("evt_1QfixtureEBSubUpd01")
	if twin.DeliveryCount != 2 || twin.EventType != "customer.subscription.updated" {
		t.Fatalf("row %+v", twin)
	}
	if _, err := h.Ledger.Get(context.Background(), "stripe", "evt_test_FAKE_thin_0002"); err == nil {
		t.Fatal("the thin twin got a row of its own")
	}
}
