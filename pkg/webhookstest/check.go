package webhookstest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// check compares what one run left with what the model expects of its
// schedule. Every message ends with the run that showed it.
func (k *kit) check(s schedule, o observed) []Failure {
	steps := s.steps(k.facts)
	x := simulate(steps, s.eager)
	var out []Failure
	run := s.describe(k.facts, k.p.Seed)
	if s.crash != nil && !o.crashed {
		run += "; the crash's call never came"
	}
	fail := func(r Rule, format string, a ...any) {
		out = append(out, Failure{Rule: r, Detail: fmt.Sprintf(format, a...) + "; run: " + run})
	}
	for _, p := range o.problems {
		fail(p.Rule, "%s", p.Detail)
	}

	// Every event processed, every intent finished by the dispatcher
	// itself (not left to an operator).
	for i, st := range steps {
		ev, ok := o.events[st.name()]
		held, refused := x.quarantined[i]
		switch {
		case !ok:
			fail(Processed, "event %s was accepted but has no ledger row", st.name())
		case refused && (ev.Status != ledger.StatusQuarantined || ev.ErrorCode != codeOperationIDReused):
			fail(OneActionPerOperationID, "event %s asks for an action under operation id %s, which %s's %s holds: its commit must be refused and the event QUARANTINED %s; it ended %s",
				st.name(), held.in.OperationID, held.by.id, held.in.Kind, codeOperationIDReused, ev.Status)
		case refused:
		case ev.Status != ledger.StatusProcessed:
			fail(Processed, "event %s ended %s (%s)", st.name(), ev.Status, lastReason(ev))
		}
	}
	ops := make([]string, 0, len(o.intents))
	for op := range o.intents {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		in := o.intents[op]
		switch in.Status {
		case ledger.IntentStatusSucceeded, ledger.IntentStatusObsolete, ledger.IntentStatusSuperseded, ledger.IntentStatusContradicted:
		default:
			fail(Processed, "intent %s of %s (operation %s) ended %s (%s: %s)", in.Kind, in.Subject, op, in.Status, in.ErrorCode, in.Detail)
		}
	}

	// The state of the highest version.
	keys := make([]subjectKey, 0, len(x.final))
	for key := range x.final {
		keys = append(keys, key)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, key := range keys {
		want := x.final[key]
		got, ok := o.projections[key]
		why := fmt.Sprintf("what %s (%s), its highest version, projects alone", want.by.id, want.by.typ)
		switch {
		case !ok:
			fail(HighestVersion, "subject %s has no state, want version %d with %s: %s", key, want.version, render(want.values), why)
		case got.Version != want.version || got.Fingerprint != want.fp:
			fail(HighestVersion, "subject %s ends at version %d with %s, want version %d with %s: %s",
				key, got.Version, render(got.State), want.version, render(want.values), why)
		}
	}

	if k.p.Warehouse {
		checkWarehouse(keys, x.final, o.records, fail)
	}

	// The effects: per operation id, against the model.
	first := map[string]pt.Arrival{} // op -> its first effective call
	for _, a := range o.arrivals {
		if _, seen := first[a.Key]; a.Applied && !seen {
			first[a.Key] = a
		}
	}
	explained := map[string]bool{} // model ops whose effect came under another id
	effective := make([]string, 0, len(o.effective))
	for op := range o.effective {
		effective = append(effective, op)
	}
	sort.Strings(effective)
	for _, id := range effective {
		n := o.effective[id]
		a, ok := first[id]
		if !ok {
			a = pt.Arrival{Key: id, Kind: "an effect", Subject: "an unknown subject"}
		}
		if n > 1 {
			fail(OneCallPerOperation, "operation %s (%s of %s) was performed %d times by the downstream", id, a.Kind, a.Subject, n)
		}
		if _, known := x.ops[id]; known {
			continue
		}
		if twin := x.twin(a, o.effective); twin != nil {
			explained[twin.in.OperationID] = true
			by := "an event"
			if _, ev, ok := strings.Cut(o.intents[id].Causation, "/"); ok {
				by = "event " + ev
				if ev == twin.by.againID {
					by += " (the same fact as " + twin.by.id + ")"
				}
			}
			model := fmt.Sprintf("%s gives that effect operation id %s", twin.by.id, twin.in.OperationID)
			if twin.compensates != "" {
				model = fmt.Sprintf("the model's id for that compensation is %s (of %s)", twin.in.OperationID, twin.compensates)
			}
			fail(OneCallPerOperation, "%s of %s was performed under operation id %s, which %s wrote; %s: one fact, two operation ids, so the downstream cannot tell they are one operation and performs it once per id",
				a.Kind, a.Subject, id, by, model)
			continue
		}
		fail(ImpliedEffects, "the downstream performed %s of %s (operation %s), which no event implies in the model", a.Kind, a.Subject, id)
	}
	// Each effective call of a while_current or latest effect, against
	// the model's state of its subject in the dispatch it arrived in.
	wrong := map[string]bool{}
	for i, a := range o.arrivals {
		m, ok := x.ops[a.Key]
		if !a.Applied || !ok || wrong[a.Key] {
			continue
		}
		p := phaseOf(o.phaseEnd, i)
		at := x.phases[p][m.key]
		what := describeOp(m)
		switch policyOf(m.in) {
		case projection.PolicyWhileCurrent:
			switch {
			case !holds(m.in.Condition, at.values):
				wrong[a.Key] = true
				fail(WhileCurrent, "%s was performed while the subject was %s at version %d (from %s), which does not satisfy its condition %s: it must end OBSOLETE without a call",
					what, render(at.values), at.version, at.by.id, conditionText(m.in.Condition))
			case m.gone && m.goneAt <= x.phaseStep[p]:
				wrong[a.Key] = true
				fail(WhileCurrent, "%s was performed after %s (version %d) had removed its reason %s: it must end OBSOLETE without a call",
					what, m.goneBy.id, m.goneBy.version, conditionText(m.in.Condition))
			}
		case projection.PolicyLatest:
			if at.fp != m.fp {
				wrong[a.Key] = true
				fail(LatestInOrder, "%s was performed while the subject held another state (version %d from %s): it must end SUPERSEDED without a call", what, at.version, at.by.id)
			}
		}
	}
	for _, id := range x.order {
		m := x.ops[id]
		n := o.effective[id]
		switch {
		case m.must && n == 0 && !explained[id] && processed(o, m.by):
			fail(ImpliedEffects, "%s was due exactly once and was never performed (its intent %s)", describeOp(m), intentStatus(o, id))
		case !m.perform && n > 0 && !wrong[id]:
			rule := WhileCurrent
			if policyOf(m.in) == projection.PolicyLatest {
				rule = LatestInOrder
			}
			at := x.phases[m.phase][m.key]
			fail(rule, "%s was performed, but when it was dispatched the subject was %s at version %d (from %s): the dispatcher must not perform it",
				describeOp(m), render(at.values), at.version, at.by.id)
		}
	}

	// Latest effects in version order, per scope and subject, as the
	// downstream applied them.
	type last struct {
		version int64
		op      string
	}
	top := map[string]last{}
	for _, a := range o.arrivals {
		m, ok := x.ops[a.Key]
		if !a.Applied || !ok || policyOf(m.in) != projection.PolicyLatest {
			continue
		}
		sk := a.Scope + "/" + a.Subject
		if t, seen := top[sk]; seen && m.version < t.version {
			fail(LatestInOrder, "the downstream applied %s of %s version %d (operation %s) after version %d (operation %s): an older state after a newer one",
				m.in.Kind, a.Subject, m.version, a.Key, t.version, t.op)
			continue
		}
		top[sk] = last{m.version, a.Key}
	}
	checkFinalPayloads(keys, x, k.facts, steps, o, fail)
	return dedupe(out)
}

// checkFinalPayloads checks, on the payloads the downstream received,
// what each subject's final revision asks of it: LatestEndsFinal and
// ReasonHeldInForce.
func checkFinalPayloads(keys []subjectKey, x expectation, facts []*fact, steps []step, o observed, fail func(Rule, string, ...any)) {
	// A projection's latest kinds on one downstream subject are one sync
	// (a grant and a revoke of one entitlement): the last call of any of
	// them is what the downstream ends with.
	type target struct{ name, scope, subject string }
	family := map[target]map[string]bool{}
	for _, f := range facts {
		for _, in := range f.intents {
			if policyOf(in) == projection.PolicyLatest {
				t := target{f.key.name, scopeOf(f.key), in.Subject}
				if family[t] == nil {
					family[t] = map[string]bool{}
				}
				family[t][in.Kind] = true
			}
		}
	}
	last := map[target]pt.Arrival{}
	for _, a := range o.arrivals {
		if !a.Applied {
			continue
		}
		for t, kinds := range family {
			if t.scope == a.Scope && t.subject == a.Subject && kinds[a.Kind] {
				last[t] = a
			}
		}
	}
	// Which subjects' final revisions sync each downstream subject.
	askers := map[target][]subjectKey{}
	for _, key := range keys {
		for _, in := range x.final[key].by.intents {
			if policyOf(in) == projection.PolicyLatest {
				t := target{key.name, scopeOf(key), in.Subject}
				askers[t] = append(askers[t], key)
			}
		}
	}
	for _, key := range keys {
		fin := x.final[key]
		if !processed(o, fin.by) {
			continue // its own failure says why
		}
		scope := scopeOf(key)
		for _, in := range fin.by.intents {
			switch policyOf(in) {
			case projection.PolicyLatest:
				t := target{key.name, scope, in.Subject}
				a, ok := last[t]
				if ok && a.Kind == in.Kind && samePayload(a.Payload, in.Payload) {
					continue
				}
				got := "no call of it"
				if ok {
					got = fmt.Sprintf("%s carrying %s (operation %s)", a.Kind, renderRaw(a.Payload), a.Key)
				}
				fix := "an older revision's call came last, or the final revision's intent was never written: is the operation id reused across revisions? Include the version in it"
				if len(askers[t]) > 1 {
					fix = fmt.Sprintf("the final revisions of %d subjects (%s) sync this one downstream subject, and only one of them can be last: give each its own downstream subject, or combine them into one projection", len(askers[t]), keyList(askers[t]))
				}
				fail(LatestEndsFinal, "projection %s, subject %s: the last sync of %s (scope %s) the downstream applied is %s, but the final revision (%s, version %d) asks for %s with %s: %s",
					key.name, key.subject, in.Subject, scope, got, fin.by.id, fin.version, in.Kind, renderPayload(in.Payload), fix)
			case projection.PolicyWhileCurrent:
				if !holds(in.Condition, fin.values) {
					continue
				}
				checkInForce(key, in, x, steps, o, fail)
			}
		}
	}
}

// checkInForce checks ReasonHeldInForce for one while_current intent of
// a subject's final revision whose condition its final state satisfies.
func checkInForce(key subjectKey, in projection.Intent, x expectation, steps []step, o observed, fail func(Rule, string, ...any)) {
	// since: the first step from which the subject's state satisfied the
	// condition up to the end.
	since := len(steps) - 1
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].f.key != key {
			continue
		}
		if !holds(in.Condition, x.after[i].values) {
			break
		}
		since = i
	}
	scope := scopeOf(key)
	performed, undone := 0, ""
	for j, a := range o.arrivals {
		if !a.Applied || a.Scope != scope || a.Subject != in.Subject {
			continue
		}
		switch {
		case a.Kind == in.Kind && samePayload(a.Payload, in.Payload) && x.phaseStep[phaseOf(o.phaseEnd, j)] >= since:
			performed++
			undone = ""
		case a.Kind == in.Compensation && in.Compensation != "" && performed > 0:
			undone = a.Key
		}
	}
	what := fmt.Sprintf("projection %s, subject %s: its final state satisfies the condition %s of %s of %s (scope %s), asked for by %s (version %d)",
		key.name, key.subject, conditionText(in.Condition), in.Kind, in.Subject, scope, x.final[key].by.id, x.final[key].version)
	switch {
	case performed == 0:
		fail(ReasonHeldInForce, "%s, but the downstream got no call of it with its payload %s since that reason began to hold: is its operation id held by an intent whose reason a revision removed? Include the version in it",
			what, renderPayload(in.Payload))
	case undone != "":
		fail(ReasonHeldInForce, "%s, but after it was performed the downstream applied %s of %s (operation %s), which undid it: another subject's revision compensates what this one still justifies; key the effect by the subject whose reason it is",
			what, in.Compensation, in.Subject, undone)
	}
}

