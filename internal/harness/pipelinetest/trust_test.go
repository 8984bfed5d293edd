package pipelinetest_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/metrics"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Trust boundaries, attacked where they enter: the intake over
// its Lambda JSON path, on the emulators.

const (
	ghSecret  = "ghsecret_test_FAKE_trust"
	ghSources = `{"sources":[{"name":"github","kind":"github","secrets":["env:GH_SECRET"]}]}`
)

func ghHarness(t *testing.T) *pt.Harness {
	return pt.New(t, pt.Options{SourcesDoc: ghSources, Secrets: map[string]string{"GH_SECRET": ghSecret}})
}

// ghDeliver sends body as GitHub would, signed, under delivery id id.
func ghDeliver(h *pt.Harness, id string, body []byte) (int, string) {
	mac := hmac.New(sha256.New, []byte(ghSecret))
	mac.Write(body)
	r := h.DeliverTo("github", body, map[string]string{
		"x-github-delivery": id, "x-github-event": "push", "x-hub-signature-256": "sha256=" + hex.EncodeToString(mac.Sum(nil)),
	})
	return r.Status, string(r.Body)
}

// GitHub's delivery id is not signed and no time is. Two captured
// deliveries re-sent under made-up ids become suspected replays: kept,
// quarantined for an operator, with no queue message and no business
// work; the genuine events are untouched.
func TestReplayUnderNewIDIsASuspectedReplay(t *testing.T) {
	h := ghHarness(t)
	ctx := context.Background()
	bodies := [][]byte{[]byte(`{"ref":"refs/heads/main","after":"aaa"}`), []byte(`{"ref":"refs/heads/main","after":"bbb"}`)}
	for i, b := range bodies {
		if st, body := ghDeliver(h, "gh-genuine-"+string(rune('a'+i)), b); st != 202 {
			t.Fatalf("genuine delivery %d: %d %s", i, st, body)
		}
	}
	queued := h.Depth(h.Queues.Queue)
	for i, b := range bodies {
		for j := range 3 {
			id := "gh-forged-" + string(rune('a'+i)) + string(rune('0'+j))
			if st, body := ghDeliver(h, id, b); st != 202 || !strings.Contains(body, "QUARANTINED") {
				t.Fatalf("replay %s: %d %s", id, st, body)
			}
			ev, err := h.Ledger.Get(ctx, "github", id)
			if err != nil || ev.Status != ledger.StatusQuarantined || ev.ErrorCode != "suspected_replay" || ev.Attributes["replay_of"] != "gh-genuine-"+string(rune('a'+i)) {
				t.Fatalf("replay row %s: %+v %v", id, ev, err)
			}
		}
	}
	if got := h.Depth(h.Queues.Queue); got != queued {
		t.Fatalf("replays enqueued work: queue depth %d, was %d", got, queued)
	}
	// A genuine redelivery of the same event is still a duplicate.
	if st, body := ghDeliver(h, "gh-genuine-a", bodies[0]); st != 202 || !strings.Contains(body, `"duplicate"`) {
		t.Fatalf("redelivery: %d %s", st, body)
	}
}

// A captured body sent under a victim's event id is not merged as its
// duplicate: it is a conflict, recorded on the row, and nothing else on
// the row changes (delivery count, last delivery, payload).
func TestOtherBytesUnderAKnownIDAreAConflict(t *testing.T) {
	h := ghHarness(t)
	ctx := context.Background()
	if st, body := ghDeliver(h, "gh-victim", []byte(`{"ref":"refs/heads/main"}`)); st != 202 {
		t.Fatalf("victim: %d %s", st, body)
	}
	before, _ := h.Ledger.Get(ctx, "github", "gh-victim")
	st, body := ghDeliver(h, "gh-victim", []byte(`{"ref":"refs/heads/attacker"}`))
	if st != 202 || !strings.Contains(body, `"conflict"`) {
		t.Fatalf("conflicting delivery: %d %s", st, body)
	}
	after, err := h.Ledger.Get(ctx, "github", "gh-victim")
	if err != nil || after.Conflicts != 1 || after.DeliveryCount != before.DeliveryCount || after.LastDeliveryID != before.LastDeliveryID || after.PayloadHash != before.PayloadHash {
		t.Fatalf("row before %+v\nafter %+v (%v)", before, after, err)
	}
}

// A second standard-webhooks source, a vendor with its own lower-value
// secret, next to the operator's orders source.
var vendorSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("test_FAKE_vendor_signing_key_0001"))

