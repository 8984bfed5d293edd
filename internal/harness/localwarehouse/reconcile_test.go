package localwarehouse_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/effectively-once/webhooks/internal/harness/localwarehouse"
	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/reconciler"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/builtin"
)

// check is the reconciler's warehouse check over the sink of s (no SDK
// retries: a store that is down answers at once), with its bounds.
func (s *sink) check(checks, readLimit int) *reconciler.Reconciler {
	h, wh := s.h, s.wh
	return &reconciler.Reconciler{Ledger: h.Ledger, SQS: h.SQS, Queues: reconciler.Queues{Effects: h.Outbox.Queues.Queue},
		Warehouse: &reconciler.WarehouseCheck{Ledger: h.Ledger, Bucket: wh.Bucket, Prefix: wh.Prefix, MaxState: wh.MaxState,
			Checks: checks, ReadLimit: readLimit,
			S3: wh.S3.ClientWith(func(o *s3.Options) { o.Retryer = aws.NopRetryer{} })}}
}

// recordOp is the operation id of an order revision's record.
func recordOp(order string, rev int64) string {
	return warehouse.OperationID("orders", builtin.OrderProjection, order, rev)
}

// changeLog is the versions of order's records, as DuckDB reads them.
func (s *sink) changeLog(t *testing.T, order string) []int64 {
	t.Helper()
	log, err := localwarehouse.ChangeLog(context.Background(), s.wh.S3.Client(), s.wh.Bucket, s.wh.Prefix+"/")
	if err != nil {
		t.Fatal(err)
	}
	var vs []int64
	for _, r := range log {
		if r.Subject == order {
			vs = append(vs, r.Version)
		}
	}
	return vs
}

// The canonical version moves on while the older revision's record
// waits: the store is down while O-42 r10 and then r12 are applied, so
// both records wait (RETRY_WAIT). The check asks for the current
// version's record only: r12 is missing and its intent waits, so it is
// announced again (one subject checked, one drifting, one re-announced).
// Once the store is back, both records land, each written once: the
// older one by its own retry, which the check never looked at. The
// change log holds r10 and r12, the current row is r12, and the next
// check finds the subject in sync.
func TestWarehouseCheckRedrivesTheCurrentVersionWhileAnOlderWaits(t *testing.T) {
	ctx := context.Background()
	s := newSink(t, pt.OutboxOptions{})
	h := s.h
	s.wh.S3.SetDown(true)
	h.DeliverOrder("msg-10", pt.OrderEvent("order.created", o42, 10, "", ""))
	processOnly(t, h, s.w1, s.d1, 2)
	h.DeliverOrder("msg-12", pt.OrderEvent("order.cancelled", o42, 12, "", ""))
	processOnly(t, h, s.w1, s.d1, 4)
	for _, rev := range []int64{10, 12} {
		if st := h.Outbox.Intent(recordOp(o42, rev)).Status; st != ledger.IntentStatusRetryWait {
			t.Fatalf("record of r%d while the store is down: %s, want RETRY_WAIT", rev, st)
		}
	}
	r := s.check(0, 0)
	if rep, err := r.CheckWarehouse(ctx, h.Clock.Now()); err == nil || rep.Unreadable != 1 || rep.Drifting != 0 {
		t.Fatalf("the check while the store is down: %+v %v (want it unreadable, and said so)", rep, err)
	}

	s.wh.S3.SetDown(false)
	h.Clock.Advance(time.Minute)
	rep, err := r.CheckWarehouse(ctx, h.Clock.Now())
	if err != nil || rep.Checked != 1 || rep.Drifting != 1 || rep.Reannounced != 1 || rep.Repaired+rep.Recreated != 0 || rep.OldestDrift < time.Minute {
		t.Fatalf("the check once the store is back: %+v %v", rep, err)
	}
	s.run(t)
	for _, rev := range []int64{10, 12} {
		if n := s.writes(s.wh.Key("orders", builtin.OrderProjection, o42, rev)); n != 1 {
			t.Fatalf("the record of r%d was written %d times", rev, n)
		}
		if st := h.Outbox.Intent(recordOp(o42, rev)).Status; st != ledger.IntentStatusSucceeded {
			t.Fatalf("record of r%d: %s", rev, st)
		}
	}
	if got := s.changeLog(t, o42); !slices.Equal(got, []int64{10, 12}) {
		t.Fatalf("change log of %s: %v, want [10 12]", o42, got)
	}
	s.requireOnce(t, o42, 12, "cancelled", "msg-12")
	if rep, err := r.CheckWarehouse(ctx, h.Clock.Now()); err != nil || rep.InSync != 1 || rep.Drifting != 0 {
		t.Fatalf("the next check: %+v %v", rep, err)
	}
}

