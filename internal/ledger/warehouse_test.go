package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// commitProjection processes one event into projection name/subject at
// version with no intents.
func commitProjection(t *testing.T, f fixture, id, name, subject string, version int64) {
	t.Helper()
	c := claimed(t, f, id)
	w := &ledger.ProjectionWrite{Name: name, Subject: subject, Version: version, Fingerprint: fmt.Sprint("f", version), State: map[string]any{"v": version}}
	_, err := f.L.Commit(context.Background(), c, w, nil)
	skipWithoutTransactions(t, err)
	if err != nil {
		t.Fatal(err)
	}
}

// A walk over the projections, one small page at a time, resumed from
// each page's cursor, sees each projection exactly once, events and
// intents aside; a name keeps only that projection's.
func TestScanProjectionsResumesFromItsCursor(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	for i := range 5 {
		commitProjection(t, f, fmt.Sprintf("evt_%d", i), "orders/order", fmt.Sprintf("O-%d", i), int64(i+1))
	}
	commitProjection(t, f, "evt_s", "stripe/stripe_subscription", "sub_1", 9)
	walk := func(name string) (map[string]int64, int) {
		seen := map[string]int64{}
		pages, cursor := 0, ""
		for {
			page, err := f.L.ScanProjections(ctx, f.DB, name, cursor, 2)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if page.Read > 2 {
				t.Fatalf("page read %d items, limit 2", page.Read)
			}
			for _, p := range page.Projections {
				if _, dup := seen[p.Name+"|"+p.Subject]; dup {
					t.Fatalf("%s/%s seen twice", p.Name, p.Subject)
				}
				seen[p.Name+"|"+p.Subject] = p.Version
			}
			if page.Next == "" {
				return seen, pages
			}
			cursor = page.Next
		}
	}
	all, pages := walk("")
	if len(all) != 6 || all["orders/order|O-3"] != 4 || all["stripe/stripe_subscription|sub_1"] != 9 || pages < 6 {
		t.Fatalf("walk: %v in %d pages", all, pages)
	}
	orders, _ := walk("orders/order")
	if len(orders) != 5 || orders["stripe/stripe_subscription|sub_1"] != 0 {
		t.Fatalf("orders only: %v", orders)
	}
	if _, err := f.L.ScanProjections(ctx, f.DB, "", "not-a-cursor", 2); !errors.Is(err, ledger.ErrCursor) {
		t.Fatalf("a made-up cursor: %v", err)
	}
}

// An operator's backfill intent is PENDING on the due index like any
// other, starts its audit with the operator and the reason, and is
// written once: the same backfill again creates nothing.
func TestBackfillIntentIsAuditedAndWrittenOnce(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	commitProjection(t, f, "evt_1", "orders/order", "O-1", 3)
	p, err := f.L.GetProjection(ctx, "orders/order", "O-1")
	if err != nil {
		t.Fatal(err)
	}
	in := ledger.Intent{OperationID: warehouse.OperationID("orders", "order", "O-1", 3), Kind: "warehouse.record", Subject: "O-1", Payload: map[string]any{"version": "3"}, Policy: ledger.PolicyOnce}
	if _, err := f.L.BackfillIntent(ctx, p, in, "orders", "evt_1", "", "why"); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("no actor: %v", err)
	}
	created, err := f.L.BackfillIntent(ctx, p, in, "orders", "evt_1", "ops:alice (local:alice@box)", "warehouse rebuilt after the bucket was emptied")
	if err != nil || !created {
		t.Fatalf("backfill: %v %v", created, err)
	}
	st, err := f.L.GetIntentState(ctx, in.OperationID)
	if err != nil {
		t.Fatal(err)
	}
	want := ledger.AuditEntry{At: f.Clock.Now(), To: ledger.Status(ledger.IntentPending), Actor: "ops:alice (local:alice@box)", Action: "backfill",
		Reason: "warehouse rebuilt after the bucket was emptied"}
	if st.Status != ledger.IntentStatusPending || st.Causation != "orders/evt_1" || st.Version != 3 || st.Projection != "orders/order" ||
		len(st.Audit) != 1 || st.Audit[0] != want {
		t.Fatalf("intent %+v", st)
	}
	if open, err := f.L.ListOpen(ctx, "intent", 10, ledger.Status(ledger.IntentPending)); err != nil || len(open) != 1 || open[0].OperationID != in.OperationID {
		t.Fatalf("not on the due index: %+v %v", open, err)
	}
	if created, err := f.L.BackfillIntent(ctx, p, in, "orders", "evt_1", "ops:alice", "again"); err != nil || created {
		t.Fatalf("second backfill: created=%v %v", created, err)
	}
}

