package demo

import (
	"slices"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/builtin"
)

// thinRun is what a good run leaves for the story's thin events: one
// processed row per fact (fetched where the thin event came first), one
// intent each, and the Stripe API's answers (the scripted 429 first).
func thinRun(s *story) (ledger.Snapshot, devstack.StripeRequests) {
	var snap ledger.Snapshot
	reqs := devstack.StripeRequests{Addr: "127.0.0.1:3003"}
	for _, t := range s.thins {
		fetched := t.Thin.Twin == nil || t.Thin.ThinFirst
		reason := "outcome applied"
		if fetched {
			reason += "; fetched from Stripe at 2026-12-01T12:00:00Z"
			if t.Thin.RateLimited {
				reqs.Requests = append(reqs.Requests, devstack.StripeRequest{Path: stripePath(t.Sub), Status: 429})
			}
			reqs.Requests = append(reqs.Requests, devstack.StripeRequest{Path: stripePath(t.Sub), Status: 200})
		}
		snap.Events = append(snap.Events, ledger.Event{Source: "stripe", EventID: t.fact(), Subject: t.Sub, Status: ledger.StatusProcessed,
			Result: &ledger.Result{Outcome: ledger.OutcomeApplied}, Audit: []ledger.AuditEntry{{Action: "accept"}, {Action: "complete", Reason: reason}}})
		snap.Intents = append(snap.Intents, ledger.StoredIntent{OperationID: "op-" + t.ID, Causation: "stripe/" + t.fact()})
	}
	return snap, reqs
}

// TestCheckThinFailsTheRun: a migration pair that became two rows or two
// intent sets, a thin event that did not end PROCESSED, and a scripted 429
// that never happened are each a violation; a good run has none.
func TestCheckThinFailsTheRun(t *testing.T) {
	s := newStory(6, 1796160000)
	if len(s.thins) != 4 || len(s.twins) != 2 || s.truth[s.subs[4]] != "canceled" || !s.fetched(s.subs[3]) || s.fetched(s.subs[1]) {
		t.Fatalf("story: %d thin events, %d twins, truth %v", len(s.thins), len(s.twins), s.truth)
	}
	var twin *event
	for _, th := range s.twins {
		if th.Thin.ThinFirst {
			twin = th
		}
	}
	cases := []struct {
		name  string
		spoil func(*ledger.Snapshot, *devstack.StripeRequests)
		want  string
	}{
		{"good run", func(*ledger.Snapshot, *devstack.StripeRequests) {}, ""},
		{"twin became its own row", func(snap *ledger.Snapshot, _ *devstack.StripeRequests) {
			snap.Events = append(snap.Events, ledger.Event{Source: "stripe", EventID: twin.ID, Status: ledger.StatusProcessed})
		}, "2 ledger rows"},
		{"twin created a second intent set", func(snap *ledger.Snapshot, _ *devstack.StripeRequests) {
			snap.Intents = append(snap.Intents, ledger.StoredIntent{OperationID: "op-again", Causation: "stripe/" + twin.ID})
		}, "2 intents"},
		{"thin event left in RETRY_WAIT", func(snap *ledger.Snapshot, _ *devstack.StripeRequests) {
			snap.Events[0].Status = ledger.StatusRetryWait
		}, "want PROCESSED"},
		{"the 429 never happened", func(_ *ledger.Snapshot, reqs *devstack.StripeRequests) {
			reqs.Requests = reqs.Requests[1:]
		}, "want a 429 first"},
		{"a twin sent first was not fetched", func(_ *ledger.Snapshot, reqs *devstack.StripeRequests) {
			reqs.Requests = slices.DeleteFunc(reqs.Requests, func(q devstack.StripeRequest) bool { return q.Path == stripePath(twin.Sub) })
		}, "the thin event was sent first, but Stripe was never asked"},
		{"a twin sent after its snapshot was fetched", func(_ *ledger.Snapshot, reqs *devstack.StripeRequests) {
			for _, th := range s.twins {
				if !th.Thin.ThinFirst {
					reqs.Requests = append(reqs.Requests, devstack.StripeRequest{Path: stripePath(th.Sub), Status: 200})
				}
			}
		}, "the snapshot was sent first, yet Stripe was asked"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			snap, reqs := thinRun(s)
			c.spoil(&snap, &reqs)
			r := Report{statusOf: map[string]int{}}
			r.checkThin(s, snap, reqs)
			if c.want == "" {
				if !r.OK() || len(r.Thin) != 4 {
					t.Fatalf("violations %v, thin %+v", r.Violations, r.Thin)
				}
				for _, o := range r.Thin {
					if o.Fetched != s.fetched(o.Subject) || o.Rows != 1 || o.Intents != 1 {
						t.Fatalf("thin outcome %+v", o)
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

// TestCheckSubjectAgainstStripe: a subscription a thin event was resolved
// for must hold Stripe's state, whatever its snapshot events said.
func TestCheckSubjectAgainstStripe(t *testing.T) {
	s := newStory(6, 1796160000)
	final := s.expectedFinal()
	var snap ledger.Snapshot
	for _, sub := range s.subs {
		want := final[sub]
		// Subscription 5's snapshot events end active; Stripe canceled
		// it. A store that kept the snapshot state is wrong.
		snap.Projections = append(snap.Projections, ledger.Projection{Name: builtin.StripeSubscriptionProjection, Subject: sub,
			Version: want.version(), State: map[string]any{"status": want.Status, "deleted": want.Type == "customer.subscription.deleted"}})
	}
	r := Report{statusOf: map[string]int{}}
	r.check(s, snap, true, 0, nil)
	if !slices.ContainsFunc(r.Violations, func(v string) bool { return strings.Contains(v, s.subs[4]+" holds active, Stripe says canceled") }) {
		t.Fatalf("violations %v", r.Violations)
	}
	for _, v := range r.Violations {
		if strings.HasPrefix(v, "I3") && !strings.Contains(v, s.subs[4]) {
			t.Fatalf("only subscription 5 differs from Stripe: %v", v)
		}
	}
}
