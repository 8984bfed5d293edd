package webhookstest

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// The reference model.
//
// It is built from what the team declares and from the team's projections
// run alone, never from what the pipeline stored. Each declared event is
// projected by itself (a fact): its subject, version, state fingerprint,
// state and intents. A run's order of events is then replayed on the
// model with the contract's version rule, one subject at a time: a newer
// version with another state applies (and its intents are written), a
// newer one with the same state only advances the version, the same
// version with the same state changes nothing, an older version or
// anything after a terminal state is stale. A re-sent copy of an event is
// the same fact: the model gives it its original's result, so a projection
// whose result depends on the delivery is caught. An intent whose
// operation id the model already holds is judged as the ledger judges it
// (judge): the same action is not written again, a once intent of
// another revision is deduplicated, and a reuse refuses the whole commit
// (the event is quarantined operation_id_reused, nothing of it applied).
// At each dispatch the
// model decides what the dispatcher must do with every intent written and
// not yet decided: a once intent is performed; a while_current intent is
// performed when the model's state of its subject satisfies its condition
// and no revision removed its reason since it was written; a latest
// intent is performed when its subject still holds the state it carries.
// A revision that removes the reason of a performed while_current intent
// with a compensation writes that compensation (once).

// subjectKey names a subject as the ledger keys it: the scoped projection
// name and the subject.
type subjectKey struct{ name, subject string }

func (k subjectKey) String() string { return k.subject + " (" + k.name + ")" }

// fact is one declared event, as the kit delivers it and as the reference
// model sees it: projected alone.
type fact struct {
	ev      Event
	d       delivery
	secret  string
	id      string // the event id the intake records
	typ     string
	payload []byte // the bytes its projection sees
	key     subjectKey
	// write and intents are the event's result projected alone, scoped
	// as the processor scopes it. version is the declared one.
	version int64
	write   projection.Write
	intents []projection.Intent
	// again is the same fact re-sent under another event id (againID).
	again        delivery
	againID      string
	againPayload []byte
}

// state is the model's state of one subject.
type state struct {
	version  int64
	fp       string
	values   map[string]any
	terminal bool
	by       *fact // the event that applied this state
}

// op is one intent the model wrote.
type op struct {
	in      projection.Intent
	by      *fact // the event whose intent it is (for a compensation: the one that removed the reason)
	key     subjectKey
	version int64
	fp      string
	step    int // the step that wrote it
	// phase is the dispatch that decides it (-1: none yet); perform says
	// whether the dispatcher must perform it then, must that it is due
	// exactly once (else at most once).
	phase   int
	perform bool
	must    bool
	// gone: a revision after the intent's (goneBy, at step goneAt)
	// removed its reason; it may never be performed after that.
	gone        bool
	goneAt      int
	goneBy      *fact
	compensates string
}

// step is one event the run delivers and processes.
type step struct {
	f    *fact
	copy bool // the re-sent copy, under f.againID
}

// name is the event id the step delivers.
func (s step) name() string {
	if s.copy {
		return s.f.againID
	}
	return s.f.id
}

// expectation is what the model says a run must end with.
type expectation struct {
	ops   map[string]*op
	order []string // op ids in the order they were written
	final map[subjectKey]state
	// phases are the model's states at each dispatch, which ran after
	// step phaseStep[p].
	phases    []map[subjectKey]state
	phaseStep []int
	// after[i] is the model's state of the subject step i is about, once
	// step i is done.
	after []state
	// quarantined are the steps whose event the pipeline quarantines
	// (projection code operation_id_reused), with the operation that
	// holds the reused id.
	quarantined map[int]*op
}

