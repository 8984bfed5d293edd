package pipelinetest_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/harness/stripefake"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Stripe thin events (object v2.core.event): the intake accepts them
// without calling Stripe, the processor fetches the object they name and
// projects Stripe's current state through the same projection as snapshot
// events, versioned by Stripe's clock at the fetch.

const subPath = "/v1/subscriptions/" + sub

func thinSub(id, snapshot string) []byte {
	return pt.ThinEvent(id, "v1.customer.subscription.updated", "subscription", sub, snapshot, pt.Start.Add(-30*time.Second))
}

func deliverStripe(t *testing.T, h *pt.Harness, body []byte, want int) {
	t.Helper()
	if r := h.Deliver(body, h.Sign(body, pt.SecretPrimary)); r.Status != want {
		t.Fatalf("delivery answered %d, want %d: %s", r.Status, want, r.Body)
	}
}

func putSub(t *testing.T, h *pt.Harness, status string) {
	t.Helper()
	if err := h.Stripe.PutObject("subscription", sub, pt.SubscriptionObject(sub, status, "acct_42")); err != nil {
		t.Fatal(err)
	}
}

// A thin event alone: accepted with no request to Stripe, then processed
// from the fetched object: the projection holds Stripe's state at the
// version of Stripe's clock, one intent, and the audit says where the
// state came from.
func TestThinEventProjectsFetchedState(t *testing.T) {
	h := pt.New(t, pt.Options{})
	h.EnableStripeAPI(time.Second)
	putSub(t, h, "past_due")
	deliverStripe(t, h, thinSub("evt_thin_1", ""), 202)
	if n := len(h.Stripe.Requests()); n != 0 {
		t.Fatalf("intake called the Stripe API %d times; the fetch belongs to the processor", n)
	}
	h.Drain(10*time.Second, time.Second, h.NewWorker("w"))

	ev := h.Event("evt_thin_1")
	if ev.Status != ledger.StatusProcessed || ev.Result.Outcome != ledger.OutcomeApplied || ev.EventType != "v1.customer.subscription.updated" {
		t.Fatalf("event %s %s %+v", ev.EventType, ev.Status, ev.Result)
	}
	fetchedAt := h.Stripe.Requests()[0].Time.Unix()
	requireSubscription(t, h, "past_due", true, version(fetchedAt, 2))
	in := requireIntents(t, h, 1)
	if in[0].Kind != "entitlement.grant" || in[0].Causation != "stripe/evt_thin_1" {
		t.Fatalf("intent %+v", in[0])
	}
	if got := h.Stripe.Count(subPath); got != 1 {
		t.Fatalf("%d fetches, want 1", got)
	}
	last := ev.Audit[len(ev.Audit)-1]
	if !strings.Contains(last.Reason, "fetched from Stripe at ") {
		t.Fatalf("completion audit %+v", last)
	}
	// A redelivery is a processed duplicate: no second fetch.
	deliverStripe(t, h, thinSub("evt_thin_1", ""), 200)
	if got := h.Stripe.Count(subPath); got != 1 {
		t.Fatalf("%d fetches after a duplicate, want 1", got)
	}
}

// During a migration Stripe sends a snapshot event and its thin twin: one
// fact, one ledger row, one outcome and one set of intents, whichever
// arrives first.
func TestThinTwinOfSnapshotIsOneFact(t *testing.T) {
	for _, thinFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("thin first %v", thinFirst), func(t *testing.T) {
			h := pt.New(t, pt.Options{})
			h.EnableStripeAPI(time.Second)
			putSub(t, h, "active")
			w := h.NewWorker("w")
			snap := subEvent("evt_snap_1", "customer.subscription.updated", "active", created)
			thin := thinSub("evt_thin_1", "evt_snap_1")
			first, second := snap, thin
			if thinFirst {
				first, second = thin, snap
			}
			deliverStripe(t, h, first, 202)
			h.Drain(10*time.Second, time.Second, w)
			deliverStripe(t, h, second, 200) // a duplicate of the processed fact
			h.Drain(10*time.Second, time.Second, w)

			ev := h.Event("evt_snap_1")
			if ev.Status != ledger.StatusProcessed || ev.Result.Outcome != ledger.OutcomeApplied {
				t.Fatalf("fact %s %+v", ev.Status, ev.Result)
			}
			if _, err := h.Ledger.Get(t.Context(), "stripe", "evt_thin_1"); err == nil {
				t.Fatal("the thin twin has a ledger row of its own: one fact, two rows")
			}
			requireIntents(t, h, 1)
			fetches := h.Stripe.Count(subPath)
			if thinFirst {
				if fetches != 1 || ev.Attributes["thin_event_id"] != "evt_thin_1" {
					t.Fatalf("thin first: %d fetches, attributes %v", fetches, ev.Attributes)
				}
				requireSubscription(t, h, "active", true, version(h.Stripe.Requests()[0].Time.Unix(), 2))
			} else {
				// The row says what it holds: the snapshot, not its twin.
				if fetches != 0 || ev.Attributes["format"] != "snapshot" || ev.Attributes["thin_event_id"] != "" {
					t.Fatalf("snapshot first: %d fetches, attributes %v", fetches, ev.Attributes)
				}
				requireSubscription(t, h, "active", true, version(created, 2))
			}
		})
	}
}