func vendorSources(extra string) string {
	opts := `"options":{"subject_path":"data.id","version_path":"data.revision"}`
	return `{"sources":[{"name":"orders","kind":"standard-webhooks","secrets":["env:ORDERS_SECRET"],` + opts + extra + `},` +
		`{"name":"vendor","kind":"standard-webhooks","secrets":["env:VENDOR_SECRET"],` + opts + extra + `}]}`
}

// With its own secret, the vendor sends order.cancelled for O-42 at
// revision 999. It cannot touch the operator's O-42: the operator's
// genuine revision 12 still applies (not stale), its refund and notice are
// the operator's own operation ids and are performed; the vendor's event
// only writes the vendor's own O-42, whose intents have other ids.
func TestAnotherSourceCannotWriteTheOperatorsOrder(t *testing.T) {
	h := pt.NewOrders(t, pt.Options{SourcesDoc: vendorSources(""), Secrets: map[string]string{"VENDOR_SECRET": vendorSecret}}, pt.OutboxOptions{})
	w, d := h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1")
	ctx := context.Background()
	if r := h.DeliverStandardWebhook("vendor", vendorSecret, "msg_vendor_999", pt.OrderEvent("order.cancelled", o42, 999, "", "")); r.Status != 202 {
		t.Fatalf("vendor: %d %s", r.Status, r.Body)
	}
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
	settle(t, h, w, d, "msg_o42_12", pt.OrderEvent("order.cancelled", o42, 12, "", ""))

	requireOrder(t, h, "cancelled", 12)
	requireEvent(t, h, "msg_o42_12", ledger.StatusProcessed, ledger.OutcomeApplied)
	for _, op := range []string{refund12, notify12} {
		if in := h.Outbox.Intent(op); in.Status != ledger.IntentStatusSucceeded || in.Causation != "orders/msg_o42_12" || h.Outbox.Down.Effective(op) != 1 {
			t.Fatalf("operator's intent %s: %s caused by %s, effective %d", op, in.Status, in.Causation, h.Outbox.Down.Effective(op))
		}
	}
	vp, err := h.Ledger.GetProjection(ctx, projection.ScopedName("vendor", builtin.OrderProjection), o42)
	if err != nil || vp.Version != 999 {
		t.Fatalf("the vendor's own O-42: %+v %v", vp, err)
	}
	vendorRefund := projection.ScopedOperationID("vendor", projection.OperationID(o42, "refund_due_to_cancellation", "999"))
	if in := h.Outbox.Intent(vendorRefund); in.Causation != "vendor/msg_vendor_999" || in.Projection != projection.ScopedName("vendor", builtin.OrderProjection) {
		t.Fatalf("vendor's refund %+v", in)
	}
	// Its revision-12 twin cannot pre-empt the operator's id either.
	if projection.ScopedOperationID("vendor", projection.OperationID(o42, "refund_due_to_cancellation", "12")) == refund12 {
		t.Fatal("two scopes share an operation id")
	}
}

// Sharing is explicit: in one domain, with shared_domain on both, the two
// sources write the same subjects (and each can make the other's older
// revision stale). That is what the config said.
func TestSharedDomainSharesSubjects(t *testing.T) {
	h := pt.NewOrders(t, pt.Options{SourcesDoc: vendorSources(`,"domain":"shop","shared_domain":true`), Secrets: map[string]string{"VENDOR_SECRET": vendorSecret}}, pt.OutboxOptions{})
	w, d := h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1")
	if r := h.DeliverStandardWebhook("vendor", vendorSecret, "msg_vendor_13", pt.OrderEvent("order.confirmed", o42, 13, "confirmed", "")); r.Status != 202 {
		t.Fatalf("vendor: %d", r.Status)
	}
	settle(t, h, w, d, "msg_o42_12", pt.OrderEvent("order.cancelled", o42, 12, "", ""))
	p, err := h.Ledger.GetProjection(context.Background(), projection.ScopedName("shop", builtin.OrderProjection), o42)
	if err != nil || p.Version != 13 || p.State["status"] != "confirmed" {
		t.Fatalf("shared O-42 %+v %v", p, err)
	}
	requireEvent(t, h, "msg_o42_12", ledger.StatusProcessed, ledger.OutcomeStale)
}

