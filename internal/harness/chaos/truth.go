package chaos

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/warehouse"
)

// I7, the downstream follows the truth (see docs/architecture.md), checked
// against a model of the business rules (the orders projection and the
// Stripe subscription projection, see stripe.go), the schedule, and, for
// the order in which facts were processed, the recorded outcomes (as for
// I3: the applied events of a subject in version order are its history).
// The ledger's intents are never the source of truth; they are read only
// to find the records the rules require (an attention item, a
// compensation's link) and the intents an operator owns.
//
// Policies, by kind:
//
//   - latest (entitlement.grant/revoke): per subscription, the versions
//     (the model's, from the operation id) of the entitlement calls the
//     downstream applied, in arrival order, never decrease; and once the
//     run settled the downstream's last applied entitlement (grant:
//     entitled; revoke or none: not) equals what the final projection
//     implies (entitled = active, trialing or past_due, and not deleted),
//     unless the intent of the newest applied fact is operator-owned
//     (QUARANTINED or FAILED).
//   - while_current (an order's refund and notify_cancellation, justified
//     by the cancellation at revision r): the cancellation is taken back
//     when a newer revision with another status was applied (the first
//     such revision "contradicts" it). Not taken back (cancelled from r to
//     the end of the processed history): exactly once, unless
//     operator-owned (I2). Taken back: 0 or 1 effective calls; if 1, the
//     ledger records it: the intent is CONTRADICTED (naming a
//     contradicting revision), or it names its compensation
//     (ledger.CompensationID) and that compensation is effective exactly
//     once, or the intent is operator-owned. An effect that reached the
//     downstream after the contradicting revision was committed (in the
//     run's shared sequence of downstream arrivals and projection
//     samples) is a violation whatever the ledger says, unless its
//     dispatcher checked before the commit and was held between the check
//     and the call (the window no local transaction closes, see
//     docs/effects.md; the executor knows those windows); then it must be
//     recorded as
//     above. If 0: the intent is not CONTRADICTED
//     (that would be an attention item for nothing) and no compensation
//     is effective (a compensation of nothing), unless operator-owned
//     (its outcome unknown).
//   - once (a compensation): effective exactly once when due, as above;
//     never for a cancellation that held, and no compensation intent
//     exists for one.
//   - Every call of a model-known operation carries the subject version
//     the model gives it: the X-Subject-Version header as a decimal
//     integer, and the body's subject_version as the same JSON string (a
//     Stripe deletion's version is above 2^53: never a float).

// Compensations are the compensation kinds the model's projections
// declare, by intent kind: the orders projection declares a notice of
// reinstatement for a cancellation notice; a refund has none.
var Compensations = map[string]string{"notify_cancellation": "notify_reinstatement"}

// sample is one subject's projection as the executor sampled it, at seq
// in the run's sequence (pipelinetest.Outbox.Tick).
type sample struct {
	seq      int64
	version  int64
	status   string
	terminal bool
}

// opInfo is what the model knows of one operation id.
type opInfo struct {
	subject  string
	revision int64 // the version the intent follows from
	stripe   bool
	state    string // the state the intent follows from
	kind     string
	// compensates, for a compensation, is the operation it compensates.
	compensates string
}

// model is the reference model of a run's effects.
type model struct {
	opOf     map[string]opInfo
	applied  map[string]string // op -> the event that applied it
	intentOf map[string]ledger.IntentState
	// orders: the applied events of each order, in revision order.
	orderHistory map[string][]Event
}

