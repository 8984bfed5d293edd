package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/harness/downstream"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// The truth moves on while effects wait (I7; see docs/architecture.md). Two
// stories are played once the main story is quiet, so that the downstream
// answers scripted for them (per kind, for the next call of that kind) meet
// their calls and no other:
//
//   - Override: order O-43 is cancelled at r12; its refund and its
//     cancellation notice meet a 503 (Retry-After) at the downstream; while
//     they wait, the operator's r13 (order.confirmed: the customer kept the
//     order) is processed. When the downstream has recovered, the retries
//     end OBSOLETE without a call: the downstream never refunds the order.
//   - Grant/revoke race: a subscription's grant meets a 503 (Retry-After);
//     meanwhile the subscription is deleted and its revoke, at a higher
//     version, is delivered and performed. The grant's retry ends
//     SUPERSEDED: the downstream ends revoked, at the deletion's version,
//     and never went back to an older one.
//
// Both are played in step: the first events of both, a wait until their
// effects wait on the 503, the newer events of both, a wait until every
// effect is finished.

// Story names a scripted story an effect plays a part in
// (EffectOutcome.Story).
const (
	StoryTimeout  = "O-42: timeout after success"
	StoryOverride = "override while queued"
	StoryRace     = "grant/revoke retry race"
)

// movedRetryAfter is the Retry-After (seconds) of the stories' 503s: the
// newer revision is processed, and the revoke performed, well within it.
const movedRetryAfter = 8

// movedOn is the model of the two stories: what the senders meant.
type movedOn struct {
	order           string        // the override story's order
	cancel, confirm otherDelivery // r12 order.cancelled, r13 order.confirmed
	sub, account    string        // the race's subscription and its local account
	grant, revoke   *event        // created (active: a grant), deleted (a revoke)
	override        bool          // the orders source is there: the override story is played
}

// newMovedOn builds the stories; ids carry the run tag, as every id of
// the demo does, so each run has its own order and subscription.
func newMovedOn(run string, now int64, override bool) *movedOn {
	m := &movedOn{order: "O-43-" + run, sub: "sub_demo" + run + "_race", account: "acct_demo" + run + "_race", override: override}
	for _, rev := range []struct {
		rev          int
		typ, status  string
		extra        string
		into         *otherDelivery
		wantsEffects []string
	}{
		{12, "order.cancelled", "cancelled", "", &m.cancel, []string{"notify_cancellation", "refund"}},
		{13, "order.confirmed", "confirmed", `,"note":"operator override: the customer kept the order"`, &m.confirm, nil},
	} {
		id := fmt.Sprintf("msg_o43_%d_%s", rev.rev, run)
		body := fmt.Appendf(nil, `{"type":%q,"timestamp":"2026-11-30T12:05:%02dZ","data":{"id":%q,"revision":%d,"status":%q,"customer_id":"cus_o43","currency":"EUR","total_minor":4200%s}}`,
			rev.typ, rev.rev, m.order, rev.rev, rev.status, rev.extra)
		*rev.into = orderDelivery(id, body, false, meant{event: id, kind: "order", projection: builtin.OrderProjection, subject: m.order,
			version: int64(rev.rev), state: map[string]string{"status": rev.status}, intents: rev.wantsEffects})
	}
	m.grant = newEvent("evt_demo"+run+"_race_grant", "customer.subscription.created", m.sub, "active", m.account, now-120)
	m.revoke = newEvent("evt_demo"+run+"_race_revoke", "customer.subscription.deleted", m.sub, "canceled", m.account, now-60)
	return m
}

// events are the stories' ledger rows (source/event_id) in the order they
// are sent: the older ones first.
func (m *movedOn) events() []string {
	var out []string
	if m.override {
		out = append(out, "orders/"+m.cancel.events[0])
	}
	out = append(out, "stripe/"+m.grant.ID)
	if m.override {
		out = append(out, "orders/"+m.confirm.events[0])
	}
	return append(out, "stripe/"+m.revoke.ID)
}

