package builtin_test

import (
	"fmt"
	"reflect"
	"sort"
	"testing"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// A small model of the ledger's commit rules (internal/ledger/commit.go), enough
// to replay a subject's events in any order without DynamoDB:
//
//   - no stored row: the write applies, with its intents;
//   - the write applies (with its intents) only if its version is greater,
//     its fingerprint differs and the stored row is not terminal;
//   - stored terminal, or stored version greater: stale;
//   - same version, same fingerprint: noop;
//   - same version, different fingerprint: quarantined (version_conflict);
//   - newer version, same fingerprint: noop, version advanced, no intents;
//   - an intent whose operation id exists is dropped (attribute_not_exists).

type simOutcome string

const (
	simApplied  simOutcome = "applied"
	simStale    simOutcome = "stale"
	simNoop     simOutcome = "noop"
	simAdvanced simOutcome = "noop(advanced)"
	simConflict simOutcome = "quarantined"
	simIgnored  simOutcome = "ignored"
)

type simRow struct {
	Version     int64
	Fingerprint string
	Terminal    bool
	State       map[string]any
}

type simIntent struct {
	projection.Intent
	Cause string // label of the event that created it
}

type simLedger struct {
	rows     map[string]*simRow
	intents  map[string]simIntent
	outcomes map[string][]simOutcome // by event label, in commit order
	created  map[string]int          // intents created, by event label
}

func newSim() *simLedger {
	return &simLedger{rows: map[string]*simRow{}, intents: map[string]simIntent{}, outcomes: map[string][]simOutcome{}, created: map[string]int{}}
}

func (s *simLedger) commit(label string, res projection.Result) simOutcome {
	out := s.guard(res)
	s.outcomes[label] = append(s.outcomes[label], out)
	if out == simApplied {
		for _, in := range res.Intents {
			if _, dup := s.intents[in.OperationID]; !dup {
				s.intents[in.OperationID] = simIntent{Intent: in, Cause: label}
				s.created[label]++
			}
		}
	}
	return out
}

func (s *simLedger) guard(res projection.Result) simOutcome {
	w := res.Write
	if w == nil {
		return simIgnored
	}
	key := w.Name + "#" + w.Subject
	old, ok := s.rows[key]
	switch {
	case !ok || (w.Version > old.Version && w.Fingerprint != old.Fingerprint && !old.Terminal):
		s.rows[key] = &simRow{Version: w.Version, Fingerprint: w.Fingerprint, Terminal: w.Terminal, State: w.State}
		return simApplied
	case old.Terminal || old.Version > w.Version:
		return simStale
	case old.Version == w.Version && old.Fingerprint == w.Fingerprint:
		return simNoop
	case old.Version == w.Version:
		return simConflict
	default:
		old.Version = w.Version
		return simAdvanced
	}
}

func (s *simLedger) row(name, subject string) *simRow { return s.rows[name+"#"+subject] }

func (s *simLedger) opIDs() []string {
	out := make([]string, 0, len(s.intents))
	for op := range s.intents {
		out = append(out, op)
	}
	sort.Strings(out)
	return out
}

// labelled is one event of a permutation test.
type labelled struct {
	label string
	ev    projection.Event
}

// permutations returns every order of 0..n-1.
func permutations(n int) [][]int {
	var out [][]int
	var rec func(prefix []int, used []bool)
	rec = func(prefix []int, used []bool) {
		if len(prefix) == n {
			out = append(out, append([]int(nil), prefix...))
			return
		}
		for i := range n {
			if !used[i] {
				used[i] = true
				rec(append(prefix, i), used)
				used[i] = false
			}
		}
	}
	rec(nil, make([]bool, n))
	return out
}

// permutationResult is what one order of commits left behind.
type permutationResult struct {
	order []string
	sim   *simLedger
	final *simRow
}

// runPermutations projects each event (twice, checking the projection is
// deterministic), commits them through the simulator in every order, and
// checks what must hold for every order: one final version and state, no
// quarantine, and intents created only by applied changes, at most once
// per operation id. If sameIntents, every order must also create the same
// set of operation ids. It returns every order's result for further checks.
func runPermutations(t *testing.T, p projection.Projection, subject string, events []labelled, sameIntents bool) []permutationResult {
	t.Helper()
	results := make([]projection.Result, len(events))
	for i, e := range events {
		r, err := p.Project(e.ev)
		if err != nil {
			t.Fatalf("%s: %v", e.label, err)
		}
		again, _ := p.Project(e.ev)
		if !reflect.DeepEqual(r, again) {
			t.Fatalf("%s: projecting twice gave different results", e.label)
		}
		results[i] = r
	}
	var all []permutationResult
	var first *permutationResult
	for _, perm := range permutations(len(events)) {
		sim := newSim()
		var order []string
		for _, i := range perm {
			order = append(order, events[i].label)
			if out := sim.commit(events[i].label, results[i]); out == simConflict {
				t.Fatalf("order %v: %s quarantined", order, events[i].label)
			}
		}
		final := sim.row(p.Name(), subject)
		if final == nil {
			t.Fatalf("order %v: no projection for %s", order, subject)
		}
		// Intents come only from applied changes.
		for i, e := range events {
			applied := false
			for _, o := range sim.outcomes[e.label] {
				applied = applied || o == simApplied
			}
			if !applied && sim.created[e.label] != 0 {
				t.Fatalf("order %v: %s was not applied but created %d intents", order, e.label, sim.created[e.label])
			}
			if applied {
				for _, in := range results[i].Intents {
					if _, ok := sim.intents[in.OperationID]; !ok {
						t.Fatalf("order %v: applied %s lost intent %s", order, e.label, in.Kind)
					}
				}
			}
		}
		r := permutationResult{order: order, sim: sim, final: final}
		if first == nil {
			first = &r
		} else {
			if final.Version != first.final.Version || final.Fingerprint != first.final.Fingerprint || !reflect.DeepEqual(final.State, first.final.State) {
				t.Fatalf("order %v ends at v%d %v; order %v at v%d %v", order, final.Version, final.State, first.order, first.final.Version, first.final.State)
			}
			if sameIntents && !reflect.DeepEqual(sim.opIDs(), first.sim.opIDs()) {
				t.Fatalf("order %v created intents %v; order %v created %v", order, sim.opIDs(), first.order, first.sim.opIDs())
			}
		}
		all = append(all, r)
	}
	return all
}

// intentKinds counts a simulator's intents by kind.
func intentKinds(sim *simLedger) map[string]int {
	out := map[string]int{}
	for _, in := range sim.intents {
		out[in.Kind]++
	}
	return out
}

func TestSimulatorFollowsTheLedgerRules(t *testing.T) {
	w := func(v int64, fp string, terminal bool, ops ...string) projection.Result {
		var ins []projection.Intent
		for _, op := range ops {
			ins = append(ins, projection.Intent{OperationID: op, Kind: "k"})
		}
		return projection.Result{Write: &projection.Write{Name: "n", Subject: "s", Version: v, Fingerprint: fp, Terminal: terminal}, Intents: ins}
	}
	sim := newSim()
	steps := []struct {
		res  projection.Result
		want simOutcome
	}{
		{w(5, "a", false, "op5"), simApplied},
		{w(5, "a", false, "op5"), simNoop},
		{w(5, "b", false, "op5b"), simConflict},
		{w(4, "c", false, "op4"), simStale},
		{w(7, "a", false, "op7"), simAdvanced},
		{w(6, "d", false, "op6"), simStale},
		{w(8, "e", true, "op8", "op5"), simApplied},
		{w(9, "f", false, "op9"), simStale},
		{projection.Result{}, simIgnored},
	}
	for i, s := range steps {
		if got := sim.commit(fmt.Sprint(i), s.res); got != s.want {
			t.Fatalf("step %d: %s, want %s", i, got, s.want)
		}
	}
	if r := sim.row("n", "s"); r.Version != 8 || r.Fingerprint != "e" {
		t.Fatalf("row %+v", r)
	}
	if got := sim.opIDs(); !reflect.DeepEqual(got, []string{"op5", "op8"}) {
		t.Fatalf("intents %v", got)
	}
	if n := len(permutations(4)); n != 24 {
		t.Fatalf("%d permutations of 4", n)
	}
}
