package intake_test

import (
	"context"
	"encoding/json"
	"testing"

	pt "github.com/effectively-once/webhooks/pkg/harness/pipelinetest"
	"github.com/effectively-once/webhooks/pkg/ledger"
)

// What AWS accepts, not what the emulators accept (issue 14), over the
// intake's Lambda JSON path.

// quarantinedAnswer is the body of a 202 for a delivery kept QUARANTINED
// under a content id.
type quarantinedAnswer struct {
	Status  string `json:"status"`
	EventID string `json:"event_id"`
}

// §6: a correctly signed empty body is a verified delivery no retry can
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
