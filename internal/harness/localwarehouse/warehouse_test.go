package localwarehouse_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/localwarehouse"
	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/reconciler"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/builtin"
)

const o42, o43 = "O-42", "O-43"

const drainTimeout, idle = 20 * time.Second, 2 * time.Second

// processOnly runs the processor until the events queue is empty, and
// the dispatcher for rounds rounds (the warehouse's records wait, the
// other effects do not).
func processOnly(t *testing.T, h *pt.Harness, w *pt.Worker, d *pt.Dispatcher, rounds int) {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(drainTimeout); h.Depth(h.Queues.Queue) > 0; {
		if time.Now().After(deadline) {
			t.Fatal("events queue not drained")
		}
		if w.PollOnce(ctx) == 0 {
			h.Clock.Advance(idle)
			time.Sleep(20 * time.Millisecond)
		}
	}
	for range rounds {
		d.PollOnce(ctx)
	}
}

// The order timeline with the warehouse on: r10; a duplicate of r10; r12
// before r11; r11 late; a replay of r12 under a new delivery; and a
// warehouse unavailable while the backlog is processed, then back. The
// warehouse's current row is the ledger's (cancelled @ 12), its change
// log holds each applied revision once (r11 was never applied: it is
// stale), and the refund and the notice were performed once each, while
// the warehouse was down, and never again because of its recovery.
func TestWarehouseOrderTimeline(t *testing.T) {
	ctx := context.Background()
	h := pt.NewOrders(t, pt.Options{}, pt.OutboxOptions{})
	wh := h.EnableWarehouse(0)
	w := h.NewWorker("w1")
	d := h.Outbox.NewDispatcher("d1")

	if r := h.DeliverOrder("msg-10", pt.OrderEvent("order.created", o42, 10, "", "")); r.Status != 202 {
		t.Fatalf("r10: %d %s", r.Status, r.Body)
	}
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
	if n := len(wh.Records()); n != 1 {
		t.Fatalf("after r10 the warehouse holds %d records", n)
	}

	// The warehouse goes down; the backlog is processed regardless.
	wh.S3.SetDown(true)
	h.DeliverOrder("msg-10", pt.OrderEvent("order.created", o42, 10, "", "")) // the same delivery again
	h.DeliverOrder("msg-12", pt.OrderEvent("order.cancelled", o42, 12, "", ""))
	h.DeliverOrder("msg-11", pt.OrderEvent("order.updated", o42, 11, "confirmed", ""))
	h.DeliverOrder("msg-12-replay", pt.OrderEvent("order.cancelled", o42, 12, "", ""))
	h.DeliverOrder("msg-o43", pt.OrderEvent("order.created", o43, 1, "", ""))
	processOnly(t, h, w, d, 4)

	refund12, notify12 := pt.OrderOps(o42, 12)
	want := map[string]int{refund12: 1, notify12: 1}
	if got := h.Outbox.Down.EffectiveByKey(); !maps.Equal(got, want) {
		t.Fatalf("with the warehouse down: effective calls %v, want %v", got, want)
	}
	rec12 := warehouse.OperationID("orders", builtin.OrderProjection, o42, 12)
	if st := h.Outbox.Intent(rec12).Status; st != ledger.IntentStatusRetryWait {
		t.Fatalf("record of r12 while the warehouse is down: %s, want RETRY_WAIT (waiting, visible)", st)
	}
	if n := len(wh.Records()); n != 1 {
		t.Fatalf("the warehouse holds %d records while down", n)
	}

	// Back: the backlog's records are written, nothing else is called.
	wh.S3.SetDown(false)
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
	if got := h.Outbox.Down.EffectiveByKey(); !maps.Equal(got, want) {
		t.Fatalf("after the warehouse's recovery: effective calls %v, want %v", got, want)
	}
	for _, op := range []string{rec12, warehouse.OperationID("orders", builtin.OrderProjection, o42, 10),
		warehouse.OperationID("orders", builtin.OrderProjection, o43, 1)} {
		if st := h.Outbox.Intent(op).Status; st != ledger.IntentStatusSucceeded {
			t.Fatalf("record %s: %s, want SUCCEEDED (observed in the warehouse)", op, st)
		}
	}
	// A redrive of every record intent adds nothing.
	h.Outbox.Announce("redrive", rec12)
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)

	cur, err := localwarehouse.CurrentState(ctx, wh.S3.Client(), wh.Bucket, wh.Prefix+"/")
	if err != nil {
		t.Fatal(err)
	}
	if len(cur) != 2 {
		t.Fatalf("current_state %+v", cur)
	}
	c := cur[0]
	canon, err := h.Ledger.GetProjection(ctx, "orders/"+builtin.OrderProjection, o42)
	if err != nil {
		t.Fatal(err)
	}
	if c.Subject != o42 || c.Version != 12 || c.State["status"] != "cancelled" || c.EventID != "msg-12" ||
		canon.Version != c.Version || canon.State["status"] != c.State["status"] {
		t.Fatalf("current row %+v; the ledger holds %v @ %d", c, canon.State["status"], canon.Version)
	}
	if cur[1].Subject != o43 || cur[1].Version != 1 {
		t.Fatalf("current row of %s: %+v", o43, cur[1])
	}
	log, err := localwarehouse.ChangeLog(ctx, wh.S3.Client(), wh.Bucket, wh.Prefix+"/")
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, r := range log {
		if r.Subject == o42 {
			got = append(got, r.Version)
		}
	}
	if len(got) != 2 || got[0] != 10 || got[1] != 12 {
		t.Fatalf("change log of %s: versions %v, want [10 12] (r11 was stale, never applied)", o42, got)
	}
}

