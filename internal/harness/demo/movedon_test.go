package demo

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/harness/downstream"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/builtin"
)

// TestMovedOnStories: the stories use the run's own order and subscription,
// send the older event of each story first, and script exactly one 503 for
// the next call of each waiting effect's kind; without the orders source
// only the race is played.
func TestMovedOnStories(t *testing.T) {
	m := newMovedOn("ab12", 1_796_000_000, true)
	if m.order != "O-43-ab12" || m.sub != "sub_demoab12_race" || m.account != "acct_demoab12_race" {
		t.Fatalf("subjects %s %s %s", m.order, m.sub, m.account)
	}
	if g, r := m.grant.version(), m.revoke.version(); g >= r || r <= 1<<53 || m.grant.Type != "customer.subscription.created" || m.revoke.Type != "customer.subscription.deleted" {
		t.Fatalf("grant v%d (%s), revoke v%d (%s)", g, m.grant.Type, r, m.revoke.Type)
	}
	want := []string{"orders/msg_o43_12_ab12", "stripe/evt_demoab12_race_grant", "orders/msg_o43_13_ab12", "stripe/evt_demoab12_race_revoke"}
	if !slices.Equal(m.events(), want) {
		t.Fatalf("events %v, want %v", m.events(), want)
	}
	if s := m.stories(); len(s) != 4 || s[want[0]] != StoryOverride || s[want[3]] != StoryRace {
		t.Fatalf("stories %v", s)
	}
	if !strings.Contains(string(m.confirm.body), `"type":"order.confirmed"`) || m.confirm.means[0].version != 13 || m.cancel.means[0].state["status"] != "cancelled" {
		t.Fatalf("override events: %s / %+v", m.confirm.body, m.cancel.means)
	}
	var kinds []string
	for _, s := range m.scripts() {
		if len(s.Then) != 1 || s.Then[0].Mode != "unavailable_503" || s.Then[0].RetryAfterSeconds != movedRetryAfter {
			t.Fatalf("script %+v", s)
		}
		kinds = append(kinds, s.Kind)
	}
	if !slices.Equal(kinds, []string{"entitlement.grant", "refund", "notify_cancellation"}) {
		t.Fatalf("scripted kinds %v", kinds)
	}

	race := newMovedOn("ab12", 1_796_000_000, false)
	if len(race.events()) != 2 || len(race.stories()) != 2 || len(race.scripts()) != 1 {
		t.Fatalf("race only: events %v, scripts %v", race.events(), race.scripts())
	}
}

// movedFixture is the ledger and downstream at the end of both stories, as
// the design says they end.
type movedFixture struct {
	out         MovedOutcome
	rows        map[string]ledger.Event
	projections []ledger.Projection
	intents     []ledger.IntentState
	down        devstack.DownstreamState
}

func goodMoved(m *movedOn) movedFixture {
	f := movedFixture{out: MovedOutcome{Override: true, Waited: true}, rows: map[string]ledger.Event{}}
	for _, e := range m.events() {
		src, id, _ := strings.Cut(e, "/")
		f.rows[e] = ledger.Event{Source: src, EventID: id, Status: ledger.StatusProcessed, Result: &ledger.Result{Outcome: ledger.OutcomeApplied}}
	}
	f.projections = []ledger.Projection{
		{Name: builtin.OrderProjection, Subject: m.order, Version: 13, State: map[string]any{"status": "confirmed"}},
		{Name: builtin.StripeSubscriptionProjection, Subject: m.sub, Version: m.revoke.version(), State: map[string]any{"status": "canceled", "deleted": true}},
	}
	f.intents = []ledger.IntentState{
		{OperationID: "op-refund", Kind: "refund", Subject: m.order, ProjectionSubject: m.order, Status: ledger.IntentStatusObsolete},
		{OperationID: "op-notice", Kind: "notify_cancellation", Subject: m.order, ProjectionSubject: m.order, Status: ledger.IntentStatusObsolete},
		{OperationID: "op-grant", Kind: "entitlement.grant", Subject: m.account, ProjectionSubject: m.sub, Status: ledger.IntentStatusSuperseded},
		{OperationID: "op-revoke", Kind: "entitlement.revoke", Subject: m.account, ProjectionSubject: m.sub, Status: ledger.IntentStatusSucceeded},
	}
	revoke := strconv.FormatInt(m.revoke.version(), 10)
	f.down = devstack.DownstreamState{
		Effects: []devstack.DownstreamEffect{{Kind: "entitlement.revoke", Effective: map[string]int{"op-revoke": 1}}},
		Subjects: map[string]map[string]downstream.SubjectView{"entitlement": {m.account: {Last: revoke, LastKind: "entitlement.revoke",
			History: []downstream.Applied{{Version: revoke, Kind: "entitlement.revoke", Key: "op-revoke"}}}}},
	}
	return f
}

