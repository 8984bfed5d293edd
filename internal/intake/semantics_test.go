package intake_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// What AWS accepts, not what the emulators accept, over the intake's
// Lambda JSON path.

// quarantinedAnswer is the body of a 202 for a delivery kept QUARANTINED
// under a content id.
type quarantinedAnswer struct {
	Status  string `json:"status"`
	EventID string `json:"event_id"`
}

// A correctly signed empty body is a verified delivery no retry can
// improve: 202, kept QUARANTINED no_identity under the content id of the
// empty body (one row per source; each delivery is counted on it), never
// a 5xx, never a queue message. minidyn refuses an empty binary value
// (AWS accepts one outside keys); the ledger stores none.
func TestSignedEmptyBodyIsQuarantinedNot5xx(t *testing.T) {
	type deliverer struct {
		source  string
		h       *pt.Harness
		headers func() map[string]string
	}
	hf := hfHarness(t)
	st := pt.New(t, pt.Options{})
	var ds []deliverer
	for _, sc := range hfSchemes() {
		ds = append(ds, deliverer{sc.source, hf, func() map[string]string { return sc.sign(t, hf.Clock.Now(), nil, sc.secret) }})
	}
	ds = append(ds, deliverer{"stripe", st, func() map[string]string {
		return map[string]string{"stripe-signature": st.Sign(nil, pt.SecretPrimary)}
	}})
	want := ledger.ContentID(nil)
	for _, d := range ds {
		t.Run(d.source, func(t *testing.T) {
			ctx := context.Background()
			depth := d.h.Depth(d.h.Queues.Queue)
			for i := range 2 {
				r := d.h.DeliverTo(d.source, nil, d.headers())
				var a quarantinedAnswer
				_ = json.Unmarshal(r.Body, &a)
				if r.Status != 202 || a.Status != "quarantined" || a.EventID != want {
					t.Fatalf("delivery %d: %d %s, want 202 quarantined under %s", i+1, r.Status, r.Body, want)
				}
			}
			ev, err := d.h.Ledger.Get(ctx, d.source, want)
			if err != nil || ev.Status != ledger.StatusQuarantined || ev.ErrorCode != "no_identity" || ev.DeliveryCount != 2 || ev.PayloadSize != 0 {
				t.Fatalf("row %+v: %v", ev, err)
			}
			if raw, err := d.h.Ledger.Payload(ctx, ev); err != nil || len(raw) != 0 {
				t.Fatalf("payload %q: %v", raw, err)
			}
			if n := d.h.Depth(d.h.Queues.Queue); n != depth {
				t.Fatalf("queue depth %d, was %d: a quarantined delivery enqueued work", n, depth)
			}
			open, err := d.h.Ledger.ListOpen(ctx, "event", 100, ledger.StatusQuarantined)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, it := range open {
				found = found || (it.Source == d.source && it.EventID == want)
			}
			if !found {
				t.Fatalf("not listed for operators: %+v", open)
			}
		})
	}
}

// An event id SQS cannot carry in a message body (U+FFFE, U+FFFF,
// outside #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF)
// or a log line should not (C1 controls) would be accepted and then fail
// to enqueue on every retry. The id is the sender's input and the delivery
// is verified: it is kept, QUARANTINED no_identity under the body's content
// id (202, no queue message), and the row names the id it could not use.
func TestUnusableEventIDIsQuarantinedUnderTheContentID(t *testing.T) {
	hf := hfHarness(t)
	st := pt.New(t, pt.Options{})
	partner := hfSchemes()[4]
	if partner.source != "partner" {
		t.Fatal("hfSchemes changed order")
	}
	cases := []struct {
		name, source, id string
		h                *pt.Harness
		body             string
		headers          func(body []byte) map[string]string
	}{
		{name: "stripe U+FFFE", source: "stripe", h: st, id: "evt_\ufffe", body: `{"id":"evt_\ufffe","object":"event","type":"customer.created","data":{"object":{"id":"cus_1"}}}`},
		{name: "stripe U+FFFF", source: "stripe", h: st, id: "evt_\uffff", body: `{"id":"evt_\uffff","object":"event","type":"customer.created","data":{"object":{"id":"cus_1"}}}`},
		{name: "partner C1 control", source: "partner", h: hf, id: "ev_\u0085", body: `{"event_id":"ev_\u0085","kind":"invoice.paid","invoice":{"id":"inv_1"}}`},
		{name: "partner U+FFFF", source: "partner", h: hf, id: "ev_\uffff", body: `{"event_id":"ev_\uffff","kind":"invoice.paid","invoice":{"id":"inv_1"}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			body := []byte(c.body)
			headers := map[string]string{"stripe-signature": c.h.Sign(body, pt.SecretPrimary)}
			if c.source == "partner" {
				headers = partner.sign(t, c.h.Clock.Now(), body, partner.secret)
			}
			depth := c.h.Depth(c.h.Queues.Queue)
			r := c.h.DeliverTo(c.source, body, headers)
			var a quarantinedAnswer
			_ = json.Unmarshal(r.Body, &a)
			want := ledger.ContentID(body)
			if r.Status != 202 || a.Status != "quarantined" || a.EventID != want {
				t.Fatalf("%d %s, want 202 quarantined under %s", r.Status, r.Body, want)
			}
			ev, err := c.h.Ledger.Get(ctx, c.source, want)
			if err != nil || ev.Status != ledger.StatusQuarantined || ev.ErrorCode != "no_identity" || ev.Attributes["unusable_event_id"] == "" {
				t.Fatalf("row %+v: %v", ev, err)
			}
			if _, err := c.h.Ledger.Get(ctx, c.source, c.id); err == nil {
				t.Fatal("a row was written under the unusable id")
			}
			if n := c.h.Depth(c.h.Queues.Queue); n != depth {
				t.Fatalf("queue depth %d, was %d", n, depth)
			}
		})
	}
}

// An unusable event id on the EventBridge path: the same rule, the same
// outcome.
func TestUnusableEventIDOverEventBridgeIsQuarantined(t *testing.T) {
	h := pt.New(t, pt.Options{SourcesDoc: ebSources})
	raw := ebEvent(t, "stripe-customer.subscription.updated.json", func(ev *events.EventBridgeEvent) {
		ev.Detail = json.RawMessage(`{"id":"evt_\uffff","object":"event","type":"customer.subscription.updated","data":{"object":{"id":"sub_1"}}}`)
	})
	if err := invokeEB(t, h.Intake, raw); err != nil {
		t.Fatalf("bridge: %v", err)
	}
	ev := h.EventOf("stripe", ledger.ContentID(detailOf(t, raw)))
	if ev.Status != ledger.StatusQuarantined || ev.ErrorCode != "no_identity" || ev.Attributes["via"] != "eventbridge" || ev.Attributes["unusable_event_id"] != `"evt_\uffff"` {
		t.Fatalf("row %+v", ev)
	}
	if d := h.Depth(h.Queues.Queue); d != 0 {
		t.Fatalf("depth %d", d)
	}
}
