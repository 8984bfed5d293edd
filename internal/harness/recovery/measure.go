package recovery

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// observed is what the run left: when each event was accepted and
// processed, and each intent's life.
type observed struct {
	accepted  map[string]time.Time // source/event_id → first 2xx answer
	processed map[string]time.Time // source/event_id → processed_at (absent: not PROCESSED)
	audits    map[string][]ledger.AuditEntry
	intents   []intentObs
}

type intentObs struct {
	op, kind, causation string
	status              ledger.IntentStatus
	created, finished   time.Time // finished: zero while not terminal
	audit               []ledger.AuditEntry
}

// Span is one kill's recovery over a set of events and intents: how many
// were in flight at the kill, and how long until the last of them was
// PROCESSED (events) or settled (intents). Unfinished counts those that
// never got there; then the time is meaningless.
type Span struct {
	Events            int           `json:"events_in_flight"`
	ToProcessed       time.Duration `json:"to_processed"`
	EventsUnfinished  int           `json:"events_unfinished,omitempty"`
	Intents           int           `json:"intents_in_flight"`
	ToSettled         time.Duration `json:"to_settled"`
	IntentsUnfinished int           `json:"intents_unfinished,omitempty"`
	// Slowest are the last event and intent to finish, with their audit
	// trail relative to the kill.
	SlowestEvent  string `json:"slowest_event,omitempty"`
	SlowestIntent string `json:"slowest_intent,omitempty"`
}

// span measures kill k at at over the events accepted and the intents
// created (or caused by an event accepted) before it; since, when not
// zero, keeps only those accepted and created at or after since (what
// the previous kill had not found in flight).
func (o observed) span(at, since time.Time) Span {
	var s Span
	var slowEv, slowIn string
	var lastEv, lastIn time.Time
	inWindow := func(t time.Time) bool { return t.Before(at) && (since.IsZero() || !t.Before(since)) }
	for k, acc := range o.accepted {
		if !inWindow(acc) {
			continue
		}
		p, ok := o.processed[k]
		switch {
		case !ok:
			s.Events++
			s.EventsUnfinished++
		case p.After(at):
			s.Events++
			if p.After(lastEv) {
				lastEv, slowEv = p, k
			}
		}
	}
	for _, in := range o.intents {
		acc, known := o.accepted[in.causation]
		before := in.created.Before(at) || (known && acc.Before(at))
		if !before {
			continue
		}
		if !since.IsZero() && (in.created.Before(since) || (known && acc.Before(since))) {
			continue
		}
		switch {
		case in.finished.IsZero():
			s.Intents++
			s.IntentsUnfinished++
		case in.finished.After(at):
			s.Intents++
			if in.finished.After(lastIn) {
				lastIn, slowIn = in.finished, in.op
			}
		}
	}
	if !lastEv.IsZero() {
		s.ToProcessed = lastEv.Sub(at)
		s.SlowestEvent = slowEv + ": " + trail(o.audits[slowEv], at)
	}
	if !lastIn.IsZero() {
		s.ToSettled = lastIn.Sub(at)
		i := slices.IndexFunc(o.intents, func(in intentObs) bool { return in.op == slowIn })
		in := o.intents[i]
		s.SlowestIntent = fmt.Sprintf("%s %s (of %s): %s", in.kind, in.op, in.causation, trail(in.audit, at))
	}
	return s
}

// trail is an audit trail with times relative to at: "+0.21s
// RECEIVED→PROCESSING (owner), …".
func trail(audit []ledger.AuditEntry, at time.Time) string {
	var parts []string
	for _, a := range audit {
		d := a.At.Sub(at)
		from := string(a.From)
		if from != "" {
			from += "→"
		}
		p := fmt.Sprintf("%+.2fs %s%s", d.Seconds(), from, a.To)
		if a.Action != "" {
			p += " " + a.Action
		}
		if a.Actor != "" {
			p += " by " + shortActor(a.Actor)
		}
		if a.Reason != "" {
			p += " (" + a.Reason + ")"
		}
		parts = append(parts, p)
	}
	if len(parts) > 6 {
		parts = append(parts[:2], append([]string{"…"}, parts[len(parts)-4:]...)...)
	}
	return strings.Join(parts, "; ")
}

// shortActor keeps a runtime's name readable: "$LATEST/a8f2413a" stays,
// a long stream name is cut.
func shortActor(s string) string {
	if len(s) > 40 {
		return s[:37] + "…"
	}
	return s
}
