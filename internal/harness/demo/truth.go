package demo

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/harness/downstream"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// The downstream against the truth (I7; see docs/architecture.md): for
// every subject the run's effects concern, the canonical state and version
// the ledger's projection holds, next to what the fake downstream says it
// applied for that subject (GET /_dev/downstream, "subjects": its own
// per-subject view, per kind family). Counting calls per key is not enough:
// a refund applied exactly once for an order the operator confirmed
// afterwards is still wrong, and so is a revoked subscription entitled
// again by a retried grant.

// SubjectTruth is one subject the run's effects concern.
type SubjectTruth struct {
	Projection, Subject string
	State               string // the canonical state, for people ("canceled, deleted, not entitled")
	Version             int64
	Downstream          []FamilyView // one per kind family of its intents
	Notes               []string     // what is right or wrong about it, for people
	OK                  bool
}

// FamilyView is the downstream's view of one subject for one kind family.
type FamilyView struct {
	Family  string
	Subject string        // as the downstream knows it (an account for entitlements)
	Policy  ledger.Policy // of the family's intents
	// Want is, for a latest family, the version of the newest intent that
	// carries the canonical state, and WantKind its kind: where the
	// downstream must end.
	Want     int64
	WantKind string
	// Last and LastKind are the downstream's last apply ("" when nothing
	// was applied), Applied how many applies it recorded.
	Last, LastKind string
	Applied        int
	Regressions    int
	Refused        int
}

// Overtaken is an intent the truth overtook: SUPERSEDED or OBSOLETE (no
// call was due) or CONTRADICTED (performed, then a newer revision removed
// its reason: an attention item for the recovery owner).
type Overtaken struct {
	OperationID, Kind   string
	Projection, Subject string
	Status              ledger.IntentStatus
	Version             int64 // the intent's
	Truth               int64 // the projection's version now
	ContradictedBy      int64 // CONTRADICTED: the revision that removed its reason
	Reason              string
	Effective           int
}

// Compensation is a performed effect a newer revision contradicted, and
// the intent its projection declared to compensate it.
type Compensation struct {
	Of, OfKind string
	By, ByKind string // "" when the compensation intent is not among the run's
	Status     ledger.IntentStatus
	Effective  int
}

// reasons are the business rules of the demo's model (builtin.Orders): the
// state an action of that kind is justified by. They come from the story,
// not from the intents' stored conditions; an action of another kind is
// judged by the condition its intent carries.
var reasons = map[string]map[string]string{
	"refund":              {"status": "cancelled"},
	"notify_cancellation": {"status": "cancelled"},
}

// justified reports whether state still justifies a while_current intent
// of kind, and if not, why.
func justified(in ledger.IntentState, state map[string]any) (bool, string) {
	cond := reasons[in.Kind]
	if cond == nil {
		cond = in.Condition
	}
	for _, k := range slices.Sorted(maps.Keys(cond)) {
		got := ""
		if v, ok := state[k]; ok && v != nil {
			got = fmt.Sprint(v)
		}
		if got != cond[k] {
			return false, fmt.Sprintf("%s is %q, a %s needs %q", k, got, in.Kind, cond[k])
		}
	}
	return true, ""
}

// effectiveByKey is how many times the downstream really applied each
// idempotency key, every kind together.
func effectiveByKey(down devstack.DownstreamState) map[string]int {
	out := map[string]int{}
	for _, e := range down.Effects {
		for k, n := range e.Effective {
			out[k] += n
		}
	}
	return out
}

