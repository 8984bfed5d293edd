package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// accepted writes one RECEIVED event.
func accepted(t *testing.T, f fixture, id string) {
	t.Helper()
	if _, err := f.L.Accept(context.Background(), delivery(id, `{"id":"`+id+`"}`)); err != nil {
		t.Fatal(err)
	}
}

func claimed(t *testing.T, f fixture, id string) ledger.Claim {
	t.Helper()
	accepted(t, f, id)
	c, err := f.L.Claim(context.Background(), "stripe", id, ledger.ClaimOptions{Owner: "proc", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func lastAudit(ev ledger.Event) ledger.AuditEntry { return ev.Audit[len(ev.Audit)-1] }

func TestHoldQuarantinesEventsNobodyIsWorkingOn(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		setup func(t *testing.T, f fixture)
		from  ledger.Status
	}{
		{"received", func(t *testing.T, f fixture) { accepted(t, f, "evt_1") }, ledger.StatusReceived},
		{"retry wait", func(t *testing.T, f fixture) {
			if err := f.L.RetryLater(ctx, claimed(t, f, "evt_1"), "http_503", "down", t0.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
		}, ledger.StatusRetryWait},
		{"dead", func(t *testing.T, f fixture) {
			if err := f.L.Dead(ctx, claimed(t, f, "evt_1"), "commit_failed", "boom"); err != nil {
				t.Fatal(err)
			}
		}, ledger.StatusDead},
		{"expired lease", func(t *testing.T, f fixture) {
			claimed(t, f, "evt_1")
			f.Clock.Advance(2 * time.Minute)
		}, ledger.StatusProcessing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.setup(t, f)
			ev, err := f.L.Hold(ctx, "stripe", "evt_1", "ops:alice", "customer asked us to wait (INC-9)")
			if err != nil {
				t.Fatal(err)
			}
			if ev.Status != ledger.StatusQuarantined || ev.ErrorCode != ledger.HoldErrorCode || ev.ErrorMessage != "customer asked us to wait (INC-9)" {
				t.Fatalf("held: %s %q %q", ev.Status, ev.ErrorCode, ev.ErrorMessage)
			}
			want := ledger.AuditEntry{At: f.Clock.Now(), From: tc.from, To: ledger.StatusQuarantined, Actor: "ops:alice", Action: "hold", Reason: "customer asked us to wait (INC-9)"}
			if got := lastAudit(ev); got != want {
				t.Fatalf("audit %+v, want %+v", got, want)
			}
			open, err := f.L.ListOpen(ctx, "event", 10, ledger.StatusQuarantined)
			if err != nil || len(open) != 1 || open[0].EventID != "evt_1" || !open[0].Since.Equal(f.Clock.Now()) {
				t.Fatalf("not on the attention shards: %+v %v", open, err)
			}
			if due, err := f.L.ListDue(ctx, t0.Add(24*time.Hour), 10); err != nil || len(due) != 0 {
				t.Fatalf("a held event is in the work query: %+v %v", due, err)
			}
			// Release is a replay: back to RECEIVED, same identity.
			back, err := f.L.Replay(ctx, "stripe", "evt_1", "ops:bob", "customer confirmed")
			if err != nil || back.Status != ledger.StatusReceived || lastAudit(back).Actor != "ops:bob" {
				t.Fatalf("release: %+v %v", back.Status, err)
			}
		})
	}
}

func TestHoldRefusesLiveLeasesAndFinishedEvents(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	claimed(t, f, "evt_live")
	c := claimed(t, f, "evt_done")
	if _, err := f.L.Commit(ctx, c, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.L.Quarantine(ctx, claimed(t, f, "evt_quar"), "malformed", "bad"); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{
		"evt_live": "hold stripe/evt_live refused: it is PROCESSING (leased by proc until 2026-11-30T12:01:00Z; wait for the worker to finish or the lease to expire)",
		"evt_done": "hold stripe/evt_done refused: it is PROCESSED (finished; nothing to hold)",
		"evt_quar": "hold stripe/evt_quar refused: it is QUARANTINED (already quarantined)",
	} {
		before, _ := f.L.Get(ctx, "stripe", id)
		_, err := f.L.Hold(ctx, "stripe", id, "ops:alice", "why")
		if !errors.Is(err, ledger.ErrRefused) || err.Error() != want {
			t.Fatalf("%s: %v", id, err)
		}
		after, _ := f.L.Get(ctx, "stripe", id)
		if len(after.Audit) != len(before.Audit) || after.Status != before.Status {
			t.Fatalf("%s changed by a refused hold", id)
		}
	}
	if _, err := f.L.Hold(ctx, "stripe", "evt_missing", "ops:alice", "why"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if _, err := f.L.Hold(ctx, "stripe", "evt_live", "", "why"); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("no actor: %v", err)
	}
}

func TestResolveIntentRecordsTheVerifiedOutcome(t *testing.T) {
	ctx := context.Background()
	record := func(st ledger.IntentStatus) func(t *testing.T, f fixture) {
		return func(t *testing.T, f fixture) {
			c, err := f.L.ClaimIntent(ctx, "op1", claimOpts)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.L.RecordIntent(ctx, c, ledger.IntentOutcome{Status: st, Code: "timeout", Next: t0.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, f fixture)
		to    ledger.IntentStatus
		from  ledger.IntentStatus
	}{
		{"uncertain", record(ledger.IntentStatusUncertain), ledger.IntentStatusSucceeded, ledger.IntentStatusUncertain},
		{"retry wait", record(ledger.IntentStatusRetryWait), ledger.IntentStatusFailed, ledger.IntentStatusRetryWait},
		{"quarantined", record(ledger.IntentStatusQuarantined), ledger.IntentStatusSucceeded, ledger.IntentStatusQuarantined},
		{"expired lease", func(t *testing.T, f fixture) {
			if _, err := f.L.ClaimIntent(ctx, "op1", claimOpts); err != nil {
				t.Fatal(err)
			}
			f.Clock.Advance(time.Minute)
		}, ledger.IntentStatusFailed, ledger.IntentStatusDispatching},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			newIntent(t, f, "op1")
			tc.setup(t, f)
			in, err := f.L.ResolveIntent(ctx, "op1", tc.to, "ops:alice", "refund re_42 seen in the Stripe dashboard")
			if err != nil {
				t.Fatal(err)
			}
			now := f.Clock.Now()
			if in.Status != tc.to || in.ErrorCode != "operator_resolved" || in.Detail != "refund re_42 seen in the Stripe dashboard" ||
				!in.FinishedAt.Equal(now) || !in.ExpiresAt.Equal(now.Add(30*24*time.Hour)) {
				t.Fatalf("resolved: %+v", in)
			}
			want := ledger.AuditEntry{At: now, From: ledger.Status(tc.from), To: ledger.Status(tc.to), Actor: "ops:alice", Action: "resolve", Reason: "refund re_42 seen in the Stripe dashboard"}
			if got := in.Audit[len(in.Audit)-1]; got != want {
				t.Fatalf("audit %+v, want %+v", got, want)
			}
			if open, err := f.L.ListOpen(ctx, "intent", 10); err != nil || len(open) != 0 {
				t.Fatalf("resolved intent still open: %+v %v", open, err)
			}
			if due, err := f.L.ListDueIntents(ctx, now.Add(24*time.Hour), 10); err != nil || len(due) != 0 {
				t.Fatalf("resolved intent still due: %+v %v", due, err)
			}
			if _, err := f.L.ResolveIntent(ctx, "op1", tc.to, "ops:alice", "again"); !errors.Is(err, ledger.ErrRefused) {
				t.Fatalf("resolving a finished intent: %v", err)
			}
		})
	}
}

func TestResolveIntentRefusals(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	newIntent(t, f, "op_pending")
	newIntent(t, f, "op_live")
	if _, err := f.L.ClaimIntent(ctx, "op_live", claimOpts); err != nil {
		t.Fatal(err)
	}
	newIntent(t, f, "op_done")
	c, err := f.L.ClaimIntent(ctx, "op_done", claimOpts)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.L.RecordIntent(ctx, c, ledger.IntentOutcome{Status: ledger.IntentStatusSucceeded, Code: "http_200"}); err != nil {
		t.Fatal(err)
	}
	for op, want := range map[string]string{
		"op_pending": "resolve intent op_pending refused: it is PENDING (not attempted yet; the dispatcher will send it)",
		"op_live":    "resolve intent op_live refused: it is DISPATCHING (leased by dispatcher-a until 2026-11-30T12:00:30Z; a dispatcher is working on it)",
		"op_done":    "resolve intent op_done refused: it is SUCCEEDED (finished)",
	} {
		if _, err := f.L.ResolveIntent(ctx, op, ledger.IntentStatusFailed, "ops:alice", "why"); !errors.Is(err, ledger.ErrRefused) || err.Error() != want {
			t.Fatalf("%s: %v", op, err)
		}
	}
	if got, _ := f.L.GetIntentState(ctx, "op_done"); got.Status != ledger.IntentStatusSucceeded || len(got.Audit) != 2 {
		t.Fatalf("refused resolve changed the intent: %+v", got)
	}
	if _, err := f.L.ResolveIntent(ctx, "op_live", ledger.IntentStatusUncertain, "ops:alice", "why"); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("resolve to UNCERTAIN: %v", err)
	}
	if _, err := f.L.ResolveIntent(ctx, "op_nope", ledger.IntentStatusFailed, "ops:alice", "why"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
}

// A dispatcher that moves the intent between the operator's read and write
// wins: the resolve fails and writes nothing.
func TestResolveIntentLosesToAConcurrentDispatcher(t *testing.T) {
	ctx := context.Background()
	f, db := fixtureWithClient(t)
	l, clock := f.L, f.Clock
	newIntent(t, f, "op1")
	c, _ := l.ClaimIntent(ctx, "op1", claimOpts)
	if err := l.RecordIntent(ctx, c, ledger.IntentOutcome{Status: ledger.IntentStatusRetryWait, Next: t0}); err != nil {
		t.Fatal(err)
	}
	racing := &racingDB{DynamoDB: db, before: func() {
		c, err := l.ClaimIntent(ctx, "op1", claimOpts)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.RecordIntent(ctx, c, ledger.IntentOutcome{Status: ledger.IntentStatusRetryWait, Next: t0}); err != nil {
			t.Fatal(err)
		}
	}}
	op, err := ledger.New(racing, ledger.Options{Table: "ledger", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.ResolveIntent(ctx, "op1", ledger.IntentStatusSucceeded, "ops:alice", "seen"); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("resolve over a concurrent attempt: %v", err)
	}
	if got, _ := l.GetIntentState(ctx, "op1"); got.Status != ledger.IntentStatusRetryWait || got.Attempts != 2 {
		t.Fatalf("intent %s attempts %d", got.Status, got.Attempts)
	}
}

// fixtureWithClient is a fixture that also hands out its DynamoDB client,
// for wrapping it or scanning with it.
func fixtureWithClient(t *testing.T) (fixture, *dynamodb.Client) {
	t.Helper()
	d := localaws.NewDynamo()
	t.Cleanup(d.Close)
	db := d.Client()
	if err := ledger.CreateTable(context.Background(), db, "ledger"); err != nil {
		t.Fatal(err)
	}
	clock := ledger.NewManualClock(t0)
	l, err := ledger.New(db, ledger.Options{Table: "ledger", Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return fixture{L: l, Clock: clock}, db
}

// racingDB runs before() once, right before the first UpdateItem.
type racingDB struct {
	ledger.DynamoDB
	before func()
	done   bool
}

func (r *racingDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if !r.done {
		r.done = true
		r.before()
	}
	return r.DynamoDB.UpdateItem(ctx, in, opts...)
}

func TestScanEventsFiltersAndStaysWithinItsBudget(t *testing.T) {
	ctx := context.Background()
	f, db := fixtureWithClient(t)
	l, clock := f.L, f.Clock
	for i := range 6 {
		c := claimed(t, f, fmt.Sprintf("evt_%d", i))
		if _, err := l.Commit(ctx, c, nil, nil); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
	}
	accepted(t, f, "evt_open")
	other := delivery("evt_other", `{}`)
	other.Source, other.EventType = "shopify", "orders/create"
	if _, err := l.Accept(ctx, other); err != nil {
		t.Fatal(err)
	}

	res, err := l.ScanEvents(ctx, db, ledger.EventFilter{Statuses: []ledger.Status{ledger.StatusProcessed}})
	if err != nil || len(res.Events) != 6 || res.More || res.Requests != 1 {
		t.Fatalf("processed: %d events, %d requests, more %v, %v", len(res.Events), res.Requests, res.More, err)
	}
	for i, ev := range res.Events {
		if ev.EventID != fmt.Sprintf("evt_%d", i) || ev.Status != ledger.StatusProcessed {
			t.Fatalf("event %d: %s %s (not oldest first?)", i, ev.EventID, ev.Status)
		}
	}
	res, err = l.ScanEvents(ctx, db, ledger.EventFilter{Statuses: []ledger.Status{ledger.StatusProcessed}, ReceivedBefore: t0.Add(2 * time.Minute)})
	if err != nil || len(res.Events) != 2 || res.Events[1].EventID != "evt_1" {
		t.Fatalf("received before: %+v %v", res.Events, err)
	}
	res, err = l.ScanEvents(ctx, db, ledger.EventFilter{Source: "shopify", EventType: "orders/create"})
	if err != nil || len(res.Events) != 1 || res.Events[0].EventID != "evt_other" {
		t.Fatalf("source and type: %+v %v", res.Events, err)
	}
	res, err = l.ScanEvents(ctx, db, ledger.EventFilter{Statuses: []ledger.Status{ledger.StatusProcessed}, Limit: 2})
	if err != nil || len(res.Events) != 2 || !res.More {
		t.Fatalf("limit: %d events, more %v, %v", len(res.Events), res.More, err)
	}
	res, err = l.ScanEvents(ctx, db, ledger.EventFilter{Source: "nobody", Budget: 3})
	if err != nil || len(res.Events) != 0 || !res.More || res.Requests != 1 {
		t.Fatalf("budget: %d events, %d requests, more %v, %v", len(res.Events), res.Requests, res.More, err)
	}
}

// A replay and a release record the status they took the event from.
func TestReopenAuditsItsFromStatus(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		from   ledger.Status
		reopen func(f fixture) (ledger.Event, error)
		action string
	}{
		{"replay of a dead event", ledger.StatusDead, func(f fixture) (ledger.Event, error) {
			return f.L.Replay(ctx, "stripe", "evt_1", "ops:alice", "fixed")
		}, "replay"},
		{"replay of a quarantined event", ledger.StatusQuarantined, func(f fixture) (ledger.Event, error) {
			return f.L.Replay(ctx, "stripe", "evt_1", "ops:alice", "fixed")
		}, "replay"},
		{"release", ledger.StatusQuarantined, func(f fixture) (ledger.Event, error) {
			return f.L.Release(ctx, "stripe", "evt_1", "ops:alice", "fixed")
		}, "release"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			c := claimed(t, f, "evt_1")
			var err error
			if tc.from == ledger.StatusDead {
				err = f.L.Dead(ctx, c, "commit_failed", "boom")
			} else {
				err = f.L.Quarantine(ctx, c, "unknown_subject", "no account")
			}
			if err != nil {
				t.Fatal(err)
			}
			ev, err := tc.reopen(f)
			if err != nil {
				t.Fatal(err)
			}
			want := ledger.AuditEntry{At: t0, From: tc.from, To: ledger.StatusReceived, Actor: "ops:alice", Action: tc.action, Reason: "fixed"}
			if got := lastAudit(ev); got != want || ev.Status != ledger.StatusReceived {
				t.Fatalf("audit %+v, want %+v", got, want)
			}
		})
	}
}