// The store is down longer than the dispatcher's attempts: the record's
// intent ends FAILED (attempts_exhausted), the refund and the notice are
// performed regardless. Once the store is back the check finds the
// current version's record missing behind a FAILED intent and writes a
// repair (RepairID(op, 1), the original's payload), which the dispatcher
// writes once, with the original's event; the original stays FAILED (its
// history is true), and the next check finds the subject in sync.
func TestWarehouseFailedRecordIsRepairedOnceTheStoreIsBack(t *testing.T) {
	ctx := context.Background()
	s := newSink(t, pt.OutboxOptions{})
	h := s.h
	s.wh.S3.SetDown(true)
	h.DeliverOrder("msg-12", pt.OrderEvent("order.cancelled", o42, 12, "", ""))
	s.run(t)
	op := recordOp(o42, 12)
	orig := h.Outbox.Intent(op)
	if orig.Status != ledger.IntentStatusFailed || orig.ErrorCode != "attempts_exhausted" {
		t.Fatalf("record intent with the store down throughout: %s %s, want FAILED attempts_exhausted", orig.Status, orig.ErrorCode)
	}
	refund, notify := pt.OrderOps(o42, 12)
	if got := h.Outbox.Down.EffectiveByKey(); !maps.Equal(got, map[string]int{refund: 1, notify: 1}) {
		t.Fatalf("effective calls %v", got)
	}
	if keys := s.wh.S3.Keys(s.wh.Bucket, s.wh.Prefix+"/"); len(keys) != 0 {
		t.Fatalf("the store holds %v while down", keys)
	}

	s.wh.S3.SetDown(false)
	r := s.check(0, 0)
	rep, err := r.CheckWarehouse(ctx, h.Clock.Now())
	if err != nil || rep.Drifting != 1 || rep.Repaired != 1 || rep.NeedsOperator != 0 {
		t.Fatalf("the check once the store is back: %+v %v", rep, err)
	}
	s.run(t)
	repair := h.Outbox.Intent(warehouse.RepairID(op, 1))
	if repair.Status != ledger.IntentStatusSucceeded {
		t.Fatalf("repair intent %s %s", repair.Status, repair.ErrorCode)
	}
	if st := h.Outbox.Intent(op).Status; st != ledger.IntentStatusFailed {
		t.Fatalf("the original became %s; it stays FAILED", st)
	}
	if n := s.writes(s.wh.Key("orders", builtin.OrderProjection, o42, 12)); n != 1 {
		t.Fatalf("the record was written %d times", n)
	}
	cur, err := localwarehouse.CurrentState(ctx, s.wh.S3.Client(), s.wh.Bucket, s.wh.Prefix+"/")
	if err != nil || len(cur) != 1 || cur[0].Version != 12 || cur[0].State["status"] != "cancelled" || cur[0].EventID != "msg-12" {
		t.Fatalf("current_state %+v %v", cur, err)
	}
	if got := h.Outbox.Down.EffectiveByKey(); !maps.Equal(got, map[string]int{refund: 1, notify: 1}) {
		t.Fatalf("effective calls after the repair %v", got)
	}
	if rep, err := r.CheckWarehouse(ctx, h.Clock.Now()); err != nil || rep.InSync != 1 || rep.Drifting != 0 || rep.Repaired != 0 {
		t.Fatalf("the next check: %+v %v", rep, err)
	}
}