// checkTruth compares, per subject, the canonical projection with the
// downstream's view, and lists the intents the truth overtook and the
// compensations. It fails the run (I7) when a latest
// subject's downstream is not at the version of the newest intent carrying
// the canonical state, when any view went back to an older version, when a
// SUPERSEDED or OBSOLETE intent was applied or an OBSOLETE one is still
// justified, and when an action was applied although the final state no
// longer justifies it, with no CONTRADICTED record or compensation.
func (r *Report) checkTruth(intents []ledger.IntentState, projections []ledger.Projection, down devstack.DownstreamState) {
	effective := effectiveByKey(down)
	byOp := map[string]ledger.IntentState{}
	type key struct{ projection, subject string }
	groups := map[key][]ledger.IntentState{}
	for _, in := range intents {
		byOp[in.OperationID] = in
		if in.Projection == "" {
			continue // written before intents knew their truth
		}
		k := key{in.Projection, in.ProjectionSubject}
		groups[k] = append(groups[k], in)
	}
	pj := map[key]ledger.Projection{}
	for _, p := range projections {
		pj[key{p.Name, p.Subject}] = p
	}
	keys := make([]key, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].projection != keys[j].projection {
			return keys[i].projection < keys[j].projection
		}
		return keys[i].subject < keys[j].subject
	})

	r.Truth, r.Overtaken, r.Compensations = nil, nil, nil
	for _, k := range keys {
		group := groups[k]
		st := SubjectTruth{Projection: k.projection, Subject: k.subject, OK: true}
		fail := func(format string, args ...any) {
			st.OK = false
			st.Notes = append(st.Notes, "WRONG: "+fmt.Sprintf(format, args...))
			r.violate("I7", "%s %s: %s", subjectLabel(k.projection), k.subject, fmt.Sprintf(format, args...))
		}
		p, ok := pj[k]
		if !ok {
			st.State = "- (no projection)"
			fail("its intents have no projection to compare the downstream with")
			r.Truth = append(r.Truth, st)
			continue
		}
		st.State, st.Version = describeState(p.State), p.Version

		// One view per (kind family, downstream subject), in the order of
		// the families' first intents by version.
		sort.Slice(group, func(i, j int) bool {
			a, b := group[i], group[j]
			if a.Version != b.Version {
				return a.Version < b.Version
			}
			if a.Kind != b.Kind {
				return a.Kind < b.Kind
			}
			return a.OperationID < b.OperationID
		})
		// The downstream keys a subject by the scope that owns it.
		type fkey struct{ family, scope, subject string }
		var order []fkey
		fams := map[fkey][]ledger.IntentState{}
		for _, in := range group {
			fk := fkey{ledger.Family(in.Kind), in.Scope, in.Subject}
			if fams[fk] == nil {
				order = append(order, fk)
			}
			fams[fk] = append(fams[fk], in)
		}
		for _, fk := range order {
			ins := fams[fk]
			v := FamilyView{Family: fk.family, Subject: fk.subject, Policy: policyOf(ins[0])}
			if sv, ok := down.Subjects[fk.family][downstream.SubjectKey{Scope: fk.scope, Subject: fk.subject}.String()]; ok {
				v.Last, v.LastKind, v.Applied, v.Regressions, v.Refused = sv.Last, sv.LastKind, len(sv.History), sv.Regressions, len(sv.Refused)
			}
			if v.Regressions > 0 {
				fail("the downstream's %s view of %s went back to an older version %d time(s)", fk.family, fk.subject, v.Regressions)
			}
			if v.Policy == ledger.PolicyLatest {
				// Where the downstream must end: the newest intent that
				// carries the canonical state.
				var want *ledger.IntentState
				for i := range ins {
					if ins[i].Fingerprint == p.Fingerprint {
						want = &ins[i]
					}
				}
				switch {
				case want == nil:
					fail("no %s intent carries its canonical state (v%d)", fk.family, p.Version)
				default:
					v.Want, v.WantKind = want.Version, want.Kind
					if li, ok := p.Latest[fk.family]; ok && li.Version != want.Version {
						fail("the projection names %s v%d as its newest %s intent, the newest intent carrying its state is v%d", li.OperationID, li.Version, fk.family, want.Version)
					}
					if v.Last != strconv.FormatInt(want.Version, 10) {
						fail("the downstream's %s last applied %s, the truth's newest intent (%s) is v%d", fk.family, orNothing(v.Last), want.Kind, want.Version)
					}
				}
			}
			st.Downstream = append(st.Downstream, v)
		}

		for _, in := range group {
			n := effective[in.OperationID]
			if in.Policy == ledger.PolicyWhileCurrent {
				still, why := justified(in, p.State)
				switch {
				case in.Status == ledger.IntentStatusObsolete && still:
					fail("%s %s ended OBSOLETE, yet the canonical state v%d still justifies it", in.Kind, in.OperationID, p.Version)
				case n > 0 && !still && in.Status != ledger.IntentStatusContradicted && in.CompensatedBy == "":
					fail("%s %s (v%d) was applied, %s at v%d, and nothing records it (no CONTRADICTED attention item, no compensation)", in.Kind, in.OperationID, in.Version, why, p.Version)
				case n > 0 && !still && in.Status == ledger.IntentStatusContradicted:
					st.Notes = append(st.Notes, fmt.Sprintf("%s %s was applied at v%d and contradicted by v%d: an attention item (CONTRADICTED)", in.Kind, in.OperationID, in.Version, in.ContradictedBy))
				case n > 0 && !still:
					st.Notes = append(st.Notes, fmt.Sprintf("%s %s was applied at v%d and contradicted by v%d: compensated by %s", in.Kind, in.OperationID, in.Version, in.ContradictedBy, in.CompensatedBy))
				}
			}
			switch in.Status {
			case ledger.IntentStatusSuperseded, ledger.IntentStatusObsolete, ledger.IntentStatusContradicted:
				if n > 0 && in.Status != ledger.IntentStatusContradicted {
					fail("%s %s ended %s, yet the downstream applied it %d time(s)", in.Kind, in.OperationID, in.Status, n)
				}
				r.Overtaken = append(r.Overtaken, Overtaken{OperationID: in.OperationID, Kind: in.Kind, Projection: in.Projection, Subject: in.ProjectionSubject,
					Status: in.Status, Version: in.Version, Truth: p.Version, ContradictedBy: in.ContradictedBy, Reason: lastReason(in), Effective: n})
			}
			if in.CompensatedBy != "" {
				c := Compensation{Of: in.OperationID, OfKind: in.Kind, By: in.CompensatedBy}
				if comp, ok := byOp[in.CompensatedBy]; ok {
					c.ByKind, c.Status, c.Effective = comp.Kind, comp.Status, effective[comp.OperationID]
				}
				r.Compensations = append(r.Compensations, c)
			}
		}
		r.Truth = append(r.Truth, st)
	}
	sort.SliceStable(r.Overtaken, func(i, j int) bool {
		a, b := r.Overtaken[i], r.Overtaken[j]
		if a.Status != b.Status {
			return a.Status > b.Status // SUPERSEDED, OBSOLETE, CONTRADICTED
		}
		if a.Subject != b.Subject {
			return a.Subject < b.Subject
		}
		return a.Kind < b.Kind
	})
}

