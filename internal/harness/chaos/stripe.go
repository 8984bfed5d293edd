package chaos

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// The model of the Stripe subscription projection
// (builtin.StripeSubscriptions), written from its documented rules,
// not from its code:
//
//   - version = created×4 + rank, rank created 1 < updated 2 < deleted 3,
//     and a deletion adds builtin.DeletedVersionBase (it is final);
//   - entitled = status active, trialing or past_due, and not deleted;
//     a transition emits entitlement.grant or entitlement.revoke keyed by
//     OperationID("stripe_subscription", subscription, kind, version);
//   - a deletion is terminal: once applied nothing changes the
//     subscription again, whatever its version;
//   - otherwise a newer version wins; the same version with another state
//     is quarantined (version_conflict), with the same state a noop; a
//     newer version with the same state only advances the version (noop,
//     no intent).
//
// Thin events (builtin.StripeFetched's documented rule): a fact whose
// ledger row holds a thin event (a thin event without a twin, or a thin
// twin that arrived before its snapshot event) is projected from what
// Stripe answers when the processor fetches: Stripe's truth (StripeTruth,
// which is also what the fake Stripe API serves), at version
// observed×4 + 2, where observed is Stripe's clock at the fetch; a
// subscription that Stripe says is canceled is a deletion
// (DeletedVersionBase + observed×4 + 3, terminal). Every Stripe event of a
// schedule is created before the run starts (StripeEpoch), so a fetched
// version is above every snapshot version of its tier, and a version at
// or above pipelinetest.Start×4 is a fetch's.

var stripeRank = map[string]int64{"created": 1, "updated": 2, "deleted": 3}

var stripeEntitled = map[string]bool{"active": true, "trialing": true, "past_due": true}

// StripeVersion is the projection version of a Stripe event.
func StripeVersion(e Event) int64 {
	v := stripeCreated(e)*4 + stripeRank[e.Type]
	if e.Type == "deleted" {
		v += builtin.DeletedVersionBase
	}
	return v
}

// StripeOp is the operation id of the intent a Stripe event emits when it
// applies.
func StripeOp(e Event) string {
	kind := "entitlement.revoke"
	if stripeEntitled[e.Status] && e.Type != "deleted" {
		kind = "entitlement.grant"
	}
	return projection.ScopedOperationID("stripe", projection.OperationID(builtin.StripeSubscriptionProjection, e.Subject, kind, strconv.FormatInt(StripeVersion(e), 10)))
}

// StripeTruth is each subscription's status in Stripe once all its events
// (delivered or not) have happened: canceled if any event deleted it (a
// deletion is final in Stripe, whatever an update stamped later by a
// skewed clock says), else the status of its newest event by version (of
// two contradicting events at that version, the first in the schedule:
// Stripe holds one state).
func StripeTruth(events []Event) map[string]string {
	out := map[string]string{}
	top := map[string]int64{}
	for _, e := range events {
		if !e.Stripe() {
			continue
		}
		v := StripeVersion(e)
		if t, seen := top[e.Subject]; !seen || v > t {
			top[e.Subject], out[e.Subject] = v, e.Status
		}
	}
	return out
}

// truthState is the state a fetch of a subscription in status projects.
func truthState(status string) (state string, deleted bool) {
	if status == "canceled" {
		return "canceled+deleted", true
	}
	return status, false
}

// fetchedVersion reports whether a recorded version is a fetch's (see the
// model above).
func fetchedVersion(v int64) bool {
	if v >= builtin.DeletedVersionBase {
		v -= builtin.DeletedVersionBase
	}
	return v >= pt.Start.Unix()*4
}

// stripeFact is what the model says one Stripe fact wrote: its version
// and state, from its own event, or from Stripe's truth when its row held
// a thin event. A fetched version is observed×4 + rank for one of the
// times the fake Stripe API answered a retrieval of the subscription (bad
// is set when the recorded one is none of those). The recorded version
// only picks which fetch: minidyn evaluates numbers in update expressions
// as float64, so a deletion-tier version (above 2^53) comes back rounded
// from the stored result; the model's version is exact.
func stripeFact(e Event, ev ledger.Event, truth map[string]string, o observed) (v int64, state string, deleted, fetched bool, bad string) {
	recorded := int64(-1)
	if ev.Result != nil && ev.Status == ledger.StatusProcessed {
		recorded = ev.Result.Version
	}
	if !e.Thin && (recorded < 0 || !fetchedVersion(recorded)) {
		return StripeVersion(e), stripeState(e), e.Type == "deleted", false, ""
	}
	state, deleted = truthState(truth[e.Subject])
	if recorded < 0 {
		return -1, state, deleted, true, fmt.Sprintf("the thin event %s ended %s (%s): a fetched fact was not processed", e.ID, ev.Status, ev.ErrorCode)
	}
	var candidates []int64
	for _, at := range o.fetches[e.Subject] {
		c := at*4 + 2
		if deleted {
			c = builtin.DeletedVersionBase + at*4 + 3
		}
		if c == recorded || (recorded > 1<<53 && float64(c) == float64(recorded)) {
			candidates = append(candidates, c)
		}
	}
	if len(candidates) == 0 {
		return recorded, state, deleted, true, fmt.Sprintf("event %s was projected from a fetch at version %d, which is no fetch of %s (Stripe's clock at each answer ×4 + the rank of %s; answers at %v)", e.ID, recorded, e.Subject, state, o.fetches[e.Subject])
	}
	v = candidates[0]
	for _, c := range candidates {
		// Rounded: several fetches of one 64 s window give one recorded
		// value; the one whose intent exists is the one that applied.
		for _, in := range o.intents {
			if in.OperationID == stripeOpOf(e.Subject, c, state, deleted) {
				v = c
			}
		}
	}
	return v, state, deleted, true, ""
}

