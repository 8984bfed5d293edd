package intake_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/intake"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/source"
)

func fixture(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile("../../events/" + path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// invoke sends an API Gateway HTTP API event through the Lambda JSON path.
func invoke(t *testing.T, h *intake.Handler, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
	t.Helper()
	payload, _ := json.Marshal(ev)
	out, err := lambda.NewHandler(h.HandleHTTPAPI).Invoke(context.Background(), payload)
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

// gatewayEvent loads the API Gateway fixture and puts a freshly signed
// Stripe payload in it.
func gatewayEvent(t *testing.T, h *pt.Harness, body []byte, secret string) events.APIGatewayV2HTTPRequest {
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(fixture(t, "lambda/http-api-webhook.json"), &ev); err != nil {
		t.Fatal(err)
	}
	ev.Body = string(body)
	ev.Headers["stripe-signature"] = h.Sign(body, secret)
	return ev
}

func TestGatewayFixtureIsAcceptedAndEnqueued(t *testing.T) {
	h := pt.New(t, pt.Options{})
	body := fixture(t, "stripe/customer.subscription.updated.json")
	resp := invoke(t, h.Intake, gatewayEvent(t, h, body, pt.SecretPrimary))
	if resp.StatusCode != 202 || resp.Headers["content-type"] != "application/json" {
		t.Fatalf("status %d headers %v body %s", resp.StatusCode, resp.Headers, resp.Body)
	}
	ev := h.Event("evt_1QfixtureSubUpdated01")
	if ev.Status != ledger.StatusReceived || ev.EventType != "customer.subscription.updated" || ev.Subject != "sub_1QfixtureSub0001" || ev.PayloadSize != len(body) {
		t.Fatalf("row %+v", ev)
	}
	if h.Depth(h.Queues.Queue) != 1 {
		t.Fatalf("queue depth %d", h.Depth(h.Queues.Queue))
	}
}

func TestBase64BodyIsVerifiedOnTheDecodedBytes(t *testing.T) {
	h := pt.New(t, pt.Options{})
	body := fixture(t, "stripe/customer.subscription.updated.json")
	ev := gatewayEvent(t, h, body, pt.SecretPrimary)
	ev.Body = base64.StdEncoding.EncodeToString(body)
	ev.IsBase64Encoded = true
	if resp := invoke(t, h.Intake, ev); resp.StatusCode != 202 {
		t.Fatalf("status %d %s", resp.StatusCode, resp.Body)
	}
	raw, err := h.Ledger.Payload(context.Background(), h.Event("evt_1QfixtureSubUpdated01"))
	if err != nil || string(raw) != string(body) {
		t.Fatalf("stored payload differs from the provider's bytes: %v", err)
	}
}

func TestRejectionsTouchNothing(t *testing.T) {
	h := pt.New(t, pt.Options{SourcesDoc: `{"sources":[{"name":"stripe","kind":"stripe","secrets":["env:STRIPE_PRIMARY"],"max_body_bytes":2048}]}`})
	body := fixture(t, "stripe/customer.subscription.updated.json")
	big := []byte(strings.Replace(string(body), `"livemode": false`, `"livemode": false, "pad": "`+strings.Repeat("x", 2048)+`"`, 1))
	cases := []struct {
		name   string
		mutate func(ev *events.APIGatewayV2HTTPRequest)
		status int
	}{
		{"body over the source cap", func(ev *events.APIGatewayV2HTTPRequest) {
			ev.Body = string(big)
			ev.Headers["stripe-signature"] = h.Sign(big, pt.SecretPrimary)
		}, 413},
		{"base64 body over the global cap", func(ev *events.APIGatewayV2HTTPRequest) {
			ev.IsBase64Encoded = true
			ev.Body = strings.Repeat("A", 2<<20)
		}, 413},
		{"invalid base64", func(ev *events.APIGatewayV2HTTPRequest) {
			ev.IsBase64Encoded = true
			ev.Body = "%%% not base64 %%%"
		}, 400},
		{"unknown source", func(ev *events.APIGatewayV2HTTPRequest) { ev.PathParameters["source"] = "shopify" }, 404},
		{"no path parameter", func(ev *events.APIGatewayV2HTTPRequest) { ev.PathParameters = nil }, 404},
		{"GET", func(ev *events.APIGatewayV2HTTPRequest) { ev.RequestContext.HTTP.Method = "GET" }, 405},
		{"no headers at all", func(ev *events.APIGatewayV2HTTPRequest) { ev.Headers = nil }, 401},
		{"empty body", func(ev *events.APIGatewayV2HTTPRequest) { ev.Body = "" }, 401},
		{"mixed-case header name", func(ev *events.APIGatewayV2HTTPRequest) {
			sig := ev.Headers["stripe-signature"]
			delete(ev.Headers, "stripe-signature")
			ev.Headers["Stripe-Signature"] = sig + "0"
		}, 401},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := gatewayEvent(t, h, body, pt.SecretPrimary)
			c.mutate(&ev)
			h.IntakeRec.Reset()
			resp := invoke(t, h.Intake, ev)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, c.status, resp.Body)
			}
			if n := h.IntakeRec.Total(""); n != 0 {
				t.Fatalf("rejected request made %d AWS calls: %s", n, h.IntakeRec)
			}
			if strings.Contains(resp.Body, "whsec") || strings.Contains(resp.Body, "ledger:") {
				t.Fatalf("response leaks internals: %s", resp.Body)
			}
		})
	}
	if _, err := h.Ledger.Get(context.Background(), "stripe", "evt_1QfixtureSubUpdated01"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a rejected request left a row: %v", err)
	}
	if h.Depth(h.Queues.Queue) != 0 {
		t.Fatal("a rejected request left a message")
	}
}

