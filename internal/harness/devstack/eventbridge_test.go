package devstack_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/intake"
	"github.com/effectively-once/webhooks/internal/ledger"
)

func TestEventBridgeEventWrapsTheBodyAsAPartnerWould(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ev, err := devstack.EventBridgeEvent("stripe", "aws.partner/stripe.com/ed_local_FAKE_0001", []byte(`{"id":"evt_1","type":"customer.subscription.updated"}`), now)
	if err != nil || ev.Source != "aws.partner/stripe.com/ed_local_FAKE_0001" || ev.DetailType != "customer.subscription.updated" ||
		string(ev.Detail) != `{"id":"evt_1","type":"customer.subscription.updated"}` || len(ev.ID) != 36 || !ev.Time.Equal(now) {
		t.Fatalf("stripe event %+v %v", ev, err)
	}
	ev, err = devstack.EventBridgeEvent("shopify", "aws.partner/shopify.com/1/x", []byte(`{"payload":{"id":1},"metadata":{"X-Shopify-Topic":"orders/updated"}}`), now)
	if err != nil || ev.DetailType != "shopifyWebhook" {
		t.Fatalf("shopify event %+v %v", ev, err)
	}
	for kind, body := range map[string]string{"stripe": `[1]`, "shopify": `{"id":1}`} {
		if _, err := devstack.EventBridgeEvent(kind, "aws.partner/x/y", []byte(body), now); err == nil {
			t.Errorf("%s: %s accepted", kind, body)
		}
	}
	// The checked-in configuration routes the fixtures' partner event sources.
	_, set, err := devstack.LoadFile("../../../scripts/devstack.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"stripe-customer.subscription.updated.json", "shopify-orders-updated.json"} {
		var fx events.EventBridgeEvent
		raw, _ := os.ReadFile("../../../events/eventbridge/" + f)
		if err := json.Unmarshal(raw, &fx); err != nil {
			t.Fatal(err)
		}
		if _, ok := set.ByEventSource(fx.Source); !ok {
			t.Errorf("scripts/devstack.json has no source for %s (%s)", fx.Source, f)
		}
	}
}