// Stripe API failures: a 429 (honouring Retry-After), a 5xx or a hang
// are transient: the event waits in RETRY_WAIT and is applied once the
// API answers; a missing object is permanent and quarantined with a clear
// code; a source without an API key quarantines rather than guesses.
func TestThinEventFetchFailures(t *testing.T) {
	cases := []struct {
		name    string
		script  []stripefake.Answer
		noAPI   bool
		missing bool
		// want
		status ledger.Status
		code   string
		tries  int // fetch requests in all
	}{
		{name: "429 with Retry-After", script: []stripefake.Answer{stripefake.RateLimited(2 * time.Second)}, status: ledger.StatusProcessed, tries: 2},
		{name: "500 then 503", script: []stripefake.Answer{stripefake.ServerError(500), stripefake.ServerError(503)}, status: ledger.StatusProcessed, tries: 3},
		{name: "hang past the timeout", script: []stripefake.Answer{stripefake.Hang()}, status: ledger.StatusProcessed, tries: 2},
		{name: "restricted key without permission", script: []stripefake.Answer{stripefake.Fail(http.StatusForbidden, "invalid_request_error", "", "The provided key does not have the required permissions")}, status: ledger.StatusProcessed, tries: 2},
		{name: "object not found", missing: true, status: ledger.StatusQuarantined, code: "stripe_object_not_found", tries: 1},
		{name: "no API configured", noAPI: true, status: ledger.StatusQuarantined, code: "stripe_api_not_configured"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := pt.New(t, pt.Options{MaxReceiveCount: 5, RetryCap: 3 * time.Second})
			if !c.noAPI {
				h.EnableStripeAPI(300 * time.Millisecond)
				if !c.missing {
					putSub(t, h, "active")
				}
				h.Stripe.Script(subPath, c.script...)
			}
			deliverStripe(t, h, thinSub("evt_thin_f", ""), 202)
			w := h.NewWorker("w")
			w.PollOnce(t.Context())
			if len(c.script) > 0 {
				ev := h.Event("evt_thin_f")
				if ev.Status != ledger.StatusRetryWait || !strings.HasPrefix(ev.ErrorCode, "stripe_api_") {
					t.Fatalf("after the first failure: %s %q", ev.Status, ev.ErrorCode)
				}
				if c.name == "429 with Retry-After" && ev.NextAttemptAt.Sub(h.Clock.Now()) < 2*time.Second {
					t.Fatalf("retry due in %s, before the server's Retry-After (2 s)", ev.NextAttemptAt.Sub(h.Clock.Now()))
				}
			}
			h.Drain(20*time.Second, time.Second, w)
			ev := h.Event("evt_thin_f")
			if ev.Status != c.status || ev.ErrorCode != c.code && c.status == ledger.StatusQuarantined {
				t.Fatalf("event %s %q (%s), want %s %q", ev.Status, ev.ErrorCode, ev.ErrorMessage, c.status, c.code)
			}
			if c.status == ledger.StatusProcessed {
				if ev.Result.Outcome != ledger.OutcomeApplied {
					t.Fatalf("result %+v", ev.Result)
				}
				requireIntents(t, h, 1)
			} else {
				requireIntents(t, h, 0)
				if h.Projections() != 0 {
					t.Fatal("a quarantined thin event wrote a projection")
				}
			}
			if h.Stripe != nil && h.Stripe.Count(subPath) != c.tries {
				t.Fatalf("%d fetches, want %d", h.Stripe.Count(subPath), c.tries)
			}
		})
	}
}

