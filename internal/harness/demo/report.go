package demo

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Report is the business outcome of a run. Every count is this run's (the
// deliveries the demo sent, the ledger rows and intents they caused)
// unless its name says Ledger (the whole table, earlier traffic included)
// or it is a queue's depth.
type Report struct {
	Seed       uint64
	Elapsed    time.Duration
	Deliveries int         // Stripe deliveries sent, forged ones included
	ByHTTP     map[int]int // HTTP status → Stripe deliveries
	Events     int         // distinct legitimate Stripe events sent (a thin twin is its snapshot's fact)
	Suppressed int         // Stripe deliveries that did not create a new ledger row
	Subjects   []SubjectOutcome
	// OtherSubjects are every other subject the run touched, next to what
	// the senders meant (subjects.go).
	OtherSubjects []OtherSubject
	RunEvents     int // ledger rows of this run, every source
	ByStatus      map[ledger.Status]int
	ByOutcome     map[ledger.Outcome]int
	Intents       int // outbox intents this run's events created
	MaxPerOp      int // most of this run's intents recorded for one operation id (must be 1)
	LedgerEvents  int // event rows in the whole ledger
	LedgerIntents int // intents in the whole ledger
	Quarantined   []string
	Dead          []string
	DLQDepth      int // the events DLQ's depth: every message in it, whatever run sent it
	// Crash is what the processor kill interrupted and how it was
	// recovered (crash.go).
	Crash      *CrashOutcome
	Violations []string

	// Others: per other provider source, what was sent and what it became.
	Others map[string]*OtherOutcome

	// Effects are this run's outbox intents as the dispatcher left them,
	// with the fake downstream's effective calls per operation id.
	Effects         []EffectOutcome
	EffectsByStatus map[ledger.IntentStatus]int
	MaxEffective    int // most effective downstream calls for one operation id (must be 1)
	Announced       int // PENDING intents the demo announced in the reconciler's stead

	// Moved is what the two stories of the truth moving on while effects
	// wait did (movedon.go); Truth, per subject the run's effects concern,
	// the canonical projection next to the downstream's own view, with the
	// intents the truth overtook and the compensations (truth.go).
	Moved         *MovedOutcome
	Truth         []SubjectTruth
	Overtaken     []Overtaken
	Compensations []Compensation

	// Thin are the run's Stripe thin events and what they became (see
	// thin.go); StripeAPI is the fake Stripe API's address.
	Thin      []ThinOutcome
	StripeAPI string

	// Warehouse is the warehouse against the truth, when the stack runs
	// the warehouse sink (warehouse.go).
	Warehouse *WarehouseOutcome

	statusOf map[string]int // event id → deliveries, for Suppressed
}

// OtherOutcome is one non-Stripe source's result.
type OtherOutcome struct {
	Deliveries int
	ByHTTP     map[int]int
	Forged401  int
	Expected   map[string]bool // event ids sent
	Rows       int             // ledger rows for the source
	Processed  int
	Intents    int // outbox intents its events created
}

func (r *Report) recordOther(d otherDelivery, code int, forged bool) {
	if r.Others == nil {
		r.Others = map[string]*OtherOutcome{}
	}
	o := r.Others[d.source]
	if o == nil {
		o = &OtherOutcome{ByHTTP: map[int]int{}, Expected: map[string]bool{}}
		r.Others[d.source] = o
	}
	if forged {
		if code == 401 {
			o.Forged401++
		} else {
			r.violate("I4", "a forged %s delivery was answered %d", d.source, code)
		}
		return
	}
	o.Deliveries++
	o.ByHTTP[code]++
	for _, id := range d.events {
		o.Expected[id] = true
	}
}

// SubjectOutcome is one subscription's final business state.
type SubjectOutcome struct {
	Subject, Account, Status string
	Entitled, Deleted        bool
	Version                  int64
	Applied, Stale, Noop     int
	Intents                  int
	Want                     string // the state the model expects
	// Stripe is the subscription's status in the fake Stripe API;
	// FromStripe: a thin event was resolved with it, so it is the
	// expected state.
	Stripe     string
	FromStripe bool
}

func (r *Report) record(id string, code int) {
	if r.ByHTTP == nil {
		r.ByHTTP = map[int]int{}
	}
	r.Deliveries++
	r.ByHTTP[code]++
	r.statusOf[id]++
}

func (r *Report) violate(inv, format string, args ...any) {
	r.Violations = append(r.Violations, inv+": "+fmt.Sprintf(format, args...))
}

