package demo_test

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/pkg/harness/demo"
	"github.com/effectively-once/webhooks/pkg/harness/devstack"
	"github.com/effectively-once/webhooks/pkg/ledger"
)

// TestDemoEndToEnd builds the real bootstraps, starts the local stack from
// a clean state (its own ports, table and queues), runs the demo story
// through HTTP, and asserts the report's business facts.
func TestDemoEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end stack test skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	stack, file, logBuf := devstack.StartForTest(t, ctx)
	target := demo.Target{
		BaseURL: stack.HTTPURL(), DB: stack.DB, Table: stack.Table(), SQS: stack.SQS,
		QueueURL: stack.Queues.Queue, DLQURL: stack.Queues.DLQ, EffectsQueueURL: stack.EffectsQueues.Queue, Secret: file.Secrets["LOCAL_STRIPE_WEBHOOK_SECRET"],
		Others: demo.ProviderSecrets{
			"orders": file.Secrets["LOCAL_ORDERS_WEBHOOK_SECRET"], "shopify": file.Secrets["LOCAL_SHOPIFY_CLIENT_SECRET"],
			"github": file.Secrets["LOCAL_GITHUB_WEBHOOK_SECRET"], "quiltt": file.Secrets["LOCAL_QUILTT_WEBHOOK_SECRET"],
		},
		Crash: func(ctx context.Context) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, stack.HTTPURL()+"/_dev/crash", nil)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			return err
		},
	}
	var progress bytes.Buffer
	rep, err := demo.Run(ctx, target, demo.Options{Seed: 7, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep.Print(&out)
	t.Log(out.String())
	if !rep.OK() {
		t.Fatalf("violations: %v\nstack log tail:\n%s", rep.Violations, logBuf.Tail(60))
	}
	if rep.ByHTTP[401] != 3 || rep.ByHTTP[202] == 0 || rep.ByHTTP[200] == 0 || rep.Suppressed < 20 {
		t.Fatalf("deliveries by status %v, suppressed %d", rep.ByHTTP, rep.Suppressed)
	}
	others := 0
	for src, o := range rep.Others {
		if o.Processed != len(o.Expected) || o.Forged401 != 1 {
			t.Fatalf("%s: %+v", src, o)
		}
		others += o.Processed
	}
	if len(rep.Others) != 4 || rep.Others["quiltt"].Rows != 3 || rep.Others["orders"].Rows != 3 || rep.Others["shopify"].Rows != 1 || rep.Others["github"].Rows != 1 {
		t.Fatalf("other providers: %d sources", len(rep.Others))
	}
	if rep.ByStatus[ledger.StatusQuarantined] != 1 || rep.ByStatus[ledger.StatusProcessed] != rep.Events-1+others || rep.MaxPerOp != 1 {
		t.Fatalf("ledger %v, max intents per op %d", rep.ByStatus, rep.MaxPerOp)
	}
	// Each applied subscription change sets one entitlement; the O-42
	// cancellation (revision 12, delivered twice) adds one refund and one
	// notification; nothing else here creates an effect.
	stripeApplied := 0
	for _, s := range rep.Subjects {
		stripeApplied += s.Applied
	}
	if rep.Others["orders"].Intents != 2 || rep.Others["shopify"].Intents+rep.Others["quiltt"].Intents+rep.Others["github"].Intents != 0 {
		t.Fatalf("other providers' intents: orders %d", rep.Others["orders"].Intents)
	}
	if rep.Intents != stripeApplied+2 || rep.ByOutcome[ledger.OutcomeStale] == 0 {
		t.Fatalf("intents %d, stripe applied %d, outcomes %v", rep.Intents, stripeApplied, rep.ByOutcome)
	}
	for _, s := range rep.Subjects {
		if s.Status != s.Stripe || (!s.FromStripe && s.Want != s.Status+" v"+strconv.FormatInt(s.Version, 10)) {
			t.Fatalf("subject %+v", s)
		}
	}
	// Stripe thin events: subscription 5 was canceled only in Stripe and
	// ends canceled; the rate-limited fetch met its 429 and then Stripe's
	// state; each migration pair is one row, processed from whichever of
	// its two events arrived first.
	if s5 := rep.Subjects[4]; !s5.FromStripe || !s5.Deleted || s5.Status != "canceled" {
		t.Fatalf("subscription 5: %+v", s5)
	}
	if len(rep.Thin) != 4 {
		t.Fatalf("thin events %+v", rep.Thin)
	}
	for _, th := range rep.Thin {
		if th.Status != ledger.StatusProcessed || th.Rows != 1 || th.Intents > 1 {
			t.Fatalf("thin event %+v", th)
		}
		switch {
		case strings.Contains(th.What, "429"):
			if len(th.Requests) < 2 || th.Requests[0] != 429 || !th.Fetched {
				t.Fatalf("rate-limited thin event %+v", th)
			}
		case strings.Contains(th.What, "snapshot sent first"):
			if th.Fetched || len(th.Requests) != 0 || th.Row == th.EventID {
				t.Fatalf("twin after its snapshot %+v", th)
			}
		case strings.Contains(th.What, "thin sent first"):
			if !th.Fetched || len(th.Requests) == 0 || th.Row == th.EventID {
				t.Fatalf("twin before its snapshot %+v", th)
			}
		}
	}
	// Every intent of the run was performed by the dispatcher against the
	// fake downstream: SUCCEEDED, and applied exactly once per operation id,
	// including the O-42 refund whose downstream timed out after applying it;
	// except an entitlement whose state a newer one carried before it was
	// dispatched (policy latest): SUPERSEDED, never applied.
	done := rep.EffectsByStatus[ledger.IntentStatusSucceeded] + rep.EffectsByStatus[ledger.IntentStatusSuperseded]
	if len(rep.Effects) != rep.Intents || done != rep.Intents || rep.MaxEffective != 1 {
		t.Fatalf("effects %d of %d intents, by status %v, max effective calls per key %d", len(rep.Effects), rep.Intents, rep.EffectsByStatus, rep.MaxEffective)
	}
	story := map[string]demo.EffectOutcome{}
	for _, e := range rep.Effects {
		if e.Status == ledger.IntentStatusSuperseded && e.Effective == 0 && strings.HasPrefix(e.Kind, "entitlement.") {
			continue
		}
		if e.Status != ledger.IntentStatusSucceeded || e.Effective != 1 {
			t.Fatalf("effect %+v: want SUCCEEDED with exactly one effective call", e)
		}
		if e.Story {
			story[e.Kind] = e
		}
	}
	refund, notify := story["refund"], story["notify_cancellation"]
	if refund.Code != "lookup_applied" || strings.Join(refund.Requests, ",") != "hang_after_apply" || !strings.Contains(strings.Join(refund.Trail, "\n"), "→ UNCERTAIN") {
		t.Fatalf("O-42 refund: want applied once, hung, UNCERTAIN, resolved by the status lookup; got %+v", refund)
	}
	if strings.Join(notify.Requests, ",") != "throttle_429,hang_after_apply,apply (replayed)" || notify.Attempts != 3 {
		t.Fatalf("O-42 notice: want 429, applied and hung, then replayed under the same key; got %+v", notify)
	}
	if !strings.Contains(logBuf.String(), "runtime mid-batch") {
		t.Fatalf("the processor was never killed mid-batch:\n%s", logBuf.Tail(40))
	}
	// The kill interrupted claimed work, and each interrupted event was
	// taken over by another worker and finished.
	c := rep.Crash
	if c == nil || !c.Reported || c.Kill == nil || len(c.Held) == 0 || c.Takeovers < len(c.Held) {
		t.Fatalf("crash %+v", c)
	}
	for _, h := range c.Held {
		if !h.Recovered() || h.TakeoverBy == c.Kill.Owner || h.ClaimedAt.After(c.Kill.At) {
			t.Fatalf("interrupted event %+v (kill %+v)", h, c.Kill)
		}
	}
	// Every other subject the run touched, as the senders meant it.
	kinds := map[string]int{}
	for _, o := range rep.OtherSubjects {
		if !o.OK {
			t.Fatalf("subject %+v", o)
		}
		kinds[o.Kind]++
		if o.Kind == "order (seed 003)" && (o.State != "cancelled" || o.Version != 12 || strings.Join(o.Intents, ",") != "notify_cancellation,refund") {
			t.Fatalf("O-42: %+v", o)
		}
	}
	if kinds["order (seed 003)"] != 1 || kinds["shopify order"] != 1 || kinds["quiltt connection"] != 3 || kinds["github push"] != 1 || kinds["stripe subscription, no local account"] != 1 {
		t.Fatalf("other subjects by kind %v", kinds)
	}
	if !strings.Contains(progress.String(), "taken over 4s after the kill") {
		t.Fatalf("the run did not say how long recovery takes:\n%s", progress.String())
	}
}