func newModel(ids []string, byID map[string]Event, truth map[string]string, o observed) *model {
	m := &model{opOf: map[string]opInfo{}, applied: map[string]string{},
		intentOf: map[string]ledger.IntentState{}, orderHistory: map[string][]Event{}}
	for _, in := range o.intents {
		m.intentOf[in.OperationID] = in
	}
	for _, id := range ids {
		e := byID[id]
		ev, ok := o.events[id]
		applied := ok && ev.Status == ledger.StatusProcessed && ev.Result != nil && ev.Result.Outcome == ledger.OutcomeApplied
		if e.Stripe() {
			v, state, deleted, _, _ := stripeFact(e, ev, truth, o)
			op := stripeOpOf(e.Subject, v, state, deleted)
			kind := "entitlement.revoke"
			if status, _, _ := strings.Cut(state, "+"); stripeEntitled[status] && !deleted {
				kind = "entitlement.grant"
			}
			m.opOf[op] = opInfo{subject: e.Subject, revision: v, stripe: true, state: state, kind: kind}
			if applied {
				m.applied[op] = id
			}
			continue
		}
		if applied {
			m.orderHistory[e.Subject] = append(m.orderHistory[e.Subject], e)
		}
		if e.Status != "cancelled" {
			continue
		}
		rf, nt := Ops(e.Subject, e.Revision)
		for op, kind := range map[string]string{rf: "refund", nt: "notify_cancellation"} {
			m.opOf[op] = opInfo{subject: e.Subject, revision: int64(e.Revision), state: "cancelled", kind: kind}
			if ck := Compensations[kind]; ck != "" {
				m.opOf[ledger.CompensationID(op)] = opInfo{subject: e.Subject, revision: int64(e.Revision), kind: ck, compensates: op}
			}
			if applied {
				m.applied[op] = id
			}
		}
	}
	for _, h := range m.orderHistory {
		sort.SliceStable(h, func(i, j int) bool { return h[i].Revision < h[j].Revision })
	}
	return m
}

// contradiction returns the applied revision that took the reason of an
// order's while_current operation back: the first applied revision above
// the cancellation's whose status is not cancelled.
func (m *model) contradiction(op string) (Event, bool) {
	c, ok := m.opOf[op]
	if !ok || c.stripe || c.compensates != "" {
		return Event{}, false
	}
	for _, e := range m.orderHistory[c.subject] {
		if int64(e.Revision) > c.revision && e.Status != "cancelled" {
			return e, true
		}
	}
	return Event{}, false
}

// statusAt is the status the model's history gives an order at revision
// rev ("" when no event applied there).
func (m *model) statusAt(subject string, rev int64) string {
	for _, e := range m.orderHistory[subject] {
		if int64(e.Revision) == rev {
			return e.Status
		}
	}
	return ""
}

func operatorOwned(in ledger.IntentState) bool {
	return in.Status == ledger.IntentStatusQuarantined || in.Status == ledger.IntentStatusFailed
}

// committedAt is the first number in the run's sequence at which subject
// was sampled at version v or above: the revision v was committed before
// it (math.MaxInt64 if never sampled so).
func committedAt(o observed, subject string, v int64) int64 {
	for _, s := range o.history[subject] {
		if s.version >= v {
			return s.seq
		}
	}
	return math.MaxInt64
}

