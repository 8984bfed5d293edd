package demo

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// OtherSubject is one subject the run touched beyond the Stripe
// subscriptions of its own accounts (the O-42 order, the Shopify order,
// the Quiltt connections, the GitHub push, the subscription no local
// account owns): its final state in the ledger next to what the senders
// meant.
type OtherSubject struct {
	Kind, Source, Subject string
	State                 string // the compared fields as the ledger holds them
	Version               int64
	Want                  string // what the senders meant
	Applied, Stale, Noop  int
	Ignored, Quarantined  int
	Intents               []string // effect kinds this run created for it
	WantIntents           []string
	OK                    bool
}

// expectation is what the senders meant for one subject: the meaning of
// its newest revision, and the events that concern it.
type expectation struct {
	source string
	final  meant
	events []string
}

// expectations derives, from the deliveries sent, the final meaning of each
// subject: the newest revision wins (I3; see docs/architecture.md),
// whatever the arrival order.
func expectations(sent []otherDelivery) []expectation {
	bySubject := map[string]*expectation{}
	var order []string
	for _, d := range sent {
		for _, m := range d.means {
			key := m.projection + "|" + m.subject
			e := bySubject[key]
			if e == nil {
				e = &expectation{source: d.source, final: m}
				bySubject[key] = e
				order = append(order, key)
			}
			if !slices.Contains(e.events, m.event) {
				e.events = append(e.events, m.event)
			}
			if m.version > e.final.version {
				e.final = m
			}
		}
	}
	out := make([]expectation, 0, len(order))
	for _, k := range order {
		out = append(out, *bySubject[k])
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].final.kind != out[j].final.kind {
			return out[i].final.kind < out[j].final.kind
		}
		return out[i].final.subject < out[j].final.subject
	})
	return out
}

// renderState shows the compared fields: one field as its value, several
// as name=value ("-" for an empty value).
func renderState(fields map[string]string, keys []string) string {
	if len(keys) == 1 {
		return orDash(fields[keys[0]])
	}
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + orDash(fields[k])
	}
	return strings.Join(parts, " ")
}