// TestCheckMovedFailsTheRun: the override's order must end as the operator
// left it and never be refunded; the race's subscription must end deleted
// and the downstream revoked at its version; a scripted 503 no call used,
// or effects not seen waiting, mean the story did not happen.
func TestCheckMovedFailsTheRun(t *testing.T) {
	m := newMovedOn("ab12", 1_796_000_000, true)
	f := goodMoved(m)
	r := Report{Moved: &f.out}
	r.checkMoved(m, f.rows, f.projections, f.intents, f.down)
	if !r.OK() || r.Moved.OrderState != "confirmed" || r.Moved.OrderVersion != 13 || r.Moved.RefundCalls != 0 ||
		!r.Moved.SubDeleted || r.Moved.DownstreamLast != strconv.FormatInt(m.revoke.version(), 10) || r.Moved.DownstreamKind != "entitlement.revoke" {
		t.Fatalf("violations %v, outcome %+v", r.Violations, r.Moved)
	}

	for _, c := range []struct {
		name  string
		spoil func(*movedFixture)
		want  string
	}{
		{"the refund was applied", func(f *movedFixture) {
			f.down.Effects = append(f.down.Effects, devstack.DownstreamEffect{Kind: "refund", Effective: map[string]int{"op-refund": 1}})
		}, "the downstream refunded order O-43-ab12 1 time(s)"},
		{"the order did not take the operator's revision", func(f *movedFixture) {
			f.projections[0].State["status"], f.projections[0].Version = "cancelled", 12
		}, "holds cancelled v12, the operator's r13 says confirmed"},
		{"the refund was contradicted though never performed", func(f *movedFixture) {
			f.intents[0].Status = ledger.IntentStatusContradicted
		}, "nothing was performed, so nothing is to contradict"},
		{"the downstream ended at the grant", func(f *movedFixture) {
			sv := f.down.Subjects["entitlement"][m.account]
			sv.History = append(sv.History, downstream.Applied{Version: strconv.FormatInt(m.grant.version(), 10), Kind: "entitlement.grant", Key: "op-grant"})
			sv.Last, sv.LastKind, sv.Regressions = strconv.FormatInt(m.grant.version(), 10), "entitlement.grant", 1
			f.down.Subjects["entitlement"][m.account] = sv
		}, "want the revoke at v"},
		{"the 503 was never used", func(f *movedFixture) {
			f.out.Leftover = map[string]int{"entitlement.grant": 1}
		}, "scripted for the stories' next entitlement.grant call was never used"},
		{"the effects were not seen waiting", func(f *movedFixture) {
			f.out.Waited = false
		}, "not seen waiting on the scripted 503"},
		{"the operator's revision was quarantined", func(f *movedFixture) {
			f.rows["orders/msg_o43_13_ab12"] = ledger.Event{Status: ledger.StatusQuarantined, ErrorCode: "conflict"}
		}, "orders/msg_o43_13_ab12 ended QUARANTINED (conflict)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := goodMoved(m)
			c.spoil(&f)
			r := Report{Moved: &f.out}
			r.checkMoved(m, f.rows, f.projections, f.intents, f.down)
			if got := strings.Join(r.Violations, "\n"); r.OK() || !strings.Contains(got, c.want) {
				t.Fatalf("violations %q, want one saying %q", got, c.want)
			}
		})
	}
}