// A record deleted from S3 after its intent SUCCEEDED: the reconciler's
// drift check finds the canonical revision missing from the warehouse,
// writes a repair intent (a derived operation id, the original's
// payload), and the dispatcher writes the same bytes again; the next
// check finds it in sync, and nothing else was called again.
func TestWarehouseDeletedRecordIsRepaired(t *testing.T) {
	ctx := context.Background()
	h := pt.NewOrders(t, pt.Options{}, pt.OutboxOptions{})
	wh := h.EnableWarehouse(0)
	w := h.NewWorker("w1")
	d := h.Outbox.NewDispatcher("d1")
	h.DeliverOrder("msg-10", pt.OrderEvent("order.created", o42, 10, "", ""))
	h.DeliverOrder("msg-12", pt.OrderEvent("order.cancelled", o42, 12, "", ""))
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
	key := wh.Key("orders", builtin.OrderProjection, o42, 12)
	before, err := wh.S3.Object(wh.Bucket, key)
	if err != nil {
		t.Fatal(err)
	}
	effective := h.Outbox.Down.EffectiveByKey()

	r := &reconciler.Reconciler{Ledger: h.Ledger, SQS: h.SQS, Queues: reconciler.Queues{Effects: h.Outbox.Queues.Queue},
		Warehouse: &reconciler.WarehouseCheck{Ledger: h.Ledger, S3: wh.S3.Client(), Bucket: wh.Bucket, Prefix: wh.Prefix}}
	rep, err := r.CheckWarehouse(ctx, h.Clock.Now())
	if err != nil || rep.Checked != 1 || rep.InSync != 1 || rep.Drifting != 0 {
		t.Fatalf("in sync: %+v %v", rep, err)
	}

	if err := wh.S3.Delete(wh.Bucket, key); err != nil {
		t.Fatal(err)
	}
	h.Clock.Advance(time.Minute)
	rep, err = r.CheckWarehouse(ctx, h.Clock.Now())
	if err != nil || rep.Drifting != 1 || rep.Repaired != 1 || rep.OldestDrift < time.Minute {
		t.Fatalf("after the deletion: %+v %v", rep, err)
	}
	// Found again before the repair ran: the same repair, announced again.
	if rep, err = r.CheckWarehouse(ctx, h.Clock.Now()); err != nil || rep.Repaired != 0 || rep.Reannounced != 1 {
		t.Fatalf("found twice: %+v %v", rep, err)
	}
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
	after, err := wh.S3.Object(wh.Bucket, key)
	if err != nil || string(after) != string(before) {
		t.Fatalf("repaired record %q (%v), want the same bytes %q", after, err, before)
	}
	orig := warehouse.OperationID("orders", builtin.OrderProjection, o42, 12)
	if st := h.Outbox.Intent(warehouse.RepairID(orig, 1)).Status; st != ledger.IntentStatusSucceeded {
		t.Fatalf("repair intent %s", st)
	}
	if rep, err = r.CheckWarehouse(ctx, h.Clock.Now()); err != nil || rep.Drifting != 0 || rep.InSync != 1 {
		t.Fatalf("after the repair: %+v %v", rep, err)
	}
	if got := h.Outbox.Down.EffectiveByKey(); !maps.Equal(got, effective) {
		t.Fatalf("effective calls %v, want %v", got, effective)
	}
}

// A revision whose state equals the subject's (a newer version, nothing
// the business acts on changed) advances the canonical version, so the
// warehouse records it too, from the processor's commit, without waiting
// for the reconciler: the current row's version is the canonical one. Its
// business effects are not written again.
func TestANewerVersionWithTheSameStateIsRecorded(t *testing.T) {
	ctx := context.Background()
	h := pt.NewOrders(t, pt.Options{}, pt.OutboxOptions{})
	wh := h.EnableWarehouse(0)
	w := h.NewWorker("w1")
	d := h.Outbox.NewDispatcher("d1")
	h.DeliverOrder("msg-1", pt.OrderEvent("order.created", o42, 1, "", ""))
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
	before := h.Outbox.Down.EffectiveByKey()
	h.DeliverOrder("msg-2", pt.OrderEvent("order.created", o42, 2, "", ""))
	h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)

	p, err := h.Ledger.GetProjection(ctx, "orders/"+builtin.OrderProjection, o42)
	if err != nil || p.Version != 2 {
		t.Fatalf("canonical: version %d, %v; want 2 (advanced)", p.Version, err)
	}
	var versions []int64
	for _, r := range wh.Records() {
		versions = append(versions, r.VersionInt())
	}
	if !slices.Equal(versions, []int64{1, 2}) {
		t.Fatalf("change log versions %v, want [1 2]: the advanced version is recorded by the commit", versions)
	}
	if st := h.Outbox.Intent(warehouse.OperationID("orders", builtin.OrderProjection, o42, 2)).Status; st != ledger.IntentStatusSucceeded {
		t.Fatalf("record of v2: %s, want SUCCEEDED (observed)", st)
	}
	if after := h.Outbox.Down.EffectiveByKey(); !maps.Equal(after, before) {
		t.Fatalf("effective calls moved from %v to %v on a revision with the same state", before, after)
	}
}