// checkSubjects compares each other subject with what the senders meant:
// its projection's compared fields and version, the outcomes of its
// events, and the effect kinds this run created for it.
func (r *Report) checkSubjects(exp []expectation, rows map[string]ledger.Event, snap ledger.Snapshot, intents []ledger.StoredIntent) {
	projections := map[string]ledger.Projection{}
	for _, p := range snap.Projections {
		_, base := projection.SplitScoped(p.Name) // a source's scope: the expectations name the projection
		projections[base+"|"+p.Subject] = p
	}
	for _, e := range exp {
		m := e.final
		o := OtherSubject{Kind: m.kind, Source: e.source, Subject: m.subject, WantIntents: slices.Sorted(slices.Values(m.intents)), OK: true}
		keys := make([]string, 0, len(m.state))
		for k := range m.state {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		causes := map[string]bool{}
		for _, id := range e.events {
			causes[e.source+"/"+id] = true
			ev, ok := rows[e.source+"/"+id]
			if !ok {
				continue // I1 reports it
			}
			switch {
			case ev.Status == ledger.StatusQuarantined:
				o.Quarantined++
			case ev.Result == nil:
			case ev.Result.Outcome == ledger.OutcomeApplied:
				o.Applied++
			case ev.Result.Outcome == ledger.OutcomeStale:
				o.Stale++
			case ev.Result.Outcome == ledger.OutcomeNoop:
				o.Noop++
			case ev.Result.Outcome == ledger.OutcomeIgnored:
				o.Ignored++
			}
		}
		for _, in := range intents {
			if causes[in.Causation] {
				o.Intents = append(o.Intents, in.Kind)
			}
		}
		sort.Strings(o.Intents)
		fail := func(inv, format string, args ...any) {
			o.OK = false
			r.violate(inv, format, args...)
		}
		if m.projection == "" {
			o.Want = "recorded, processed as ignored (no projection)"
			o.State = fmt.Sprintf("%d event(s) ignored", o.Ignored)
			if o.Ignored != len(e.events) {
				fail("I1", "%s %s: %d of %d events processed as ignored", m.kind, m.subject, o.Ignored, len(e.events))
			}
		} else {
			o.Want = renderState(m.state, keys)
			if m.version != 0 {
				o.Want += fmt.Sprintf(" v%d", m.version)
			} else {
				o.Want += " (versioned at receipt)"
			}
			if len(m.intents) > 0 {
				o.Want += " → " + strings.Join(o.WantIntents, ", ")
			}
			p, ok := projections[m.projection+"|"+m.subject]
			if !ok {
				o.State = "- (no projection)"
				fail("I3", "%s %s has no projection, want %s", m.kind, m.subject, o.Want)
			} else {
				got := map[string]string{}
				for _, k := range keys {
					if v, ok := p.State[k]; ok && v != nil {
						got[k] = fmt.Sprint(v)
					}
				}
				o.State, o.Version = renderState(got, keys), p.Version
				for _, k := range keys {
					if got[k] != m.state[k] {
						fail("I3", "%s %s: %s is %q, the senders meant %q", m.kind, m.subject, k, got[k], m.state[k])
					}
				}
				if m.version != 0 && p.Version != m.version {
					fail("I3", "%s %s holds version %d, the senders' newest is %d", m.kind, m.subject, p.Version, m.version)
				}
			}
		}
		if !slices.Equal(o.Intents, o.WantIntents) {
			fail("I2", "%s %s: this run created effects %v, the final state calls for %v", m.kind, m.subject, o.Intents, o.WantIntents)
		}
		r.OtherSubjects = append(r.OtherSubjects, o)
	}
}

// checkOrphan adds the subscription no local account owns: the senders
// meant nothing to apply, so its event is quarantined and it has no
// projection.
func (r *Report) checkOrphan(s *story, rows map[string]ledger.Event, hasProjection bool) {
	o := OtherSubject{Kind: "stripe subscription, no local account", Source: "stripe", Subject: s.orphan.Sub,
		Want: "quarantined (unknown_subject), no projection", OK: true}
	ev, ok := rows["stripe/"+s.orphan.ID]
	switch {
	case !ok:
		o.State = "- (no ledger row)"
	case ev.Status == ledger.StatusQuarantined:
		o.Quarantined = 1
		o.State = fmt.Sprintf("%s (%s)", ev.Status, ev.ErrorCode)
	default:
		o.State = string(ev.Status)
	}
	if hasProjection {
		o.State += ", has a projection"
	}
	o.OK = ok && ev.Status == ledger.StatusQuarantined && ev.ErrorCode == "unknown_subject" && !hasProjection
	r.OtherSubjects = append(r.OtherSubjects, o)
}

// printSubjects writes the other subjects' table.
func (r Report) printSubjects(w io.Writer) {
	if len(r.OtherSubjects) == 0 {
		return
	}
	fmt.Fprintf(w, "\nOther subjects this run touched (%d), next to what the senders meant:\n", len(r.OtherSubjects))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  KIND\tSUBJECT\tSTATE\tVERSION\tSENDERS MEANT\tAPPLIED\tSTALE\tNOOP\tIGNORED\tQUARANTINED\tEFFECTS\tMATCH")
	for _, o := range r.OtherSubjects {
		version := "-"
		if o.Version != 0 {
			version = fmt.Sprint(o.Version)
		}
		effects := strings.Join(o.Intents, ", ")
		if effects == "" {
			effects = "none"
		}
		match := "yes"
		if !o.OK {
			match = "NO"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", o.Kind, o.Subject, o.State, version, o.Want, o.Applied, o.Stale, o.Noop, o.Ignored, o.Quarantined, effects, match)
	}
	_ = tw.Flush()
}
