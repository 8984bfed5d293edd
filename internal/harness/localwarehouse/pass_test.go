package localwarehouse_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"testing"
	"time"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/metrics"
	"github.com/effectively-once/webhooks/internal/reconciler"
	"github.com/effectively-once/webhooks/pkg/builtin"
)

// passOrders is how many orders the pass tests apply: more than one
// run's bound of subjects (passChecks) and more than one run's read of
// the table (passReads).
const passOrders, passChecks, passReads = 12, 5, 20

// The store is down longer than the dispatcher's attempts for twelve
// orders, more than one run's bound: every record intent ends FAILED.
// Once the store is back, the check, five subjects and twenty items per
// run, resumes each run where the last stopped, so within a bounded
// number of runs every subject is checked and repaired, and the pass
// that found them reports all twelve drifting; the next complete pass
// reports none.
func TestWarehouseCheckReachesEverySubjectPastOneRunsBound(t *testing.T) {
	ctx := context.Background()
	s := newSink(t, pt.OutboxOptions{})
	h := s.h
	s.wh.S3.SetDown(true)
	for i := range passOrders {
		h.DeliverOrder(fmt.Sprintf("msg-%d", i), pt.OrderEvent("order.created", fmt.Sprintf("O-%02d", i), 1, "", ""))
	}
	s.run(t)
	for i := range passOrders {
		if in := h.Outbox.Intent(recordOp(fmt.Sprintf("O-%02d", i), 1)); in.Status != ledger.IntentStatusFailed {
			t.Fatalf("record of O-%02d with the store down throughout: %s, want FAILED", i, in.Status)
		}
	}
	s.wh.S3.SetDown(false)
	r := s.check(passChecks, passReads)
	// Each run reads at most passReads items: the table's items, over
	// passReads, plus one pass to find and one to confirm, bound the runs.
	runs := 0
	var found, clean *reconciler.WarehouseReport
	for ; runs < 40 && clean == nil; runs++ {
		rep, err := r.CheckWarehouse(ctx, h.Clock.Now())
		if err != nil {
			t.Fatalf("run %d: %v", runs+1, err)
		}
		if rep.Read > passReads || rep.Checked > passChecks {
			t.Fatalf("run %d read %d items and checked %d subjects, over its bounds", runs+1, rep.Read, rep.Checked)
		}
		switch {
		case rep.Completed && found == nil:
			found = &rep
		case rep.Completed:
			clean = &rep
		}
		s.run(t)
		h.Clock.Advance(5 * time.Minute)
	}
	if found == nil || clean == nil {
		t.Fatalf("after %d runs: no two complete passes (%v, %v)", runs, found, clean)
	}
	if found.Pass.Drifting != passOrders || found.Pass.Checked != passOrders || found.Pass.Runs < 2 {
		t.Fatalf("the pass that found the outage: %+v, want %d subjects checked, all drifting, over several runs", found.Pass, passOrders)
	}
	if clean.Pass.Drifting != 0 || clean.Pass.Checked != passOrders || clean.PassAge != h.Clock.Now().Add(-5*time.Minute).Sub(clean.Pass.Started) {
		t.Fatalf("the pass after the repairs: %+v (age %s), want %d subjects in sync", clean.Pass, clean.PassAge, passOrders)
	}
	var missing []string
	for i := range passOrders {
		order := fmt.Sprintf("O-%02d", i)
		if s.writes(s.wh.Key("orders", builtin.OrderProjection, order, 1)) != 1 {
			missing = append(missing, order)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("after %d runs of %d subjects each, %d of %d records were never repaired: %v", runs, passChecks, len(missing), passOrders, missing)
	}
	t.Logf("every record repaired; two passes took %d runs (%d and %d), reading %d and %d items", runs, found.Pass.Runs, clean.Pass.Runs, found.Pass.Read, clean.Pass.Read)
}

// retention is the records' lifecycle expiration in the retention test.
const retention = 30 * 24 * time.Hour

// A subject unchanged for longer than the records' retention loses its
// current record to the lifecycle's expiration (deleted here, as S3's
// expiration deletes it). The check, told the retention, visits every
// subject whose revision is older than it in each pass: it finds the
// record missing and writes it again, the same bytes, from a repair
// intent; the business effects are not performed again.
func TestWarehouseExpiredCurrentRecordIsRewritten(t *testing.T) {
	ctx := context.Background()
	s := newSink(t, pt.OutboxOptions{})
	h := s.h
	h.DeliverOrder("msg-12", pt.OrderEvent("order.cancelled", o42, 12, "", ""))
	s.run(t)
	key := s.wh.Key("orders", builtin.OrderProjection, o42, 12)
	before, err := s.wh.S3.Object(s.wh.Bucket, key)
	if err != nil {
		t.Fatal(err)
	}
	effective := h.Outbox.Down.EffectiveByKey()
	r := s.retained(retention)
	if rep, err := r.CheckWarehouse(ctx, h.Clock.Now()); err != nil || rep.InSync != 1 {
		t.Fatalf("the check while the record is there: %+v %v", rep, err)
	}
	// The subject stays unchanged past the retention; the daily runs in
	// between find nothing missing.
	for range 40 {
		h.Clock.Advance(24 * time.Hour)
		if rep, err := r.CheckWarehouse(ctx, h.Clock.Now()); err != nil || rep.Drifting != 0 {
			t.Fatalf("a check before the expiration: %+v %v", rep, err)
		}
	}
	if err := s.wh.S3.Delete(s.wh.Bucket, key); err != nil { // the lifecycle's expiration
		t.Fatal(err)
	}
	h.Clock.Advance(5 * time.Minute)
	rep, err := r.CheckWarehouse(ctx, h.Clock.Now())
	if err != nil || rep.Drifting != 1 || rep.Repaired != 1 {
		t.Fatalf("the check after the expiration of a record %s old: %+v %v (want it found and repaired)", 40*24*time.Hour, rep, err)
	}
	s.run(t)
	after, err := s.wh.S3.Object(s.wh.Bucket, key)
	if err != nil || string(after) != string(before) {
		t.Fatalf("rewritten record %q (%v), want the same bytes %q", after, err, before)
	}
	if got := h.Outbox.Down.EffectiveByKey(); !maps.Equal(got, effective) {
		t.Fatalf("effective calls %v, want %v", got, effective)
	}
}

// retained is the check of s told the records' retention.
func (s *sink) retained(d time.Duration) *reconciler.Reconciler {
	r := s.check(0, 0)
	r.Warehouse.Retention = d
	return r
}

// The drift metrics are a complete pass's: five orders whose records are
// all deleted, checked two subjects per run. Until the pass completes the
// run publishes no WarehouseDrift (a partial count would read as drift
// falling) but the age of the pass under way; the run that completes it
// publishes all five drifting, and the pass's age.
func TestWarehouseDriftMetricIsTheCompletePass(t *testing.T) {
	ctx := context.Background()
	s := newSink(t, pt.OutboxOptions{})
	h := s.h
	for i := range 5 {
		h.DeliverOrder(fmt.Sprintf("msg-%d", i), pt.OrderEvent("order.created", fmt.Sprintf("O-%d", i), 1, "", ""))
	}
	s.run(t)
	for _, k := range s.wh.S3.Keys(s.wh.Bucket, s.wh.Prefix+"/") {
		if err := s.wh.S3.Delete(s.wh.Bucket, k); err != nil {
			t.Fatal(err)
		}
	}
	r := s.check(2, 0)
	var out bytes.Buffer
	r.Sources, r.Queues.Events = h.Sources, h.Queues.Queue
	r.Opts = reconciler.Options{Now: h.Clock.Now, Metrics: metrics.New(&out, "test", h.Clock.Now), DLQWait: -1}
	start := h.Clock.Now()
	for run := 1; run <= 10; run++ {
		out.Reset()
		rep, _ := r.Run(ctx)
		var emf map[string]any
		if err := json.Unmarshal(out.Bytes(), &emf); err != nil {
			t.Fatalf("run %d: EMF %q: %v", run, out.String(), err)
		}
		age := h.Clock.Now().Sub(start).Seconds()
		if emf["WarehouseCheckPassAgeSeconds"] != age {
			t.Fatalf("run %d: pass age %v, want %v", run, emf["WarehouseCheckPassAgeSeconds"], age)
		}
		if !rep.Warehouse.Completed {
			if d, ok := emf["WarehouseDrift"]; ok {
				t.Fatalf("run %d, pass under way: WarehouseDrift %v published", run, d)
			}
			h.Clock.Advance(5 * time.Minute)
			continue
		}
		if emf["WarehouseDrift"] != float64(5) || run < 3 {
			t.Fatalf("run %d completed the pass: WarehouseDrift %v, want 5", run, emf["WarehouseDrift"])
		}
		return
	}
	t.Fatal("no pass completed in 10 runs")
}
