package demo_test

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/demo"
	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/ledger"
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
	target.WarehouseBucket, target.WarehousePrefix = stack.Warehouse()
	target.S3 = stack.S3.Client()
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
	// Orders: O-42's three events, and O-43's r12 and r13 (the override).
	if len(rep.Others) != 4 || rep.Others["quiltt"].Rows != 3 || rep.Others["orders"].Rows != 5 || rep.Others["shopify"].Rows != 1 || rep.Others["github"].Rows != 1 {
		t.Fatalf("other providers: %d sources", len(rep.Others))
	}
	// The race's two Stripe events are processed besides the main story's.
	if rep.ByStatus[ledger.StatusQuarantined] != 1 || rep.ByStatus[ledger.StatusProcessed] != rep.Events-1+others+2 || rep.MaxPerOp != 1 {
		t.Fatalf("ledger %v, max intents per op %d", rep.ByStatus, rep.MaxPerOp)
	}
	// Each applied subscription change sets one entitlement (the race's
	// grant and revoke included); the O-42 cancellation (revision 12,
	// delivered twice) and the O-43 cancellation each add one refund and
	// one notification; the operator's r13 adds none (nothing was
	// performed, so nothing is to compensate); nothing else creates an
	// effect.
	stripeApplied := 2
	for _, s := range rep.Subjects {
		stripeApplied += s.Applied
	}
	if rep.Others["orders"].Intents != 4 || rep.Others["shopify"].Intents+rep.Others["quiltt"].Intents+rep.Others["github"].Intents != 0 {
		t.Fatalf("other providers' intents: orders %d", rep.Others["orders"].Intents)
	}
	if rep.Intents != stripeApplied+4 || rep.ByOutcome[ledger.OutcomeStale] == 0 {
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
	// dispatched (policy latest): SUPERSEDED, never applied; and the O-43
	// refund and notice, made obsolete by the operator's r13 while they
	// waited: OBSOLETE, never applied.
	done := rep.EffectsByStatus[ledger.IntentStatusSucceeded] + rep.EffectsByStatus[ledger.IntentStatusSuperseded] + rep.EffectsByStatus[ledger.IntentStatusObsolete]
	if len(rep.Effects) != rep.Intents || done != rep.Intents || rep.MaxEffective != 1 || rep.EffectsByStatus[ledger.IntentStatusObsolete] != 2 {
		t.Fatalf("effects %d of %d intents, by status %v, max effective calls per key %d", len(rep.Effects), rep.Intents, rep.EffectsByStatus, rep.MaxEffective)
	}
	story := map[string]demo.EffectOutcome{}
	moved := map[string]demo.EffectOutcome{} // the override's and the race's, by kind
	for _, e := range rep.Effects {
		if e.Story == demo.StoryOverride || e.Story == demo.StoryRace {
			moved[e.Kind] = e
			continue
		}
		if e.Status == ledger.IntentStatusSuperseded && e.Effective == 0 && strings.HasPrefix(e.Kind, "entitlement.") {
			continue
		}
		if e.Status != ledger.IntentStatusSucceeded || e.Effective != 1 {
			t.Fatalf("effect %+v: want SUCCEEDED with exactly one effective call", e)
		}
		if e.Story == demo.StoryTimeout {
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
	// The truth moved on while effects waited. Override: the O-43 refund
	// and notice each met one 503, and their retries found the order
	// confirmed: OBSOLETE, no call; the downstream never refunded O-43.
	// Race: the grant met one 503 and its retry found the subscription
	// deleted: SUPERSEDED; the revoke was applied once; the downstream ends
	// revoked at the projection's version, never having gone back.
	for _, kind := range []string{"refund", "notify_cancellation"} {
		if e := moved[kind]; e.Story != demo.StoryOverride || e.Status != ledger.IntentStatusObsolete || e.Effective != 0 || strings.Join(e.Requests, ",") != "unavailable_503" {
			t.Fatalf("override %s: want one 503, then OBSOLETE without a call; got %+v", kind, e)
		}
	}
	if e := moved["entitlement.grant"]; e.Status != ledger.IntentStatusSuperseded || e.Effective != 0 || strings.Join(e.Requests, ",") != "unavailable_503" {
		t.Fatalf("race grant: want one 503, then SUPERSEDED without a call; got %+v", e)
	}
	if e := moved["entitlement.revoke"]; e.Status != ledger.IntentStatusSucceeded || e.Effective != 1 {
		t.Fatalf("race revoke: want SUCCEEDED once; got %+v", e)
	}
	m := rep.Moved
	if m == nil || !m.Override || !m.Waited || len(m.Leftover) != 0 {
		t.Fatalf("the stories of the truth moving on did not play as scripted: %+v", m)
	}
	if m.OrderState != "confirmed" || m.OrderVersion != 13 || m.RefundCalls != 0 {
		t.Fatalf("override: order %s is %s v%d with %d effective refund calls; want confirmed v13 and none", m.Order, m.OrderState, m.OrderVersion, m.RefundCalls)
	}
	if !m.SubDeleted || m.SubVersion != m.RevokeVersion || m.DownstreamLast != strconv.FormatInt(m.SubVersion, 10) || m.DownstreamKind != "entitlement.revoke" || m.Regressions != 0 {
		t.Fatalf("race: subscription deleted=%v v%d; downstream at %s (%s), %d regressions; want revoked at v%d", m.SubDeleted, m.SubVersion, m.DownstreamLast, m.DownstreamKind, m.Regressions, m.RevokeVersion)
	}
	// Every subject the run's effects concern is in step with the truth,
	// and the overtaken intents are exactly the superseded entitlements
	// and the two obsolete O-43 actions, none applied; nothing was
	// contradicted or compensated.
	if len(rep.Truth) != len(rep.Subjects)+3 {
		t.Fatalf("subjects compared with the downstream: %d, want %d (subscriptions, the race's, O-42, O-43)", len(rep.Truth), len(rep.Subjects)+3)
	}
	for _, s := range rep.Truth {
		if !s.OK {
			t.Fatalf("subject %+v", s)
		}
		for _, v := range s.Downstream {
			if v.Regressions != 0 || (v.Policy == ledger.PolicyLatest && v.Last != strconv.FormatInt(v.Want, 10)) {
				t.Fatalf("subject %s: downstream view %+v", s.Subject, v)
			}
		}
		if s.Subject == m.Order && (s.State != "confirmed" || len(s.Downstream) != 2 || s.Downstream[0].Last != "" || s.Downstream[1].Last != "") {
			t.Fatalf("O-43 against the downstream: %+v", s)
		}
		if s.Subject == m.Sub && (s.Version != m.RevokeVersion || s.Downstream[0].Last != strconv.FormatInt(s.Version, 10) || s.Downstream[0].LastKind != "entitlement.revoke") {
			t.Fatalf("the race's subscription against the downstream: %+v", s)
		}
	}
	byStatus := map[ledger.IntentStatus]int{}
	for _, o := range rep.Overtaken {
		byStatus[o.Status]++
		if o.Effective != 0 || o.Reason == "" || o.Truth <= o.Version {
			t.Fatalf("overtaken intent %+v", o)
		}
	}
	if byStatus[ledger.IntentStatusObsolete] != 2 || byStatus[ledger.IntentStatusSuperseded] != rep.EffectsByStatus[ledger.IntentStatusSuperseded] || byStatus[ledger.IntentStatusContradicted] != 0 || len(rep.Compensations) != 0 {
		t.Fatalf("overtaken %v, compensations %+v", byStatus, rep.Compensations)
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
		if o.Kind == "order" && (o.State != "cancelled" || o.Version != 12 || strings.Join(o.Intents, ",") != "notify_cancellation,refund") {
			t.Fatalf("O-42: %+v", o)
		}
	}
	if kinds["order"] != 1 || kinds["shopify order"] != 1 || kinds["quiltt connection"] != 3 || kinds["github push"] != 1 || kinds["stripe subscription, no local account"] != 1 {
		t.Fatalf("other subjects by kind %v", kinds)
	}
	// The warehouse: every subject the run changed last has its current
	// row, read with DuckDB from the local S3, at the canonical version
	// with the canonical state; the subscriptions, O-42, O-43, the race's
	// subscription, the Shopify order and the three Quiltt connections.
	w := rep.Warehouse
	if w == nil || !w.InStep || len(w.Subjects) != len(rep.Subjects)+1+2+1+3 || w.Records < len(w.Subjects) {
		t.Fatalf("warehouse %+v", w)
	}
	for _, s := range w.Subjects {
		if !s.OK || s.Warehouse != s.Canonical || s.Row == nil {
			t.Fatalf("warehouse subject %+v", s)
		}
		if s.Subject == m.Order && (s.Canonical != 13 || s.Row["status"] != "confirmed") {
			t.Fatalf("O-43 in the warehouse: %+v", s)
		}
	}
	if !strings.Contains(out.String(), "The warehouse against the truth") {
		t.Fatalf("report without the warehouse:\n%s", out.String())
	}
	if !strings.Contains(progress.String(), "taken over 4s after the kill") {
		t.Fatalf("the run did not say how long recovery takes:\n%s", progress.String())
	}
}
