package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// The invariants a violation is filed under (see docs/architecture.md).
const (
	I1      = "I1 nothing accepted is lost"
	I2      = "I2 one effect per intent"
	I3      = "I3 no regression / newest revision wins"
	I4      = "I4 unverified requests touch nothing"
	I5      = "I5 fenced completion"
	I6      = "I6 auditable"
	I7      = "I7 the downstream follows the truth"
	I9      = "I9 the warehouse follows the truth"
	I10     = "I10 an operation id names one action"
	Harness = "harness error"
)

// Invariants lists them in report order.
var Invariants = []string{I1, I2, I3, I4, I5, I6, I7, I9, I10, Harness}

// Violation is one broken invariant with what the checker saw.
type Violation struct {
	Invariant string `json:"invariant"`
	Detail    string `json:"detail"`
}

func (v Violation) String() string { return v.Invariant + ": " + v.Detail }

// observed is the final state of a run.
type observed struct {
	events      map[string]ledger.Event      // by event id
	projections map[string]ledger.Projection // by subject
	intents     []ledger.IntentState
	effects     map[string]int // effective downstream calls per operation id
	outbox      bool
	// fetches are the times (Stripe's clock, Unix seconds) of the Stripe
	// API's answered subscription retrievals, by subscription.
	fetches map[string][]int64
	// arrivals are the effect calls (POSTs) the downstream received, each
	// with its number in the run's sequence; history the sampled changes
	// of each subject's projection in the same sequence; windows the
	// dispatcher pauses between a check and a call (ours and outbox
	// designs only).
	arrivals []pt.Arrival
	history  map[string][]sample
	windows  []window
	// warehouse is what the warehouse sink's store holds at the end (nil:
	// the sink was off).
	warehouse *warehouseObs
}

// Ops returns the operation ids of a cancellation of subject at revision:
// the refund's and the notification's (builtin.Orders' keys, in the
// "orders" source's scope).
func Ops(subject string, revision int) (refund, notify string) {
	rev := strconv.Itoa(revision)
	return projection.ScopedOperationID("orders", projection.OperationID(subject, "refund_due_to_cancellation", rev)),
		projection.ScopedOperationID("orders", projection.OperationID(subject, "notify_cancellation", rev))
}

