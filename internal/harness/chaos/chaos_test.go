package chaos_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/internal/harness/chaos"
)

// TestChaosOurs runs a short batch of random schedules through the real
// handlers and fails with the seed, the schedule and a shrunk reproducer
// when any invariant breaks. `go run ./scripts/chaos -n 1000` runs more.
func TestChaosOurs(t *testing.T) {
	n := 30
	if testing.Short() {
		n = 8
	}
	sums, err := chaos.RunBatch(chaos.BatchOptions{N: n, Seed: 1, Designs: []string{"ours"}, ShrinkFirst: 1, MaxShrinkRuns: 60})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", chaos.Table(sums))
	s := sums[0]
	if s.Stats.Crashes == 0 || s.Stats.Intents == 0 || s.Stats.Takeovers == 0 {
		t.Errorf("the batch exercised too little to mean anything: %+v", s.Stats)
	}
	if !testing.Short() && (s.Stats.StripeApplied == 0 || s.Stats.StripeStale == 0 || s.Stats.Deleted == 0) {
		t.Errorf("the batch exercised too few Stripe subscription events: %+v", s.Stats)
	}
	reportFailures(t, s)
}

// reportFailures fails t with each failing schedule of s: its shrunk
// reproducer, or its seed and violations.
func reportFailures(t *testing.T, s chaos.Summary) {
	t.Helper()
	for _, f := range s.Failures {
		if f.Report != "" {
			t.Errorf("\n%s", f.Report)
		} else {
			t.Errorf("seed %d: %v", f.Seed, f.Violations)
		}
	}
}

// TestChaosOursWithLostAnswers: the same, with every crash step turned
// into a lost answer (the call applied, its answer lost, the SDK's retry):
// nothing dies, and every invariant must still hold.
func TestChaosOursWithLostAnswers(t *testing.T) {
	n := 20
	if testing.Short() {
		n = 5
	}
	sums, err := chaos.RunBatch(chaos.BatchOptions{N: n, Seed: 1000, Designs: []string{"ours"}, ShrinkFirst: 1, MaxShrinkRuns: 60, Config: chaos.Config{LostPercent: 100}})
	if err != nil {
		t.Fatal(err)
	}
	s := sums[0]
	if s.Stats.Lost == 0 {
		t.Errorf("no answer was lost: %+v", s.Stats)
	}
	reportFailures(t, s)
	t.Logf("%d schedules, %d answers lost", n, s.Stats.Lost)
}

// TestChaosNaiveDesignsAreCaught runs the same generator and checker
// against the naive designs (package naive): the harness must find
// violations in at least two of them, so its silence about ours means
// something.
func TestChaosNaiveDesignsAreCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("naive designs skipped in -short mode")
	}
	sums, err := chaos.RunBatch(chaos.BatchOptions{N: 25, Seed: 1, Designs: []string{"checkthen", "split", "nolease"}, ShrinkFirst: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", chaos.Table(sums))
	caught := 0
	for _, s := range sums {
		if s.Failed > 0 {
			caught++
		}
	}
	if caught < 2 {
		t.Fatalf("only %d naive designs were caught violating an invariant", caught)
	}
}

// TestShrinkKeepsTheFailure shrinks a naive design's failure and checks
// the reproducer is smaller, still fails the same way, and prints as a
// test to paste.
func TestShrinkKeepsTheFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("shrinking skipped in -short mode")
	}
	d := chaos.Designs()["split"]
	for seed := uint64(1); seed <= 60; seed++ {
		s := chaos.Generate(seed, chaos.Config{})
		r := chaos.Run(s, d)
		if !r.Failed() {
			continue
		}
		small, smallRes := chaos.Shrink(s, d, r, 80)
		if !smallRes.Failed() || len(small.Steps) > len(s.Steps) || len(small.Events) > len(s.Events) {
			t.Fatalf("seed %d: shrunk to %d steps / %d events (from %d / %d), failed %v", seed, len(small.Steps), len(small.Events), len(s.Steps), len(s.Events), smallRes.Failed())
		}
		again := chaos.Run(small, d)
		if !again.Failed() {
			t.Fatalf("seed %d: the shrunk schedule does not fail when replayed:\n%#v", seed, small)
		}
		rep := chaos.Report(d.Name, s, r, small, smallRes)
		for _, want := range []string{"seed", "reproducer", "chaos.Schedule{", "func TestChaosRepro_split_"} {
			if !strings.Contains(rep, want) {
				t.Fatalf("report lacks %q:\n%s", want, rep)
			}
		}
		t.Logf("seed %d: %d steps / %d events shrunk to %d / %d\n%s", seed, len(s.Steps), len(s.Events), len(small.Steps), len(small.Events), rep)
		return
	}
	t.Fatal("no failing split schedule in 60 seeds")
}

