package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// The processor crash in the story, and how long recovery takes.
//
// The demo arms a crash (Target.Crash, POST /_dev/crash) before the
// shuffled deliveries. The stack kills a processor runtime only while it
// holds a claim, and re-arms the crash when a kill interrupted nothing
// (internal/harness/devstack, crash.go); GET /_dev/crash says what the kill held. The
// report then reads, in each held event's ledger audit, how it was
// recovered: the killed runtime's claim, another worker's takeover once the
// lease expired, and the completion. A crash that never interrupted claimed
// work, or held work that was not taken over, fails the run.

// CrashOutcome is what the processor kill interrupted and how it was
// recovered.
type CrashOutcome struct {
	Requested bool // the demo asked for a crash
	// Reported: the stack says what its kills held (GET /_dev/crash). A
	// stack from an older tree does not; the ledger's takeovers are then
	// the only evidence.
	Reported bool
	Kill     *devstack.CrashKill // the kill that interrupted claimed work
	Kills    int                 // runtimes killed during this run (some may have held nothing)
	Rearmed  []devstack.CrashRearm
	Disarmed int // requested crashes that never landed on claimed work
	Held     []HeldEvent
	// Takeovers and Retries count this run's claims of an expired lease
	// and of a RETRY_WAIT event (every source).
	Takeovers, Retries int
}

// HeldEvent is one event the killed runtime held, with its recovery as the
// ledger audit records it.
type HeldEvent struct {
	Event      string // source/event_id
	ClaimedAt  time.Time
	TakeoverAt time.Time // zero: never taken over
	TakeoverBy string
	Takeover   string // the takeover's reason (whose lease expired when)
	FinishedAt time.Time
	FinishedBy string
	Status     ledger.Status
	Outcome    ledger.Outcome
}

// Recovered reports whether another worker took the event over and it
// finished.
func (h HeldEvent) Recovered() bool { return !h.TakeoverAt.IsZero() && h.Status.Terminal() }

// crashState reads GET /_dev/crash; ok is false when the stack does not
// serve it.
func crashState(ctx context.Context, base string) (devstack.CrashState, bool) {
	var st devstack.CrashState
	return st, getDev(ctx, base, "/_dev/crash", "the crash state", &st) == nil
}

// disarm withdraws requested crashes that have not landed.
func disarm(ctx context.Context, base string) int {
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, base+"/_dev/crash", nil)
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var out struct{ Disarmed int }
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return out.Disarmed
}

// checkCrash fills the crash outcome from the stack's kills since armed
// and the run's ledger rows, and fails the run when the crash interrupted
// no claimed work or that work was not recovered.
func (r *Report) checkCrash(c *CrashOutcome, st devstack.CrashState, armed time.Time, rows map[string]ledger.Event) {
	r.Crash = c
	for _, ev := range rows {
		for _, a := range ev.Audit {
			switch a.Action {
			case "takeover":
				c.Takeovers++
			case "retry":
				c.Retries++
			}
		}
	}
	if !c.Requested {
		return
	}
	if !c.Reported {
		if c.Takeovers == 0 {
			r.violate("crash", "no expired lease was taken over during this run, so the processor kill interrupted no claimed work and proved nothing (this stack does not say what its kill held: restart `make dev` from this tree)")
		}
		return
	}
	for _, k := range st.Kills {
		if k.At.Before(armed) {
			continue // an earlier run's
		}
		c.Kills++
		if len(k.Held) > 0 && c.Kill == nil {
			c.Kill = &k
		}
	}
	for _, ra := range st.Rearmed {
		if !ra.At.Before(armed) {
			c.Rearmed = append(c.Rearmed, ra)
		}
	}
	if c.Kill == nil {
		r.violate("crash", "the processor runtime was never killed while it held claimed work (%d kills, %d batches passed over, %d crash still armed and withdrawn): the crash proved nothing", c.Kills, len(c.Rearmed), c.Disarmed)
		return
	}
	for _, id := range c.Kill.Held {
		h := HeldEvent{Event: id}
		ev, ok := rows[id]
		if !ok {
			r.violate("crash", "%s was held by the killed runtime but is not a row of this run", id)
			c.Held = append(c.Held, h)
			continue
		}
		h.Status = ev.Status
		if ev.Result != nil {
			h.Outcome = ev.Result.Outcome
		}
		owner := c.Kill.Owner
		for _, a := range ev.Audit {
			switch {
			case a.Actor == owner && a.To == ledger.StatusProcessing:
				h.ClaimedAt = a.At
			case a.Actor == owner && a.At.After(c.Kill.At):
				r.violate("I5", "%s: the killed runtime %s wrote %s → %s after it died", id, owner, a.From, a.To)
			case a.Action == "takeover" && a.Actor != owner && !h.ClaimedAt.IsZero() && h.TakeoverAt.IsZero():
				h.TakeoverAt, h.TakeoverBy, h.Takeover = a.At, a.Actor, a.Reason
			}
			if a.From == ledger.StatusProcessing && a.To.Terminal() {
				h.FinishedAt, h.FinishedBy = a.At, a.Actor
			}
		}
		switch {
		case h.ClaimedAt.IsZero():
			r.violate("crash", "%s: the ledger has no claim by the killed runtime %s", id, owner)
		case h.TakeoverAt.IsZero():
			r.violate("I1", "%s was held by the killed runtime %s and never taken over by another worker", id, owner)
		case !h.Status.Terminal():
			r.violate("I1", "%s was taken over by %s but is still %s", id, h.TakeoverBy, h.Status)
		}
		c.Held = append(c.Held, h)
	}
}