// A state over the sink's limit is never written (never truncated): the
// record's intent is QUARANTINED state_too_large for an operator, the
// refund and the notice are performed. The check finds the subject's
// current version missing in every run, counts it drifting and needing an
// operator, and repairs nothing silently: no repair intent, no write,
// and the drift's age grows from run to run.
func TestWarehouseOversizeStateStaysVisibleDrift(t *testing.T) {
	ctx := context.Background()
	h := pt.NewOrders(t, pt.Options{}, pt.OutboxOptions{})
	wh := h.EnableWarehouse(16) // the order's state is more than 16 bytes of JSON
	s := &sink{h: h, wh: wh, w1: h.NewWorker("w1"), d1: h.Outbox.NewDispatcher("d1")}
	s.w2, s.d2 = s.w1, s.d1
	h.DeliverOrder("msg-12", pt.OrderEvent("order.cancelled", o42, 12, "", ""))
	s.run(t)
	op := recordOp(o42, 12)
	in := h.Outbox.Intent(op)
	if in.Status != ledger.IntentStatusQuarantined || in.ErrorCode != warehouse.CodeStateTooLarge {
		t.Fatalf("record intent of an oversize state: %s %s, want QUARANTINED %s", in.Status, in.ErrorCode, warehouse.CodeStateTooLarge)
	}
	refund, notify := pt.OrderOps(o42, 12)
	if got := h.Outbox.Down.EffectiveByKey(); !maps.Equal(got, map[string]int{refund: 1, notify: 1}) {
		t.Fatalf("effective calls %v", got)
	}
	intents := len(s.statuses(t))
	r := s.check(0, 0)
	var ages []time.Duration
	for run := range 3 {
		h.Clock.Advance(time.Hour)
		rep, err := r.CheckWarehouse(ctx, h.Clock.Now())
		if err != nil || rep.Checked != 1 || rep.Drifting != 1 || rep.NeedsOperator != 1 || rep.Repaired+rep.Recreated+rep.Reannounced != 0 {
			t.Fatalf("check %d: %+v %v", run+1, rep, err)
		}
		ages = append(ages, rep.OldestDrift)
		s.run(t)
	}
	if !(ages[0] < ages[1] && ages[1] < ages[2]) {
		t.Fatalf("the drift's age does not grow: %v", ages)
	}
	if n := len(s.statuses(t)); n != intents {
		t.Fatalf("%d intents after the checks, %d before: something was repaired", n, intents)
	}
	if keys := wh.S3.Keys(wh.Bucket, wh.Prefix+"/"); len(keys) != 0 || wh.S3.Requests()["PutObject"] != 0 {
		t.Fatalf("the store holds %v after %d PutObjects", keys, wh.S3.Requests()["PutObject"])
	}
	if st := h.Outbox.Intent(op).Status; st != ledger.IntentStatusQuarantined {
		t.Fatalf("the record intent became %s", st)
	}
}

// The check is bounded per run, and resumes: each run checks at most
// Checks subjects (one HeadObject each) and reads at most ReadLimit items
// of the table, and the next run goes on where it stopped (Capped until
// the pass reaches the end of the table). Five orders, each with its
// record: with Checks 2, or with a ReadLimit of 3 items, a pass takes
// several runs and checks each of the five once; with the defaults one
// run is a pass.
func TestWarehouseCheckIsBounded(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name              string
		checks, readLimit int
		minRuns           int
	}{
		{"checks 2", 2, 0, 3},
		{"read limit 3", 0, 3, 5},
		{"defaults", 0, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSink(t, pt.OutboxOptions{})
			h := s.h
			for i := range 5 {
				h.DeliverOrder(fmt.Sprintf("msg-%d", i), pt.OrderEvent("order.created", fmt.Sprintf("O-%d", i), 1, "", ""))
			}
			s.run(t)
			heads := func() int { return s.wh.S3.Requests()["HeadObject"] }
			r := s.check(c.checks, c.readLimit)
			for run := 1; ; run++ {
				before := heads()
				rep, err := r.CheckWarehouse(ctx, h.Clock.Now())
				if err != nil || rep.InSync != rep.Checked || rep.Drifting != 0 || rep.Capped == rep.Completed {
					t.Fatalf("run %d: %+v %v", run, rep, err)
				}
				if c.checks > 0 && rep.Checked > c.checks || c.readLimit > 0 && rep.Read > c.readLimit {
					t.Fatalf("run %d checked %d subjects and read %d items", run, rep.Checked, rep.Read)
				}
				if n := heads() - before; n != rep.Checked {
					t.Fatalf("run %d: %d HeadObjects for %d subjects checked", run, n, rep.Checked)
				}
				if rep.Completed {
					if run < c.minRuns || rep.Pass.Runs != run || rep.Pass.Checked != 5 || rep.Pass.Drifting != 0 {
						t.Fatalf("the pass ended at run %d: %+v, want 5 subjects checked in at least %d runs", run, rep.Pass, c.minRuns)
					}
					return
				}
				if run > 50 {
					t.Fatal("no pass completed in 50 runs")
				}
			}
		})
	}
}
