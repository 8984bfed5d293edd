package pipelinetest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// seatsHarness runs rule through the whole pipeline with an outbox whose
// downstream performs its kind, and delivers the seat counts as
// revisions 1, 2, 3 of subscription O-7, each settled before the next.
func seatsHarness(t *testing.T, rule pt.SeatsRule, seats ...int) *pt.Harness {
	t.Helper()
	reg := projection.NewRegistry()
	rule.Register(reg)
	h := pt.NewOrders(t, pt.Options{Registry: reg}, pt.OutboxOptions{Kinds: []string{rule.Kind()}, Scopes: map[string][]string{rule.Kind(): {"orders"}}})
	w, d := h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1")
	for i, n := range seats {
		settle(t, h, w, d, fmt.Sprintf("msg_seats_%d", i+1), pt.SeatsEvent("O-7", i+1, n))
	}
	return h
}

// lastSeats is the seat count the downstream last applied for O-7.
func lastSeats(t *testing.T, h *pt.Harness) any {
	t.Helper()
	view, ok := h.Outbox.Down.Subject("orders", "O-7")
	if !ok || len(view.History) == 0 {
		return nil
	}
	st, _ := view.History[len(view.History)-1].State["state"].(map[string]any)
	return st["seats"]
}

// Seats 5 → 8 → 3 under a latest intent keyed without the revision: the
// later revisions reuse the first one's operation id. They are
// quarantined operation_id_reused (an attention item naming the id), the
// downstream holds 5 and nothing newer is written. The same schedule
// under the rule keyed by revision ends at 3 at the downstream.
func TestAReusedLatestOperationIDIsQuarantinedNotDropped(t *testing.T) {
	ctx := context.Background()
	buggy := pt.NewSeatsRule(true, false)
	h := seatsHarness(t, buggy, 5, 8, 3)
	op := buggy.OperationID("O-7", 1)
	if got := lastSeats(t, h); fmt.Sprint(got) != "5" || h.Outbox.Down.Effective(op) != 1 {
		t.Fatalf("downstream holds seats %v (%d effective calls of %s), want 5 once", got, h.Outbox.Down.Effective(op), op)
	}
	for _, id := range []string{"msg_seats_2", "msg_seats_3"} {
		ev := h.EventOf("orders", id)
		if ev.Status != ledger.StatusQuarantined || ev.ErrorCode != projection.CodeOperationIDReused || !strings.Contains(ev.ErrorMessage, op) {
			t.Fatalf("%s: %s %q %q; want QUARANTINED %s naming %s", id, ev.Status, ev.ErrorCode, ev.ErrorMessage, projection.CodeOperationIDReused, op)
		}
	}
	open, err := h.Ledger.ListOpen(ctx, "event", 10)
	if err != nil {
		t.Fatal(err)
	}
	told := 0
	for _, o := range open {
		if o.ErrorCode == projection.CodeOperationIDReused {
			told++
		}
	}
	if told != 2 {
		t.Fatalf("attention items %s: %d of %+v, want 2", projection.CodeOperationIDReused, told, open)
	}
	p, err := h.Ledger.GetProjection(ctx, projection.ScopedName("orders", builtin.OrderProjection), "O-7")
	if err != nil || p.Version != 1 {
		t.Fatalf("projection %+v %v: a quarantined revision writes no state", p, err)
	}

	fixed := seatsHarness(t, pt.NewSeatsRule(false, false), 5, 8, 3)
	if got := lastSeats(t, fixed); fmt.Sprint(got) != "3" {
		t.Fatalf("with the revision in the id the downstream ends at %v seats, want 3", got)
	}
}

// A once dunning email emitted by two revisions under one id is the
// declared deduplication: one email performed, and the second revision's
// event records it.
func TestAOnceIntentCarriedByTwoRevisionsIsPerformedOnceAndRecorded(t *testing.T) {
	rule := pt.NewSeatsRule(true, true)
	h := seatsHarness(t, rule, 5, 8)
	op := rule.OperationID("O-7", 1)
	if n := len(h.Outbox.Arrivals("")); n != 1 || h.Outbox.Down.Effective(op) != 1 {
		t.Fatalf("%d calls, %d effective for %s; want one email", n, h.Outbox.Down.Effective(op), op)
	}
	ev := h.EventOf("orders", "msg_seats_2")
	if ev.Status != ledger.StatusProcessed || ev.Result == nil || len(ev.Result.Deduplicated) != 1 ||
		ev.Result.Deduplicated[0].OperationID != op || ev.Result.Deduplicated[0].HeldBy != "orders/msg_seats_1" {
		t.Fatalf("second revision: %s %+v", ev.Status, ev.Result)
	}
	if !strings.Contains(strings.Join(pt.Actions(ev), " "), "intent_deduplicated") {
		t.Fatalf("audit %v", pt.Actions(ev))
	}
}
