package ledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// DEAD and QUARANTINED events and quarantined intents stay findable through
// the due index (its attention shards) without a scan, and never show up in
// the reconciler's work queries.
func TestListOpenFindsItemsWaitingForAnOperator(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	claim := func(id string) ledger.Claim {
		t.Helper()
		if _, err := f.L.Accept(ctx, delivery(id, `{"id":"x"}`)); err != nil {
			t.Fatal(err)
		}
		c, err := f.L.Claim(ctx, "stripe", id, ledger.ClaimOptions{Owner: "proc", Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if err := f.L.Dead(ctx, claim("evt_dead"), "commit_failed", "boom"); err != nil {
		t.Fatal(err)
	}
	f.Clock.Advance(time.Second)
	if err := f.L.Quarantine(ctx, claim("evt_quar"), "malformed", "bad json"); err != nil {
		t.Fatal(err)
	}
	f.Clock.Advance(time.Second)
	if _, err := f.L.Accept(ctx, delivery("evt_new", `{"id":"y"}`)); err != nil {
		t.Fatal(err)
	}

	all, err := f.L.ListOpen(ctx, "event", 10)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]ledger.OpenItem{}
	for _, it := range all {
		got[it.EventID] = it
	}
	if len(all) != 3 || got["evt_dead"].Status != "DEAD" || got["evt_quar"].Status != "QUARANTINED" || got["evt_new"].Status != "RECEIVED" {
		t.Fatalf("open events: %+v", all)
	}
	if d := got["evt_dead"]; d.ErrorCode != "commit_failed" || d.Attempts != 1 || d.EventType != "customer.subscription.updated" || !d.Since.Equal(t0) || !d.ReceivedAt.Equal(t0) {
		t.Fatalf("dead item: %+v", d)
	}
	if all[0].EventID != "evt_dead" {
		t.Fatalf("not oldest first: %+v", all)
	}
	quar, err := f.L.ListOpen(ctx, "event", 10, ledger.StatusQuarantined)
	if err != nil || len(quar) != 1 || quar[0].EventID != "evt_quar" {
		t.Fatalf("quarantined only: %+v %v", quar, err)
	}
	due, err := f.L.ListDue(ctx, t0.Add(time.Hour), 10)
	if err != nil || len(due) != 1 || due[0].EventID != "evt_new" {
		t.Fatalf("work query must not see items waiting for an operator: %+v %v", due, err)
	}

	// Replay takes an event back to the work shards.
	if _, err := f.L.Replay(ctx, "stripe", "evt_dead", "ops@example.test", "fixed the downstream"); err != nil {
		t.Fatal(err)
	}
	due, err = f.L.ListDue(ctx, t0.Add(time.Hour), 10)
	if err != nil || len(due) != 2 {
		t.Fatalf("replayed event not due: %+v %v", due, err)
	}
	if _, err := f.L.ListOpen(ctx, "projection", 10); err == nil {
		t.Fatal("unknown kind accepted")
	}
}

func TestListOpenFindsQuarantinedIntents(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	newIntent(t, f, "op1")
	c, err := f.L.ClaimIntent(ctx, "op1", claimOpts)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.L.RecordIntent(ctx, c, ledger.IntentOutcome{Status: ledger.IntentStatusQuarantined, Code: "idempotency_window_passed"}); err != nil {
		t.Fatal(err)
	}
	open, err := f.L.ListOpen(ctx, "intent", 10)
	if err != nil || len(open) != 1 || open[0].OperationID != "op1" || open[0].Status != "QUARANTINED" || open[0].IntentKind != "entitlement.grant" {
		t.Fatalf("open intents: %+v %v", open, err)
	}
	if due, _ := f.L.ListDueIntents(ctx, t0.Add(time.Hour), 10); len(due) != 0 {
		t.Fatalf("quarantined intent in the work query: %+v", due)
	}
}

// A claim leaves the item's index key alone (no delete+put of the index
// entry); the leased item is due only once its lease has expired.
func TestLeasedEventIsDueOnlyAfterItsLease(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	if _, err := f.L.Accept(ctx, delivery("evt_l", `{"id":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.L.Claim(ctx, "stripe", "evt_l", ledger.ClaimOptions{Owner: "p", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if due, err := f.L.ListDue(ctx, t0.Add(59*time.Second), 10); err != nil || len(due) != 0 {
		t.Fatalf("live lease listed as due: %+v %v", due, err)
	}
	due, err := f.L.ListDue(ctx, t0.Add(61*time.Second), 10)
	if err != nil || len(due) != 1 || due[0].Status != ledger.StatusProcessing || !due[0].DueAt.Equal(t0) {
		t.Fatalf("expired lease not due: %+v %v", due, err)
	}
	if open, _ := f.L.ListOpen(ctx, "event", 10); len(open) != 1 || open[0].Status != "PROCESSING" {
		t.Fatalf("open: %+v", open)
	}
}

// Release reopens only a QUARANTINED event and says so in the audit; a DEAD
// one is refused (Replay is for it).
func TestReleaseOnlyFromQuarantine(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	for _, id := range []string{"evt_q", "evt_d"} {
		if _, err := f.L.Accept(ctx, delivery(id, `{"id":"x"}`)); err != nil {
			t.Fatal(err)
		}
		c, err := f.L.Claim(ctx, "stripe", id, ledger.ClaimOptions{Owner: "p", Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if id == "evt_q" {
			err = f.L.Quarantine(ctx, c, "operator_hold", "disputed")
		} else {
			err = f.L.Dead(ctx, c, "commit_failed", "boom")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	ev, err := f.L.Release(ctx, "stripe", "evt_q", "ops:alice", "dispute settled")
	if err != nil || ev.Status != ledger.StatusReceived {
		t.Fatalf("release: %+v %v", ev, err)
	}
	last := ev.Audit[len(ev.Audit)-1]
	if last.Action != "release" || last.Actor != "ops:alice" || last.Reason != "dispute settled" {
		t.Fatalf("audit %+v", last)
	}
	if ev, err := f.L.Release(ctx, "stripe", "evt_d", "ops:alice", "x"); !errors.Is(err, ledger.ErrNotReplayable) || ev.Status != ledger.StatusDead {
		t.Fatalf("release of a DEAD event: %+v %v", ev.Status, err)
	}
	if _, err := f.L.Release(ctx, "stripe", "evt_q", "", "x"); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("release without an actor: %v", err)
	}
}