// An hmac sender ("partner") whose event id is an unsigned header, and one
// that also signs a timestamp, both carrying order events that the order
// projection handles. Ids like these are often sequential: an attacker
// can guess the next one.
const (
	partnerSecret  = "hmac_test_FAKE_partner_trust"
	partnerSources = `{"sources":[` +
		`{"name":"partner","kind":"hmac","secrets":["env:PARTNER_SECRET"],"options":{"header":"x-partner-signature","prefix":"sha256=",` +
		`"id_header":"x-partner-event-id","type_path":"type","subject_path":"data.id","delivery_id_header":"x-partner-delivery"}},` +
		`{"name":"partner-ts","kind":"hmac","secrets":["env:PARTNER_SECRET"],"options":{"header":"x-partner-signature","prefix":"sha256=",` +
		`"timestamp_header":"x-partner-timestamp","id_header":"x-partner-event-id","type_path":"type","subject_path":"data.id"}}]}`
	// A partner that signs its id header, beside a timestamp.
	partnerSignedIDSources = `{"sources":[{"name":"partner-signed-id","kind":"hmac","secrets":["env:PARTNER_SECRET"],"options":{` +
		`"header":"x-partner-signature","prefix":"sha256=","timestamp_header":"x-partner-timestamp","signed_payload":"{id}.{timestamp}.{body}",` +
		`"id_header":"x-partner-event-id","type_path":"type","subject_path":"data.id"}}]}`
)

// partnerHarness is the pipeline with sources (a partner document), the
// order projection registered for hmac sources, and the effects stage.
func partnerHarness(t *testing.T, sources string) *pt.Harness {
	reg := builtin.Default(builtin.StripeOptions{})
	orders := builtin.NewOrders(builtin.OrderOptions{})
	reg.Register("hmac", orders.EventTypes(), orders)
	return pt.NewOrders(t, pt.Options{SourcesDoc: sources, Registry: reg, Secrets: map[string]string{"PARTNER_SECRET": partnerSecret}}, pt.OutboxOptions{Scopes: map[string][]string{"refund": {"partner"}, "notify_cancellation": {"partner"}}})
}

// partnerSigned returns the headers of a signed partner delivery: the
// signature over the signed payload (parts), and the other headers.
func partnerSigned(parts []string, kv ...string) map[string]string {
	mac := hmac.New(sha256.New, []byte(partnerSecret))
	for _, p := range parts {
		mac.Write([]byte(p))
	}
	h := map[string]string{"x-partner-signature": "sha256=" + hex.EncodeToString(mac.Sum(nil)), "content-type": "application/json"}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = kv[i+1]
	}
	return h
}

