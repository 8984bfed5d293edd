package intake_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// Visibly fake secrets of the HMAC-family sources. The Standard Webhooks
// one is base64 after "whsec_", as that scheme requires.
const (
	hfSecretSW      = "whsec_testFAKEintakeSW0000000000000000"
	hfSecretShopify = "shpss_test_FAKE_intake"
	hfSecretGitHub  = "gh_test_FAKE_intake"
	hfSecretQuiltt  = "quiltt_test_FAKE_intake"
	hfSecretPartner = "hmac_test_FAKE_intake"
	hfSecretWrong   = "whsec_testFAKEintakeWrong0000000000000" // base64 too, so it is a wrong key for every scheme
)

const hfSources = `{"sources":[
  {"name":"orders","kind":"standard-webhooks","secrets":["env:SW_SECRET"],"options":{"version_path":"data.revision"}},
  {"name":"shopify","kind":"shopify","secrets":["env:SHOPIFY_SECRET"]},
  {"name":"github","kind":"github","secrets":["env:GITHUB_SECRET"]},
  {"name":"quiltt","kind":"quiltt","secrets":["env:QUILTT_SECRET"]},
  {"name":"partner","kind":"hmac","secrets":["env:PARTNER_SECRET"],"options":{"header":"X-Partner-Signature","prefix":"sha256=",
    "timestamp_header":"x-partner-timestamp","id_path":"event_id","type_path":"kind","subject_path":"invoice.id","delivery_id_header":"x-partner-delivery"}}
]}`

func hfHarness(t *testing.T) *pt.Harness {
	return pt.New(t, pt.Options{SourcesDoc: hfSources, Secrets: map[string]string{
		"SW_SECRET": hfSecretSW, "SHOPIFY_SECRET": hfSecretShopify, "GITHUB_SECRET": hfSecretGitHub,
		"QUILTT_SECRET": hfSecretQuiltt, "PARTNER_SECRET": hfSecretPartner,
	}})
}