// samePayload reports whether a payload the downstream received is an
// intent's payload (compared as JSON, numbers exactly; an absent payload
// is an empty one).
func samePayload(raw json.RawMessage, want map[string]any) bool {
	got, err := canonical(raw)
	if err != nil {
		return false
	}
	if want == nil {
		want = map[string]any{}
	}
	b, err := json.Marshal(want)
	if err != nil {
		return false
	}
	w, err := canonical(b)
	return err == nil && got == w
}

// canonical is a JSON object re-encoded with its keys sorted and its
// numbers as written; null or nothing is the empty object.
func canonical(raw []byte) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "{}", nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return "", err
	}
	b, err := json.Marshal(v)
	return string(b), err
}

// renderRaw is a received payload as a message shows it.
func renderRaw(raw json.RawMessage) string {
	s, err := canonical(raw)
	if err != nil {
		s = string(raw)
	}
	if len(s) > 200 {
		s = s[:197] + "..."
	}
	return s
}

func keyList(keys []subjectKey) string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.String()
	}
	return strings.Join(out, ", ")
}

// twin is the model's operation for the effect a call performed under an
// operation id the model does not know: one of the same kind, subject and
// scope, preferably one the downstream never performed.
func (x expectation) twin(a pt.Arrival, effective map[string]int) *op {
	var found *op
	for _, id := range x.order {
		m := x.ops[id]
		if m.in.Kind != a.Kind || m.in.Subject != a.Subject || scopeOf(m.key) != a.Scope {
			continue
		}
		if effective[id] == 0 {
			return m
		}
		if found == nil {
			found = m
		}
	}
	return found
}