// printCrash writes the crash part of the report.
func (c *CrashOutcome) print(w io.Writer) {
	if c == nil {
		return
	}
	other := fmt.Sprintf("%d claim(s) of an expired lease (takeover), %d retry(ies) of a RETRY_WAIT event", c.Takeovers, c.Retries)
	switch {
	case !c.Requested:
		fmt.Fprintf(w, "\nRecovery this run (no crash requested): %s.\n", other)
		return
	case !c.Reported:
		fmt.Fprintf(w, "\nCrash: a processor runtime was killed mid-batch; this stack does not say what it held. Recovery this run: %s.\n", other)
		return
	case c.Kill == nil:
		fmt.Fprintf(w, "\nCrash: NOT PROVEN: the processor runtime was never killed while holding claimed work (%d kills, %d batches passed over). Recovery this run: %s.\n", c.Kills, len(c.Rearmed), other)
		printRearmed(w, c.Rearmed)
		return
	}
	k := c.Kill
	fmt.Fprintf(w, "\nCrash: the %s runtime (lease owner %s) was killed at %s in the middle of a batch of %d messages, holding %d claimed event(s)",
		k.Instance, k.Owner, clock(k.At), k.Batch, len(k.Held))
	if len(k.Finished) > 0 {
		fmt.Fprintf(w, "; it had finished %d event(s) of that batch before (%s)", len(k.Finished), strings.Join(k.Finished, ", "))
	}
	fmt.Fprintln(w, ":")
	recovered, last := 0, k.At
	for _, h := range c.Held {
		fmt.Fprintf(w, "  %s: claimed %s by the killed runtime", h.Event, clock(h.ClaimedAt))
		if h.TakeoverAt.IsZero() {
			fmt.Fprintf(w, "; NEVER TAKEN OVER; now %s\n", h.Status)
			continue
		}
		fmt.Fprintf(w, "; taken over %s by %s (+%s after the kill; %s)", clock(h.TakeoverAt), h.TakeoverBy, h.TakeoverAt.Sub(k.At).Round(100*time.Millisecond), h.Takeover)
		if !h.FinishedAt.IsZero() {
			fmt.Fprintf(w, "; finished %s by %s: %s %s", clock(h.FinishedAt), h.FinishedBy, h.Status, orDash(string(h.Outcome)))
			last = later(last, h.FinishedAt)
		} else {
			fmt.Fprintf(w, "; now %s", h.Status)
		}
		fmt.Fprintln(w)
		if h.Recovered() {
			recovered++
		}
	}
	fmt.Fprintf(w, "Recovered: %d of %d interrupted events taken over by another worker once the killed runtime's lease expired, and finished (%s after the kill).\n",
		recovered, len(c.Held), last.Sub(k.At).Round(100*time.Millisecond))
	fmt.Fprintf(w, "Recovery this run, every source: %s.\n", other)
	printRearmed(w, c.Rearmed)
}

func printRearmed(w io.Writer, rs []devstack.CrashRearm) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "  Before that the crash passed over %d batch(es), re-armed each time:\n", len(rs))
	for _, ra := range rs {
		fmt.Fprintf(w, "    %s %s (batch of %d): %s\n", clock(ra.At), orDash(ra.Instance), ra.Batch, ra.Why)
	}
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("15:04:05.000")
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// recovery is how long a batch killed mid-way takes to be taken over on a
// stack with these timings: its messages come back after the events
// queue's visibility timeout, and a message that comes back while the
// lease still holds fails and waits another visibility timeout; the
// reconciler re-drives a lease expired for ReconcileStuck at its next
// scheduled run. Not sooner than the lease.
func recovery(t devstack.Timings) (soonest, latest time.Duration) {
	v, l := seconds(t.VisibilitySeconds), seconds(t.LeaseSeconds)
	if v <= 0 {
		return l, l
	}
	back := v
	for back < l {
		back += v
	}
	if t.ScheduleSeconds > 0 {
		back = min(back, l+seconds(t.ReconcileStuckSeconds)+seconds(t.ScheduleSeconds))
	}
	return l, back
}