// TestGenerateIsDeterministic: a seed is the whole schedule.
func TestGenerateIsDeterministic(t *testing.T) {
	for seed := uint64(0); seed < 50; seed++ {
		a, b := chaos.Generate(seed, chaos.Config{}), chaos.Generate(seed, chaos.Config{})
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d generated two schedules", seed)
		}
		subjects := map[string]bool{}
		for _, e := range a.Events {
			subjects[e.Subject] = true
		}
		if len(subjects) > 4 || a.Workers < 1 || a.Workers > 3 || a.Dispatchers < 1 || a.Dispatchers > 3 {
			t.Fatalf("seed %d out of bounds: %d subjects, %d workers, %d dispatchers", seed, len(subjects), a.Workers, a.Dispatchers)
		}
	}
	if reflect.DeepEqual(chaos.Generate(1, chaos.Config{}), chaos.Generate(2, chaos.Config{})) {
		t.Fatal("two seeds, one schedule")
	}
}

// Two stories as schedules, through the real handlers: the O-42 override
// while the refund and notice wait on a 503, and a grant that meets a 503
// and is retried after the revoke was performed. Ours passes both; the
// dispatch-everything design (a dispatcher blind to the truth) is caught
// by I7 in both, and in a generated schedule.
func TestChaosDispatchEverythingIsCaught(t *testing.T) {
	o42 := chaos.Schedule{Seed: 42, Workers: 1, Dispatchers: 2,
		Events: []chaos.Event{
			{ID: "o42-12", Subject: "O-42", Revision: 12, Status: "cancelled"},
			{ID: "o42-13", Subject: "O-42", Revision: 13, Status: "confirmed"},
		},
		Steps: []chaos.Step{
			{Op: chaos.OpDeliver, Event: 0}, {Op: chaos.OpPoll},
			{Op: chaos.OpDownstream, Mode: chaos.Mode503}, {Op: chaos.OpDownstream, Mode: chaos.Mode503},
			{Op: chaos.OpDispatch}, {Op: chaos.OpDispatch},
			{Op: chaos.OpDeliver, Event: 1}, {Op: chaos.OpPoll}, {Op: chaos.OpDispatch, Who: 1},
		},
	}
	grant := chaos.Schedule{Seed: 5, Workers: 1, Dispatchers: 2,
		Events: []chaos.Event{
			{ID: "evt_grant", Source: chaos.SourceStripe, Subject: "sub_chaos_1", Type: "created", Revision: 0, Status: "active"},
			{ID: "evt_revoke", Source: chaos.SourceStripe, Subject: "sub_chaos_1", Type: "updated", Revision: 2, Status: "unpaid"},
		},
		Steps: []chaos.Step{
			{Op: chaos.OpDeliver, Event: 0}, {Op: chaos.OpPoll},
			{Op: chaos.OpDownstream, Mode: chaos.Mode503}, {Op: chaos.OpDispatch},
			{Op: chaos.OpDeliver, Event: 1}, {Op: chaos.OpPoll}, {Op: chaos.OpDispatch, Who: 1},
		},
	}
	for name, s := range map[string]chaos.Schedule{"O-42 override": o42, "grant retried after the revoke": grant, "generated seed 12": chaos.Generate(12, chaos.Config{})} {
		t.Run(name, func(t *testing.T) {
			if r := chaos.Run(s, chaos.Ours); r.Failed() {
				t.Fatalf("ours: %v", r.Violations)
			}
			r := chaos.Run(s, chaos.DispatchEverything)
			for _, v := range r.Violations {
				if v.Invariant == chaos.I7 {
					t.Logf("caught: %s", v)
					return
				}
			}
			t.Fatalf("dispatch-everything was not caught by I7: %v", r.Violations)
		})
	}
}

