package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// commitLatest commits one revision of subscription sub_c at version v
// with one latest intent "op<v>", as the processor does.
func commitLatest(t *testing.T, f fixture, v int64) string {
	t.Helper()
	ctx := context.Background()
	id := fmt.Sprintf("evt_c%d", v)
	if _, err := f.L.Accept(ctx, delivery(id, `{"id":"x"}`)); err != nil {
		t.Fatal(err)
	}
	c, err := f.L.Claim(ctx, "stripe", id, ledger.ClaimOptions{Owner: "proc", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	op := fmt.Sprintf("op%d", v)
	w := &ledger.ProjectionWrite{Name: "sub", Subject: "sub_c", Version: v, Fingerprint: fmt.Sprint("f", v), State: map[string]any{"v": v}}
	in := ledger.Intent{OperationID: op, Kind: "entitlement.grant", Subject: "acct_c", Policy: ledger.PolicyLatest, Payload: map[string]any{"v": v}}
	if _, err := f.L.Commit(ctx, c, w, []ledger.Intent{in}); err != nil {
		skipWithoutTransactions(t, err)
		t.Fatal(err)
	}
	return op
}

// The subject cursor serializes latest dispatches: a newer version waits
// while an older one is in flight, takes over once it is recorded, and an
// older version never goes after a newer one. The cursor then waits on
// the sync shards for the reconciler's drift check.
func TestLockSubjectSerializesVersions(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	op3, op5, op9 := commitLatest(t, f, 3), commitLatest(t, f, 5), commitLatest(t, f, 9)

	c5, err := f.L.ClaimIntent(ctx, op5, claimOpts)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.L.LockSubject(ctx, c5); err != nil {
		t.Fatalf("first lock: %v", err)
	}
	if err := f.L.LockSubject(ctx, c5); err != nil {
		t.Fatalf("the holder locks again: %v", err)
	}
	c9, err := f.L.ClaimIntent(ctx, op9, ledger.ClaimOptions{Owner: "dispatcher-b", Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var busy *ledger.SubjectBusyError
	if err := f.L.LockSubject(ctx, c9); !errors.As(err, &busy) || busy.Newer || busy.Cursor.HolderOp != op5 || !busy.Cursor.HolderUntil.Equal(c5.Expires) {
		t.Fatalf("v9 while v5 is in flight: %v; want busy with v5 until its lease ends", err)
	}
	if err := f.L.RecordIntent(ctx, c5, ledger.IntentOutcome{Status: ledger.IntentStatusSucceeded, Code: "ok_200"}); err != nil {
		t.Fatal(err)
	}
	if err := f.L.LockSubject(ctx, c9); err != nil {
		t.Fatalf("v9 once v5 is recorded: %v", err)
	}
	c3, err := f.L.ClaimIntent(ctx, op3, claimOpts)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.L.LockSubject(ctx, c3); !errors.As(err, &busy) || !busy.Newer || busy.Cursor.HolderVersion != 9 {
		t.Fatalf("v3 after v9: %v; want overtaken by v9", err)
	}

	// Drift check bookkeeping: due once v9's lease has passed.
	if due, err := f.L.ListSyncDue(ctx, t0, 10); err != nil || len(due) != 0 {
		t.Fatalf("due before the lease ends: %+v %v", due, err)
	}
	f.Clock.Advance(time.Minute)
	due, err := f.L.ListSyncDue(ctx, f.Clock.Now(), 10)
	if err != nil || len(due) != 1 || due[0].HolderOp != op9 || due[0].HolderVersion != 9 || due[0].Subject != "acct_c" || due[0].Family != "entitlement" || due[0].ProjSubject != "sub_c" {
		t.Fatalf("due cursors %+v %v", due, err)
	}
	stale := due[0]
	stale.HolderOp, stale.HolderVersion = op5, 5
	if err := f.L.MarkSynced(ctx, stale, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if again, _ := f.L.ListSyncDue(ctx, f.Clock.Now(), 10); len(again) != 1 {
		t.Fatalf("a check of an older holder parked the cursor: %+v", again)
	}
	if err := f.L.MarkSynced(ctx, due[0], f.Clock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if again, _ := f.L.ListSyncDue(ctx, f.Clock.Now(), 10); len(again) != 0 {
		t.Fatalf("rescheduled an hour later, yet due now: %+v", again)
	}
	if err := f.L.MarkSynced(ctx, due[0], time.Time{}); err != nil {
		t.Fatal(err)
	}
	if again, _ := f.L.ListSyncDue(ctx, f.Clock.Now().Add(2*time.Hour), 10); len(again) != 0 {
		t.Fatalf("parked, yet due: %+v", again)
	}
	p, err := f.L.GetProjection(ctx, "sub", "sub_c")
	if err != nil || p.Latest["entitlement"] != (ledger.LatestIntent{OperationID: op9, Kind: "entitlement.grant", Subject: "acct_c", Version: 9}) {
		t.Fatalf("projection's latest intents %+v %v", p.Latest, err)
	}
}

// A holder whose lease ended without a record (its dispatcher died) no
// longer blocks a newer version.
func TestLockSubjectAfterHolderLeaseExpired(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	op5, op9 := commitLatest(t, f, 5), commitLatest(t, f, 9)
	c5, err := f.L.ClaimIntent(ctx, op5, claimOpts)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.L.LockSubject(ctx, c5); err != nil {
		t.Fatal(err)
	}
	f.Clock.Advance(claimOpts.Lease + time.Second)
	c9, err := f.L.ClaimIntent(ctx, op9, claimOpts)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.L.LockSubject(ctx, c9); err != nil {
		t.Fatalf("v9 after v5's lease ended: %v", err)
	}
	cur, err := f.L.GetCursor(ctx, "sub", "sub_c", "entitlement")
	if err != nil || cur.HolderOp != op9 {
		t.Fatalf("cursor %+v %v", cur, err)
	}
}

func TestConditionHolds(t *testing.T) {
	cond := map[string]string{"status": "cancelled", "total": "1200"}
	if ok, why := ledger.ConditionHolds(cond, map[string]any{"status": "cancelled", "total": 1200}); !ok {
		t.Fatalf("holds: %s", why)
	}
	if ok, why := ledger.ConditionHolds(cond, map[string]any{"status": "confirmed", "total": 1200}); ok || why != "status=confirmed, the intent needs status=cancelled" {
		t.Fatalf("%v %q", ok, why)
	}
	if ok, why := ledger.ConditionHolds(cond, map[string]any{"total": 1200}); ok || why != "status=, the intent needs status=cancelled" {
		t.Fatalf("missing field: %v %q", ok, why)
	}
}

// The cursor's own requests (no transaction), so that they also run on
// dynalite (make test-dynalite): taking it, being overtaken, the drift
// check's listing and marking.
func TestCursorRequestsWithoutTransactions(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	claim := func(v int64, tok string) ledger.IntentClaim {
		return ledger.IntentClaim{Owner: "d", Token: tok, Expires: f.Clock.Now().Add(30 * time.Second), From: ledger.IntentStatusPending,
			Intent: ledger.IntentState{OperationID: fmt.Sprintf("op-raw-%d", v), Kind: "entitlement.grant", Subject: "acct_raw",
				Projection: "stripe/stripe_subscription", ProjectionSubject: "sub_raw", Version: v, Policy: ledger.PolicyLatest}}
	}
	if err := f.L.LockSubject(ctx, claim(5, "t5")); err != nil {
		t.Fatal(err)
	}
	var busy *ledger.SubjectBusyError
	if err := f.L.LockSubject(ctx, claim(3, "t3")); !errors.As(err, &busy) || !busy.Newer {
		t.Fatalf("v3 after v5: %v", err)
	}
	f.Clock.Advance(time.Minute)
	due, err := f.L.ListSyncDue(ctx, f.Clock.Now(), 10)
	if err != nil || len(due) != 1 || due[0].HolderOp != "op-raw-5" || due[0].Projection != "stripe/stripe_subscription" {
		t.Fatalf("due %+v %v", due, err)
	}
	if err := f.L.MarkSynced(ctx, due[0], time.Time{}); err != nil {
		t.Fatal(err)
	}
	if due, err := f.L.ListSyncDue(ctx, f.Clock.Now().Add(time.Hour), 10); err != nil || len(due) != 0 {
		t.Fatalf("after MarkSynced: %+v %v", due, err)
	}
}
