package chaos

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/effectively-once/webhooks/pkg/ledger"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// The model of the Stripe subscription projection
// (projection.StripeSubscriptions), written from its documented rules,
// not from its code:
//
//   - version = created×4 + rank, rank created 1 < updated 2 < deleted 3,
//     and a deletion adds projection.DeletedVersionBase (it is final);
//   - entitled = status active, trialing or past_due, and not deleted;
//     a transition emits entitlement.grant or entitlement.revoke keyed by
//     OperationID("stripe_subscription", subscription, kind, version);
//   - a deletion is terminal: once applied nothing changes the
//     subscription again, whatever its version;
//   - otherwise a newer version wins; the same version with another state
//     is quarantined (version_conflict), with the same state a noop; a
//     newer version with the same state only advances the version (noop,
//     no intent).

var stripeRank = map[string]int64{"created": 1, "updated": 2, "deleted": 3}

var stripeEntitled = map[string]bool{"active": true, "trialing": true, "past_due": true}

// StripeVersion is the projection version of a Stripe event.
func StripeVersion(e Event) int64 {
	v := stripeCreated(e)*4 + stripeRank[e.Type]
	if e.Type == "deleted" {
		v += projection.DeletedVersionBase
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
	return projection.OperationID(projection.StripeSubscriptionProjection, e.Subject, kind, strconv.FormatInt(StripeVersion(e), 10))
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
	outcome ledger.Outcome // "" unless PROCESSED with a result
	status  ledger.Status
}

func checkSubscription(subj string, evs []Event, o observed, add func(string, string, ...any)) {
	statesAt := map[int64]map[string]bool{}
	var facts []fact
	for _, e := range evs {
		v := StripeVersion(e)
		if statesAt[v] == nil {
			statesAt[v] = map[string]bool{}
		}
		statesAt[v][stripeState(e)] = true
		ev := o.events[e.ID]
		if ev.Status == ledger.StatusDead {
			continue // waits for an operator; not part of the expected state
		}
		f := fact{e: e, v: v, status: ev.Status}
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
			wonAt[f.v][stripeState(f.e)] = true
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
			case prev.v == f.v && stripeState(prev.e) == stripeState(f.e):
				add(I2, "%s: events %s and %s both applied version %d (%s): one intent due, two transitions recorded", subj, prev.e.ID, f.e.ID, f.v, f.e.Status)
			case stripeState(prev.e) == stripeState(f.e):
				add(I2, "%s: event %s applied v%d (%s) though the state was already that at v%d (%s): a transition that changed nothing emitted an intent", subj, f.e.ID, f.v, stripeState(f.e), prev.v, prev.e.ID)
			}
		}
		if f.e.Type == "deleted" {
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
			case at.e.Type == "deleted":
				add(I3, "event %s (%s v%d %s) is noop over the deletion %s: it should be stale", f.e.ID, subj, f.v, f.e.Status, at.e.ID)
			case stripeState(at.e) != stripeState(f.e):
				add(I3, "event %s (%s v%d %s) is noop but the state it found (from %s v%d) was %s: its change was lost", f.e.ID, subj, f.v, stripeState(f.e), at.e.ID, at.v, stripeState(at.e))
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
		return
	}
	p, ok := o.projections[subj]
	if !ok {
		add(I3, "%s: no projection, want version %d", subj, top)
		return
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
		if p.Version != deletion.v || !p.Terminal || got != stripeState(deletion.e) {
			add(I3, "%s: projection at version %d (%s, terminal %v), want the applied deletion %s at version %d (%s, terminal)", subj, p.Version, got, p.Terminal, deletion.e.ID, deletion.v, stripeState(deletion.e))
		}
		return
	}
	won := map[string]bool{}
	for _, f := range facts {
		if f.v == top && (f.outcome == ledger.OutcomeApplied || f.outcome == ledger.OutcomeNoop) {
			won[stripeState(f.e)] = true
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
