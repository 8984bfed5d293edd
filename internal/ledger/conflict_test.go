package ledger_test

import (
	"context"
	"testing"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// A delivery under a known id with other bytes in the same
// form is not a duplicate. It is recorded as a conflict on the row (a
// count, the last one, one audit entry however many come) and changes
// nothing else: not the delivery count, not the last delivery, not the
// payload. The same fact in another form (a thin twin) stays a duplicate.
func TestConflictingBytesAreNotADuplicate(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	first := ledger.Delivery{Source: "github", EventID: "d-1", EventType: "push", DeliveryID: "d-1", Payload: []byte(`{"ref":"main"}`)}
	if _, err := f.L.Accept(ctx, first); err != nil {
		t.Fatal(err)
	}
	forged := first
	forged.Payload = []byte(`{"ref":"attacker"}`)
	for n := 1; n <= 3; n++ {
		res, err := f.L.Accept(ctx, forged)
		if err != nil || !res.Conflict || res.Duplicate || res.Event.Conflicts != n {
			t.Fatalf("conflict %d: %+v %v", n, res, err)
		}
	}
	ev, err := f.L.Get(ctx, "github", "d-1")
	if err != nil {
		t.Fatal(err)
	}
	if ev.DeliveryCount != 1 || ev.Conflicts != 3 || ev.PayloadHash != mustAccepted(t, f, first).Event.PayloadHash {
		t.Fatalf("row after conflicts: deliveries %d, conflicts %d, hash %s", ev.DeliveryCount, ev.Conflicts, ev.PayloadHash)
	}
	n := 0
	for _, a := range ev.Audit {
		if a.Action == "conflict" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d conflict audit entries, want 1: %+v", n, ev.Audit)
	}
	body, err := f.L.Payload(ctx, ev)
	if err != nil || string(body) != `{"ref":"main"}` {
		t.Fatalf("stored payload %q %v", body, err)
	}
}

// mustAccepted delivers d again (a true duplicate) and returns the answer.
func mustAccepted(t *testing.T, f fixture, d ledger.Delivery) ledger.Accepted {
	t.Helper()
	res, err := f.L.Accept(context.Background(), d)
	if err != nil || !res.Duplicate || res.Conflict {
		t.Fatalf("duplicate: %+v %v", res, err)
	}
	return res
}

// The same fact in another form or through the other path: other bytes by
// design, still a duplicate.
func TestOtherFormIsStillADuplicate(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	snap := ledger.Delivery{Source: "stripe", EventID: "evt_1", EventType: "customer.subscription.updated", Payload: []byte(`{"object":"event"}`),
		Attributes: map[string]string{"format": "snapshot"}}
	if _, err := f.L.Accept(ctx, snap); err != nil {
		t.Fatal(err)
	}
	thin := snap
	thin.Payload, thin.Attributes = []byte(`{"object":"v2.core.event"}`), map[string]string{"thin_event_id": "evtv2_1"}
	res, err := f.L.Accept(ctx, thin)
	if err != nil || !res.Duplicate || res.Conflict || !res.PayloadMismatch {
		t.Fatalf("thin twin: %+v %v", res, err)
	}
	bridged := snap
	bridged.Payload, bridged.Attributes = []byte(`{"object": "event"}`), map[string]string{"format": "snapshot", "via": "eventbridge"}
	if res, err := f.L.Accept(ctx, bridged); err != nil || !res.Duplicate || res.Conflict {
		t.Fatalf("through EventBridge: %+v %v", res, err)
	}
}
