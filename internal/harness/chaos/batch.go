package chaos

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// BatchOptions configure RunBatch. Zero values are sensible.
type BatchOptions struct {
	N        int    // schedules per design (default 30)
	Seed     uint64 // schedule i has seed Seed+i
	Designs  []string
	Parallel int // schedules run at once (default 2)
	// ShrinkFirst is how many failures per design are shrunk (0: one,
	// negative: none); MaxShrinkRuns bounds each shrink (default 150 runs).
	ShrinkFirst, MaxShrinkRuns int
	Config                     Config
	// Progress, when set, is called after each schedule.
	Progress func(design string, done, total, failed int)
}

// Summary is one design's batch.
type Summary struct {
	Design      string         `json:"design"`
	Schedules   int            `json:"schedules"`
	Failed      int            `json:"failed"`
	ByInvariant map[string]int `json:"violated_schedules_by_invariant"`
	Stats       Stats          `json:"exercised"`
	Took        time.Duration  `json:"took_ns"`
	Failures    []Failure      `json:"failures,omitempty"`
}

// Failure is one failing schedule; Report is set for the shrunk ones.
type Failure struct {
	Seed       uint64      `json:"seed"`
	Violations []Violation `json:"violations"`
	Report     string      `json:"report,omitempty"`
}

// RunBatch runs N generated schedules against each design.
func RunBatch(o BatchOptions) ([]Summary, error) {
	if o.N <= 0 {
		o.N = 30
	}
	if o.Parallel <= 0 {
		o.Parallel = 2
	}
	if o.ShrinkFirst == 0 {
		o.ShrinkFirst = 1
	}
	if o.MaxShrinkRuns <= 0 {
		o.MaxShrinkRuns = 150
	}
	if len(o.Designs) == 0 {
		o.Designs = []string{Ours.Name}
	}
	all := Designs()
	var out []Summary
	for _, name := range o.Designs {
		d, ok := all[name]
		if !ok {
			return out, fmt.Errorf("chaos: unknown design %q (have %s)", name, strings.Join(DesignNames(), ", "))
		}
		out = append(out, runDesign(d, o))
	}
	return out, nil
}

func runDesign(d Design, o BatchOptions) Summary {
	start := time.Now()
	sum := Summary{Design: d.Name, Schedules: o.N, ByInvariant: map[string]int{}}
	results := make([]Result, o.N)
	schedules := make([]Schedule, o.N)
	var mu sync.Mutex
	done := 0
	cfg := o.Config
	if d.WarehouseWriter != nil {
		cfg.WarehousePercent = 100 // a naive writer is measured where it writes
	}
	if d.ReuseIDs {
		cfg.ReusePercent = 100 // a design that drops reused ids is measured where ids are reused
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range o.Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				s := Generate(o.Seed+uint64(i), cfg)
				r := Run(s, d)
				mu.Lock()
				schedules[i], results[i] = s, r
				done++
				if r.Failed() {
					sum.Failed++
				}
				if o.Progress != nil {
					o.Progress(d.Name, done, o.N, sum.Failed)
				}
				mu.Unlock()
			}
		}()
	}
	for i := range o.N {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	shrunk := 0
	for i, r := range results {
		st := r.Stats
		sum.Stats.add(st)
		if !r.Failed() {
			continue
		}
		seen := map[string]bool{}
		for _, v := range r.Violations {
			if !seen[v.Invariant] {
				seen[v.Invariant] = true
				sum.ByInvariant[v.Invariant]++
			}
		}
		f := Failure{Seed: r.Seed, Violations: r.Violations}
		if shrunk < o.ShrinkFirst {
			shrunk++
			small, smallRes := Shrink(schedules[i], d, r, o.MaxShrinkRuns)
			f.Report = Report(d.Name, schedules[i], r, small, smallRes)
		}
		sum.Failures = append(sum.Failures, f)
	}
	sum.Took = time.Since(start)
	return sum
}

func (s *Stats) add(o Stats) {
	s.Steps += o.Steps
	s.Crashes += o.Crashes
	s.Lost += o.Lost
	s.Pauses += o.Pauses
	s.Takeovers += o.Takeovers
	s.Redrives += o.Redrives
	s.Replays += o.Replays
	s.Dead += o.Dead
	s.Quarantined += o.Quarantined
	s.Effects += o.Effects
	s.Intents += o.Intents
	s.Stripe += o.Stripe
	s.StripeApplied += o.StripeApplied
	s.StripeStale += o.StripeStale
	s.StripeNoop += o.StripeNoop
	s.Deleted += o.Deleted
	s.StripeFetched += o.StripeFetched
	s.StripeFetches += o.StripeFetches
	s.DispatcherPauses += o.DispatcherPauses
	s.Kills += o.Kills
	s.StepFunctions += o.StepFunctions
	s.ReuseIDs += o.ReuseIDs
	s.ReuseTold += o.ReuseTold
	s.Waited += o.Waited
	s.OverrideQueued += o.OverrideQueued
	s.OverridePerformed += o.OverridePerformed
	s.CheckWindow += o.CheckWindow
	s.TwoDispatchers += o.TwoDispatchers
	s.PayloadWaits += o.PayloadWaits
	s.Warehouse += o.Warehouse
	s.Records += o.Records
	s.StoreOutages += o.StoreOutages
	s.StoreHangs += o.StoreHangs
	s.RecordsWaited += o.RecordsWaited
	s.RecordsFailed += o.RecordsFailed
	s.RecordsRecreated += o.RecordsRecreated
	s.RecordsRepaired += o.RecordsRepaired
	s.RecordsReannounced += o.RecordsReannounced
	s.LateOlder += o.LateOlder
}

