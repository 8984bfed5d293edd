package operator_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// seedEvents leaves one event in each interesting state, a minute apart,
// then moves the clock to t0+1h.
func seedEvents(f *fixture) {
	ctx := context.Background()
	f.accept("stripe", "evt_recv", "invoice.paid", `{"id":"evt_recv","type":"invoice.paid","data":{"object":{}}}`)
	f.Clock.Advance(time.Minute)
	f.dead("stripe", "evt_dead", "invoice.paid")
	f.Clock.Advance(time.Minute)
	f.accept("shopify", "evt_quar", "orders/create", `{"id":1}`)
	if err := f.L.Quarantine(ctx, f.claim("shopify", "evt_quar"), "malformed", "no order id"); err != nil {
		f.t.Fatal(err)
	}
	f.Clock.Advance(time.Minute)
	f.accept("stripe", "evt_done", "invoice.paid", `{"id":"evt_done"}`)
	if _, err := f.L.Commit(ctx, f.claim("stripe", "evt_done"), nil, nil); err != nil {
		f.t.Fatal(err)
	}
	f.Clock.Advance(57 * time.Minute)
}

func TestEventsListFromTheDueIndex(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	seedEvents(f)

	requireEqual(t, "events list", f.mustRun("events", "list"), `SOURCE   EVENT_ID  TYPE           STATUS       SINCE                 AGE     ATTEMPTS  ERROR
stripe   evt_recv  invoice.paid   RECEIVED     2026-11-30T12:00:00Z  1h00m   0         -
stripe   evt_dead  invoice.paid   DEAD         2026-11-30T12:01:00Z  59m00s  1         commit_failed
shopify  evt_quar  orders/create  QUARANTINED  2026-11-30T12:02:00Z  58m00s  1         malformed
3 events from the due index
`)
	requireEqual(t, "by source", f.mustRun("events", "list", "--source", "shopify"), `SOURCE   EVENT_ID  TYPE           STATUS       SINCE                 AGE     ATTEMPTS  ERROR
shopify  evt_quar  orders/create  QUARANTINED  2026-11-30T12:02:00Z  58m00s  1         malformed
1 events from the due index
`)
	requireEqual(t, "by status, type and age", f.mustRun("events", "list", "--status", "dead,received", "--type", "invoice.paid", "--older-than", "59m30s"),
		`SOURCE  EVENT_ID  TYPE          STATUS    SINCE                 AGE    ATTEMPTS  ERROR
stripe  evt_recv  invoice.paid  RECEIVED  2026-11-30T12:00:00Z  1h00m  0         -
1 events from the due index
`)
	requireEqual(t, "limit", f.mustRun("events", "list", "--limit", "1"), `SOURCE  EVENT_ID  TYPE          STATUS    SINCE                 AGE    ATTEMPTS  ERROR
stripe  evt_recv  invoice.paid  RECEIVED  2026-11-30T12:00:00Z  1h00m  0         -
1 events from the due index (more match: raise --limit or narrow the filter)
`)
	requireEqual(t, "json", f.mustRun("events", "list", "--status", "DEAD", "--json"), `{
  "via": "due_index",
  "events": [
    {
      "source": "stripe",
      "event_id": "evt_dead",
      "type": "invoice.paid",
      "status": "DEAD",
      "since": "2026-11-30T12:01:00Z",
      "age_seconds": 3540,
      "attempts": 1,
      "error_code": "commit_failed"
    }
  ],
  "count": 1,
  "more": false
}
`)
}

func TestEventsListProcessedNeedsAScan(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	seedEvents(f)
	out, errOut, code := f.run("events", "list", "--status", "PROCESSED")
	if code != 2 || out != "" || !strings.Contains(errOut, "PROCESSED events are not on the due index; add --scan") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	requireEqual(t, "scan", f.mustRun("events", "list", "--status", "PROCESSED", "--scan"), `SOURCE  EVENT_ID  TYPE          STATUS     SINCE                 AGE     ATTEMPTS  ERROR
stripe  evt_done  invoice.paid  PROCESSED  2026-11-30T12:03:00Z  57m00s  1         -
1 events from a table scan
table scan: 1 requests
`)
	var got struct {
		Via    string
		Count  int
		Events []struct {
			EventID string `json:"event_id"`
		}
	}
	if err := json.Unmarshal([]byte(f.mustRun("events", "list", "--scan", "--source", "stripe", "--json")), &got); err != nil {
		t.Fatal(err)
	}
	if got.Via != "scan" || got.Count != 3 || got.Events[0].EventID != "evt_recv" || got.Events[2].EventID != "evt_done" {
		t.Fatalf("scan of every stripe event: %+v", got)
	}
}

