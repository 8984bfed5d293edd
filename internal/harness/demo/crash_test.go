package demo

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// TestCheckCrash: the report states what the kill held and how each event
// was recovered, and fails the run when the crash interrupted nothing, or
// held work nobody took over.
func TestCheckCrash(t *testing.T) {
	armed := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	killAt := armed.Add(2 * time.Second)
	at := func(d time.Duration) time.Time { return killAt.Add(d) }
	const dead, live = "$LATEST/dead0001", "$LATEST/live0002"
	recovered := ledger.Event{Source: "stripe", EventID: "evt_a", Status: ledger.StatusProcessed, Result: &ledger.Result{Outcome: ledger.OutcomeApplied},
		Audit: []ledger.AuditEntry{
			{At: armed, To: ledger.StatusReceived, Actor: "intake", Action: "accept"},
			{At: at(-10 * time.Millisecond), From: ledger.StatusReceived, To: ledger.StatusProcessing, Actor: dead, Action: "claim"},
			{At: at(4 * time.Second), From: ledger.StatusProcessing, To: ledger.StatusProcessing, Actor: live, Action: "takeover", Reason: "lease of " + dead + " expired"},
			{At: at(4*time.Second + 5*time.Millisecond), From: ledger.StatusProcessing, To: ledger.StatusProcessed, Actor: live, Action: "complete"},
		}}
	stuck := ledger.Event{Source: "stripe", EventID: "evt_b", Status: ledger.StatusProcessing, LeaseOwner: dead,
		Audit: []ledger.AuditEntry{
			{At: armed, To: ledger.StatusReceived, Actor: "intake", Action: "accept"},
			{At: at(-5 * time.Millisecond), From: ledger.StatusReceived, To: ledger.StatusProcessing, Actor: dead, Action: "claim"},
		}}
	rows := map[string]ledger.Event{"stripe/evt_a": recovered, "stripe/evt_b": stuck}
	kill := func(held ...string) devstack.CrashKill {
		return devstack.CrashKill{At: killAt, Instance: "processor-1", Owner: dead, Batch: 10, Held: held}
	}
	earlier := devstack.CrashKill{At: armed.Add(-time.Hour), Owner: "$LATEST/old", Held: []string{"stripe/evt_old"}}

	for _, c := range []struct {
		name     string
		crash    CrashOutcome
		state    devstack.CrashState
		want     string // a violation saying this; "" for none
		takeover int
	}{
		{"held work taken over and finished", CrashOutcome{Requested: true, Reported: true},
			devstack.CrashState{Kills: []devstack.CrashKill{earlier, kill("stripe/evt_a")}}, "", 1},
		{"a kill that held nothing proves nothing", CrashOutcome{Requested: true, Reported: true},
			devstack.CrashState{Kills: []devstack.CrashKill{earlier, kill()}, Rearmed: []devstack.CrashRearm{{At: killAt, Why: "claimed none"}}}, "never killed while it held claimed work", 1},
		{"held work nobody took over", CrashOutcome{Requested: true, Reported: true},
			devstack.CrashState{Kills: []devstack.CrashKill{kill("stripe/evt_a", "stripe/evt_b")}}, "stripe/evt_b was held by the killed runtime " + dead + " and never taken over", 1},
		{"an older stack and no takeover at all", CrashOutcome{Requested: true}, devstack.CrashState{}, "no expired lease was taken over", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Report{}
			in := rows
			if c.takeover == 0 {
				in = map[string]ledger.Event{"stripe/evt_b": stuck}
			}
			crash := c.crash
			r.checkCrash(&crash, c.state, armed, in)
			if crash.Takeovers != c.takeover {
				t.Fatalf("takeovers %d, want %d", crash.Takeovers, c.takeover)
			}
			if c.want == "" {
				if !r.OK() || crash.Kill == nil || len(crash.Held) != 1 || !crash.Held[0].Recovered() || crash.Held[0].TakeoverBy != live || crash.Kills != 1 {
					t.Fatalf("violations %v, crash %+v", r.Violations, crash)
				}
				var out strings.Builder
				crash.print(&out)
				for _, want := range []string{"processor-1 runtime (lease owner " + dead + ")", "taken over", "by " + live, "Recovered: 1 of 1"} {
					if !strings.Contains(out.String(), want) {
						t.Fatalf("report lacks %q:\n%s", want, out.String())
					}
				}
				return
			}
			if !slices.ContainsFunc(r.Violations, func(v string) bool { return strings.Contains(v, c.want) }) {
				t.Fatalf("violations %v, want one saying %q", r.Violations, c.want)
			}
		})
	}
}