// phaseOf is the dispatch the ith call arrived in.
func phaseOf(phaseEnd []int, i int) int {
	for p, end := range phaseEnd {
		if i < end {
			return p
		}
	}
	return len(phaseEnd) - 1
}

// describeOp names an operation of the model for a message.
func describeOp(m *op) string {
	if m.compensates != "" {
		return fmt.Sprintf("%s of %s (operation %s, the compensation of %s once %s removed its reason)", m.in.Kind, m.in.Subject, m.in.OperationID, m.compensates, m.by.id)
	}
	return fmt.Sprintf("%s of %s (operation %s, %s, asked for by %s)", m.in.Kind, m.in.Subject, m.in.OperationID, policyOf(m.in), m.by.id)
}

// scopeOf is the scope of a subject's scoped projection name.
func scopeOf(k subjectKey) string {
	scope, _ := projection.SplitScoped(k.name)
	return scope
}

// processed reports whether the event whose intent (or compensation) an
// operation is ended PROCESSED: when it did not, its intents were never
// written, and the failure that says why is its own.
func processed(o observed, f *fact) bool {
	for _, id := range []string{f.id, f.againID} {
		if ev, ok := o.events[id]; ok && ev.Status == ledger.StatusProcessed {
			return true
		}
	}
	return false
}