// check compares a run's final state with the reference model.
//
// The model: per subject, the events accepted (a 2xx) and not left DEAD
// for an operator; the highest revision R among them must be the
// projection's version, with the state of the event(s) at R that were
// applied (or found it already applied). A revision sent with two
// different states is a contradiction: one of them may apply, the others
// must be QUARANTINED (version_conflict), and nothing else is quarantined.
// Effects: an operation id exists for each cancelled (subject, revision);
// every event that applied a cancellation that no newer revision took
// back needs its refund and its notification effective exactly once (an
// intent an operator must settle, QUARANTINED or FAILED, may have 0 or
// 1); one that a newer revision took back is I7's (checkTruth); no key is
// ever effective twice, and no key is effective without an applied
// cancellation (or, for a compensation, without the cancellation whose
// effect it compensates).
func check(s Schedule, accepted []bool, o observed, settled bool) []Violation {
	var out []Violation
	add := func(inv, format string, a ...any) { out = append(out, Violation{inv, fmt.Sprintf(format, a...)}) }
	if !settled {
		add(I1, "the run did not settle: work still unfinished after the queues were drained, time advanced and the reconciler run")
	}

	// The accepted facts, one per event id.
	ids, byID := acceptedFacts(s, accepted)

	// I1 and the audit (I5, I6), event by event.
	for _, id := range ids {
		ev, ok := o.events[id]
		if !ok {
			add(I1, "event %s was answered 2xx but has no ledger row", id)
			continue
		}
		switch ev.Status {
		case ledger.StatusProcessed:
		case ledger.StatusDead:
			// Visible, but the schedules hold no permanent failure: every
			// DEAD event was replayed by the operator while settling.
			add(I1, "event %s is still DEAD (%s) after the operator's replays", id, ev.ErrorCode)
		case ledger.StatusQuarantined:
			if ev.ErrorCode == "" || len(ev.Audit) == 0 || ev.Audit[len(ev.Audit)-1].Reason == "" {
				add(I1, "event %s is %s without a code or an audited reason for the operator", id, ev.Status)
			}
		default:
			add(I1, "event %s ended %s: neither processed nor visibly stuck", id, ev.Status)
		}
		checkAudit(id, ev, add)
		for _, a := range ev.Audit {
			// A row an intake left without its payload waits for the
			// provider's retry, which in every schedule comes: it never
			// spends its attempts on the missing payload (DEAD) nor
			// outlives the retry horizon.
			if (a.To == ledger.StatusDead || a.To == ledger.StatusQuarantined) && strings.HasPrefix(a.Reason, "payload_") {
				add(I1, "event %s went %s for its missing payload (%s) although the provider's retry stores it", id, a.To, a.Reason)
			}
		}
	}

	// I10: a rule that reuses an operation id converges or is told; an
	// event told for wrote nothing, so the model leaves it out.
	if told := checkReuse(s, ids, byID, o, settled, add); len(told) > 0 {
		ids = slices.DeleteFunc(ids, func(id string) bool { return told[id] })
	}

	// I3: the final state of each subject against the model.
	truth := StripeTruth(s.Events)
	subjects := map[string][]Event{}
	for _, id := range ids {
		e := byID[id]
		subjects[e.Subject] = append(subjects[e.Subject], e)
	}
	names := make([]string, 0, len(subjects))
	for n := range subjects {
		names = append(names, n)
	}
	sort.Strings(names)
	models := map[string]subjectModel{}
	for _, subj := range names {
		if subjects[subj][0].Stripe() {
			models[subj] = checkSubscription(subj, subjects[subj], truth, o, add)
			continue
		}
		models[subj] = checkSubject(subj, subjects[subj], o, add)
	}

	// I2: effects. An order's operation ids come from its cancellations, a
	// subscription's from each of its events (one grant or revoke per
	// version); an operation is due exactly once when an event applied it
	// and no newer revision took its reason back.
	m := newModel(ids, byID, truth, o)
	opOf, appliedCancel, intentOf := m.opOf, m.applied, m.intentOf
	keys := make([]string, 0, len(o.effects))
	for k := range o.effects {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		n := o.effects[k]
		c, known := opOf[k]
		if s.ReuseIDs && isReuseOp(k, byID) {
			if n > 1 {
				add(I2, "operation %s (%s) was effective %d times downstream", short(k), SyncKind, n)
			}
			continue // the state sync is I10's (checkReuse)
		}
		switch {
		case n > 1:
			add(I2, "operation %s (%s r%d) was effective %d times downstream", short(k), c.subject, c.revision, n)
		case n == 1 && !known:
			add(I2, "operation %s was effective with no cancellation or subscription event behind it", short(k))
		}
		switch {
		case c.compensates != "":
			// A compensation: whether it was due is I7's (checkTruth).
		case n >= 1 && known && c.stripe && appliedCancel[k] == "":
			// The model: an event that did not change the subscription
			// (noop, stale, quarantined) emits no intent.
			add(I2, "operation %s (%s v%d) was effective but no event applied that subscription transition (a suppressed intent took effect)", short(k), c.subject, c.revision)
		case n >= 1 && known && appliedCancel[k] == "":
			// The effect may be right; the ledger just does not say which
			// event caused it.
			add(I6, "operation %s (%s r%d) was effective but no event is recorded as having applied that cancellation", short(k), c.subject, c.revision)
		}
		if o.outbox && n >= 1 {
			if _, ok := intentOf[k]; !ok {
				add(I2, "operation %s was effective without an outbox intent", short(k))
			}
		}
	}
	// movedOn: the model's reason for an intent to end OBSOLETE or
	// SUPERSEDED without a call: an event of a newer version
	// of its subject, with another state, was applied.
	movedOn := func(c opInfo) bool {
		for _, id := range ids {
			e := byID[id]
			ev, ok := o.events[id]
			if e.Subject != c.subject || !ok || ev.Result == nil || ev.Result.Outcome != ledger.OutcomeApplied {
				continue
			}
			v, state := int64(e.Revision), e.Status
			if e.Stripe() {
				v, state, _, _, _ = stripeFact(e, ev, truth, o)
			}
			if v > c.revision && state != c.state {
				return true
			}
		}
		return false
	}
	ops := make([]string, 0, len(appliedCancel))
	for op := range appliedCancel {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		c := opOf[op]
		n := o.effects[op]
		if n == 1 {
			continue
		}
		if _, taken := m.contradiction(op); taken {
			continue // a newer revision took its reason back: I7 (checkTruth)
		}
		if in, ok := intentOf[op]; ok && (in.Status == ledger.IntentStatusQuarantined || in.Status == ledger.IntentStatusFailed) && n <= 1 {
			continue // an operator owns it, visibly
		}
		if in, ok := intentOf[op]; ok && n == 0 && (in.Status == ledger.IntentStatusObsolete || in.Status == ledger.IntentStatusSuperseded) {
			if !movedOn(c) {
				add(I2, "intent %s (%s v%d) ended %s though no newer state of %s was applied: a due effect was suppressed", short(op), c.subject, c.revision, in.Status, c.subject)
			}
			continue
		}
		if n == 0 && c.stripe {
			add(I2, "event %s applied the subscription transition of %s v%d but operation %s was never effective", appliedCancel[op], c.subject, c.revision, short(op))
		} else if n == 0 {
			add(I2, "event %s applied the cancellation of %s r%d but operation %s was never effective", appliedCancel[op], c.subject, c.revision, short(op))
		}
	}
	for _, in := range o.intents {
		if !in.Status.Terminal() {
			add(I1, "intent %s (%s) ended %s", short(in.OperationID), in.Kind, in.Status)
		}
		if in.Kind == warehouse.Kind {
			continue // a change record, not a downstream effect: I9 (checkWarehouse)
		}
		if in.Kind == SyncKind && s.ReuseIDs {
			continue // the reusing rule's state sync: I10 (checkReuse)
		}
		if in.Status == ledger.IntentStatusSucceeded && o.effects[in.OperationID] != 1 {
			add(I2, "intent %s is SUCCEEDED but was effective %d times", short(in.OperationID), o.effects[in.OperationID])
		}
		cause := in.Causation
		if opOf[in.OperationID].compensates != "" {
			continue // whether it should exist is I7's (checkTruth)
		}
		if appliedCancel[in.OperationID] == "" {
			add(I2, "intent %s %s (caused by %s) exists though no event applied its cancellation or subscription transition", short(in.OperationID), in.Kind, cause)
		}
	}
	checkTruth(m, o, settled, add)
	if o.warehouse != nil {
		checkWarehouse(models, o, settled, add)
	}
	return out
}