// Any arrival order of snapshot events, their thin twins and thin events
// without a twin converges to Stripe's state once the events stop: every
// permutation of six deliveries (720; see below) ends with the projection holding
// Stripe's final state, each operation id written once, and the newest
// intent saying what Stripe says.
func TestThinAndSnapshotPermutationsConverge(t *testing.T) {
	// The subscription's history in Stripe: active, then past_due, then
	// canceled (deleted). Every event was created before any delivery.
	type delivery struct {
		id   string
		body []byte
	}
	at := func(s int64) time.Time { return time.Unix(created+s, 0) }
	all := []delivery{
		{"s1", subEvent("evt_s1", "customer.subscription.created", "active", created)},
		{"t1", pt.ThinEvent("evt_t1", "v1.customer.subscription.created", "subscription", sub, "evt_s1", at(0))},
		{"s2", subEvent("evt_s2", "customer.subscription.updated", "past_due", created+10)},
		{"t3", pt.ThinEvent("evt_t3", "v1.customer.subscription.deleted", "subscription", sub, "", at(20))},
		{"s3", subEvent("evt_s3", "customer.subscription.deleted", "canceled", created+20)},
		{"t2", pt.ThinEvent("evt_t2", "v1.customer.subscription.updated", "subscription", sub, "", at(10))},
	}
	// All 720 take a minute on 2 cores: make test runs a fixed sample of
	// 120 (30 with -short); THIN_PERMUTATIONS=all runs every one.
	perms := permutations(len(all))
	if os.Getenv("THIN_PERMUTATIONS") != "all" {
		rand.New(rand.NewPCG(1, 2)).Shuffle(len(perms), func(i, j int) { perms[i], perms[j] = perms[j], perms[i] })
		perms = perms[:120]
		if testing.Short() {
			perms = perms[:30]
		}
	}
	for _, perm := range perms {
		name := ""
		for _, i := range perm {
			name += all[i].id
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := pt.New(t, pt.Options{})
			h.EnableStripeAPI(time.Second)
			putSub(t, h, "canceled")
			w := h.NewWorker("w")
			for _, i := range perm {
				b := all[i].body
				if r := h.Deliver(b, h.Sign(b, pt.SecretPrimary)); r.Status != 202 && r.Status != 200 {
					t.Fatalf("%s: %d", all[i].id, r.Status)
				}
				h.Drain(10*time.Second, time.Second, w)
				h.Clock.Advance(time.Second)
			}
			p := requireProjection(t, h)
			if p.State["status"] != "canceled" || p.State["entitled"] != false || p.State["deleted"] != true || !p.Terminal {
				t.Fatalf("final projection %v (version %d, terminal %v), want Stripe's: canceled, deleted, not entitled", p.State, p.Version, p.Terminal)
			}
			in := h.Intents() // requireIntents' uniqueness check, without a fixed count
			seen := map[string]bool{}
			var newest ledger.StoredIntent
			for _, i := range in {
				if seen[i.OperationID] {
					t.Fatalf("operation %s written twice", i.OperationID)
				}
				seen[i.OperationID] = true
				if v := intentVersion(t, i); v >= intentVersion(t, newest) {
					newest = i
				}
			}
			if newest.Kind != "entitlement.revoke" {
				t.Fatalf("newest intent %s (%v); Stripe says the subscription is deleted", newest.Kind, newest.Payload)
			}
			for _, id := range []string{"evt_s1", "evt_s2", "evt_s3", "evt_t2", "evt_t3"} {
				if ev := h.Event(id); ev.Status != ledger.StatusProcessed {
					t.Fatalf("%s ended %s (%s): a fact was not finished", id, ev.Status, ev.ErrorCode)
				}
			}
		})
	}
}

func requireProjection(t *testing.T, h *pt.Harness) ledger.Projection {
	t.Helper()
	p, err := h.Ledger.GetProjection(t.Context(), projection.ScopedName("stripe", builtin.StripeSubscriptionProjection), sub)
	if err != nil {
		t.Fatalf("projection: %v", err)
	}
	return p
}

func intentVersion(t *testing.T, i ledger.StoredIntent) int64 {
	t.Helper()
	if i.Payload == nil {
		return -1
	}
	switch v := i.Payload["version"].(type) {
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("intent version %q: %v", v, err)
		}
		return n
	case json.Number:
		n, _ := v.Int64()
		return n
	case float64:
		return int64(v)
	case int64:
		return v
	}
	t.Fatalf("intent version %T %v", i.Payload["version"], i.Payload["version"])
	return 0
}

// permutations lists every order of n items.
func permutations(n int) [][]int {
	var out [][]int
	var rec func(cur []int, used []bool)
	rec = func(cur []int, used []bool) {
		if len(cur) == n {
			out = append(out, append([]int(nil), cur...))
			return
		}
		for i := range n {
			if !used[i] {
				used[i] = true
				rec(append(cur, i), used)
				used[i] = false
			}
		}
	}
	rec(nil, make([]bool, n))
	return out
}
