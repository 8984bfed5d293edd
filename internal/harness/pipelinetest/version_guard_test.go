package pipelinetest_test

import (
	"testing"
	"time"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/builtin"
)

// The three ways a version guard can fail, each recorded as a business
// fact and never retried: a retry cannot change a version comparison.
func TestVersionGuardOutcomes(t *testing.T) {
	h := pt.New(t, pt.Options{})
	w := h.NewWorker("w")
	send := func(id, typ, status string, at int64) ledger.Event {
		t.Helper()
		b := subEvent(id, typ, status, at)
		if r := h.Deliver(b, h.Sign(b, pt.SecretPrimary)); r.Status != 202 {
			t.Fatalf("%s: %d", id, r.Status)
		}
		h.Drain(10*time.Second, time.Second, w)
		return h.Event(id)
	}
	send("evt_v1", "customer.subscription.updated", "active", created)
	requireIntents(t, h, 1)

	// Same version, same state, different event id: noop, no intent.
	if ev := send("evt_v1_copy", "customer.subscription.updated", "active", created); ev.Status != ledger.StatusProcessed || ev.Result.Outcome != ledger.OutcomeNoop {
		t.Fatalf("same version same state: %s %+v", ev.Status, ev.Result)
	}
	requireIntents(t, h, 1)

	// Same version, contradictory state: quarantined, projection untouched.
	ev := send("evt_v1_conflict", "customer.subscription.updated", "past_due", created)
	if ev.Status != ledger.StatusQuarantined || ev.ErrorCode != "version_conflict" || ev.TotalAttempts != 1 {
		t.Fatalf("same version, other state: %s %q attempts %d", ev.Status, ev.ErrorCode, ev.TotalAttempts)
	}
	requireSubscription(t, h, "active", true, version(created, 2))
	requireIntents(t, h, 1)

	// Newer version, same state: noop without an intent, but the version
	// advances, so an older event with another state is now stale.
	if ev := send("evt_v2_same", "customer.subscription.updated", "active", created+20); ev.Result.Outcome != ledger.OutcomeNoop {
		t.Fatalf("newer, same state: %+v", ev.Result)
	}
	requireSubscription(t, h, "active", true, version(created+20, 2))
	requireIntents(t, h, 1)
	if ev := send("evt_between", "customer.subscription.updated", "unpaid", created+10); ev.Result.Outcome != ledger.OutcomeStale {
		t.Fatalf("older than the advanced version: %+v", ev.Result)
	}
	requireSubscription(t, h, "active", true, version(created+20, 2))

	// A newer, different state applies and emits exactly one new intent.
	if ev := send("evt_v3", "customer.subscription.updated", "unpaid", created+30); ev.Result.Outcome != ledger.OutcomeApplied {
		t.Fatalf("newer, different: %+v", ev.Result)
	}
	requireSubscription(t, h, "unpaid", false, version(created+30, 2))
	in := requireIntents(t, h, 2)
	revokes := 0
	for _, i := range in {
		if i.Kind == "entitlement.revoke" && i.Causation == "stripe/evt_v3" {
			revokes++
		}
	}
	if revokes != 1 {
		t.Fatalf("intents %+v", in)
	}
}

// A deletion is final even when an update stamped after it (clock skew) was
// processed first: the subscription ends deleted and not entitled, with
// one grant (the update's) and one revoke (the deletion's), never revived.
func TestDeletionIsFinalWhateverTheTimestamps(t *testing.T) {
	h := pt.New(t, pt.Options{})
	w := h.NewWorker("w")
	send := func(id, typ, status string, at int64) ledger.Event {
		t.Helper()
		b := subEvent(id, typ, status, at)
		if r := h.Deliver(b, h.Sign(b, pt.SecretPrimary)); r.Status != 202 {
			t.Fatalf("%s: %d", id, r.Status)
		}
		h.Drain(10*time.Second, time.Second, w)
		return h.Event(id)
	}
	if ev := send("evt_skewed_update", "customer.subscription.updated", "active", created+5); ev.Result.Outcome != ledger.OutcomeApplied {
		t.Fatalf("update: %+v", ev.Result)
	}
	if ev := send("evt_deleted", "customer.subscription.deleted", "canceled", created); ev.Result.Outcome != ledger.OutcomeApplied {
		t.Fatalf("the deletion must apply over a later-stamped update: %+v", ev.Result)
	}
	p := requireSubscription(t, h, "canceled", false, builtin.DeletedVersionBase+version(created, 3))
	if !p.Terminal {
		t.Fatalf("deleted subscription not terminal: %+v", p)
	}
	if ev := send("evt_late_update", "customer.subscription.updated", "active", created+60); ev.Result.Outcome != ledger.OutcomeStale {
		t.Fatalf("an update after the deletion revived it: %+v", ev.Result)
	}
	kinds := map[string]int{}
	for _, in := range requireIntents(t, h, 2) {
		kinds[in.Kind]++
	}
	if kinds["entitlement.grant"] != 1 || kinds["entitlement.revoke"] != 1 {
		t.Fatalf("intents %v", kinds)
	}
}