// TestChaosOursWithStepFunctions: the same, with every schedule's effects
// performed by a Step Functions target (each start runs a workflow that
// makes the call on the downstream). Step Functions deduplicates by
// execution name and answers DescribeExecution, so the reference model
// expects what it expects of the idempotent HTTP downstream: every
// invariant must hold, with one execution per operation id.
func TestChaosOursWithStepFunctions(t *testing.T) {
	n := 16
	if testing.Short() {
		n = 4
	}
	sums, err := chaos.RunBatch(chaos.BatchOptions{N: n, Seed: 2000, Designs: []string{"ours"}, ShrinkFirst: 1, MaxShrinkRuns: 60,
		Config: chaos.Config{StepFunctionsPercent: 100}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", chaos.Table(sums))
	s := sums[0]
	if s.Stats.StepFunctions != n || s.Stats.Crashes == 0 || s.Stats.Intents == 0 || s.Stats.Effects == 0 {
		t.Errorf("the batch exercised too little to mean anything: %+v", s.Stats)
	}
	reportFailures(t, s)
}

// TestChaosOursWithWarehouse: the same, with the warehouse sink on in
// every schedule: every applied revision is a change record in a local S3
// whose store goes down for a stretch (longer, sometimes, than the
// dispatcher's attempts on a record), holds a PutObject past its timeout
// after or before the write, or refuses one as a concurrent write, and
// whose PutObject a dispatcher dies right before or after, or loses the
// answer of. The run ends with the reconciler's warehouse check. I9 (the
// warehouse follows the truth) must hold with every other invariant.
func TestChaosOursWithWarehouse(t *testing.T) {
	n := 16
	if testing.Short() {
		n = 4
	}
	sums, err := chaos.RunBatch(chaos.BatchOptions{N: n, Seed: 3000, Parallel: 4, Designs: []string{"ours"}, ShrinkFirst: 1, MaxShrinkRuns: 60,
		Config: chaos.Config{WarehousePercent: 100}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", chaos.Table(sums))
	s := sums[0]
	if st := s.Stats; st.Warehouse != n || st.Records == 0 || st.StoreOutages == 0 || st.StoreHangs == 0 || st.RecordsWaited == 0 {
		t.Errorf("the batch exercised too little of the warehouse to mean anything: %+v", st)
	}
	// (Recreated stays 0 here: every revision, an advanced version
	// included, writes its record intent in its own commit.)
	if st := s.Stats; !testing.Short() && (st.RecordsFailed == 0 || st.RecordsRepaired == 0) {
		t.Errorf("no record intent ended FAILED and was repaired: %+v", st)
	}
	reportFailures(t, s)
}

// TestChaosNaiveWarehouseWritersAreCaught runs the warehouse schedules
// against the naive writers: "last write wins" (one object per subject,
// overwritten: a late older revision becomes the current row) and a
// writer that counts a record written without the store's answer. I9
// must catch both, each in the way it breaks.
func TestChaosNaiveWarehouseWritersAreCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("naive designs skipped in -short mode")
	}
	sums, err := chaos.RunBatch(chaos.BatchOptions{N: 4, Seed: 1, Parallel: 4, Designs: []string{chaos.WarehouseOverwrite.Name, chaos.WarehouseUnobserved.Name}, ShrinkFirst: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", chaos.Table(sums))
	says := map[string]string{
		chaos.WarehouseOverwrite.Name:  "the warehouse's current row is",
		chaos.WarehouseUnobserved.Name: "SUCCEEDED must mean the store said it holds the record",
	}
	for _, s := range sums {
		if s.ByInvariant[chaos.I9] == 0 {
			t.Errorf("%s: no schedule broke I9 (%d failed: %v)", s.Design, s.Failed, s.ByInvariant)
			continue
		}
		found := 0
		for _, f := range s.Failures {
			for _, v := range f.Violations {
				if v.Invariant == chaos.I9 && strings.Contains(v.Detail, says[s.Design]) {
					found++
					t.Logf("%s, seed %d: %s", s.Design, f.Seed, v.Detail)
					break
				}
			}
		}
		if found == 0 {
			t.Errorf("%s: I9 never said %q", s.Design, says[s.Design])
		}
	}
}