// appliedArrivals are the downstream's effective calls in arrival order.
func appliedArrivals(o observed) []pt.Arrival {
	var out []pt.Arrival
	for _, a := range o.arrivals {
		if a.Applied {
			out = append(out, a)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out
}

func checkTruth(m *model, o observed, settled bool, add func(string, string, ...any)) {
	applies := appliedArrivals(o)
	if o.outbox {
		// The harness itself: its record of applied calls must agree with
		// the downstream's own count.
		per := map[string]int{}
		for _, a := range applies {
			per[a.Key]++
		}
		for k, n := range o.effects {
			if per[k] != n {
				add(Harness, "operation %s: the downstream counts %d effective calls, the arrivals record %d", short(k), n, per[k])
			}
		}
		checkVersions(m, o, add)
	}
	if o.outbox {
		checkLatest(m, o, applies, settled, add)
	}
	checkWhileCurrent(m, o, applies, add)
}

// checkVersions: every call of a model-known operation carries the
// version of the truth it came from, exactly.
func checkVersions(m *model, o observed, add func(string, string, ...any)) {
	seen := map[string]bool{}
	for _, a := range o.arrivals {
		c, ok := m.opOf[a.Key]
		if a.Method != "POST" || !ok || seen[a.Key] {
			continue
		}
		if c.compensates != "" {
			continue // which version a compensation carries is the product's choice
		}
		want := strconv.FormatInt(c.revision, 10)
		var body string
		if err := json.Unmarshal(a.BodyVersion, &body); err != nil {
			body = "not a string: " + string(a.BodyVersion)
		}
		if !sameVersion(a.Version, c.revision) || body != a.Version {
			seen[a.Key] = true
			add(I7, "%s %s (%s v%s): the call carries X-Subject-Version %q and subject_version %s; the truth it came from is version %s", c.kind, short(a.Key), c.subject, want, a.Version, string(a.BodyVersion), want)
		}
	}
}

// sameVersion reports whether a version sent as text is exactly the
// model's v, as a decimal integer. Exact even above 2^53 on minidyn, which
// evaluates every number of an item as float64 when it applies an update
// expression to it: the intent keeps its version as text too.
func sameVersion(sent string, v int64) bool {
	return sent == strconv.FormatInt(v, 10)
}

// checkLatest: per subscription, applied versions never go down, and the
// downstream ends where the final projection says.
func checkLatest(m *model, o observed, applies []pt.Arrival, settled bool, add func(string, string, ...any)) {
	bySubject := map[string][]pt.Arrival{}
	for _, a := range applies {
		if c, ok := m.opOf[a.Key]; ok && c.stripe {
			bySubject[c.subject] = append(bySubject[c.subject], a)
		}
	}
	subjects := map[string]bool{}
	for _, c := range m.opOf {
		if c.stripe {
			subjects[c.subject] = true
		}
	}
	for _, subj := range keysOf(subjects) {
		var top opInfo
		topOp := ""
		for _, a := range bySubject[subj] {
			c := m.opOf[a.Key]
			if topOp != "" && c.revision < top.revision {
				add(I7, "%s: the downstream applied %s v%d (%s) after %s v%d (%s): an older state after a newer one", subj, c.kind, c.revision, short(a.Key), top.kind, top.revision, short(topOp))
			}
			if topOp == "" || c.revision >= top.revision {
				top, topOp = c, a.Key
			}
		}
		p, ok := o.projections[subj]
		if !settled || !ok {
			continue // I1 or I3 says why
		}
		status := fmt.Sprint(p.State["status"])
		want := stripeEntitled[status] && !p.Terminal && p.State["deleted"] != true
		got, last := false, "nothing"
		if as := bySubject[subj]; len(as) > 0 {
			c := m.opOf[as[len(as)-1].Key]
			got, last = c.kind == "entitlement.grant", fmt.Sprintf("%s v%d", c.kind, c.revision)
		}
		if got == want {
			continue
		}
		newest, newestOp := int64(-1), ""
		for op, id := range m.applied {
			if c := m.opOf[op]; c.stripe && c.subject == subj && id != "" && c.revision > newest {
				newest, newestOp = c.revision, op
			}
		}
		if in, ok := m.intentOf[newestOp]; ok && operatorOwned(in) {
			continue // the newest intent is the operator's, visibly
		}
		add(I7, "%s: the downstream ends entitled=%v (last applied: %s), the subscription ends %s at version %d (terminal %v): entitled=%v", subj, got, last, status, p.Version, p.Terminal, want)
	}
}

// checkWhileCurrent: the refund and notice of a cancellation, and the
// compensations, against the order's history.
func checkWhileCurrent(m *model, o observed, applies []pt.Arrival, add func(string, string, ...any)) {
	firstApplied := map[string]int64{}
	for _, a := range applies {
		if _, seen := firstApplied[a.Key]; !seen {
			firstApplied[a.Key] = a.Seq
		}
	}
	ops := make([]string, 0, len(m.applied))
	for op := range m.applied {
		if c := m.opOf[op]; !c.stripe && c.compensates == "" {
			ops = append(ops, op)
		}
	}
	sort.Strings(ops)
	for _, op := range ops {
		c := m.opOf[op]
		n := o.effects[op]
		in, hasIntent := m.intentOf[op]
		comp := ledger.CompensationID(op)
		nc := o.effects[comp]
		cin, hasComp := m.intentOf[comp]
		what := fmt.Sprintf("%s %s of %s r%d", c.kind, short(op), c.subject, c.revision)
		by, taken := m.contradiction(op)
		if !taken {
			// The cancellation held to the end: exactly once (I2); nothing
			// to compensate or to report.
			switch {
			case nc > 0:
				add(I7, "%s: its compensation %s was effective %d times though the order stayed cancelled", what, short(comp), nc)
			case hasComp:
				add(I7, "%s: a compensation intent %s (%s) exists though the order stayed cancelled", what, short(comp), cin.Status)
			}
			if in.Status == ledger.IntentStatusContradicted {
				add(I7, "%s is CONTRADICTED though the order stayed cancelled from r%d on", what, c.revision)
			}
			continue
		}
		takenBack := fmt.Sprintf("r%d %s", by.Revision, by.Status)
		if n == 0 {
			if in.Status == ledger.IntentStatusContradicted {
				add(I7, "%s is CONTRADICTED (an attention item) but was never effective; %s took its reason back before", what, takenBack)
			}
			if nc > 0 && !operatorOwned(in) {
				add(I7, "%s was never effective, yet its compensation %s was effective %d times", what, short(comp), nc)
			}
			continue
		}
		// Effective, and taken back: the ledger must say so. After the
		// contradicting revision was committed, only a call checked
		// before it (a dispatcher held between its check and its call)
		// may have been made at all.
		when := "before"
		commit := committedAt(o, c.subject, int64(by.Revision))
		if at, ok := firstApplied[op]; ok && at > commit {
			when = "after"
			if !checkedBefore(o, at, commit) {
				add(I7, "%s was performed after %s was committed, by a dispatch that checked the order after that (the order was at %s when it was called): it should have ended OBSOLETE without a call; the intent is %s", what, takenBack, sampledAt(o, c.subject, at), in.Status)
				continue
			}
		}
		compensated := hasIntent && in.CompensatedBy == comp && (nc == 1 || (hasComp && operatorOwned(cin)))
		switch {
		case in.Status == ledger.IntentStatusContradicted, operatorOwned(in), compensated:
		case !hasIntent:
			add(I7, "%s was effective %s %s was committed, and nothing records it (no intent: no attention item, no compensation)", what, when, takenBack)
		default:
			add(I7, "%s was effective %s %s was committed, and the ledger records neither CONTRADICTED nor a compensation: the intent is %s (compensated by %q, its compensation effective %d times)", what, when, takenBack, in.Status, in.CompensatedBy, nc)
		}
		if hasIntent && in.CompensatedBy != "" && Compensations[c.kind] == "" {
			add(I7, "%s names compensation %s, but its kind declares none", what, short(in.CompensatedBy))
		} else if hasIntent && in.CompensatedBy != "" && in.CompensatedBy != comp {
			add(I7, "%s names compensation %s, want %s", what, short(in.CompensatedBy), short(comp))
		}
		if hasIntent && in.CompensatedBy == comp && nc != 1 && !(hasComp && operatorOwned(cin)) {
			add(I7, "%s names its compensation %s, which was effective %d times, want exactly once", what, short(comp), nc)
		}
		if in.Status == ledger.IntentStatusContradicted {
			if st := m.statusAt(c.subject, in.ContradictedBy); in.ContradictedBy <= c.revision || st == "" || st == "cancelled" {
				add(I7, "%s is CONTRADICTED by version %d, which is no applied revision that took the cancellation back (%s did)", what, in.ContradictedBy, takenBack)
			}
		}
	}
}

// sampledAt describes subject's projection as last sampled before seq.
func sampledAt(o observed, subject string, seq int64) string {
	last := "no sample"
	for _, s := range o.history[subject] {
		if s.seq < seq {
			last = fmt.Sprintf("r%d %s", s.version, s.status)
		}
	}
	return last
}

// checkedBefore reports whether the call that arrived at seq at was made
// by a dispatcher held between its check and its call since before
// commit: the first call after such a window ended.
func checkedBefore(o observed, at, commit int64) bool {
	for _, w := range o.windows {
		if w.from >= commit || w.to >= at {
			continue
		}
		for _, a := range o.arrivals {
			if a.Seq > w.to {
				if a.Seq == at {
					return true
				}
				break
			}
		}
	}
	return false
}

// exercised counts, for one run, the situations the I7 schedules are
// meant to produce (see Stats).
func exercised(s Schedule, accepted []bool, o observed) Stats {
	var st Stats
	ids, byID := acceptedFacts(s, accepted)
	for _, id := range ids {
		if ev, ok := o.events[id]; ok && reuseTold(ev, byID[id].Subject) {
			st.ReuseTold++
		}
	}
	m := newModel(ids, byID, StripeTruth(s.Events), o)
	applies := appliedArrivals(o)
	firstApplied := map[string]int64{}
	for _, a := range applies {
		if _, seen := firstApplied[a.Key]; !seen {
			firstApplied[a.Key] = a.Seq
		}
	}
	appliedBefore := func(op string, seq int64) bool {
		at, ok := firstApplied[op]
		if !ok && !o.outbox {
			return o.effects[op] > 0 // a naive core performs inside its commit
		}
		return ok && at < seq
	}
	// newerAfter: the first number in the sequence after seq at which the
	// subject was sampled above version v.
	newerAfter := func(subject string, v, seq int64) int64 {
		for _, s := range o.history[subject] {
			if s.seq > seq && s.version > v {
				return s.seq
			}
		}
		return math.MaxInt64
	}
	for _, a := range o.arrivals {
		c, ok := m.opOf[a.Key]
		if a.Method != "POST" || a.Applied || !ok {
			continue
		}
		if at := newerAfter(c.subject, c.revision, a.Seq); at != math.MaxInt64 && !appliedBefore(a.Key, at) {
			st.Waited = 1
		}
	}
	for op := range m.applied {
		by, taken := m.contradiction(op)
		if !taken {
			continue
		}
		if appliedBefore(op, committedAt(o, m.opOf[op].subject, int64(by.Revision))) {
			st.OverridePerformed = 1
		} else {
			st.OverrideQueued = 1
		}
	}
	for _, w := range o.windows {
		for _, a := range o.arrivals {
			if a.Seq <= w.to || a.Method != "POST" {
				continue
			}
			if c, ok := m.opOf[a.Key]; ok && newerAfter(c.subject, c.revision, w.from) < w.to {
				st.CheckWindow = 1
			}
			break
		}
	}
	claimers := map[string]map[string]bool{}
	for _, in := range o.intents {
		if in.Kind == warehouse.Kind {
			continue // change records: not the effects these count
		}
		for _, a := range in.Audit {
			if a.To != ledger.Status(ledger.IntentStatusDispatching) {
				continue
			}
			name, _, _ := strings.Cut(a.Actor, ".") // disp-<i>.<instance>
			if claimers[in.Subject] == nil {
				claimers[in.Subject] = map[string]bool{}
			}
			claimers[in.Subject][name] = true
		}
	}
	for _, c := range claimers {
		if len(c) > 1 {
			st.TwoDispatchers = 1
		}
	}
	return st
}

// acceptedFacts are the accepted events, one per event id, and their ids
// sorted.
func acceptedFacts(s Schedule, accepted []bool) ([]string, map[string]Event) {
	byID := map[string]Event{}
	var ids []string
	for i, e := range s.Events {
		if i < len(accepted) && accepted[i] {
			if _, dup := byID[e.ID]; !dup {
				ids = append(ids, e.ID)
			}
			byID[e.ID] = e
		}
	}
	sort.Strings(ids)
	return ids, byID
}