// runRows returns this run's ledger rows by source/event_id: their ids
// carry the run tag.
func runRows(snap ledger.Snapshot, run string) map[string]ledger.Event {
	rows := map[string]ledger.Event{}
	for _, ev := range snap.Events {
		if strings.Contains(ev.EventID, run) {
			rows[ev.Source+"/"+ev.EventID] = ev
		}
	}
	return rows
}

// check compares the ledger with the model (the invariants). causes are
// this run's events (source/event_id), whose intents are the run's.
func (r *Report) check(s *story, snap ledger.Snapshot, quiet bool, dlq int, causes map[string]bool) {
	r.ByStatus, r.ByOutcome = map[ledger.Status]int{}, map[ledger.Outcome]int{}
	r.DLQDepth = dlq
	r.LedgerEvents, r.LedgerIntents = len(snap.Events), len(snap.Intents)
	if !quiet {
		r.violate("I1", "the pipeline did not become quiet in time")
	}
	events := map[string]ledger.Event{}
	rows := runRows(snap, s.run)
	r.RunEvents = len(rows)
	for _, ev := range snap.Events {
		if _, ok := rows[ev.Source+"/"+ev.EventID]; !ok {
			continue // another run's event, or someone else's
		}
		r.ByStatus[ev.Status]++
		if ev.Result != nil && ev.Status == ledger.StatusProcessed {
			r.ByOutcome[ev.Result.Outcome]++
		}
		switch ev.Status {
		case ledger.StatusQuarantined:
			r.Quarantined = append(r.Quarantined, fmt.Sprintf("%s/%s: %s (%s)", ev.Source, ev.EventID, ev.ErrorCode, ev.ErrorMessage))
		case ledger.StatusDead:
			r.Dead = append(r.Dead, fmt.Sprintf("%s/%s: %s (%s)", ev.Source, ev.EventID, ev.ErrorCode, ev.ErrorMessage))
		}
		if o := r.Others[ev.Source]; o != nil {
			o.Rows++
			if ev.Status == ledger.StatusProcessed {
				o.Processed++
			}
			if !o.Expected[ev.EventID] {
				r.violate("I4", "%s has an unexpected row %s (forged or duplicate identity)", ev.Source, ev.EventID)
			}
			continue
		}
		events[ev.EventID] = ev
	}
	r.Events = len(s.events)
	sent := 0
	for _, ev := range s.events {
		sent += r.statusOf[ev.ID]
	}
	r.Suppressed = sent - len(s.events)

	// I4: forged deliveries were refused and left nothing.
	for _, ev := range s.forged {
		if _, ok := events[ev.ID]; ok {
			r.violate("I4", "forged delivery %s has a ledger row", ev.ID)
		}
	}
	for src, o := range r.Others {
		if o.Rows != len(o.Expected) || o.Processed != len(o.Expected) {
			r.violate("I1", "%s: %d events sent, %d rows, %d processed", src, len(o.Expected), o.Rows, o.Processed)
		}
		if o.ByHTTP[0]+o.ByHTTP[401]+o.ByHTTP[500]+o.ByHTTP[503] > 0 {
			r.violate("I1", "%s: legitimate deliveries answered %v", src, o.ByHTTP)
		}
		if o.Forged401 != 1 {
			r.violate("I4", "%s: forged delivery not refused", src)
		}
	}
	if r.ByHTTP[401] != len(s.forged) {
		r.violate("I4", "%d deliveries answered 401, want %d (the forged ones)", r.ByHTTP[401], len(s.forged))
	}
	if r.ByHTTP[0] > 0 || r.ByHTTP[500] > 0 || r.ByHTTP[503] > 0 {
		r.violate("I1", "%d deliveries never got a 2xx after retries", r.ByHTTP[0]+r.ByHTTP[500]+r.ByHTTP[503])
	}

	// I1 and I6: every accepted event finished as the model says, audited.
	for _, want := range s.events {
		ev, ok := events[want.ID]
		switch {
		case !ok:
			r.violate("I1", "accepted event %s has no ledger row", want.ID)
			continue
		case want == s.orphan:
			if ev.Status != ledger.StatusQuarantined || ev.ErrorCode != "unknown_subject" {
				r.violate("I1", "%s is %s/%s, want QUARANTINED/unknown_subject", ev.EventID, ev.Status, ev.ErrorCode)
			}
		case ev.Status != ledger.StatusProcessed:
			r.violate("I1", "%s ended %s (%s), want PROCESSED", ev.EventID, ev.Status, ev.ErrorCode)
		}
		completes := 0
		for i, a := range ev.Audit {
			if a.Actor == "" || a.At.IsZero() || a.To == "" {
				r.violate("I6", "%s audit entry %d lacks who, when or what", ev.EventID, i)
			}
			if a.Action == "complete" {
				completes++
			}
		}
		if len(ev.Audit) == 0 || ev.Audit[0].Action != "accept" {
			r.violate("I6", "%s audit does not start with its acceptance", ev.EventID)
		}
		if ev.Status == ledger.StatusProcessed && completes != 1 {
			r.violate("I5", "%s completed %d times", ev.EventID, completes)
		}
	}

	// I2: one intent per operation id, one per applied event, none
	// otherwise (this run's intents).
	perOp := map[string]int{}
	perCause := map[string]int{}
	perSubject := map[string]int{}
	intents := downstreamIntents(snap, causes)
	for _, in := range intents {
		if src, id, ok := strings.Cut(in.Causation, "/"); ok && r.Others[src] != nil && r.Others[src].Expected[id] {
			r.Others[src].Intents++
		}
		perOp[in.OperationID]++
		perCause[in.Causation]++
		perSubject[in.Subject]++
	}
	r.Intents = len(intents)
	for op, n := range perOp {
		r.MaxPerOp = max(r.MaxPerOp, n)
		if n != 1 {
			r.violate("I2", "operation %s recorded %d times", op, n)
		}
	}
	for _, ev := range rows {
		n := perCause[ev.Source+"/"+ev.EventID]
		applied := ev.Result != nil && ev.Result.Outcome == ledger.OutcomeApplied
		if applied && ev.Source == "stripe" && n != 1 {
			// Every applied subscription change sets the entitlement once.
			r.violate("I2", "applied event %s created %d intents, want 1", ev.EventID, n)
		}
		if !applied && n != 0 {
			r.violate("I2", "%s (%s) created %d intents, want 0", ev.EventID, ev.Status, n)
		}
	}

	// I3: each subject holds the state of its winning revision.
	projections := map[string]ledger.Projection{}
	for _, p := range snap.Projections {
		if _, base := projection.SplitScoped(p.Name); base == builtin.StripeSubscriptionProjection {
			projections[p.Subject] = p
		}
	}
	if _, ok := projections[s.orphan.Sub]; ok {
		r.violate("I3", "the unknown subject %s got a projection", s.orphan.Sub)
	}
	_, orphanProjected := projections[s.orphan.Sub]
	r.checkOrphan(s, rows, orphanProjected)
	final := s.expectedFinal()
	for _, sub := range s.subs {
		want := final[sub]
		p, ok := projections[sub]
		out := SubjectOutcome{Subject: sub, Account: want.Account, Want: fmt.Sprintf("%s v%d", want.Status, want.version()),
			Stripe: s.truth[sub], FromStripe: s.fetched(sub)}
		if out.FromStripe {
			// Stripe's state at a fetch, versioned no lower than any
			// snapshot event of the story.
			out.Want = fmt.Sprintf("%s v≥%d", out.Stripe, want.version())
		}
		for _, ev := range snap.Events {
			if ev.Subject != sub || ev.Result == nil {
				continue
			}
			switch ev.Result.Outcome {
			case ledger.OutcomeApplied:
				out.Applied++
			case ledger.OutcomeStale:
				out.Stale++
			case ledger.OutcomeNoop:
				out.Noop++
			}
		}
		if !ok {
			r.violate("I3", "%s has no projection", sub)
			r.Subjects = append(r.Subjects, out)
			continue
		}
		out.Status, _ = p.State["status"].(string)
		out.Entitled, _ = p.State["entitled"].(bool)
		out.Deleted, _ = p.State["deleted"].(bool)
		out.Version = p.Version
		out.Intents = perSubject[want.Account]
		switch {
		case out.FromStripe:
			if out.Status != out.Stripe || p.Version < want.version() {
				r.violate("I3", "%s holds %s v%d, want Stripe's %s at v≥%d", sub, out.Status, p.Version, out.Stripe, want.version())
			}
			if out.Deleted != (out.Stripe == "canceled") {
				r.violate("I3", "%s deleted=%v, want %v", sub, out.Deleted, !out.Deleted)
			}
		default:
			if out.Status != want.Status || p.Version != want.version() {
				r.violate("I3", "%s holds %s v%d, want %s v%d", sub, out.Status, p.Version, want.Status, want.version())
			}
			if out.Deleted != (want.Type == "customer.subscription.deleted") {
				r.violate("I3", "%s deleted=%v, want %v", sub, out.Deleted, !out.Deleted)
			}
		}
		if out.Stripe != "" && out.Status != out.Stripe {
			r.violate("I3", "%s holds %s, Stripe says %s", sub, out.Status, out.Stripe)
		}
		r.Subjects = append(r.Subjects, out)
	}
	if r.ByStatus[ledger.StatusDead] > 0 {
		r.violate("I1", "%d events DEAD", r.ByStatus[ledger.StatusDead])
	}
	sort.Strings(r.Quarantined)
	sort.Strings(r.Dead)
}