// describeTimings says, before anything is sent, how long this stack's
// recovery takes and so how long the run will wait.
func describeTimings(t devstack.Timings, crash bool) []string {
	soonest, latest := recovery(t)
	v := seconds(t.VisibilitySeconds)
	lines := []string{fmt.Sprintf("this stack's timings: events queue visibility %s, processor lease %s, reconciler every %s re-driving work stuck for %s; effects queue visibility %s, dispatch lease %s",
		v, seconds(t.LeaseSeconds), seconds(t.ScheduleSeconds), seconds(t.ReconcileStuckSeconds), seconds(t.EffectsVisibilitySeconds), seconds(t.DispatchLeaseSeconds))}
	if crash {
		lines = append(lines, fmt.Sprintf("the killed batch's events are taken over %s after the kill (its messages come back after the visibility timeout; not before the %s lease expires)",
			latest.Round(time.Second), soonest.Round(time.Second)))
	}
	lines = append(lines, fmt.Sprintf("an event waiting for a retry (the thin event's 429) waits for its message too: %s", v.Round(time.Second)))
	lines = append(lines, fmt.Sprintf("expect the whole run to take about %s", (max(latest, v)+5*time.Second).Round(time.Second)))
	if v > 30*time.Second {
		lines = append(lines, "these are the deployed timings; `DEV_FAST=1 make dev` (or `make demo` with no stack running, which starts its own) recovers in 4 s")
	}
	return lines
}

// openItem is one unfinished event or intent of the run while waiting.
type openItem struct {
	eta time.Time
	why string
}

// eventETA estimates when an unfinished event finishes: one leased by a
// dead runtime (killed, or holding its lease past the function timeout)
// when its message comes back after the lease expired, a waiting one when
// its message comes back after its retry is due.
func eventETA(ev ledger.Event, t devstack.Timings, now time.Time, killed map[string]time.Time) openItem {
	v := seconds(t.VisibilitySeconds)
	claimed := time.Time{}
	for _, a := range ev.Audit {
		if a.To == ledger.StatusProcessing {
			claimed = a.At
		}
	}
	back := func(due time.Time) time.Time {
		if v <= 0 || claimed.IsZero() {
			return due
		}
		at := claimed.Add(v)
		for at.Before(due) {
			at = at.Add(v)
		}
		return at
	}
	id := ev.Source + "/" + ev.EventID
	var it openItem
	switch {
	case ev.Status == ledger.StatusProcessing && killed[ev.LeaseOwner].IsZero() && now.Sub(claimed) < seconds(t.FunctionTimeoutSeconds):
		it.eta = now.Add(time.Second)
		it.why = fmt.Sprintf("%s is being processed by %s", id, ev.LeaseOwner)
	case ev.Status == ledger.StatusProcessing:
		it.eta = back(ev.LeaseExpires)
		if t.ScheduleSeconds > 0 {
			if viaReconciler := ev.LeaseExpires.Add(seconds(t.ReconcileStuckSeconds) + seconds(t.ScheduleSeconds)); viaReconciler.Before(it.eta) {
				it.eta = viaReconciler
			}
		}
		who := "the dead runtime " + ev.LeaseOwner
		if !killed[ev.LeaseOwner].IsZero() {
			who = "the killed runtime " + ev.LeaseOwner
		}
		it.why = fmt.Sprintf("%s is PROCESSING under %s's lease until %s; another worker takes it over when its message comes back, about %s", id, who, clock(ev.LeaseExpires), clock(it.eta))
	case ev.Status == ledger.StatusRetryWait:
		it.eta = back(ev.NextAttemptAt)
		it.why = fmt.Sprintf("%s waits for a retry (due %s); its message comes back about %s", id, clock(ev.NextAttemptAt), clock(it.eta))
	case ev.Status == ledger.StatusReceived && now.Sub(ev.ReceivedAt) > seconds(2*t.BatchWindowSeconds)+2*time.Second:
		// Unclaimed for a while: its pointer was in a batch that failed
		// (the killed one, most likely) and comes back after the
		// visibility timeout, or the reconciler re-drives it.
		from := ev.ReceivedAt
		for _, at := range killed {
			from = later(from, at)
		}
		it.eta = from.Add(v)
		if t.ScheduleSeconds > 0 {
			if viaReconciler := ev.ReceivedAt.Add(seconds(t.ReconcileStuckSeconds) + seconds(t.ScheduleSeconds)); viaReconciler.Before(it.eta) {
				it.eta = viaReconciler
			}
		}
		it.why = fmt.Sprintf("%s is RECEIVED and unclaimed: its pointer was in a batch that failed (the killed one?) and comes back about %s", id, clock(it.eta))
	default:
		it.eta = now.Add(seconds(t.BatchWindowSeconds) + time.Second)
		it.why = fmt.Sprintf("%s is %s, waiting for a processor", id, ev.Status)
	}
	if it.eta.Before(now) {
		it.eta = now.Add(time.Second)
	}
	return it
}

// openSummary renders counts by status and kind: "PROCESSING stripe×2, RETRY_WAIT stripe×1".
func openSummary(counts map[string]map[string]int) string {
	var statuses []string
	for s := range counts {
		statuses = append(statuses, s)
	}
	sort.Strings(statuses)
	var parts []string
	for _, s := range statuses {
		var kinds []string
		for k, n := range counts[s] {
			kinds = append(kinds, fmt.Sprintf("%s×%d", k, n))
		}
		sort.Strings(kinds)
		parts = append(parts, s+" "+strings.Join(kinds, " "))
	}
	return strings.Join(parts, ", ")
}