func intentStatus(o observed, op string) string {
	in, ok := o.intents[op]
	if !ok {
		return "was never written"
	}
	if in.ErrorCode != "" {
		return "is " + string(in.Status) + ", " + in.ErrorCode
	}
	return "is " + string(in.Status)
}

func conditionText(c map[string]string) string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := ""
	for i, k := range keys {
		if i > 0 {
			out += ","
		}
		out += k + "=" + strconv.Quote(c[k])
	}
	return out
}

// lastReason is why an event ended where it is: its last audit entry's
// reason (which names the code), else its code.
func lastReason(ev ledger.Event) string {
	if n := len(ev.Audit); n > 0 && ev.Audit[n-1].Reason != "" {
		return ev.Audit[n-1].Reason
	}
	return ev.ErrorCode
}

// dedupe drops repeated failures, keeping the first of each.
func dedupe(fs []Failure) []Failure {
	seen := map[Failure]bool{}
	var out []Failure
	for _, f := range fs {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out
}

// checkWarehouse checks WarehouseFollows: each subject's highest-version
// record is the final version with the final state.
func checkWarehouse(keys []subjectKey, final map[subjectKey]state, records []warehouse.Record, fail func(Rule, string, ...any)) {
	top := map[subjectKey]warehouse.Record{}
	for _, r := range records {
		key := subjectKey{name: projection.ScopedName(r.Scope, r.Projection), subject: r.Subject}
		if cur, ok := top[key]; !ok || r.VersionInt() > cur.VersionInt() {
			top[key] = r
		}
	}
	for _, key := range keys {
		want := final[key]
		got, ok := top[key]
		switch {
		case !ok:
			fail(WarehouseFollows, "subject %s has no record in the warehouse, want version %d with %s", key, want.version, render(want.values))
		case got.VersionInt() != want.version || projection.Fingerprint(got.State) != want.fp:
			fail(WarehouseFollows, "subject %s: the warehouse's current row is version %d with %s, want version %d with %s",
				key, got.VersionInt(), render(got.State), want.version, render(want.values))
		}
	}
}