// simulate replays steps on the model, with a dispatch after each step
// (eager) or after the last only.
func simulate(steps []step, eager bool) expectation {
	x := expectation{ops: map[string]*op{}, final: map[subjectKey]state{}, quarantined: map[int]*op{}}
	states := map[subjectKey]state{}
	for i, s := range steps {
		x.apply(states, s.f, i)
		x.after = append(x.after, states[s.f.key])
		if eager || i == len(steps)-1 {
			x.dispatch(states, len(x.phases))
			snap := make(map[subjectKey]state, len(states))
			for k, v := range states {
				snap[k] = v
			}
			x.phases = append(x.phases, snap)
			x.phaseStep = append(x.phaseStep, i)
		}
	}
	for k, v := range states {
		x.final[k] = v
	}
	// A latest intent of the event that applied a subject's final state
	// carries what the downstream must end with: it is due exactly once.
	for _, o := range x.ops {
		if o.in.Policy == projection.PolicyLatest && o.perform && x.final[o.key].by == o.by {
			o.must = true
		}
	}
	return x
}

// apply is the contract's version rule for one event (step i).
func (x *expectation) apply(states map[subjectKey]state, f *fact, i int) {
	cur, ok := states[f.key]
	switch {
	case ok && (cur.terminal || f.version < cur.version):
		return // stale
	case ok && f.version == cur.version:
		return // the same state again (two states at one version are refused before any run)
	case ok && f.write.Fingerprint == cur.fp:
		cur.version = f.version // a newer version of the same state: no intents
		states[f.key] = cur
		return
	}
	// An intent whose operation id the ledger already holds is the same
	// action (not written again), a once intent's declared deduplication
	// (not written, recorded on the event), or a reuse: the commit is
	// refused and the event quarantined, nothing of it written.
	var write []projection.Intent
	for _, in := range f.intents {
		held, dup := x.ops[in.OperationID]
		if !dup {
			write = append(write, in)
			continue
		}
		if judge(held.in, held.version, held.gone, in, f.version) == reused {
			x.quarantined[i] = held
			return
		}
	}
	states[f.key] = state{version: f.version, fp: f.write.Fingerprint, values: f.write.State, terminal: f.write.Terminal, by: f}
	for _, in := range write {
		x.add(&op{in: in, by: f, key: f.key, version: f.version, fp: f.write.Fingerprint, step: i, phase: -1})
	}
	// The commit of a revision checks the while_current intents its
	// subject watches: one whose condition the new state breaks has lost
	// its reason; if it was performed and declares a compensation, the
	// compensation is written with this revision.
	for _, id := range x.order {
		o := x.ops[id]
		if o.key != f.key || o.step >= i || o.gone || o.in.Policy != projection.PolicyWhileCurrent || holds(o.in.Condition, f.write.State) {
			continue
		}
		o.gone, o.goneAt, o.goneBy = true, i, f
		if o.perform && o.in.Compensation != "" {
			cid := projection.CompensationID(o.in.OperationID)
			x.add(&op{in: projection.Intent{OperationID: cid, Kind: o.in.Compensation, Subject: o.in.Subject, Policy: projection.PolicyOnce},
				by: f, key: f.key, version: f.version, fp: f.write.Fingerprint, step: i, phase: -1, compensates: o.in.OperationID})
		}
	}
}

func (x *expectation) add(o *op) {
	x.ops[o.in.OperationID] = o
	x.order = append(x.order, o.in.OperationID)
}

// dispatch decides every undecided intent against the model's states.
func (x *expectation) dispatch(states map[subjectKey]state, phase int) {
	for _, id := range x.order {
		o := x.ops[id]
		if o.phase >= 0 {
			continue
		}
		o.phase = phase
		cur := states[o.key]
		switch o.in.Policy {
		case projection.PolicyWhileCurrent:
			o.perform = !o.gone && holds(o.in.Condition, cur.values)
			o.must = o.perform
		case projection.PolicyLatest:
			o.perform = cur.fp == o.fp
		default:
			o.perform, o.must = true, true
		}
	}
}

// verdict is what an intent under an operation id the ledger already
// holds is.
type verdict int