// The pre-emption. The partner's event 100 is captured; the attacker
// re-sends it under 101, the partner's next id, before the partner uses
// it. That re-send is a suspected replay: quarantined, no queue message.
// Then the partner's genuine event 101 arrives with its own bytes: it is
// not a conflict (which would answer 202 and lose it, the partner would
// never retry), it displaces the replay and is processed: its order state
// applied, its intents created and performed. The replay stays visible in
// the row's audit and in the metrics.
func TestAReplayUnderTheNextIdCannotPreemptTheGenuineEvent(t *testing.T) {
	h := partnerHarness(t, partnerSources)
	var metricsOut bytes.Buffer
	h.Intake.Metrics = metrics.New(&metricsOut, "EffectivelyOnce/test", h.Clock.Now)
	w, d := h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1")
	ctx := context.Background()
	send := func(id string, body []byte) (int, string) {
		r := h.DeliverTo("partner", body, partnerSigned([]string{string(body)}, "x-partner-event-id", id, "x-partner-delivery", "dlv-"+id))
		return r.Status, string(r.Body)
	}

	captured := pt.OrderEvent("order.created", "O-7", 1, "", "")
	if st, body := send("100", captured); st != 202 || !strings.Contains(body, `"accepted"`) {
		t.Fatalf("event 100: %d %s", st, body)
	}
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)

	// The attacker, first under 101.
	if st, body := send("101", captured); st != 202 || !strings.Contains(body, "QUARANTINED") {
		t.Fatalf("replay under 101: %d %s", st, body)
	}
	if ev := h.EventOf("partner", "101"); ev.Status != ledger.StatusQuarantined || ev.ErrorCode != "suspected_replay" || ev.Attributes["replay_of"] != "100" {
		t.Fatalf("replay row: %+v", ev)
	}
	if got := h.Depth(h.Queues.Queue); got != 0 {
		t.Fatalf("the replay enqueued work: depth %d", got)
	}

	// The partner's own event 101.
	own := pt.OrderEvent("order.cancelled", o42, 12, "", "")
	st, body := send("101", own)
	if st != 202 || !strings.Contains(body, `"status":"accepted"`) || strings.Contains(body, "conflict") {
		t.Fatalf("genuine 101: %d %s", st, body)
	}
	if got := h.Depth(h.Queues.Queue); got != 1 {
		t.Fatalf("genuine 101 not enqueued: depth %d", got)
	}
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)

	ev := h.EventOf("partner", "101")
	if ev.Status != ledger.StatusProcessed || ev.Result == nil || ev.Result.Outcome != ledger.OutcomeApplied || ev.PayloadHash != ledger.PayloadHash(own) {
		t.Fatalf("genuine 101 not processed: %+v", ev)
	}
	p, err := h.Ledger.GetProjection(ctx, projection.ScopedName("partner", builtin.OrderProjection), o42)
	if err != nil || p.Version != 12 || p.State["status"] != "cancelled" {
		t.Fatalf("order O-42: %+v %v", p, err)
	}
	for _, transition := range []string{"refund_due_to_cancellation", "notify_cancellation"} {
		op := projection.ScopedOperationID("partner", projection.OperationID(o42, transition, "12"))
		if in := h.Outbox.Intent(op); in.Status != ledger.IntentStatusSucceeded || in.Causation != "partner/101" || h.Outbox.Down.Effective(op) != 1 {
			t.Fatalf("intent %s: %s caused by %s, effective %d", transition, in.Status, in.Causation, h.Outbox.Down.Effective(op))
		}
	}

	// The replay is not forgotten: its quarantine and its displacement are
	// in the row's audit, with its reason and what it replayed.
	acts := pt.Actions(ev)
	if len(acts) < 2 || acts[0] != "quarantine_on_accept" || acts[1] != "displace_replay" {
		t.Fatalf("audit %v", acts)
	}
	if a := ev.Audit[1]; !strings.Contains(a.Reason, "suspected_replay") || !strings.Contains(a.Reason, `replay of "100"`) ||
		!strings.Contains(a.Reason, ledger.PayloadHash(captured)) {
		t.Fatalf("displacement entry %+v", a)
	}
	// One record per request: event 100, the replay, the genuine 101.
	lines := strings.Split(strings.TrimSpace(metricsOut.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d metrics records, want 3", len(lines))
	}
	for i, want := range []map[string]float64{
		{"Accepted": 1, "SuspectedReplays": 0, "ReplaysDisplaced": 0},
		{"Accepted": 1, "SuspectedReplays": 1, "ReplaysDisplaced": 0},
		{"Accepted": 1, "SuspectedReplays": 0, "ReplaysDisplaced": 1, "Conflicts": 0},
	} {
		var rec map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &rec); err != nil {
			t.Fatal(err)
		}
		for k, v := range want {
			if rec[k] != v {
				t.Fatalf("metrics record %d: %s = %v, want %v", i, k, rec[k], v)
			}
		}
	}

	// The replay sent again now is a conflict with the event's bytes, and
	// changes nothing.
	if st, body := send("101", captured); st != 202 || !strings.Contains(body, `"conflict"`) {
		t.Fatalf("replay after the event: %d %s", st, body)
	}
	if after := h.EventOf("partner", "101"); after.Status != ledger.StatusProcessed || after.PayloadHash != ev.PayloadHash {
		t.Fatalf("row after the replay came back: %+v", after)
	}
}

// A signed timestamp does not sign the id header: the same body with the
// same timestamp and signature, re-sent within the tolerance under a new
// id, verifies. It is a suspected replay, kept quarantined with no queue
// message, not a new event.
func TestAnIdBesideASignedTimestampIsStillUnsigned(t *testing.T) {
	h := partnerHarness(t, partnerSources)
	body := pt.OrderEvent("order.cancelled", o42, 12, "", "")
	ts := strconv.FormatInt(h.Clock.Now().Unix(), 10)
	headers := func(id string) map[string]string {
		return partnerSigned([]string{ts, ".", string(body)}, "x-partner-event-id", id, "x-partner-timestamp", ts)
	}
	if r := h.DeliverTo("partner-ts", body, headers("200")); r.Status != 202 || !strings.Contains(string(r.Body), `"accepted"`) {
		t.Fatalf("event 200: %d %s", r.Status, r.Body)
	}
	queued := h.Depth(h.Queues.Queue)
	h.Clock.Advance(time.Minute)
	r := h.DeliverTo("partner-ts", body, headers("201"))
	if r.Status != 202 || !strings.Contains(string(r.Body), "QUARANTINED") {
		t.Fatalf("re-sent under 201: %d %s", r.Status, r.Body)
	}
	if ev := h.EventOf("partner-ts", "201"); ev.Status != ledger.StatusQuarantined || ev.ErrorCode != "suspected_replay" || ev.Attributes["replay_of"] != "200" {
		t.Fatalf("row 201: %+v", ev)
	}
	if got := h.Depth(h.Queues.Queue); got != queued {
		t.Fatalf("the re-send enqueued work: depth %d, was %d", got, queued)
	}
}