// checkAudit: the trail starts with the accept, every transition starts
// where the previous one ended, and it ends in the event's status. A
// completion that does not start from PROCESSING was made by a worker
// that no longer held the lease (I5).
func checkAudit(id string, ev ledger.Event, add func(string, string, ...any)) {
	if len(ev.Audit) == 0 || ev.Audit[0].Action != "accept" {
		add(I6, "event %s: audit does not start with its accept: %v", id, actions(ev.Audit))
		return
	}
	holder := "" // the actor of the latest move into PROCESSING: the lease holder
	for k := 1; k < len(ev.Audit); k++ {
		a, prev := ev.Audit[k], ev.Audit[k-1]
		if a.From == ledger.StatusProcessing && a.To != ledger.StatusProcessing && prev.To == ledger.StatusProcessing && holder != "" && a.Actor != holder {
			add(I5, "event %s: %s by %s while %s held the lease: %v", id, a.Action, a.Actor, holder, actions(ev.Audit))
			return
		}
		if a.To == ledger.StatusProcessing {
			holder = a.Actor
		}
		if (a.Action == "complete" || a.Action == "quarantine") && (prev.To == ledger.StatusProcessed || prev.To == ledger.StatusQuarantined) {
			add(I5, "event %s: %s by %s after it was already %s (two workers processed it): %v", id, a.Action, a.Actor, prev.To, actions(ev.Audit))
			return
		}
		if a.From == "" || a.From == prev.To {
			continue
		}
		if a.From == ledger.StatusProcessing {
			add(I5, "event %s: %s by %s from PROCESSING after the event had moved to %s (a fenced-out worker completed): %v", id, a.Action, a.Actor, prev.To, actions(ev.Audit))
		} else {
			add(I6, "event %s: transition %s from %s does not follow %s: %v", id, a.Action, a.From, prev.To, actions(ev.Audit))
		}
		return
	}
	if last := ev.Audit[len(ev.Audit)-1]; last.To != ev.Status {
		add(I6, "event %s is %s but its audit ends in %s: %v", id, ev.Status, last.To, actions(ev.Audit))
	}
}