// TestLocalStackRunsTheBridge starts the local stack with the checked-in
// configuration (stripe and shopify over https+eventbridge) and sends one
// Stripe fact through /_dev/eventbridge and as a signed webhook: the real
// bridge bootstrap under aws-lambda-rie accepts it, and the pipeline
// processes it once. Then the reconciler sweeps the bridge DLQ: the letter
// the bridge's role wrote (as Lambda does) is redelivered, the one another
// principal wrote is refused and recorded, so the SenderId the local stack
// sees matches what it tells the reconciler to allow.
func TestLocalStackRunsTheBridge(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end stack test skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	stack, file, logs := devstack.StartForTest(t, ctx)
	post := func(path string, body []byte, headers map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, stack.HTTPURL()+path, bytes.NewReader(body))
		req.Header.Set("content-type", "application/json")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	fixture := func(name string) events.EventBridgeEvent {
		var ev events.EventBridgeEvent
		raw, _ := os.ReadFile("../../../events/eventbridge/" + name)
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatal(err)
		}
		return ev
	}

	// GIVEN a Stripe event put on the partner bus (the dev endpoint)
	detail := []byte(fixture("stripe-customer.subscription.updated.json").Detail)
	if code, body := post("/_dev/eventbridge/stripe", detail, nil); code != http.StatusAccepted {
		t.Fatalf("eventbridge: %d %s\n%s", code, body, logs.String())
	}
	// AND the same event as a signed webhook
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, []byte(file.Secrets["LOCAL_STRIPE_WEBHOOK_SECRET"]))
	mac.Write([]byte(ts + "." + string(detail)))
	if code, body := post("/webhooks/stripe", detail, map[string]string{"Stripe-Signature": fmt.Sprintf("t=%s,v1=%x", ts, mac.Sum(nil))}); code != 202 && code != 200 {
		t.Fatalf("webhook: %d %s", code, body)
	}
	// AND a Shopify webhook through its partner bus
	shop := fixture("shopify-orders-updated.json")
	if code, body := post("/_dev/eventbridge/shopify", shop.Detail, nil); code != http.StatusAccepted {
		t.Fatalf("shopify eventbridge: %d %s", code, body)
	}
	// AND requests the endpoint refuses: a source without eventbridge
	// delivery, and a Shopify body that is not {payload, metadata}
	if code, _ := post("/_dev/eventbridge/orders", detail, nil); code != http.StatusNotFound {
		t.Fatalf("orders: %d", code)
	}
	if code, _ := post("/_dev/eventbridge/shopify", detail, nil); code != http.StatusBadRequest {
		t.Fatalf("shopify with a stripe body: %d", code)
	}

	// THEN the pipeline processes each fact once, under one ledger row each
	l, err := ledger.New(stack.DB, ledger.Options{Table: stack.Table()})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		ev, err := l.Get(ctx, "stripe", "evt_1QfixtureEBSubUpd01")
		sev, serr := l.Get(ctx, "shopify", "ev_test_FAKE_eventbridge_0001")
		if err == nil && serr == nil && ev.Status == ledger.StatusProcessed && sev.Status == ledger.StatusProcessed {
			if ev.DeliveryCount != 2 || ev.Result.Outcome != ledger.OutcomeApplied || strings.Count(strings.Join(actions(ev), ","), "complete") != 1 {
				t.Fatalf("stripe row %+v", ev)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not processed: %+v %v / %+v %v\n%s", ev, err, sev, serr, logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}

	// GIVEN the bridge DLQ holds an event the bridge failed on, written as
	// Lambda writes it (with the bridge's role), and a made-up one written
	// by another principal (the stack's own key)
	letter := func(id string) string {
		d := strings.ReplaceAll(string(detail), "evt_1QfixtureEBSubUpd01", id)
		ev, err := devstack.EventBridgeEvent("stripe", fixture("stripe-customer.subscription.updated.json").Source, []byte(d), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(ev)
		return string(b)
	}
	if err := stack.DeadLetter(ctx, letter("evt_local_FAKE_dlq_0001")); err != nil {
		t.Fatal(err)
	}
	if _, err := stack.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(stack.BridgeDLQ), MessageBody: aws.String(letter("evt_local_FAKE_forged_0001"))}); err != nil {
		t.Fatal(err)
	}
	// WHEN the reconciler runs
	if _, err := stack.Invoke(ctx, "reconciler", []byte(`{"version":"0","id":"test","detail-type":"Scheduled Event","source":"aws.events","detail":{}}`), nil); err != nil {
		t.Fatalf("reconciler: %v\n%s", err, logs.String())
	}
	// THEN the bridge's letter is redelivered, and the other one is on
	// record, refused, naming its sender, and never accepted
	deadline = time.Now().Add(60 * time.Second)
	for {
		_, gerr := l.Get(ctx, "stripe", "evt_local_FAKE_dlq_0001")
		var refused []ledger.Event
		open, err := l.ListOpen(ctx, "event", 100, ledger.StatusQuarantined)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range open {
			if o.Source == intake.RefusedDLQSource {
				ev, err := l.Get(ctx, o.Source, o.EventID)
				if err != nil {
					t.Fatal(err)
				}
				refused = append(refused, ev)
			}
		}
		if gerr == nil && len(refused) == 1 {
			if refused[0].Attributes["sender_id"] != localaws.FakeAccessKey || refused[0].Attributes["eventbridge_id"] == "" {
				t.Fatalf("refusal %+v", refused[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bridge DLQ not swept: %v, %d refused\n%s", gerr, len(refused), logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := l.Get(ctx, "stripe", "evt_local_FAKE_forged_0001"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the forged letter was accepted: %v", err)
	}
}

func actions(ev ledger.Event) []string {
	var out []string
	for _, a := range ev.Audit {
		out = append(out, a.Action)
	}
	return out
}
