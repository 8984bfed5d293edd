package processor_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/source"
	"github.com/effectively-once/webhooks/internal/stripeapi"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

func fixture(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile("../../events/" + path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// One bad message never fails the batch: the SQS fixture holds a valid
// pointer and a malformed body; a third record points at an event another
// worker holds under a live lease.
func TestBatchReportsOnlyTheMessagesToRetry(t *testing.T) {
	h := pt.New(t, pt.Options{})
	body := fixture(t, "stripe/customer.subscription.updated.json")
	if r := h.Deliver(body, h.Sign(body, pt.SecretPrimary)); r.Status != 202 {
		t.Fatalf("deliver: %d", r.Status)
	}
	busy := pt.SubscriptionEvent("evt_busy", "customer.subscription.created", "sub_busy", "active", pt.Start.Unix(), "acct_1")
	h.Deliver(busy, h.Sign(busy, pt.SecretPrimary))
	if _, err := h.Ledger.Claim(context.Background(), "stripe", "evt_busy", ledger.ClaimOptions{Owner: "other", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}

	var batch events.SQSEvent
	if err := json.Unmarshal(fixture(t, "lambda/sqs-pointer-batch.json"), &batch); err != nil {
		t.Fatal(err)
	}
	batch.Records = append(batch.Records, events.SQSMessage{MessageId: "busy-1", Body: `{"v":1,"source":"stripe","event_id":"evt_busy"}`})
	payload, _ := json.Marshal(batch)
	w := h.NewWorker("w")
	out, err := lambda.NewHandler(w.P.HandleSQS).Invoke(context.Background(), payload)
	if err != nil {
		t.Fatalf("batch failed as a whole: %v", err)
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "busy-1" {
		t.Fatalf("batch item failures %+v, want only busy-1", resp.BatchItemFailures)
	}
	ev := h.Event("evt_1QfixtureSubUpdated01")
	if ev.Status != ledger.StatusProcessed || ev.Result.Outcome != ledger.OutcomeApplied {
		t.Fatalf("fixture event %s %+v", ev.Status, ev.Result)
	}
	p, err := h.Ledger.GetProjection(context.Background(), projection.ScopedName("stripe", builtin.StripeSubscriptionProjection), "sub_1QfixtureSub0001")
	if err != nil || p.State["status"] != "past_due" || p.State["entitled"] != true || p.State["account_id"] != "acct_fixture_42" {
		t.Fatalf("projection %+v %v", p.State, err)
	}
	if busyEv := h.Event("evt_busy"); busyEv.Status != ledger.StatusProcessing || busyEv.LeaseOwner != "other" {
		t.Fatalf("busy event disturbed: %s %s", busyEv.Status, busyEv.LeaseOwner)
	}
}

// An event type no projection handles is processed with outcome ignored
// and creates nothing.
func TestUnprojectedEventTypeIsIgnored(t *testing.T) {
	h := pt.New(t, pt.Options{})
	body := []byte(`{"id":"evt_ignored_1","object":"event","type":"charge.refund.updated","created":1796040000,"data":{"object":{"id":"re_1","object":"refund"}}}`)
	if r := h.Deliver(body, h.Sign(body, pt.SecretPrimary)); r.Status != 202 {
		t.Fatalf("deliver %d", r.Status)
	}
	h.Drain(10*time.Second, time.Second, h.NewWorker("w"))
	ev := h.Event("evt_ignored_1")
	if ev.Status != ledger.StatusProcessed || ev.Result.Outcome != ledger.OutcomeIgnored {
		t.Fatalf("%s %+v", ev.Status, ev.Result)
	}
	if h.Projections() != 0 || len(h.Intents()) != 0 {
		t.Fatal("an ignored event wrote state")
	}
}

// BuildResolvers gives every source of a kind with a factory its
// resolver, built from its api settings: the Stripe source with an api
// fetches with its key, read when a fetch needs it (not at cold start);
// the one without quarantines a thin event rather than guess; a kind
// without a factory has none, and an api it could not use is an error.
func TestBuildResolversFromTheSources(t *testing.T) {
	set, err := source.Parse([]byte(`{"sources":[
		{"name":"stripe","kind":"stripe","secrets":["env:W"],"api":{"secret":"env:STRIPE_API_KEY","url":"http://127.0.0.1:1"}},
		{"name":"stripe-legacy","kind":"stripe","secrets":["env:W"]},
		{"name":"shop","kind":"shopify","secrets":["env:S"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	key := func(_ context.Context, ref string) (string, error) {
		asked = append(asked, ref)
		return "rk_test_FAKE_clients", nil
	}
	reg := builtin.Default(builtin.StripeOptions{})
	resolvers, err := processor.BuildResolvers(set, reg, builtin.Resolvers(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resolvers) != 2 || resolvers["stripe"] == nil || resolvers["stripe-legacy"] == nil || len(asked) != 0 {
		t.Fatalf("resolvers %v, keys asked %v", resolvers, asked)
	}
	thin := projection.Event{Source: "stripe", Kind: "stripe", EventID: "evt_thin", Type: "v1.customer.subscription.updated",
		Payload: pt.ThinEvent("evt_thin", "v1.customer.subscription.updated", "subscription", "sub_1", "", pt.Start)}
	// The fetch to a closed port fails as unavailable (retryable).
	_, err = resolvers["stripe"].Resolve(t.Context(), thin)
	if code, _, ok := projection.AsRetryable(err); !ok || code != "stripe_api_unavailable" || !errors.Is(err, stripeapi.ErrUnavailable) || len(asked) != 1 || asked[0] != "env:STRIPE_API_KEY" {
		t.Fatalf("resolve: %v, keys asked %v", err, asked)
	}
	_, err = resolvers["stripe-legacy"].Resolve(t.Context(), thin)
	if code, _ := projection.AsPermanent(err); code != "stripe_api_not_configured" {
		t.Fatalf("resolve without an api: %v", err)
	}
	// A snapshot event is not a resolver's business.
	snapshot := projection.Event{Source: "stripe", Kind: "stripe", Payload: pt.SubscriptionEvent("evt_s", "customer.subscription.updated", "sub_1", "active", pt.Start.Unix(), "")}
	if _, err := resolvers["stripe"].Resolve(t.Context(), snapshot); !errors.Is(err, projection.ErrNothingToResolve) {
		t.Fatalf("resolve a snapshot event: %v", err)
	}

	// Without Stripe's factory, the source's api has no reader.
	_, err = processor.BuildResolvers(set, reg, nil, key)
	if err == nil || !strings.Contains(err.Error(), "source stripe configures an api, but no resolver is registered for kind stripe") {
		t.Fatalf("no factory for an api: %v", err)
	}
}