// TestRecoveryFromTimings: how long a killed batch takes to be taken over
// follows from the stack's settings.
func TestRecoveryFromTimings(t *testing.T) {
	for _, c := range []struct {
		name            string
		t               devstack.Timings
		soonest, latest time.Duration
	}{
		{"deployed: the visibility timeout", devstack.Timings{VisibilitySeconds: 180, LeaseSeconds: 60, ScheduleSeconds: 60, ReconcileStuckSeconds: 300}, time.Minute, 3 * time.Minute},
		{"fast profile", devstack.Timings{VisibilitySeconds: 4, LeaseSeconds: 3, ScheduleSeconds: 60, ReconcileStuckSeconds: 30}, 3 * time.Second, 4 * time.Second},
		{"a lease longer than the visibility: the message comes back more than once", devstack.Timings{VisibilitySeconds: 4, LeaseSeconds: 10, ScheduleSeconds: 60, ReconcileStuckSeconds: 300}, 10 * time.Second, 12 * time.Second},
		{"the reconciler is sooner", devstack.Timings{VisibilitySeconds: 180, LeaseSeconds: 200, ScheduleSeconds: 60, ReconcileStuckSeconds: 30}, 200 * time.Second, 290 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			if soonest, latest := recovery(c.t); soonest != c.soonest || latest != c.latest {
				t.Fatalf("recovery %s..%s, want %s..%s", soonest, latest, c.soonest, c.latest)
			}
		})
	}
	lines := strings.Join(describeTimings(devstack.Timings{VisibilitySeconds: 180, LeaseSeconds: 60, ScheduleSeconds: 60, ReconcileStuckSeconds: 300}, true), "\n")
	for _, want := range []string{"taken over 3m0s after the kill", "1m0s lease", "DEV_FAST=1 make dev"} {
		if !strings.Contains(lines, want) {
			t.Fatalf("timings lack %q:\n%s", want, lines)
		}
	}
}

// TestEventETA: an event leased by the killed runtime is done when its
// message comes back after the lease expired; one a live worker just
// claimed, in a moment.
func TestEventETA(t *testing.T) {
	tm := devstack.Timings{VisibilitySeconds: 180, LeaseSeconds: 60, FunctionTimeoutSeconds: 30, ScheduleSeconds: 60, ReconcileStuckSeconds: 300}
	claimed := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ev := ledger.Event{Source: "stripe", EventID: "evt_a", Status: ledger.StatusProcessing, LeaseOwner: "$LATEST/dead", LeaseExpires: claimed.Add(time.Minute),
		Audit: []ledger.AuditEntry{{At: claimed, To: ledger.StatusProcessing}}}
	now := claimed.Add(10 * time.Second)
	it := eventETA(ev, tm, now, map[string]time.Time{"$LATEST/dead": claimed})
	if !it.eta.Equal(claimed.Add(3*time.Minute)) || !strings.Contains(it.why, "killed runtime") {
		t.Fatalf("dead lease: %+v", it)
	}
	if it := eventETA(ev, tm, now, nil); !it.eta.Equal(now.Add(time.Second)) || !strings.Contains(it.why, "being processed") {
		t.Fatalf("live lease: %+v", it)
	}
	ev.Status, ev.NextAttemptAt = ledger.StatusRetryWait, claimed.Add(time.Second)
	if it := eventETA(ev, tm, now, nil); !it.eta.Equal(claimed.Add(3 * time.Minute)) {
		t.Fatalf("retry: %+v", it)
	}
	// A row unclaimed since before the kill: its pointer was in the
	// killed batch.
	ev = ledger.Event{Source: "stripe", EventID: "evt_c", Status: ledger.StatusReceived, ReceivedAt: claimed.Add(-time.Second)}
	if it := eventETA(ev, tm, now, map[string]time.Time{"$LATEST/dead": claimed}); !it.eta.Equal(claimed.Add(3*time.Minute)) || !strings.Contains(it.why, "unclaimed") {
		t.Fatalf("unclaimed: %+v", it)
	}
}