// stripeOpOf is the operation id the fact's intent carries.
func stripeOpOf(subject string, v int64, state string, deleted bool) string {
	status, _, _ := strings.Cut(state, "+")
	kind := "entitlement.revoke"
	if stripeEntitled[status] && !deleted {
		kind = "entitlement.grant"
	}
	return projection.ScopedOperationID("stripe", projection.OperationID(builtin.StripeSubscriptionProjection, subject, kind, strconv.FormatInt(v, 10)))
}

// stripeState is what a subscription event says: the state it writes.
func stripeState(e Event) string {
	if e.Type == "deleted" {
		return e.Status + "+deleted"
	}
	return e.Status
}

// checkSubscription checks one subscription's final state and its events'
// outcomes against the model. Delivery and processing order are chosen by
// the schedule's chaos, so the model is checked as a serialization: the
// applied events, in version order, are the projection's history (the
// version guard makes commit order version order), and every other
// outcome must be what the model gives at the point that history puts it.
//
//   - At most one deletion applies; if one (D) did, the final projection
//     is D's state at D's version, terminal, and every event of a newer
//     version is stale (a deletion applied first wins over any later
//     event; an event of a newer version applied before D would have made
//     D stale).
//   - Otherwise the final projection is not terminal and holds the
//     highest version among the processed or quarantined events, with the
//     state of the event applied (or noop) there; a deletion of the newest
//     version that did not apply is a lost deletion.
//   - Each applied event changes the state of the one applied before it
//     (else it emits an intent for a change that changed nothing).
//   - A noop event at version v has the state of the applied event of the
//     highest version ≤ v, which is not a deletion (else it was stale).
//   - A stale event at v: a deletion applied, or an event of a newer
//     version was applied or advanced the version.
//   - Quarantine only for version_conflict at a version sent with two
//     states; at most one state wins at a version.
type fact struct {
	e       Event
	v       int64
	state   string // what it wrote (stripeFact)
	deleted bool
	outcome ledger.Outcome // "" unless PROCESSED with a result
	status  ledger.Status
}