func TestEventsShow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	payload := `{"type":"invoice.paid","id":"evt_show","data":{"object":{"customer":"cus_secretish"}}}`
	f.accept("stripe", "evt_show", "invoice.paid", payload)
	f.Clock.Advance(time.Second)
	f.accept("stripe", "evt_show", "invoice.paid", payload) // a second delivery
	f.Clock.Advance(time.Minute)
	if err := f.L.Dead(context.Background(), f.claim("stripe", "evt_show"), "projection_failed", "lookup timed out"); err != nil {
		t.Fatal(err)
	}
	out := f.mustRun("events", "show", "stripe", "evt_show")
	requireEqual(t, "show", out, `event         stripe/evt_show
type          invoice.paid
subject       -
version hint  -
status        DEAD
attempts      1 this round, 1 in all
error         projection_failed: lookup timed out
received      2026-11-30T12:00:00Z
processed     -
expires       -
deliveries    2 (first d-evt_show, last d-evt_show at 2026-11-30T12:00:01Z)
recent        2026-11-30T12:00:01.000Z d-evt_show
payload       86 bytes, sha256 44bfdf19f81515353e628fad1dc9867e5dda2d88c41d960ac5f37fdf207c383a, JSON object with keys data, id, type (body not shown: --payload)
audit:
AT                    FROM        TO          ACTOR     ACTION  REASON
2026-11-30T12:00:00Z  -           RECEIVED    intake    accept  delivery d-evt_show
2026-11-30T12:01:01Z  RECEIVED    PROCESSING  worker-1  claim   -
2026-11-30T12:01:01Z  PROCESSING  DEAD        worker-1  dead    projection_failed: lookup timed out
`)
	if strings.Contains(out, "cus_secretish") {
		t.Fatal("the payload body was printed without --payload")
	}
	if out := f.mustRun("events", "show", "stripe", "evt_show", "--payload"); !strings.HasSuffix(out, "payload body:\n"+payload+"\n") {
		t.Fatalf("--payload:\n%s", out)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(f.mustRun("events", "show", "stripe", "evt_show", "--json")), &got); err != nil {
		t.Fatal(err)
	}
	p := got["payload"].(map[string]any)
	if got["delivery_count"] != 2.0 || got["status"] != "DEAD" || p["size"] != 86.0 || p["kind"] != "JSON object" || got["body"] != nil ||
		len(got["audit"].([]any)) != 3 || p["sha256"] != "44bfdf19f81515353e628fad1dc9867e5dda2d88c41d960ac5f37fdf207c383a" {
		t.Fatalf("json: %v", got)
	}
	_, errOut, code := f.run("events", "show", "stripe", "evt_nope")
	if code != 1 || errOut != "webhookctl: get event stripe/evt_nope: ledger: not found\n" {
		t.Fatalf("missing event: exit %d %q", code, errOut)
	}
}

// A processed event shows every delivery it received, duplicates after
// processing included, and the operation ids of the intents it wrote, one
// line each, so they can be fed to `intents show` and the downstream.
func TestEventsShowDuplicatesAndOperations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.accept("orders", "msg_o42_12", "order.cancelled", `{"type":"order.cancelled","data":{"id":"O-42","revision":12}}`)
	w := &ledger.ProjectionWrite{Name: "order", Subject: "O-42", Version: 12, Fingerprint: "cancelled", State: map[string]any{"status": "cancelled"}}
	ins := []ledger.Intent{
		{OperationID: "9f2c41d0a7b35e6c8d1f0a2b3c4d5e6f", Kind: "refund", Subject: "O-42"},
		{OperationID: "0b1c2d3e4f5061728394a5b6c7d8e9f0", Kind: "notify_cancellation", Subject: "O-42"},
	}
	if _, err := f.L.Commit(ctx, f.claim("orders", "msg_o42_12"), w, ins); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"d-retry-1", "d-retry-2"} {
		f.Clock.Advance(time.Minute)
		// The same bytes: other bytes under this id would be a conflict.
		d := ledger.Delivery{Source: "orders", EventID: "msg_o42_12", EventType: "order.cancelled", DeliveryID: id, Payload: []byte(`{"type":"order.cancelled","data":{"id":"O-42","revision":12}}`)}
		if res, err := f.L.Accept(ctx, d); err != nil || !res.Duplicate {
			t.Fatalf("duplicate: %+v %v", res, err)
		}
	}
	out := f.mustRun("events", "show", "orders", "msg_o42_12")
	for _, want := range []string{
		"status        PROCESSED\n",
		"deliveries    3 (first d-msg_o42_12, last d-retry-2 at 2026-11-30T12:02:00Z)\n",
		"result        applied order/O-42 version 12, 2 intents\n",
		"operation     9f2c41d0a7b35e6c8d1f0a2b3c4d5e6f refund\n",
		"operation     0b1c2d3e4f5061728394a5b6c7d8e9f0 notify_cancellation\n",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("events show lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "recent        2026-11-30T12:02:00.000Z d-retry-2") {
		t.Fatalf("the newest delivery is not first in recent:\n%s", out)
	}
	var got struct {
		DeliveryCount int                     `json:"delivery_count"`
		Recent        []ledger.DeliveryRecord `json:"recent_deliveries"`
		Result        ledger.Result           `json:"result"`
	}
	if err := json.Unmarshal([]byte(f.mustRun("events", "show", "orders", "msg_o42_12", "--json")), &got); err != nil {
		t.Fatal(err)
	}
	if got.DeliveryCount != 3 || len(got.Recent) == 0 || got.Recent[0].ID != "d-retry-2" ||
		len(got.Result.Operations) != 2 || got.Result.Operations[0] != (ledger.Operation{ID: ins[0].OperationID, Kind: "refund"}) {
		t.Fatalf("json: %+v", got)
	}
}