// ListProjectionsChanged says when a bound left projections out (capped):
// with five projections changed, a limit of two returns two and is
// capped, though the scan read the whole table in one page; a limit at or
// above five returns all five, not capped; a read bound below the table's
// size is capped; and only the projections changed since the time asked
// are returned.
func TestListProjectionsChangedSaysWhenABoundLeftSomeOut(t *testing.T) {
	ctx := context.Background()
	f, _ := fixtureWithClient(t)
	for i := range 5 {
		c := claimed(t, f, fmt.Sprintf("evt_%d", i))
		w := &ledger.ProjectionWrite{Name: "orders/order", Subject: fmt.Sprintf("S-%d", i), Version: 1, Fingerprint: "fp", State: map[string]any{"status": "created"}}
		if _, err := f.L.Commit(ctx, c, w, nil); err != nil {
			t.Fatal(err)
		}
		f.Clock.Advance(time.Minute)
	}
	since := t0.Add(-time.Hour)
	for _, c := range []struct {
		limit, maxRead int
		since          time.Time
		n              int
		capped         bool
	}{
		{limit: 2, maxRead: 10000, since: since, n: 2, capped: true},
		{limit: 5, maxRead: 10000, since: since, n: 5, capped: false},
		{limit: 10, maxRead: 10000, since: since, n: 5, capped: false},
		{limit: 10, maxRead: 3, since: since, n: -1, capped: true},
		{limit: 10, maxRead: 10000, since: t0.Add(4 * time.Minute), n: 1, capped: false},
	} {
		ps, capped, err := f.L.ListProjectionsChanged(ctx, c.since, c.limit, c.maxRead)
		if err != nil || capped != c.capped || (c.n >= 0 && len(ps) != c.n) || len(ps) > c.limit {
			t.Fatalf("limit %d, read %d, since %s: %d projections, capped %v, %v; want %d, capped %v",
				c.limit, c.maxRead, c.since.Format(time.TimeOnly), len(ps), capped, err, c.n, c.capped)
		}
	}
}