func TestStoreFailuresAskTheProviderToRetry(t *testing.T) {
	body := fixture(t, "stripe/customer.subscription.updated.json")
	cases := []struct {
		name   string
		crash  awstrace.Crash
		status int
		row    bool
	}{
		{"DynamoDB unavailable", awstrace.Crash{Op: "DynamoDB.UpdateItem", Nth: 1, When: awstrace.Before}, 503, false},
		{"SQS unavailable after the put", awstrace.Crash{Op: "SQS.SendMessage", Nth: 1, When: awstrace.Before}, 500, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := pt.New(t, pt.Options{})
			h.IntakeRec.Arm(c.crash)
			resp := invoke(t, h.Intake, gatewayEvent(t, h, body, pt.SecretPrimary))
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.status)
			}
			_, err := h.Ledger.Get(context.Background(), "stripe", "evt_1QfixtureSubUpdated01")
			if c.row != (err == nil) {
				t.Fatalf("row present = %v, want %v", err == nil, c.row)
			}
		})
	}
}

type failingSecrets struct{}

func (failingSecrets) For(context.Context, source.Source, bool) ([]string, error) {
	return nil, source.ErrSecrets
}

func TestSecretsUnavailableIs503(t *testing.T) {
	h := pt.New(t, pt.Options{})
	broken := &intake.Handler{Sources: h.Intake.Sources, Secrets: failingSecrets{}, Ledger: h.Intake.Ledger, Queue: h.Intake.Queue, Now: h.Intake.Now}
	body := fixture(t, "stripe/customer.subscription.updated.json")
	if resp := invoke(t, broken, gatewayEvent(t, h, body, pt.SecretPrimary)); resp.StatusCode != 503 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if h.IntakeRec.Total("") != 0 {
		t.Fatal("AWS calls without a secret")
	}
}

// answer is one event of a 202 body.
type answer struct {
	EventID       string `json:"event_id"`
	Status        string `json:"status"`
	LedgerStatus  string `json:"ledger_status"`
	Reenqueued    *bool  `json:"reenqueued"`
	DeliveryCount int    `json:"delivery_count"`
}

func answers(t *testing.T, body string) []answer {
	t.Helper()
	var b struct{ Events []answer }
	if err := json.Unmarshal([]byte(body), &b); err != nil || len(b.Events) == 0 {
		t.Fatalf("202 body %s: %v", body, err)
	}
	return b.Events
}

// A duplicate of an event still waiting for a worker is re-enqueued; a
// duplicate of a quarantined one is not (it waits for an operator). Each
// answer says which: a new event is "accepted", a duplicate "duplicate"
// with whether it was re-enqueued and the deliveries counted so far.
func TestDuplicatesOfUnfinishedEvents(t *testing.T) {
	h := pt.New(t, pt.Options{})
	body := fixture(t, "stripe/customer.subscription.updated.json")
	var got []answer
	for range 2 {
		resp := invoke(t, h.Intake, gatewayEvent(t, h, body, pt.SecretPrimary))
		if resp.StatusCode != 202 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		got = append(got, answers(t, resp.Body)...)
	}
	if a := got[0]; a.Status != "accepted" || a.LedgerStatus != "RECEIVED" || a.Reenqueued != nil {
		t.Fatalf("new event answered %+v", a)
	}
	if a := got[1]; a.Status != "duplicate" || a.LedgerStatus != "RECEIVED" || a.Reenqueued == nil || !*a.Reenqueued || a.DeliveryCount != 2 {
		t.Fatalf("duplicate of a waiting event answered %+v", a)
	}
	if d := h.Depth(h.Queues.Queue); d != 2 {
		t.Fatalf("RECEIVED duplicate not re-enqueued: depth %d", d)
	}
	if ev := h.Event("evt_1QfixtureSubUpdated01"); ev.DeliveryCount != 2 {
		t.Fatalf("delivery count %d", ev.DeliveryCount)
	}

	orphan := pt.SubscriptionEvent("evt_orphan_dup", "customer.subscription.updated", "sub_x", "active", pt.Start.Unix(), "")
	h.Deliver(orphan, h.Sign(orphan, pt.SecretPrimary))
	h.Drain(10e9, 1e9, h.NewWorker("w"))
	if ev := h.Event("evt_orphan_dup"); ev.Status != ledger.StatusQuarantined {
		t.Fatalf("setup: %s", ev.Status)
	}
	r := h.Deliver(orphan, h.Sign(orphan, pt.SecretPrimary))
	if r.Status != 202 {
		t.Fatalf("duplicate of quarantined: %d", r.Status)
	}
	if a := answers(t, string(r.Body))[0]; a.Status != "duplicate" || a.LedgerStatus != "QUARANTINED" || a.Reenqueued == nil || *a.Reenqueued || a.DeliveryCount != 2 {
		t.Fatalf("duplicate of a quarantined event answered %+v", a)
	}
	if d := h.Depth(h.Queues.Queue); d != 0 {
		t.Fatalf("quarantined duplicate was enqueued: depth %d", d)
	}
}