// Table renders the summaries: schedules, failing schedules, schedules
// violating each invariant, and time.
func Table(sums []Summary) string {
	var b strings.Builder
	cols := []string{"I1", "I2", "I3", "I4", "I5", "I6", "I7", "I9", "I10", "harness"}
	fmt.Fprintf(&b, "%-19s %9s %7s", "design", "schedules", "failed")
	for _, c := range cols {
		fmt.Fprintf(&b, " %7s", c)
	}
	fmt.Fprintf(&b, " %9s\n", "time")
	for _, s := range sums {
		fmt.Fprintf(&b, "%-19s %9d %7d", s.Design, s.Schedules, s.Failed)
		for _, inv := range Invariants {
			fmt.Fprintf(&b, " %7d", s.ByInvariant[inv])
		}
		fmt.Fprintf(&b, " %9s\n", s.Took.Round(100*time.Millisecond))
	}
	b.WriteString("(columns I1..harness count schedules with at least one violation of that invariant)\n")
	for _, s := range sums {
		st := s.Stats
		fmt.Fprintf(&b, "%s exercised: %d steps, %d crashes fired, %d answers lost and retried, %d pauses, %d lease takeovers, %d DLQ redrives, %d operator replays, %d DEAD and %d QUARANTINED at the end, %d intents, %d effective calls\n",
			s.Design, st.Steps, st.Crashes, st.Lost, st.Pauses, st.Takeovers, st.Redrives, st.Replays, st.Dead, st.Quarantined, st.Intents, st.Effects)
		if st.PayloadWaits > 0 {
			fmt.Fprintf(&b, "%s: %d events found without their payload (an intake died between the row and its chunks) waited for the provider's retry\n", s.Design, st.PayloadWaits)
		}
		if st.StepFunctions > 0 {
			fmt.Fprintf(&b, "%s: %d of %d schedules performed their effects through a Step Functions target (executions started per operation id)\n",
				s.Design, st.StepFunctions, s.Schedules)
		}
		if st.ReuseIDs > 0 {
			fmt.Fprintf(&b, "%s I10: %d of %d schedules ran their orders under a rule that reuses its latest intent's operation id across revisions; %d events were quarantined operation_id_reused for an operator\n",
				s.Design, st.ReuseIDs, s.Schedules, st.ReuseTold)
		}
		if st.Warehouse > 0 {
			fmt.Fprintf(&b, "%s warehouse: %d of %d schedules with the sink on, %d records at the end; the store down %d times and a PutObject held past its timeout %d times; %d record intents waited, %d ended FAILED; the reconciler's check recreated %d, repaired %d, re-announced %d; %d schedules wrote a subject's older record after a newer one\n",
				s.Design, st.Warehouse, s.Schedules, st.Records, st.StoreOutages, st.StoreHangs, st.RecordsWaited, st.RecordsFailed, st.RecordsRecreated, st.RecordsRepaired, st.RecordsReannounced, st.LateOlder)
		}
		if st.Stripe > 0 {
			fmt.Fprintf(&b, "%s Stripe: %d subscription events accepted (%d applied, %d noop, %d stale), %d subscriptions ended deleted; %d facts projected from a thin event's fetch (%d Stripe API requests)\n",
				s.Design, st.Stripe, st.StripeApplied, st.StripeNoop, st.StripeStale, st.Deleted, st.StripeFetched, st.StripeFetches)
		}
		fmt.Fprintf(&b, "%s I7 schedules: %d with an effect's call failed and then a newer revision of its subject committed before it was performed, %d with an order's cancellation overridden while its effects were not performed yet, %d after one was performed, %d with a dispatcher paused between its check and its call while a newer revision was committed, %d with intents of one subject claimed by two dispatchers (%d dispatcher pauses, %d stopped past their lease)\n",
			s.Design, st.Waited, st.OverrideQueued, st.OverridePerformed, st.CheckWindow, st.TwoDispatchers, st.DispatcherPauses, st.Kills)
	}
	return b.String()
}