const (
	// sameAction: the intent the ledger holds, asked for again (a retry,
	// the same fact under another event id, or a while_current reason
	// that still holds).
	sameAction verdict = iota
	// deduplicated: a once intent of the same kind from another
	// revision: the declared deduplication, not performed again.
	deduplicated
	// reused: another action under the id (another kind or policy, a
	// latest intent of another revision or payload, a while_current one
	// of another payload or condition, or of a reason a revision removed
	// since): the rule's mistake, which the pipeline refuses.
	reused
)

// judge compares an intent of revision version with the one that holds
// its operation id (held, of revision heldVersion; gone when a revision
// removed its reason since).
func judge(held projection.Intent, heldVersion int64, gone bool, in projection.Intent, version int64) verdict {
	if held.Kind != in.Kind || policyOf(held) != policyOf(in) {
		return reused
	}
	same := payloadHash(held.Payload) == payloadHash(in.Payload)
	switch policyOf(in) {
	case projection.PolicyOnce:
		if same && heldVersion == version {
			return sameAction
		}
		return deduplicated
	case projection.PolicyWhileCurrent:
		// The held intent acts on the same reason for as long as it
		// holds: a newer revision that keeps the reason asks for the
		// same action.
		if same && conditionText(held.Condition) == conditionText(in.Condition) && !gone {
			return sameAction
		}
		return reused
	default:
		// A latest intent carries its revision's state: the held one is
		// superseded by the newer revision, whose own intent must exist.
		if same && heldVersion == version {
			return sameAction
		}
		return reused
	}
}

// payloadHash is the canonical hash of an intent's payload, an absent
// payload hashed as an empty one.
func payloadHash(p map[string]any) string {
	if p == nil {
		p = map[string]any{}
	}
	return projection.Fingerprint(p)
}

// holds reports whether a state satisfies a condition: every field equal,
// compared as text, as the contract says.
func holds(cond map[string]string, values map[string]any) bool {
	for k, want := range cond {
		if text(values[k]) != want {
			return false
		}
	}
	return true
}

// text is a state value as a condition compares it.
func text(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// project runs the team's projection for one event as the processor
// does: a panic is its permanent error (projection.CodePanic), a result
// projection.Validate refuses is one too, and the result is scoped.
func project(reg *projection.Registry, f *fact, id string, payload []byte, at time.Time) (projection.Result, error) {
	p, ok := reg.Lookup(f.d.src.Kind, f.typ)
	if !ok {
		return projection.Result{}, fmt.Errorf("no projection of the registry handles %s %q", f.d.src.Kind, f.typ)
	}
	scope := f.d.src.Scope()
	name, res, err := processor.Project(p, scope, projection.Event{Source: f.d.src.Name, Kind: f.d.src.Kind, EventID: id, Type: f.typ, Payload: payload, ReceivedAt: at},
		slog.New(slog.DiscardHandler))
	if err == nil {
		err = projection.Validate(name, res)
	}
	if err != nil {
		return res, err
	}
	return projection.Scoped(scope, res), nil
}

// receivedAt is when the kit says an event was first received (the
// harness's clock start), and againAt when its re-sent copy was.
var (
	receivedAt = pipelinetest.Start
	againAt    = pipelinetest.Start.Add(time.Hour)
)

// render is a state as a message shows it: compact JSON, cut short.
func render(values map[string]any) string {
	b, err := json.Marshal(values)
	if err != nil {
		return fmt.Sprint(values)
	}
	if s := string(b); len(s) <= 200 {
		return s
	}
	return string(b[:197]) + "..."
}

// sameJSON reports whether two values encode to the same JSON (numbers as
// the stored state gives them back, exactly).
func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// stateMismatch lists the fields of want that got does not hold, as
// "field=got (want x)".
func stateMismatch(want, got map[string]any) string {
	var diffs []string
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !sameJSON(want[k], got[k]) {
			g, _ := json.Marshal(got[k])
			w, _ := json.Marshal(want[k])
			diffs = append(diffs, fmt.Sprintf("%s=%s (want %s)", k, g, w))
		}
	}
	return strings.Join(diffs, ", ")
}