// policyOf is an intent's dispatch policy ("" is once).
func policyOf(in ledger.IntentState) ledger.Policy {
	if in.Policy == "" {
		return ledger.PolicyOnce
	}
	return in.Policy
}

// lastReason is the reason of the intent's last audit entry into its
// current status: what made it so.
func lastReason(in ledger.IntentState) string {
	for i := len(in.Audit) - 1; i >= 0; i-- {
		if a := in.Audit[i]; a.To == ledger.Status(in.Status) {
			return a.Reason
		}
	}
	return in.Detail
}

// describeState renders the business fields a newcomer looks for first.
func describeState(state map[string]any) string {
	var parts []string
	if s, ok := state["status"]; ok {
		parts = append(parts, fmt.Sprint(s))
	}
	if d, _ := state["deleted"].(bool); d {
		parts = append(parts, "deleted")
	}
	if e, ok := state["entitled"].(bool); ok {
		if e {
			parts = append(parts, "entitled")
		} else {
			parts = append(parts, "not entitled")
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// subjectLabel names a projection's subjects for people.
func subjectLabel(name string) string {
	_, name = projection.SplitScoped(name)
	switch name {
	case builtin.OrderProjection:
		return "order"
	case builtin.StripeSubscriptionProjection:
		return "subscription"
	}
	return name
}

// orNothing renders a downstream's last applied version.
func orNothing(v string) string {
	if v == "" {
		return "nothing"
	}
	return "v" + v
}

// describeView renders one family's view on one line.
func describeView(v FamilyView) string {
	if v.Last == "" {
		s := fmt.Sprintf("%s: nothing applied", v.Family)
		if v.Refused > 0 {
			s += fmt.Sprintf(" (%d refused)", v.Refused)
		}
		return s
	}
	s := fmt.Sprintf("%s: last v%s (%s), %s, %d regressions", v.Family, v.Last, v.LastKind, plural(v.Applied, "apply", "applies"), v.Regressions)
	if v.Refused > 0 {
		s += fmt.Sprintf(", %d refused", v.Refused)
	}
	return s
}

// printTruth writes the downstream-against-the-truth part of the report.
func (r Report) printTruth(w io.Writer) {
	if r.Truth == nil {
		return
	}
	fmt.Fprintf(w, "\nThe downstream against the truth, per subject (%d): the ledger's projection (truth) next to the fake downstream's own per-subject view (GET /_dev/downstream):\n", len(r.Truth))
	for _, s := range r.Truth {
		target := ""
		if len(s.Downstream) > 0 && s.Downstream[0].Subject != s.Subject {
			target = " (the downstream knows it as " + s.Downstream[0].Subject + ")"
		}
		fmt.Fprintf(w, "  %s %s%s\n", subjectLabel(s.Projection), s.Subject, target)
		fmt.Fprintf(w, "    truth:       %s, v%d\n", s.State, s.Version)
		for _, v := range s.Downstream {
			if v.Policy == ledger.PolicyLatest && v.WantKind != "" {
				fmt.Fprintf(w, "    must be at:  %s v%d (%s, the newest intent carrying this state)\n", v.Family, v.Want, v.WantKind)
			}
		}
		views := make([]string, len(s.Downstream))
		for i, v := range s.Downstream {
			views[i] = describeView(v)
		}
		fmt.Fprintf(w, "    downstream:  %s\n", strings.Join(views, "; "))
		for _, n := range s.Notes {
			fmt.Fprintf(w, "    note:        %s\n", n)
		}
		verdict := "in step"
		if !s.OK {
			verdict = "MISMATCH (see the notes)"
		}
		fmt.Fprintf(w, "    verdict:     %s\n", verdict)
	}
	fmt.Fprintf(w, "Intents the truth overtook (SUPERSEDED, OBSOLETE: no call; CONTRADICTED: performed, then contradicted: an attention item): %d\n", len(r.Overtaken))
	for _, o := range r.Overtaken {
		versions := fmt.Sprintf("intent v%d, truth now v%d", o.Version, o.Truth)
		if o.Status == ledger.IntentStatusContradicted {
			versions = fmt.Sprintf("intent v%d, contradicted by v%d", o.Version, o.ContradictedBy)
		}
		fmt.Fprintf(w, "  - %s %s %s of %s %s (%s; effective calls %d): %s\n", o.Status, o.Kind, o.OperationID, subjectLabel(o.Projection), o.Subject, versions, o.Effective, orDash(o.Reason))
	}
	fmt.Fprintf(w, "Compensations: %d\n", len(r.Compensations))
	for _, c := range r.Compensations {
		fmt.Fprintf(w, "  - %s %s compensated by %s %s: %s, effective calls %d\n", c.OfKind, c.Of, orDash(c.ByKind), c.By, orDash(string(c.Status)), c.Effective)
	}
}