// stories maps each story event (source/event_id) to its story.
func (m *movedOn) stories() map[string]string {
	out := map[string]string{"stripe/" + m.grant.ID: StoryRace, "stripe/" + m.revoke.ID: StoryRace}
	if m.override {
		out["orders/"+m.cancel.events[0]] = StoryOverride
		out["orders/"+m.confirm.events[0]] = StoryOverride
	}
	return out
}

// scripts are the downstream's answers the stories need: one 503 with
// Retry-After for the next call of each waiting effect's kind.
func (m *movedOn) scripts() []devstack.Script {
	unavailable := []devstack.Behavior{{Mode: "unavailable_503", RetryAfterSeconds: movedRetryAfter}}
	out := []devstack.Script{{Kind: "entitlement.grant", Then: unavailable}}
	if m.override {
		out = append(out, devstack.Script{Kind: "refund", Then: unavailable}, devstack.Script{Kind: "notify_cancellation", Then: unavailable})
	}
	return out
}

// MovedOutcome is what the two stories did, checked against what the
// senders meant.
type MovedOutcome struct {
	Override   bool // the override story was played (the stack has the orders source)
	RetryAfter int  // seconds, of the scripted 503s
	// ClearedBefore are scripted answers no call had used when the stories
	// began (left by the O-42 story or an earlier run), dropped so that they
	// cannot answer the stories' calls; Leftover, those the stories' calls
	// did not use (must be none).
	ClearedBefore, Leftover map[string]int
	// Waited: the first events' effects were seen waiting on the 503
	// before the newer events were sent.
	Waited bool

	// The override story.
	Order        string
	OrderState   string // the order's canonical status at the end (the operator's: confirmed)
	OrderVersion int64
	RefundCalls  int // effective refund calls the downstream applied for the order (must be 0)
	OrderLine    []string

	// The race.
	Sub, Account                string
	GrantVersion, RevokeVersion int64 // what the senders' events mean
	SubDeleted                  bool
	SubVersion                  int64 // the subscription's canonical version at the end
	// DownstreamLast and DownstreamKind are the downstream's last applied
	// version and kind for the account, Regressions its regressions.
	DownstreamLast, DownstreamKind string
	Regressions                    int
	RaceLine                       []string
}

// play runs both stories against the stack and records what was sent in
// rep; checkMoved judges the outcome from the ledger and the downstream.
func (m *movedOn) play(ctx context.Context, t Target, o Options, rep *Report) error {
	out := &MovedOutcome{Override: m.override, RetryAfter: movedRetryAfter, Order: m.order, Sub: m.sub, Account: m.account,
		GrantVersion: m.grant.version(), RevokeVersion: m.revoke.version()}
	rep.Moved = out
	l, err := ledger.New(t.DB, ledger.Options{Table: t.Table})
	if err != nil {
		return err
	}
	cleared, err := clearScripts(ctx, t.BaseURL)
	if err != nil {
		return err
	}
	out.ClearedBefore = cleared
	if len(cleared) > 0 {
		progress(o.Progress, "dropped scripted downstream answers no call had used (%v), so they cannot answer the next stories' calls", cleared)
	}
	kinds := "entitlement grant"
	if m.override {
		kinds = "refund, cancellation notice and entitlement grant"
	}
	progress(o.Progress, "the truth moves on while effects wait: the fake downstream will answer the next %s with 503 (Retry-After: %ds)", kinds, movedRetryAfter)
	if err := scriptDownstream(ctx, t.BaseURL, m.scripts()); err != nil {
		return err
	}

	var first, then []string
	if m.override {
		progress(o.Progress, "override: sending order %s r12 (order.cancelled): a refund and a cancellation notice are due", m.order)
		rep.recordOther(m.cancel, sendOther(ctx, t.BaseURL, m.cancel, t.Others["orders"]), false)
		first = append(first, "orders/"+m.cancel.events[0])
	}
	progress(o.Progress, "race: sending %s created (active): a grant at v%d", m.sub, m.grant.version())
	rep.record(m.grant.ID, send(ctx, t.BaseURL, delivery{ev: m.grant, secret: t.Secret}))
	first = append(first, "stripe/"+m.grant.ID)

	waiting := func(in ledger.IntentState) bool {
		return in.Status == ledger.IntentStatusRetryWait || in.Status.Terminal()
	}
	states, ok := waitIntents(ctx, l, first, o.Timeout, waiting)
	out.Waited = ok
	for _, op := range slices.Sorted(maps.Keys(states)) {
		in := states[op]
		if in.Status == ledger.IntentStatusRetryWait {
			progress(o.Progress, "  %s %s waits (RETRY_WAIT, %s) until %s", in.Kind, op, in.ErrorCode, clock(in.NextAttemptAt))
		} else {
			out.Waited = false
			progress(o.Progress, "  %s %s already ended %s (%s): the story did not go as scripted", in.Kind, op, in.Status, in.ErrorCode)
		}
	}
	if m.override {
		progress(o.Progress, "override: sending the operator's r13 (order.confirmed: the customer kept the order) while they wait")
		rep.recordOther(m.confirm, sendOther(ctx, t.BaseURL, m.confirm, t.Others["orders"]), false)
		then = append(then, "orders/"+m.confirm.events[0])
	}
	progress(o.Progress, "race: sending %s deleted: a revoke at v%d, delivered while the grant waits", m.sub, m.revoke.version())
	rep.record(m.revoke.ID, send(ctx, t.BaseURL, delivery{ev: m.revoke, secret: t.Secret}))
	then = append(then, "stripe/"+m.revoke.ID)

	progress(o.Progress, "waiting for the retries (~%ds): the waiting effects must end without a call (OBSOLETE, SUPERSEDED)", movedRetryAfter)
	done := func(in ledger.IntentState) bool { return in.Status.Terminal() }
	if _, ok := waitIntents(ctx, l, append(first, then...), o.Timeout, done); !ok {
		progress(o.Progress, "  the stories' effects did not all finish in %s", o.Timeout)
	}
	if out.Leftover, err = clearScripts(ctx, t.BaseURL); err != nil {
		return err
	}
	return nil
}