func checkSubscription(subj string, evs []Event, truth map[string]string, o observed, add func(string, string, ...any)) subjectModel {
	m := newSubjectModel(SourceStripe)
	statesAt := map[int64]map[string]bool{}
	var facts []fact
	for _, e := range evs {
		ev := o.events[e.ID]
		if ev.Status == ledger.StatusDead {
			continue // waits for an operator; not part of the expected state
		}
		v, state, deleted, _, bad := stripeFact(e, ev, truth, o)
		if bad != "" {
			add(I3, "%s: %s", subj, bad)
			continue
		}
		if statesAt[v] == nil {
			statesAt[v] = map[string]bool{}
		}
		statesAt[v][state] = true
		f := fact{e: e, v: v, state: state, deleted: deleted, status: ev.Status}
		if ev.Status == ledger.StatusProcessed && ev.Result != nil {
			f.outcome = ev.Result.Outcome
		}
		facts = append(facts, f)
	}
	sort.SliceStable(facts, func(i, j int) bool { return facts[i].v < facts[j].v })

	var applied []fact
	wonAt := map[int64]map[string]bool{}
	top := int64(-1)
	for _, f := range facts {
		switch f.status {
		case ledger.StatusQuarantined:
			ev := o.events[f.e.ID]
			if ev.ErrorCode != "version_conflict" || len(statesAt[f.v]) < 2 {
				add(I3, "event %s (%s %s v%d %s) was quarantined (%s) without a contradiction at its version", f.e.ID, subj, f.e.Type, f.v, f.e.Status, ev.ErrorCode)
			}
			top = max(top, f.v)
		case ledger.StatusProcessed:
			top = max(top, f.v)
		}
		switch f.outcome {
		case ledger.OutcomeApplied, ledger.OutcomeNoop:
			if wonAt[f.v] == nil {
				wonAt[f.v] = map[string]bool{}
			}
			wonAt[f.v][f.state] = true
			m.reach(f.v, f.state, f.e.ID, f.outcome == ledger.OutcomeApplied)
			if f.outcome == ledger.OutcomeApplied {
				applied = append(applied, f)
			}
		case ledger.OutcomeStale, "":
		default:
			add(I6, "event %s (%s v%d %s) is PROCESSED as %q: the ledger does not record whether its fact was applied", f.e.ID, subj, f.v, f.e.Status, f.outcome)
		}
	}
	for v, won := range wonAt {
		if len(won) > 1 {
			add(I3, "%s: contradictory states %v were both applied at version %d (one should be quarantined)", subj, keysOf(won), v)
		}
	}

	// The history: applied events in version order.
	var deletion *fact
	for i, f := range applied {
		if i > 0 {
			prev := applied[i-1]
			switch {
			case prev.v == f.v && prev.state == f.state:
				add(I2, "%s: events %s and %s both applied version %d (%s): one intent due, two transitions recorded", subj, prev.e.ID, f.e.ID, f.v, f.e.Status)
			case prev.state == f.state:
				add(I2, "%s: event %s applied v%d (%s) though the state was already that at v%d (%s): a transition that changed nothing emitted an intent", subj, f.e.ID, f.v, f.state, prev.v, prev.e.ID)
			}
		}
		if f.deleted {
			if deletion != nil {
				add(I3, "%s: two deletions applied (%s v%d, %s v%d): a deleted subscription changed again", subj, deletion.e.ID, deletion.v, f.e.ID, f.v)
				continue
			}
			deletion = &applied[i]
		}
	}
	for _, f := range facts {
		switch f.outcome {
		case ledger.OutcomeNoop:
			var at *fact
			for i := range applied {
				if applied[i].v <= f.v {
					at = &applied[i]
				}
			}
			switch {
			case at == nil:
				add(I3, "event %s (%s v%d %s) is noop but no event at or below its version was applied", f.e.ID, subj, f.v, f.e.Status)
			case at.deleted:
				add(I3, "event %s (%s v%d %s) is noop over the deletion %s: it should be stale", f.e.ID, subj, f.v, f.e.Status, at.e.ID)
			case at.state != f.state:
				add(I3, "event %s (%s v%d %s) is noop but the state it found (from %s v%d) was %s: its change was lost", f.e.ID, subj, f.v, f.state, at.e.ID, at.v, at.state)
			}
		case ledger.OutcomeStale:
			newer := deletion != nil
			for _, g := range facts {
				if g.v > f.v && (g.outcome == ledger.OutcomeApplied || g.outcome == ledger.OutcomeNoop) {
					newer = true
				}
			}
			if !newer {
				add(I3, "event %s (%s %s v%d %s) is stale but nothing newer was applied and no deletion", f.e.ID, subj, f.e.Type, f.v, f.e.Status)
			}
		}
	}
	if top < 0 {
		return m
	}
	if deletion != nil {
		m.final, m.state, m.ok = deletion.v, deletion.state, true
	} else if won := wonAt[top]; len(won) == 1 {
		m.final, m.state, m.ok = top, keysOf(won)[0], true
	}
	p, ok := o.projections[subj]
	if !ok {
		add(I3, "%s: no projection, want version %d", subj, top)
		return m
	}
	got := fmt.Sprint(p.State["status"])
	if p.Terminal || p.State["deleted"] == true {
		got += "+deleted"
	}
	if deletion != nil {
		for _, f := range facts {
			if f.v > deletion.v && f.outcome != ledger.OutcomeStale {
				add(I3, "%s: event %s (%s v%d %s) is %s %s though the deletion %s (v%d) was applied: either the older deletion overwrote it or the deleted (terminal) subscription changed after it", subj, f.e.ID, f.e.Type, f.v, f.e.Status, f.status, f.outcome, deletion.e.ID, deletion.v)
			}
		}
		if p.Version != deletion.v || !p.Terminal || got != deletion.state {
			add(I3, "%s: projection at version %d (%s, terminal %v), want the applied deletion %s at version %d (%s, terminal)", subj, p.Version, got, p.Terminal, deletion.e.ID, deletion.v, deletion.state)
		}
		return m
	}
	won := map[string]bool{}
	for _, f := range facts {
		if f.v == top && (f.outcome == ledger.OutcomeApplied || f.outcome == ledger.OutcomeNoop) {
			won[f.state] = true
		}
	}
	switch {
	case p.Terminal:
		add(I3, "%s: projection is terminal at version %d (%s) though no deletion was applied", subj, p.Version, got)
	case p.Version != top:
		add(I3, "%s: projection at version %d (%s), want the highest accepted version %d", subj, p.Version, got, top)
	case len(won) == 0:
		add(I3, "%s: no event at the highest version %d was applied (a lost %s)", subj, top, typesAt(facts, top))
	case len(won) > 1:
		// reported above
	case !won[got]:
		add(I3, "%s: projection says %s at version %d, the applied event said %v", subj, got, top, keysOf(won))
	}
	return m
}

// typesAt names the event types sent at version v.
func typesAt(facts []fact, v int64) string {
	for _, f := range facts {
		if f.v == v {
			return f.e.Type
		}
	}
	return "event"
}
