package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// Percentiles of a set of durations, in milliseconds (nearest rank).
type Percentiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P95 float64 `json:"p95_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// NewPercentiles computes the nearest-rank percentiles of ds.
func NewPercentiles(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p/100*float64(len(s)))) - 1
		i = min(max(i, 0), len(s)-1)
		return ms(s[i])
	}
	return Percentiles{N: len(s), P50: rank(50), P95: rank(95), P99: rank(99), Max: ms(s[len(s)-1])}
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)) / 1000 }

// Effects is what the fake downstream did with the run's intents.
type Effects struct {
	Expected int `json:"expected"` // intents the applied events must have created
	Applied  int `json:"applied"`  // of those, applied at least once
	Missing  int `json:"missing"`  // expected, never applied
	// Suppressed: expected, never applied, and rightly so: the intent ended
	// SUPERSEDED or OBSOLETE (a newer state of its subject arrived first).
	Suppressed int `json:"suppressed,omitempty"`
	// MissingByStatus is the ledger status of the missing intents:
	// PENDING (committed, never announced: the processor died between its
	// commit and its SendMessage, and the reconciler re-announces it after
	// RECONCILE_STUCK_SECONDS), RETRY_WAIT, UNCERTAIN, … or NO_INTENT.
	MissingByStatus map[string]int `json:"missing_by_status,omitempty"`
	Doubled         int            `json:"doubled"`    // keys applied more than once
	Unexpected      int            `json:"unexpected"` // keys of the run no applied event should have created
	Requests        int            `json:"requests"`   // POSTs the downstream received for expected keys
	MaxPerKey       int            `json:"max_effective_per_key"`
	ByKind          map[string]int `json:"applied_by_kind"`
	MissingKeys     []string       `json:"missing_keys,omitempty"` // the first 20
	DoubledKeys     []string       `json:"doubled_keys,omitempty"` // the first 20
}

// Result is one run's report.
type Result struct {
	Run            string  `json:"run"`
	Seed           uint64  `json:"seed"`
	OfferedRate    float64 `json:"offered_rate_per_s"`
	DuplicateRatio float64 `json:"duplicate_ratio"`
	MaxInFlight    int     `json:"max_in_flight"`

	// The send phase.
	Sent        int            `json:"sent"`        // deliveries sent
	Duplicates  int            `json:"duplicates"`  // of those, re-sends of an event already sent
	NewEvents   int            `json:"new_events"`  // distinct events sent
	Skipped     int            `json:"skipped"`     // scheduled sends dropped: every slot busy
	SkippedNew  int            `json:"skipped_new"` // of those, first sends of an event
	SendSeconds float64        `json:"send_seconds"`
	SentRate    float64        `json:"sent_rate_per_s"`
	Throughput  float64        `json:"accepted_per_s"` // 2xx answers per second of the send phase
	StatusCodes map[string]int `json:"status_codes"`   // "0" is a transport error
	Intake      Percentiles    `json:"intake_latency"`

	// The ledger after the drain.
	Accepted     int            `json:"accepted_events"` // events answered 2xx at least once
	Processed    int            `json:"processed"`
	Lost         int            `json:"lost"` // accepted, not PROCESSED by the deadline
	LostByStatus map[string]int `json:"lost_by_status,omitempty"`
	LostEvents   []string       `json:"lost_events,omitempty"` // the first 20
	Outcomes     map[string]int `json:"outcomes"`
	Regressions  int            `json:"regressions"` // a subject's latest event not applied
	EndToEnd     Percentiles    `json:"end_to_end_to_processed"`

	Effects    Effects  `json:"effects"`
	Violations []string `json:"violations"`

	// Drift compares the run's first and last DriftWindow deliveries; set
	// when at least twice that many were sent.
	Drift *Drift `json:"drift,omitempty"`
}

// DriftWindow is how many deliveries (and events) Drift compares at the
// start and at the end of a run.
const DriftWindow = 1000

// Drift is the latency of a run's first DriftWindow deliveries against its
// last: a stack whose cost per request grows with what it has stored (an
// emulator that scans its whole index per query) shows it here, where a
// short run cannot. Intake is ordered by send time; time to PROCESSED by the
// event's first send, over accepted events that reached PROCESSED.
type Drift struct {
	Window        int         `json:"window"`
	IntakeFirst   Percentiles `json:"intake_first"`
	IntakeLast    Percentiles `json:"intake_last"`
	EndToEndFirst Percentiles `json:"to_processed_first"`
	EndToEndLast  Percentiles `json:"to_processed_last"`
}

// Ratio is last over first of a percentile, or 0 when first is 0.
func Ratio(first, last float64) float64 {
	if first == 0 {
		return 0
	}
	return last / first
}

// timed is a duration measured at a point of the run.
type timed struct {
	at time.Time
	d  time.Duration
}

// ends returns the percentiles of the first and the last n of ts by time.
func ends(ts []timed, n int) (first, last Percentiles) {
	slices.SortStableFunc(ts, func(a, b timed) int { return a.at.Compare(b.at) })
	pick := func(part []timed) Percentiles {
		ds := make([]time.Duration, len(part))
		for i, t := range part {
			ds[i] = t.d
		}
		return NewPercentiles(ds)
	}
	n = min(n, len(ts))
	return pick(ts[:n]), pick(ts[len(ts)-n:])
}

// OK reports whether the run kept every promise: nothing lost, no effect
// missing, doubled or unexpected, no regression, every send answered 2xx.
func (r Result) OK() bool { return len(r.Violations) == 0 }

func (r *Result) summarizeSends(sends []sent, elapsed time.Duration) {
	r.StatusCodes = map[string]int{}
	seen := map[*Event]bool{}
	var lat []time.Duration
	var byTime []timed
	ok := 0
	for _, s := range sends {
		r.Sent++
		seen[s.ev] = true
		r.StatusCodes[strconv.Itoa(s.status)]++
		if s.status >= 200 && s.status <= 299 {
			ok++
		}
		if s.status != 0 {
			lat = append(lat, s.latency)
			byTime = append(byTime, timed{s.at, s.latency})
		}
	}
	if r.Sent >= 2*DriftWindow {
		r.Drift = &Drift{Window: DriftWindow}
		r.Drift.IntakeFirst, r.Drift.IntakeLast = ends(byTime, DriftWindow)
	}
	r.NewEvents = len(seen)
	// A planned re-send whose original was skipped is the event's first
	// send, so duplicates are counted from what was really sent.
	r.Duplicates = r.Sent - r.NewEvents
	r.SendSeconds = math.Round(elapsed.Seconds()*1000) / 1000
	if elapsed > 0 {
		r.SentRate = round2(float64(r.Sent) / elapsed.Seconds())
		r.Throughput = round2(float64(ok) / elapsed.Seconds())
	}
	r.Intake = NewPercentiles(lat)
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

func (r *Result) summarizeEvents(events []*Event, rows map[*Event]ledger.Event, first, accepted map[*Event]time.Time) {
	r.Outcomes = map[string]int{}
	var e2e []time.Duration
	var byTime []timed
	latest := map[string]*Event{} // subject → its latest sent event
	for _, ev := range events {
		if _, ok := first[ev]; !ok {
			continue
		}
		if cur := latest[ev.Subject]; cur == nil || ev.Step > cur.Step {
			latest[ev.Subject] = ev
		}
		if _, ok := accepted[ev]; !ok {
			continue
		}
		r.Accepted++
		row, ok := rows[ev]
		if !ok || row.Status != ledger.StatusProcessed {
			r.Lost++
			if r.LostByStatus == nil {
				r.LostByStatus = map[string]int{}
			}
			status := "MISSING_ROW"
			if ok {
				status = string(row.Status)
			}
			r.LostByStatus[status]++
			r.LostEvents = appendCapped(r.LostEvents, ev.Key()+" "+status)
			continue
		}
		r.Processed++
		if row.Result != nil {
			r.Outcomes[string(row.Result.Outcome)]++
		}
		e2e = append(e2e, row.ProcessedAt.Sub(first[ev]))
		byTime = append(byTime, timed{first[ev], row.ProcessedAt.Sub(first[ev])})
	}
	r.EndToEnd = NewPercentiles(e2e)
	if r.Drift != nil {
		r.Drift.EndToEndFirst, r.Drift.EndToEndLast = ends(byTime, r.Drift.Window)
	}
	for _, ev := range latest {
		row, ok := rows[ev]
		if ok && row.Status == ledger.StatusProcessed && (row.Result == nil || row.Result.Outcome != ledger.OutcomeApplied) {
			r.Regressions++
		}
	}
}

// finish lists the violations.
func (r *Result) finish() {
	r.Violations = []string{}
	v := func(format string, args ...any) { r.Violations = append(r.Violations, fmt.Sprintf(format, args...)) }
	if r.Lost > 0 {
		v("I1: %d accepted events not PROCESSED (%v)", r.Lost, r.LostByStatus)
	}
	if r.Effects.Missing > 0 {
		v("I2: %d expected effects not applied by the drain deadline (intents %v)", r.Effects.Missing, r.Effects.MissingByStatus)
	}
	if r.Effects.Doubled > 0 {
		v("I2: %d keys applied more than once", r.Effects.Doubled)
	}
	if r.Effects.Unexpected > 0 {
		v("I2: %d effects no applied event should have created", r.Effects.Unexpected)
	}
	if r.Regressions > 0 {
		v("I3: %d subjects whose latest event was not applied", r.Regressions)
	}
	for code, n := range r.StatusCodes {
		if code != "200" && code != "202" {
			v("%d sends answered %s", n, code)
		}
	}
	sort.Strings(r.Violations)
}

// Print writes the human table.
func (r Result) Print(w io.Writer) {
	fmt.Fprintf(w, "run %s (seed %d): offered %.1f/s, %.0f%% duplicates, max in flight %d\n", r.Run, r.Seed, r.OfferedRate, 100*r.DuplicateRatio, r.MaxInFlight)
	fmt.Fprintf(w, "  sent           %d deliveries (%d new events, %d duplicates) in %.2f s = %.1f/s; skipped %d (no free slot)\n",
		r.Sent, r.NewEvents, r.Duplicates, r.SendSeconds, r.SentRate, r.Skipped)
	codes := slices.Sorted(maps.Keys(r.StatusCodes))
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%s: %d", c, r.StatusCodes[c]))
	}
	fmt.Fprintf(w, "  status codes   %s\n", strings.Join(parts, ", "))
	fmt.Fprintf(w, "  throughput     %.1f accepted/s\n", r.Throughput)
	fmt.Fprintf(w, "  %-14s %8s %8s %8s %8s %6s\n", "latency (ms)", "p50", "p95", "p99", "max", "n")
	for _, p := range []struct {
		name string
		p    Percentiles
	}{{"intake", r.Intake}, {"to PROCESSED", r.EndToEnd}} {
		fmt.Fprintf(w, "  %-14s %8.1f %8.1f %8.1f %8.1f %6d\n", p.name, p.p.P50, p.p.P95, p.p.P99, p.p.Max, p.p.N)
	}
	if d := r.Drift; d != nil {
		fmt.Fprintf(w, "  first %d against last %d (ms)\n", d.Window, d.Window)
		for _, p := range []struct {
			name        string
			first, last Percentiles
		}{{"intake", d.IntakeFirst, d.IntakeLast}, {"to PROCESSED", d.EndToEndFirst, d.EndToEndLast}} {
			fmt.Fprintf(w, "  %-14s p50 %8.1f → %8.1f (%.2f×)   p99 %8.1f → %8.1f (%.2f×)\n", p.name,
				p.first.P50, p.last.P50, Ratio(p.first.P50, p.last.P50), p.first.P99, p.last.P99, Ratio(p.first.P99, p.last.P99))
		}
	}
	outcomes := slices.Sorted(maps.Keys(r.Outcomes))
	parts = parts[:0]
	for _, o := range outcomes {
		parts = append(parts, fmt.Sprintf("%s %d", o, r.Outcomes[o]))
	}
	fmt.Fprintf(w, "  ledger         %d accepted events, %d PROCESSED (%s), lost %d, regressions %d\n",
		r.Accepted, r.Processed, strings.Join(parts, ", "), r.Lost, r.Regressions)
	e := r.Effects
	kinds := slices.Sorted(maps.Keys(e.ByKind))
	parts = parts[:0]
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, e.ByKind[k]))
	}
	fmt.Fprintf(w, "  effects        %d expected, %d applied (%s), %d requests; superseded or obsolete before dispatch %d; missing %d, doubled %d, unexpected %d; max effective per key %d\n",
		e.Expected, e.Applied, strings.Join(parts, ", "), e.Requests, e.Suppressed, e.Missing, e.Doubled, e.Unexpected, e.MaxPerKey)
	for _, s := range r.LostEvents {
		fmt.Fprintf(w, "    lost %s\n", s)
	}
	for _, s := range e.MissingKeys {
		fmt.Fprintf(w, "    missing %s\n", s)
	}
	for _, s := range e.DoubledKeys {
		fmt.Fprintf(w, "    doubled %s\n", s)
	}
	if r.OK() {
		fmt.Fprintln(w, "  OK: nothing lost, every effect applied exactly once")
		return
	}
	for _, s := range r.Violations {
		fmt.Fprintf(w, "  VIOLATION %s\n", s)
	}
}

// PrintSweep writes one line per run.
func PrintSweep(w io.Writer, rs []Result) {
	fmt.Fprintf(w, "%9s %8s %8s %9s %9s %9s %9s %9s %9s %5s %7s %7s\n",
		"offered/s", "sent/s", "ok/s", "skipped", "p50 ms", "p95 ms", "p99 ms", "e2e p50", "e2e p99", "lost", "doubled", "missing")
	for _, r := range rs {
		fmt.Fprintf(w, "%9.1f %8.1f %8.1f %9d %9.1f %9.1f %9.1f %9.1f %9.1f %5d %7d %7d\n",
			r.OfferedRate, r.SentRate, r.Throughput, r.Skipped, r.Intake.P50, r.Intake.P95, r.Intake.P99,
			r.EndToEnd.P50, r.EndToEnd.P99, r.Lost, r.Effects.Doubled, r.Effects.Missing)
	}
}

// WriteJSON writes v (a Result or a sweep's []Result) to path, indented.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