// With {id} in the signed payload the id header is signed: a captured
// delivery re-sent under another id does not verify, and nothing is
// stored under that id.
func TestASignedIdHeaderCannotBeMoved(t *testing.T) {
	h := partnerHarness(t, partnerSignedIDSources)
	body := pt.OrderEvent("order.cancelled", o42, 12, "", "")
	ts := strconv.FormatInt(h.Clock.Now().Unix(), 10)
	signed := partnerSigned([]string{"300", ".", ts, ".", string(body)}, "x-partner-event-id", "300", "x-partner-timestamp", ts)
	if r := h.DeliverTo("partner-signed-id", body, signed); r.Status != 202 {
		t.Fatalf("event 300: %d %s", r.Status, r.Body)
	}
	moved := map[string]string{}
	for k, v := range signed {
		moved[k] = v
	}
	moved["x-partner-event-id"] = "301"
	if r := h.DeliverTo("partner-signed-id", body, moved); r.Status != 401 {
		t.Fatalf("re-sent under 301: %d %s", r.Status, r.Body)
	}
	if _, err := h.Ledger.Get(context.Background(), "partner-signed-id", "301"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("row 301: %v", err)
	}
}

// The same pre-emption against a Shopify source that receives both paths:
// a captured webhook re-sent by HTTPS under the event id of a fact that
// then arrives through the partner bus. The bus's copy is in another form
// (other bytes by design), so it must not count as a duplicate of the
// quarantined replay, which would leave it never processed: it displaces
// the replay and is processed.
func TestAReplayCannotPreemptTheEventThroughEventBridge(t *testing.T) {
	h := ebHarness(t)
	raw, ev := ebFixture(t, "shopify-orders-updated.json")
	var detail struct {
		Payload  json.RawMessage   `json:"payload"`
		Metadata map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(ev.Detail, &detail); err != nil {
		t.Fatal(err)
	}
	const eventID = "ev_test_FAKE_eventbridge_0001"
	send := func(id string, body []byte) (int, string) {
		headers := map[string]string{}
		for k, v := range detail.Metadata {
			headers[strings.ToLower(k)] = v
		}
		mac := hmac.New(sha256.New, []byte(ebSecret))
		mac.Write(body)
		headers["x-shopify-hmac-sha256"] = base64.StdEncoding.EncodeToString(mac.Sum(nil))
		headers["x-shopify-event-id"], headers["x-shopify-webhook-id"] = id, "wh-"+id
		r := h.DeliverTo("shopify", body, headers)
		return r.Status, string(r.Body)
	}
	// An earlier event of the shop (another order), delivered, and captured.
	earlier := bytes.ReplaceAll(detail.Payload, []byte("820982911946154999"), []byte("820982911946154001"))
	if bytes.Equal(earlier, detail.Payload) {
		t.Fatal("the earlier body equals the fixture's")
	}
	if st, body := send("ev_test_FAKE_earlier_0000", earlier); st != 202 {
		t.Fatalf("earlier event: %d %s", st, body)
	}
	// Re-sent under the id of the fact still to come.
	if st, body := send(eventID, earlier); st != 202 || !strings.Contains(body, "QUARANTINED") {
		t.Fatalf("replay: %d %s", st, body)
	}
	queued := h.Depth(h.Queues.Queue)
	if err := bridge(t, h, raw); err != nil {
		t.Fatal(err)
	}
	if got := h.Depth(h.Queues.Queue); got != queued+1 {
		t.Fatalf("the fact through the bus was not enqueued: depth %d, was %d", got, queued)
	}
	h.Drain(drainTimeout, time.Second, h.NewWorker("w1"))
	got := h.EventOf("shopify", eventID)
	if got.Status != ledger.StatusProcessed || got.Result == nil || got.Result.Outcome != ledger.OutcomeApplied ||
		got.Attributes["via"] != "eventbridge" || got.PayloadHash != ledger.PayloadHash(detail.Payload) {
		t.Fatalf("the fact: %s %+v, attributes %v, audit %v", got.Status, got.Result, got.Attributes, pt.Actions(got))
	}
	if acts := pt.Actions(got); acts[0] != "quarantine_on_accept" || acts[1] != "displace_replay" {
		t.Fatalf("audit %v", acts)
	}
}
