package pipelinetest_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"

	pt "github.com/effectively-once/webhooks/pkg/harness/pipelinetest"
	"github.com/effectively-once/webhooks/pkg/ledger"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Trust boundaries (issue 13), attacked where they enter: the intake over
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

// §4: GitHub's delivery id is not signed and no time is. Two captured
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

// §4: a captured body sent under a victim's event id is not merged as its
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

// §1: with its own secret, the vendor sends order.cancelled for O-42 at
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
	vp, err := h.Ledger.GetProjection(ctx, projection.ScopedName("vendor", projection.OrderProjection), o42)
	if err != nil || vp.Version != 999 {
		t.Fatalf("the vendor's own O-42: %+v %v", vp, err)
	}
	vendorRefund := projection.ScopedOperationID("vendor", projection.OperationID(o42, "refund_due_to_cancellation", "999"))
	if in := h.Outbox.Intent(vendorRefund); in.Causation != "vendor/msg_vendor_999" || in.Projection != projection.ScopedName("vendor", projection.OrderProjection) {
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
	p, err := h.Ledger.GetProjection(context.Background(), projection.ScopedName("shop", projection.OrderProjection), o42)
	if err != nil || p.Version != 13 || p.State["status"] != "confirmed" {
		t.Fatalf("shared O-42 %+v %v", p, err)
	}
	requireEvent(t, h, "msg_o42_12", ledger.StatusProcessed, ledger.OutcomeStale)
}