// waitIntents polls the ledger until every event of events (source/id)
// is finished and every intent its commit wrote satisfies done, or the
// timeout passes. It returns the intents as last read.
func waitIntents(ctx context.Context, l *ledger.Ledger, events []string, timeout time.Duration, done func(ledger.IntentState) bool) (map[string]ledger.IntentState, bool) {
	deadline := time.Now().Add(timeout)
	for {
		states := map[string]ledger.IntentState{}
		all := true
		for _, e := range events {
			src, id, _ := strings.Cut(e, "/")
			ev, err := l.Get(ctx, src, id)
			if err != nil || !ev.Status.Terminal() {
				all = false
				continue
			}
			if ev.Result == nil {
				continue
			}
			for _, op := range ev.Result.Operations {
				if warehouseKind(op.Kind) {
					continue // a change record, not a call to the downstream
				}
				in, err := l.GetIntentState(ctx, op.ID)
				if err != nil {
					all = false
					continue
				}
				states[op.ID] = in
				all = all && done(in)
			}
		}
		if all {
			return states, true
		}
		if !time.Now().Before(deadline) || ctx.Err() != nil {
			return states, false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// clearScripts drops the fake downstream's scripted answers no call has
// used yet, of every kind, and returns how many per kind.
func clearScripts(ctx context.Context, base string) (map[string]int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, base+"/_dev/downstream/script", nil)
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("clear the downstream's scripts: %w", err)
	}
	defer resp.Body.Close()
	var body struct {
		Cleared map[string]int `json:"cleared"`
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("clear the downstream's scripts: HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("clear the downstream's scripts: %w", err)
	}
	if len(body.Cleared) == 0 {
		return nil, nil
	}
	return body.Cleared, nil
}

// checkMoved judges the two stories against what the senders meant: the
// order ends as the operator left it (confirmed, r13) and the downstream
// never refunded it; the subscription ends deleted at the revoke's version
// and the downstream ends there too, revoked, never having gone back. The
// effects' own steps are checked with the other effects (checkStory).
func (r *Report) checkMoved(m *movedOn, rows map[string]ledger.Event, projections []ledger.Projection, intents []ledger.IntentState, down devstack.DownstreamState) {
	out := r.Moved
	if out == nil {
		return
	}
	fail := func(format string, args ...any) { r.violate("I7", format, args...) }
	if !out.Waited {
		fail("the stories' first effects were not seen waiting on the scripted 503 before the newer revisions were sent")
	}
	for kind, n := range out.Leftover {
		fail("the downstream's answer scripted for the stories' next %s call was never used (%d left): the story did not happen", kind, n)
	}
	for _, e := range m.events() {
		ev, ok := rows[e]
		switch {
		case !ok:
			fail("%s has no ledger row", e)
		case ev.Status != ledger.StatusProcessed || ev.Result == nil || ev.Result.Outcome != ledger.OutcomeApplied:
			fail("%s ended %s (%s), want PROCESSED and applied", e, ev.Status, ev.ErrorCode)
		}
	}
	proj := func(name, subject string) (ledger.Projection, bool) {
		for _, p := range projections {
			if _, base := projection.SplitScoped(p.Name); base == name && p.Subject == subject {
				return p, true
			}
		}
		return ledger.Projection{}, false
	}
	effective := effectiveByKey(down)
	lines := func(story string) []string { return storyTimeline(story, m, rows, intents) }

	if m.override {
		out.OrderLine = lines(StoryOverride)
		if p, ok := proj(builtin.OrderProjection, m.order); !ok {
			fail("order %s has no projection", m.order)
		} else {
			out.OrderState, _ = p.State["status"].(string)
			out.OrderVersion = p.Version
			if out.OrderState != "confirmed" || p.Version != 13 {
				fail("order %s holds %s v%d, the operator's r13 says confirmed", m.order, out.OrderState, p.Version)
			}
		}
		for _, in := range intents {
			if in.Kind == "refund" && in.Subject == m.order {
				out.RefundCalls += effective[in.OperationID]
			}
			if in.ProjectionSubject == m.order && (in.Status == ledger.IntentStatusContradicted || in.CompensatedBy != "") {
				fail("order %s: %s %s ended %s (compensated by %q); nothing was performed, so nothing is to contradict", m.order, in.Kind, in.OperationID, in.Status, in.CompensatedBy)
			}
		}
		if sv, ok := subjectView(down, intents, "refund", m.order); ok && len(sv.History) > 0 {
			out.RefundCalls = max(out.RefundCalls, len(sv.History))
		}
		if out.RefundCalls != 0 {
			fail("the downstream refunded order %s %d time(s); the operator confirmed it while the refund waited", m.order, out.RefundCalls)
		}
	}

	out.RaceLine = lines(StoryRace)
	if p, ok := proj(builtin.StripeSubscriptionProjection, m.sub); !ok {
		fail("subscription %s has no projection", m.sub)
	} else {
		out.SubDeleted, _ = p.State["deleted"].(bool)
		out.SubVersion = p.Version
		if !out.SubDeleted || p.Version != m.revoke.version() {
			fail("subscription %s holds deleted=%v v%d, want deleted at v%d", m.sub, out.SubDeleted, p.Version, m.revoke.version())
		}
	}
	sv, _ := subjectView(down, intents, ledger.Family("entitlement.revoke"), m.account)
	out.DownstreamLast, out.DownstreamKind, out.Regressions = sv.Last, sv.LastKind, sv.Regressions
	if sv.Last != strconv.FormatInt(m.revoke.version(), 10) || sv.LastKind != "entitlement.revoke" || sv.Regressions != 0 {
		fail("the downstream last applied %s for %s (%s, %d regressions), want the revoke at v%d", orNothing(sv.Last), m.account, orDash(sv.LastKind), sv.Regressions, m.revoke.version())
	}
	for _, a := range sv.History {
		if a.Kind == "entitlement.grant" {
			fail("the downstream applied the grant v%s to %s; its retry should have been superseded by the revoke", a.Version, m.account)
		}
	}
}

// storyTimeline lists, in time order, what happened in one story: its
// events' processing and its effects' recorded outcomes (claims left out).
func storyTimeline(story string, m *movedOn, rows map[string]ledger.Event, intents []ledger.IntentState) []string {
	type line struct {
		at   time.Time
		text string
	}
	var ls []line
	stories := m.stories()
	for e, s := range stories {
		if s != story {
			continue
		}
		ev, ok := rows[e]
		if !ok {
			continue
		}
		outcome := string(ev.Status)
		if ev.Result != nil {
			outcome = string(ev.Result.Outcome)
			if len(ev.Result.Operations) > 0 {
				var kinds []string
				for _, op := range ev.Result.Operations {
					kinds = append(kinds, op.Kind)
				}
				sort.Strings(kinds)
				outcome += ", intents " + strings.Join(kinds, ", ")
			}
		}
		ls = append(ls, line{ev.ProcessedAt, fmt.Sprintf("%s processed (%s): %s", ev.EventID, ev.EventType, outcome)})
	}
	for _, in := range intents {
		if stories[in.Causation] != story {
			continue
		}
		for _, a := range in.Audit {
			if a.To == ledger.Status(ledger.IntentStatusDispatching) || a.To == ledger.Status(ledger.IntentStatusPending) {
				continue
			}
			ls = append(ls, line{a.At, fmt.Sprintf("%s %s: %s → %s: %s", in.Kind, in.OperationID, orDash(string(a.From)), a.To, orDash(a.Reason))})
		}
	}
	sort.SliceStable(ls, func(i, j int) bool { return ls[i].at.Before(ls[j].at) })
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = clock(l.at) + "  " + l.text
	}
	return out
}

// printMoved writes the two stories' part of the report.
func (r Report) printMoved(w io.Writer) {
	o := r.Moved
	if o == nil {
		return
	}
	fmt.Fprintf(w, "\nThe truth moved on while effects waited (I7); the downstream answered each waiting effect's first call 503, Retry-After: %ds:\n", o.RetryAfter)
	if len(o.ClearedBefore) > 0 {
		fmt.Fprintf(w, "  (before the stories, dropped scripted answers no call had used: %v)\n", o.ClearedBefore)
	}
	if o.Override {
		fmt.Fprintf(w, "  Override: order %s cancelled at r12; its refund and notice wait on the 503; the operator's r13 (order.confirmed) arrives meanwhile.\n", o.Order)
		for _, l := range o.OrderLine {
			fmt.Fprintf(w, "    %s\n", l)
		}
		fmt.Fprintf(w, "    order now:           %s v%d\n", orDash(o.OrderState), o.OrderVersion)
		fmt.Fprintf(w, "    refunds applied:     %d (want 0)\n", o.RefundCalls)
	}
	fmt.Fprintf(w, "  Grant/revoke race: subscription %s (downstream subject %s); the grant v%d waits on the 503, the deletion's revoke v%d is delivered meanwhile.\n", o.Sub, o.Account, o.GrantVersion, o.RevokeVersion)
	for _, l := range o.RaceLine {
		fmt.Fprintf(w, "    %s\n", l)
	}
	state := "not deleted"
	if o.SubDeleted {
		state = "deleted"
	}
	fmt.Fprintf(w, "    subscription now:    %s v%d\n", state, o.SubVersion)
	fmt.Fprintf(w, "    downstream now:      last applied %s (%s), %d regressions (want v%d, entitlement.revoke, 0)\n", orNothing(o.DownstreamLast), orDash(o.DownstreamKind), o.Regressions, o.RevokeVersion)
	if len(o.Leftover) > 0 {
		fmt.Fprintf(w, "  scripted answers the stories never used: %v\n", o.Leftover)
	}
}

// subjectView is the downstream's view of subject in a kind family, keyed
// as the downstream keys it: by the scope of the intents that reached it.
func subjectView(down devstack.DownstreamState, intents []ledger.IntentState, family, subject string) (downstream.SubjectView, bool) {
	for _, in := range intents {
		if ledger.Family(in.Kind) != family || in.Subject != subject {
			continue
		}
		if sv, ok := down.Subjects[family][downstream.SubjectKey{Scope: in.Scope, Subject: subject}.String()]; ok {
			return sv, true
		}
	}
	return downstream.SubjectView{}, false
}