// OK reports whether no invariant was violated.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// Print writes the report for people.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "\n=== Business outcome (seed %d, %s) ===\n", r.Seed, r.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "Every subject this run touched, next to what the senders meant (the demo's own model of what it sent, not the ledger).\n")
	fmt.Fprintf(w, "Counts are this run's (the deliveries this demo sent, the ledger rows and intents they caused) unless marked \"whole ledger\" or \"whole queue\".\n\n")
	fmt.Fprintf(w, "Stripe subscriptions (%d):\n", len(r.Subjects))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBJECT\tACCOUNT\tSTATE\tENTITLED\tVERSION\tEXPECTED\tSTRIPE SAYS\tAPPLIED\tSTALE\tNOOP\tINTENTS")
	for _, s := range r.Subjects {
		state := s.Status
		if s.Deleted {
			state += " (deleted)"
		}
		stripe := orDash(s.Stripe)
		if s.FromStripe {
			stripe += " (fetched)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%d\t%s\t%s\t%d\t%d\t%d\t%d\n", s.Subject, s.Account, state, s.Entitled, s.Version, s.Want, stripe, s.Applied, s.Stale, s.Noop, s.Intents)
	}
	_ = tw.Flush()
	r.printSubjects(w)

	codes := make([]int, 0, len(r.ByHTTP))
	for c := range r.ByHTTP {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var http []string
	for _, c := range codes {
		http = append(http, fmt.Sprintf("%d×%d", r.ByHTTP[c], c))
	}
	fmt.Fprintf(w, "\nCounts:\n")
	fmt.Fprintf(w, "  Stripe deliveries, this run: %d (%s) carrying %d distinct Stripe events; %d legitimate deliveries were duplicates (no new ledger row)\n", r.Deliveries, strings.Join(http, ", "), r.Events, r.Suppressed)
	srcs := make([]string, 0, len(r.Others))
	for src := range r.Others {
		srcs = append(srcs, src)
	}
	sort.Strings(srcs)
	for _, src := range srcs {
		o := r.Others[src]
		fmt.Fprintf(w, "  %s, this run: %s carrying %s → %s, %d processed, %s; forged request refused: %v\n",
			src, plural(o.Deliveries, "delivery", "deliveries"), plural(len(o.Expected), "event", "events"), plural(o.Rows, "ledger row", "ledger rows"),
			o.Processed, plural(o.Intents, "intent", "intents"), o.Forged401 == 1)
	}
	fmt.Fprintf(w, "  Ledger rows, this run (every source): %d; by status: %s; processed by outcome: %s (stale = older revisions ignored)\n", r.RunEvents, tally(r.ByStatus), tally(r.ByOutcome))
	fmt.Fprintf(w, "  Outbox intents, this run: %d (effects on the downstream; the warehouse's records aside), at most %d per operation id\n", r.Intents, r.MaxPerOp)
	fmt.Fprintf(w, "  Whole ledger (earlier traffic included): %d events, %d intents\n", r.LedgerEvents, r.LedgerIntents)
	fmt.Fprintf(w, "  Events dead-letter queue, whole queue: %d messages\n", r.DLQDepth)
	list := func(title string, items []string) {
		fmt.Fprintf(w, "%s: %d\n", title, len(items))
		for _, it := range items {
			fmt.Fprintf(w, "  - %s\n", it)
		}
	}
	r.Crash.print(w)
	r.printThin(w)
	list("\nQuarantined, this run", r.Quarantined)
	list("Dead, this run", r.Dead)
	r.printEffects(w)
	r.printMoved(w)
	r.printTruth(w)
	r.printWarehouse(w)
	if r.OK() {
		inStep := ""
		if r.Warehouse != nil {
			inStep = ", the warehouse's current rows in step with the canonical state"
		}
		fmt.Fprintf(w, "\nNo violation: invariants I1–I7, every subject as the senders meant, the downstream in step with the truth%s, the crash's interrupted work recovered.\n", inStep)
		return
	}
	list("\nVIOLATIONS", r.Violations)
}

// tally renders counts by key, largest first: "PROCESSED 39, QUARANTINED 1".
func tally[K ~string](m map[K]int) string {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