func checkSubject(subj string, evs []Event, o observed, add func(string, string, ...any)) subjectModel {
	statesAt := map[int]map[string]bool{}
	for _, e := range evs {
		if statesAt[e.Revision] == nil {
			statesAt[e.Revision] = map[string]bool{}
		}
		statesAt[e.Revision][e.Status] = true
	}
	wonAt := map[int]map[string]bool{}
	for _, e := range evs {
		ev := o.events[e.ID]
		if ev.Status != ledger.StatusProcessed || ev.Result == nil {
			continue
		}
		switch ev.Result.Outcome {
		case ledger.OutcomeApplied, ledger.OutcomeNoop:
			if wonAt[e.Revision] == nil {
				wonAt[e.Revision] = map[string]bool{}
			}
			wonAt[e.Revision][e.Status] = true
		case ledger.OutcomeStale, ledger.OutcomeIgnored:
		default:
			// The ledger does not say what became of the fact; if it was
			// lost, the final state or the effects show it too.
			add(I6, "event %s (%s r%d %s) is PROCESSED as %q: the ledger does not record whether its fact was applied", e.ID, subj, e.Revision, e.Status, ev.Result.Outcome)
		}
	}
	for r, won := range wonAt {
		if len(won) > 1 {
			add(I3, "%s: contradictory states %v were both applied at revision %d (one should be quarantined)", subj, keysOf(won), r)
		}
	}
	m := newSubjectModel(SourceOrders)
	for _, e := range evs {
		ev := o.events[e.ID]
		if ev.Status != ledger.StatusProcessed || ev.Result == nil {
			continue
		}
		switch ev.Result.Outcome {
		case ledger.OutcomeApplied:
			m.reach(int64(e.Revision), e.Status, e.ID, true)
		case ledger.OutcomeNoop:
			m.reach(int64(e.Revision), e.Status, e.ID, false)
		}
	}
	top := -1
	for _, e := range evs {
		ev := o.events[e.ID]
		switch ev.Status {
		case ledger.StatusQuarantined:
			if ev.ErrorCode != "version_conflict" || len(statesAt[e.Revision]) < 2 {
				add(I3, "event %s (%s r%d %s) was quarantined (%s) without a contradiction at its revision", e.ID, subj, e.Revision, e.Status, ev.ErrorCode)
			}
		case ledger.StatusDead:
			continue // waits for an operator; not part of the expected state
		}
		if ev.Status == ledger.StatusProcessed || ev.Status == ledger.StatusQuarantined {
			top = max(top, e.Revision)
		}
	}
	if top < 0 {
		return m
	}
	won := map[string]bool{}
	for _, e := range evs {
		ev := o.events[e.ID]
		if e.Revision == top && ev.Status == ledger.StatusProcessed && ev.Result != nil &&
			(ev.Result.Outcome == ledger.OutcomeApplied || ev.Result.Outcome == ledger.OutcomeNoop) {
			won[e.Status] = true
		}
	}
	if len(won) == 1 {
		m.final, m.state, m.ok = int64(top), keysOf(won)[0], true
	}
	p, ok := o.projections[subj]
	switch {
	case !ok:
		add(I3, "%s: no projection, want revision %d", subj, top)
		return m
	case p.Version != int64(top):
		add(I3, "%s: projection at revision %d (%v), want the highest accepted revision %d", subj, p.Version, p.State["status"], top)
		return m
	case len(won) == 0:
		add(I3, "%s: no event at the highest revision %d was applied", subj, top)
	case len(won) > 1:
		// reported above
	case !won[fmt.Sprint(p.State["status"])]:
		add(I3, "%s: projection says %v at revision %d, the applied event said %v", subj, p.State["status"], top, keysOf(won))
	}
	return m
}

func actions(audit []ledger.AuditEntry) string {
	parts := make([]string, len(audit))
	for i, a := range audit {
		parts[i] = a.Action + "(" + a.Actor + ")"
	}
	return strings.Join(parts, " ")
}

func keysOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func short(op string) string {
	if len(op) > 12 {
		return op[:12]
	}
	return op
}