// A once intent a later revision carried again under its operation id
// (the declared deduplication) is shown on the event that did not write
// it: which id, which kind, the event and version that hold it, in the
// text (one line per id), the audit and the JSON.
func TestEventsShowDeduplicatedIntents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	dunning := func(id string, version int64, attempt int) {
		f.accept("stripe", id, "invoice.payment_failed", `{"id":"`+id+`"}`)
		w := &ledger.ProjectionWrite{Name: "billing", Subject: "sub_1", Version: version, Fingerprint: id, State: map[string]any{"attempt": attempt}}
		in := ledger.Intent{OperationID: "op-dunning-sub_1", Kind: "dunning.email", Subject: "sub_1", Payload: map[string]any{"attempt": attempt}}
		if _, err := f.L.Commit(ctx, f.claim("stripe", id), w, []ledger.Intent{in}); err != nil {
			t.Fatal(err)
		}
	}
	dunning("evt_fail_1", 1, 1)
	dunning("evt_fail_2", 2, 2)
	out := f.mustRun("events", "show", "stripe", "evt_fail_2")
	for _, want := range []string{
		"result        applied billing/sub_1 version 2, 0 intents\n",
		"deduplicated  op-dunning-sub_1 dunning.email held by stripe/evt_fail_1 at version 1 (another payload)\n",
		"intent_deduplicated",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("events show lacks %q:\n%s", want, out)
		}
	}
	var got struct {
		Result ledger.Result `json:"result"`
	}
	if err := json.Unmarshal([]byte(f.mustRun("events", "show", "stripe", "evt_fail_2", "--json")), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Result.Deduplicated) != 1 || got.Result.Deduplicated[0] != (ledger.Deduplication{OperationID: "op-dunning-sub_1", Kind: "dunning.email", HeldBy: "stripe/evt_fail_1", HeldVersion: 1}) {
		t.Fatalf("json result: %+v", got.Result)
	}
}

// A conflict (other bytes under a known id) is shown on the event.
func TestEventsShowConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.accept("github", "gh-1", "push", `{"ref":"main"}`)
	d := ledger.Delivery{Source: "github", EventID: "gh-1", EventType: "push", DeliveryID: "d-forged", Payload: []byte(`{"ref":"attacker"}`)}
	if res, err := f.L.Accept(ctx, d); err != nil || !res.Conflict {
		t.Fatalf("conflict: %+v %v", res, err)
	}
	if out := f.mustRun("events", "show", "github", "gh-1"); !strings.Contains(out, "conflicts     1 deliveries of this id with other bytes") || !strings.Contains(out, "|d-forged") {
		t.Fatalf("events show:\n%s", out)
	}
}

// A version above 2^53 is shown exactly: the event's stored result is
// written by the commit's update of the event item and read back over
// DynamoDB's wire API, and a Stripe deletion's version is above 2^60.
func TestEventsShowExactLargeVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	const v = int64(1152921511792670487)
	payload := `{"id":"evt_big","type":"customer.subscription.deleted"}`
	f.accept("stripe", "evt_big", "customer.subscription.deleted", payload)
	w := &ledger.ProjectionWrite{Name: "stripe_subscription", Subject: "sub_big", Version: v, Fingerprint: "deleted", Terminal: true, State: map[string]any{"status": "canceled"}}
	if _, err := f.L.Commit(ctx, f.claim("stripe", "evt_big"), w, nil); err != nil {
		t.Fatal(err)
	}
	out := f.mustRun("events", "show", "stripe", "evt_big")
	if want := "result        applied stripe_subscription/sub_big version 1152921511792670487, 0 intents\n"; !strings.Contains(out, want) {
		t.Fatalf("events show lacks %q:\n%s", want, out)
	}
	if p, err := f.L.GetProjection(ctx, "stripe_subscription", "sub_big"); err != nil || p.Version != v {
		t.Fatalf("projection version %d (%v), want %d", p.Version, err, v)
	}
}