func hmacSHA256(secret string, parts ...string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

// hfScheme is one source under test: how to sign a delivery for it, and
// the ledger row a valid delivery of its fixture must create.
type hfScheme struct {
	source  string
	fixture string
	secret  string
	sign    func(t *testing.T, at time.Time, body []byte, secret string) map[string]string
	eventID string
	check   func(t *testing.T, ev ledger.Event)
}

func hfSchemes() []hfScheme {
	return []hfScheme{
		{
			source: "orders", fixture: "standardwebhooks/order.updated.json", secret: hfSecretSW,
			sign: func(t *testing.T, at time.Time, body []byte, secret string) map[string]string {
				wh, err := standardwebhooks.NewWebhook(secret)
				if err != nil {
					t.Fatal(err)
				}
				sig, err := wh.Sign("msg_test_FAKE_order42r12", at, body)
				if err != nil {
					t.Fatal(err)
				}
				// svix-* on purpose: the other family must be accepted too.
				return map[string]string{"svix-id": "msg_test_FAKE_order42r12", "svix-timestamp": fmt.Sprint(at.Unix()), "svix-signature": sig}
			},
			eventID: "msg_test_FAKE_order42r12",
			check: func(t *testing.T, ev ledger.Event) {
				if ev.EventType != "order.updated" || ev.Subject != "O-42" || ev.VersionHint != "12" || ev.FirstDeliveryID != "msg_test_FAKE_order42r12" {
					t.Errorf("row %+v", ev)
				}
			},
		},
		{
			source: "shopify", fixture: "shopify/orders-updated.json", secret: hfSecretShopify,
			sign: func(t *testing.T, at time.Time, body []byte, secret string) map[string]string {
				return map[string]string{
					"x-shopify-hmac-sha256": base64.StdEncoding.EncodeToString(hmacSHA256(secret, string(body))),
					"x-shopify-topic":       "orders/updated", "x-shopify-shop-domain": "fixture-shop.myshopify.com",
					"x-shopify-webhook-id": "wh_test_FAKE_1", "x-shopify-event-id": "ev_test_FAKE_shopify_1",
					"x-shopify-triggered-at": at.Add(-3 * time.Hour).Format(time.RFC3339Nano), "x-shopify-api-version": "2025-01",
				}
			},
			eventID: "ev_test_FAKE_shopify_1",
			check: func(t *testing.T, ev ledger.Event) {
				if ev.EventType != "orders/updated" || ev.Subject != "gid://shopify/Order/820982911946154508" ||
					ev.VersionHint != "2026-11-30T06:59:58-05:00" || ev.FirstDeliveryID != "wh_test_FAKE_1" ||
					ev.Attributes["shop_domain"] != "fixture-shop.myshopify.com" || ev.Attributes["webhook_id"] != "wh_test_FAKE_1" {
					t.Errorf("row %+v", ev)
				}
			},
		},
		{
			source: "github", fixture: "github/push.json", secret: hfSecretGitHub,
			sign: func(t *testing.T, at time.Time, body []byte, secret string) map[string]string {
				return map[string]string{
					"x-hub-signature-256": "sha256=" + hex.EncodeToString(hmacSHA256(secret, string(body))),
					"x-github-event":      "push", "x-github-delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
				}
			},
			eventID: "72d3162e-cc78-11e3-81ab-4c9367dc0958",
			check: func(t *testing.T, ev ledger.Event) {
				if ev.EventType != "push" || ev.Subject != "octo-org/webhooks-fixture" || ev.FirstDeliveryID != "72d3162e-cc78-11e3-81ab-4c9367dc0958" {
					t.Errorf("row %+v", ev)
				}
			},
		},
		{
			source: "quiltt", fixture: "quiltt/connection-events.json", secret: hfSecretQuiltt,
			sign:    quilttSign,
			eventID: "evt_1QfixtureQuilttSync01",
			check: func(t *testing.T, ev ledger.Event) {
				if ev.EventType != "connection.synced.successful" || ev.Subject != "conn_1QfixtureConn0001" || ev.Attributes["profile_id"] != "p_1QfixtureProfile01" {
					t.Errorf("row %+v", ev)
				}
			},
		},
		{
			source: "partner", fixture: "", secret: hfSecretPartner,
			sign: func(t *testing.T, at time.Time, body []byte, secret string) map[string]string {
				ts := fmt.Sprint(at.Unix())
				return map[string]string{
					"x-partner-signature": "sha256=" + hex.EncodeToString(hmacSHA256(secret, ts, ".", string(body))),
					"x-partner-timestamp": ts, "x-partner-delivery": "dlv_test_FAKE_1",
				}
			},
			eventID: "ev_test_FAKE_partner_1",
			check: func(t *testing.T, ev ledger.Event) {
				if ev.EventType != "invoice.paid" || ev.Subject != "inv_test_FAKE_1" || ev.FirstDeliveryID != "dlv_test_FAKE_1" {
					t.Errorf("row %+v", ev)
				}
			},
		},
	}
}

func quilttSign(t *testing.T, at time.Time, body []byte, secret string) map[string]string {
	ts := fmt.Sprint(at.Unix())
	return map[string]string{"quiltt-signature": base64.StdEncoding.EncodeToString(hmacSHA256(secret, "1", ts, string(body))), "quiltt-timestamp": ts}
}

const partnerBody = `{"event_id":"ev_test_FAKE_partner_1","kind":"invoice.paid","invoice":{"id":"inv_test_FAKE_1","amount_minor":12990}}`

// Every HMAC-family scheme through the intake: forged deliveries get 401
// and touch neither the ledger nor the queue; a valid one gets 202 and its
// ledger row with the identity the verifier read.
func TestHMACFamilyThroughIntake(t *testing.T) {
	h := hfHarness(t)
	ctx := context.Background()
	for _, sc := range hfSchemes() {
		t.Run(sc.source, func(t *testing.T) {
			body := []byte(partnerBody)
			if sc.fixture != "" {
				body = fixture(t, sc.fixture)
			}
			at := h.Clock.Now()
			tampered := []byte(strings.Replace(string(body), "}", ` }`, 1))
			forged := []struct {
				name    string
				body    []byte
				headers map[string]string
			}{
				{"wrong secret", body, sc.sign(t, at, body, hfSecretWrong)},
				{"tampered body", tampered, sc.sign(t, at, body, sc.secret)},
				{"no signature headers", body, map[string]string{"content-type": "application/json"}},
			}
			for _, f := range forged {
				depth := h.Depth(h.Queues.Queue)
				if r := h.DeliverTo(sc.source, f.body, f.headers); r.Status != 401 {
					t.Fatalf("%s: status %d, want 401 (%s)", f.name, r.Status, r.Body)
				}
				if _, err := h.Ledger.Get(ctx, sc.source, sc.eventID); !errors.Is(err, ledger.ErrNotFound) {
					t.Fatalf("%s: a rejected delivery left a row: %v", f.name, err)
				}
				if d := h.Depth(h.Queues.Queue); d != depth {
					t.Fatalf("%s: queue depth %d, was %d", f.name, d, depth)
				}
			}

			depth := h.Depth(h.Queues.Queue)
			if r := h.DeliverTo(sc.source, body, sc.sign(t, at, body, sc.secret)); r.Status != 202 {
				t.Fatalf("valid delivery: status %d (%s)", r.Status, r.Body)
			}
			ev, err := h.Ledger.Get(ctx, sc.source, sc.eventID)
			if err != nil {
				t.Fatalf("ledger row: %v", err)
			}
			if ev.Status != ledger.StatusReceived {
				t.Errorf("status %s", ev.Status)
			}
			sc.check(t, ev)
			if d := h.Depth(h.Queues.Queue); d <= depth {
				t.Errorf("queue depth %d after a valid delivery, was %d", d, depth)
			}
		})
	}
}

// One Quiltt delivery carries several events: one row each, each with its
// own bytes; a later delivery with one old and one new event adds only the
// new row.
func TestQuilttDeliveryOfSeveralEvents(t *testing.T) {
	h := hfHarness(t)
	ctx := context.Background()
	body := fixture(t, "quiltt/connection-events.json")
	var parsed struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(body, &parsed); err != nil || len(parsed.Events) != 2 {
		t.Fatalf("fixture: %v", err)
	}
	if r := h.DeliverTo("quiltt", body, quilttSign(t, h.Clock.Now(), body, hfSecretQuiltt)); r.Status != 202 {
		t.Fatalf("status %d (%s)", r.Status, r.Body)
	}
	for i, id := range []string{"evt_1QfixtureQuilttSync01", "evt_1QfixtureQuilttSync02"} {
		ev, err := h.Ledger.Get(ctx, "quiltt", id)
		if err != nil {
			t.Fatalf("row %s: %v", id, err)
		}
		want := fmt.Sprintf("conn_1QfixtureConn000%d", i+1)
		if ev.EventType != "connection.synced.successful" || ev.Subject != want || ev.FirstDeliveryID != "" {
			t.Errorf("row %+v, want subject %s", ev, want)
		}
		raw, err := h.Ledger.Payload(ctx, ev)
		if err != nil || string(raw) != string(parsed.Events[i]) {
			t.Errorf("row %s stores %q, want its own element %q (%v)", id, raw, parsed.Events[i], err)
		}
	}
	if d := h.Depth(h.Queues.Queue); d != 2 {
		t.Fatalf("queue depth %d, want 2", d)
	}
	if n := hfEventRows(t, h, "quiltt"); n != 2 {
		t.Fatalf("%d rows, want 2", n)
	}

	h.Clock.Advance(time.Minute)
	second := []byte(`{"eventTypes":["connection.synced.successful"],"events":[` + string(parsed.Events[1]) + `,` +
		`{"id":"evt_1QfixtureQuilttSync03","type":"connection.synced.successful","record":{"id":"conn_1QfixtureConn0003","profileId":"p_1QfixtureProfile01"}}]}`)
	if r := h.DeliverTo("quiltt", second, quilttSign(t, h.Clock.Now(), second, hfSecretQuiltt)); r.Status != 202 {
		t.Fatalf("second delivery: status %d (%s)", r.Status, r.Body)
	}
	if n := hfEventRows(t, h, "quiltt"); n != 3 {
		t.Fatalf("%d rows after the second delivery, want 3", n)
	}
	if ev, err := h.Ledger.Get(ctx, "quiltt", "evt_1QfixtureQuilttSync03"); err != nil || ev.Subject != "conn_1QfixtureConn0003" {
		t.Fatalf("new row %+v: %v", ev, err)
	}
	if ev, err := h.Ledger.Get(ctx, "quiltt", "evt_1QfixtureQuilttSync02"); err != nil || ev.DeliveryCount != 2 {
		t.Fatalf("old row %+v: %v, want delivery count 2", ev, err)
	}
	if ev, err := h.Ledger.Get(ctx, "quiltt", "evt_1QfixtureQuilttSync01"); err != nil || ev.DeliveryCount != 1 {
		t.Fatalf("untouched row %+v: %v", ev, err)
	}
}

// hfEventRows counts a source's event rows (a test-only scan).
func hfEventRows(t *testing.T, h *pt.Harness, source string) int {
	t.Helper()
	out, err := h.DB.Scan(context.Background(), &dynamodb.ScanInput{
		TableName: aws.String(h.Table), FilterExpression: aws.String("#i = :k AND #s = :s"),
		ExpressionAttributeNames: map[string]string{"#i": "item", "#s": "source"},
		ExpressionAttributeValues: map[string]dtypes.AttributeValue{
			":k": &dtypes.AttributeValueMemberS{Value: "event"}, ":s": &dtypes.AttributeValueMemberS{Value: source},
		},
	})
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	return len(out.Items)
}