// MissingRecord, the one decision of the reconciler's drift check and the
// operator's backfill, from each state of a record intent and its repairs.
func TestMissingRecordDecidesFromTheIntentAndItsRepairs(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	commitProjection(t, f, "evt_w1", "orders/order", "O-1", 7)
	p, err := f.L.GetProjection(ctx, "orders/order", "O-1")
	if err != nil {
		t.Fatal(err)
	}
	need := func() ledger.RecordNeed {
		t.Helper()
		n, err := f.L.MissingRecord(ctx, p, 0)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// finish claims op and records status for it.
	finish := func(op string, st ledger.IntentStatus) {
		t.Helper()
		c, err := f.L.ClaimIntent(ctx, op, claimOpts)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.L.RecordIntent(ctx, c, ledger.IntentOutcome{Status: st, Code: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	// No record intent: written from the projection, caused by its last event.
	n := need()
	op := n.OperationID
	if n.Action != ledger.RecordWrite || op != n.Intent.OperationID || n.Source+"/"+n.Event != p.LastEvent || n.Intent.Kind == "" {
		t.Fatalf("no intent: %+v", n)
	}
	if _, err := f.L.PutIntent(ctx, p, n.Intent, n.Source, n.Event); err != nil {
		t.Fatal(err)
	}
	// PENDING: announced again, nothing written.
	if n := need(); n.Action != ledger.RecordAnnounce || n.OperationID != op || n.Status != ledger.IntentStatusPending {
		t.Fatalf("pending: %+v", n)
	}
	// SUCCEEDED without its object: repair 1, the original's payload.
	finish(op, ledger.IntentStatusSucceeded)
	orig, err := f.L.GetIntentState(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	for r := 1; r <= ledger.MaxRecordRepairs; r++ {
		n := need()
		if n.Action != ledger.RecordRepair || n.Repair != r || n.Original.OperationID != op || n.Intent.OperationID != n.OperationID ||
			fmt.Sprint(n.Intent.Payload) != fmt.Sprint(orig.Payload) {
			t.Fatalf("repair %d: %+v", r, n)
		}
		if _, err := f.L.PutIntent(ctx, p, n.Intent, n.Source, n.Event); err != nil {
			t.Fatal(err)
		}
		if r == 2 {
			// A waiting repair is announced again; a quarantined one is the
			// operator's until resolved.
			if n2 := need(); n2.Action != ledger.RecordAnnounce || n2.OperationID != n.OperationID {
				t.Fatalf("pending repair: %+v", n2)
			}
			finish(n.OperationID, ledger.IntentStatusQuarantined)
			if n2 := need(); n2.Action != ledger.RecordOperator || n2.OperationID != n.OperationID || n2.ErrorCode != "test" {
				t.Fatalf("quarantined repair: %+v", n2)
			}
			if _, err := f.L.ResolveIntent(ctx, n.OperationID, ledger.IntentStatusFailed, "op@example.com", "test"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		finish(n.OperationID, ledger.IntentStatusFailed)
	}
	// Every repair ended without the object: the operator's.
	if n := need(); n.Action != ledger.RecordOperator || n.OperationID != "" || n.Original.OperationID != op {
		t.Fatalf("repairs exhausted: %+v", n)
	}
	// A quarantined record intent (a state too large, say) is the
	// operator's; nothing is repaired.
	commitProjection(t, f, "evt_w2", "orders/order", "O-2", 3)
	if p, err = f.L.GetProjection(ctx, "orders/order", "O-2"); err != nil {
		t.Fatal(err)
	}
	n = need()
	if _, err := f.L.PutIntent(ctx, p, n.Intent, n.Source, n.Event); err != nil {
		t.Fatal(err)
	}
	finish(n.OperationID, ledger.IntentStatusQuarantined)
	if q := need(); q.Action != ledger.RecordOperator || q.OperationID != n.OperationID || q.Status != ledger.IntentStatusQuarantined || q.Original.OperationID != "" {
		t.Fatalf("quarantined record intent: %+v", q)
	}
}

// Outside a commit the ledger writes warehouse record intents only: a
// PENDING business intent (a refund) or a record kind under a business
// intent's key is refused with nothing written, whoever asks (the
// reconciler's drift repair, an operator's backfill).
func TestOnlyRecordIntentsAreWrittenOutsideACommit(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	commitProjection(t, f, "evt_1", "orders/order", "O-1", 3)
	p, err := f.L.GetProjection(ctx, "orders/order", "O-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []ledger.Intent{
		{OperationID: "0f3a9c", Kind: "refund", Subject: "O-1", Payload: map[string]any{"amount": 12900}},
		{OperationID: "0f3a9d", Kind: warehouse.Kind, Subject: "O-1", Payload: map[string]any{"version": "3"}},
		{OperationID: warehouse.OperationID("orders", "order", "O-1", 3), Kind: "refund", Subject: "O-1"},
	} {
		if created, err := f.L.PutIntent(ctx, p, in, "orders", "evt_1"); !errors.Is(err, ledger.ErrInvalid) || created {
			t.Errorf("put %s (%s): created=%v %v; want ErrInvalid", in.OperationID, in.Kind, created, err)
		}
		if _, err := f.L.GetIntentState(ctx, in.OperationID); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("intent %s (%s) exists: %v", in.OperationID, in.Kind, err)
		}
	}
}

// The largest result projection.Validate accepts commits with the
// warehouse on: its MaxIntents intents and the record of the revision in
// one transaction, the budget leaving room for a full watch list's
// contradictions and compensations too.
func TestTheLargestValidResultCommitsWithTheWarehouseOn(t *testing.T) {
	if want := ledger.MaxTransactItems - 3 - 2*ledger.MaxWatch; projection.MaxIntents != want {
		t.Fatalf("projection.MaxIntents is %d; a transaction with the event, the projection, the record and a full watch list leaves %d", projection.MaxIntents, want)
	}
	ctx := context.Background()
	f := newFixture(t)
	state := map[string]any{"status": "paid"}
	w := &ledger.ProjectionWrite{Name: "orders/order", Subject: "O-1", Version: 3, Fingerprint: projection.Fingerprint(state), State: state}
	res := projection.Result{Write: w}
	for i := range projection.MaxIntents {
		res.Intents = append(res.Intents, projection.Intent{OperationID: fmt.Sprintf("op-%02d", i), Kind: "notify", Subject: "O-1"})
	}
	unscoped := *w
	unscoped.Name = "order" // as the projection returns it, before the processor scopes it
	if err := projection.Validate("orders/order", projection.Result{Write: &unscoped, Intents: res.Intents}); err != nil {
		t.Fatal(err)
	}
	intents := append(res.Intents, warehouse.Intent(*w, "orders", "evt_1", f.Clock.Now(), 0))
	if _, err := f.L.Accept(ctx, ledger.Delivery{Source: "orders", EventID: "evt_1", EventType: "order.paid", DeliveryID: "d1", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	c, err := f.L.Claim(ctx, "orders", "evt_1", ledger.ClaimOptions{Owner: "w", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	done, err := f.L.Commit(ctx, c, w, intents)
	skipWithoutTransactions(t, err)
	if err != nil || done.Result.Outcome != ledger.OutcomeApplied || len(done.Intents) != projection.MaxIntents+1 {
		t.Fatalf("commit: %+v %v; want applied with %d intents and the record", done.Result, err, projection.MaxIntents)
	}
}
