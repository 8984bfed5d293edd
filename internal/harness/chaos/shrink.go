package chaos

import (
	"fmt"
	"strings"
)

// Shrink greedily looks for a smaller schedule that still breaks one of
// the invariants the original run broke: it drops chunks of steps (halves
// down to single steps), then whole events with their deliveries and
// replays, then workers and dispatchers, keeping every change after which
// the run still fails. It stops after maxRuns runs and returns the
// smallest failing schedule found with its result.
func Shrink(s Schedule, d Design, failed Result, maxRuns int) (Schedule, Result) {
	want := map[string]bool{}
	for _, v := range failed.Violations {
		want[v.Invariant] = true
	}
	runs := 0
	best, bestRes := s, failed
	try := func(c Schedule) bool {
		if runs >= maxRuns {
			return false
		}
		runs++
		r := Run(c, d)
		for _, v := range r.Violations {
			if want[v.Invariant] {
				best, bestRes = c, r
				return true
			}
		}
		return false
	}
	for progress := true; progress && runs < maxRuns; {
		progress = false
		for chunk := max(len(best.Steps)/2, 1); chunk >= 1; chunk /= 2 {
			for i := len(best.Steps) - chunk; i >= 0; i -= chunk {
				c := best
				c.Steps = append(append([]Step(nil), best.Steps[:i]...), best.Steps[i+chunk:]...)
				if try(c) {
					progress = true
				}
			}
			if chunk == 1 {
				break
			}
		}
		for e := len(best.Events) - 1; e >= 0; e-- {
			if try(dropEvent(best, e)) {
				progress = true
			}
		}
		for best.Workers > 1 && try(withInstances(best, best.Workers-1, best.Dispatchers)) {
			progress = true
		}
		for best.Dispatchers > 1 && try(withInstances(best, best.Workers, best.Dispatchers-1)) {
			progress = true
		}
	}
	return best, bestRes
}

// dropEvent removes event e, the steps that name it, and renumbers the rest.
func dropEvent(s Schedule, e int) Schedule {
	c := s
	c.Events = append(append([]Event(nil), s.Events[:e]...), s.Events[e+1:]...)
	c.Steps = nil
	for _, st := range s.Steps {
		if st.Op == OpDeliver || st.Op == OpReplay || st.Op == OpForge {
			if st.Event == e {
				continue
			}
			if st.Event > e {
				st.Event--
			}
		}
		c.Steps = append(c.Steps, st)
	}
	return c
}

// withInstances keeps w workers and n dispatchers; steps that named a
// removed one name another.
func withInstances(s Schedule, w, n int) Schedule {
	c := s
	c.Workers, c.Dispatchers = w, n
	c.Steps = make([]Step, len(s.Steps))
	for i, st := range s.Steps {
		switch {
		case st.Op == OpDispatch || st.Target == TargetDispatcher:
			st.Who %= n
		case st.Op == OpPoll || st.Op == OpPause || st.Op == OpResume || (st.Op == OpCrash && st.Target == TargetWorker):
			st.Who %= w
		}
		c.Steps[i] = st
	}
	return c
}

// Report renders a failure for a developer: the seed, the violations, the
// schedule, and the shrunk reproducer as a test to paste.
func Report(design string, s Schedule, res Result, shrunk Schedule, shrunkRes Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "design %s, seed %d: %d violation(s)\n", design, s.Seed, len(res.Violations))
	for _, v := range res.Violations {
		fmt.Fprintf(&b, "  - %s\n", v)
	}
	fmt.Fprintf(&b, "schedule (%d workers, %d dispatchers):\n", s.Workers, s.Dispatchers)
	for i, e := range s.Events {
		fmt.Fprintf(&b, "  e#%d %s %s r%d %s\n", i, e.ID, e.Subject, e.Revision, e.Status)
	}
	for i, st := range s.Steps {
		fmt.Fprintf(&b, "  %3d %s\n", i, st)
	}
	fmt.Fprintf(&b, "shrunk to %d events, %d steps; it still breaks:\n", len(shrunk.Events), len(shrunk.Steps))
	for _, v := range shrunkRes.Violations {
		fmt.Fprintf(&b, "  - %s\n", v)
	}
	fmt.Fprintf(&b, "reproducer:\n\nfunc TestChaosRepro_%s_%d(t *testing.T) {\n\ts := %s\n", design, s.Seed, strings.ReplaceAll(shrunk.GoString(), "\n", "\n\t"))
	fmt.Fprintf(&b, "\tif r := chaos.Run(s, chaos.Designs()[%q]); r.Failed() {\n\t\tt.Fatal(r.Violations)\n\t}\n}\n", design)
	return b.String()
}
