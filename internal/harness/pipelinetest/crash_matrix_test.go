package pipelinetest_test

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/processor"
)

// crashScenario is one path through the pipeline. The crash matrix first
// runs it cleanly to list every AWS write call made by the intake and by the
// worker, then reruns it once per (call, before|after), crashing the
// component there, restarting it, and checking the same business facts.
type crashScenario struct {
	name     string
	id       string
	body     func() []byte
	options  func() pt.Options
	maxPolls int // polls the first worker gets before it is replaced
	check    func(t *testing.T, h *pt.Harness)
}

var writeOps = map[string]bool{
	"DynamoDB.UpdateItem": true, "DynamoDB.PutItem": true, "DynamoDB.TransactWriteItems": true,
	"SQS.SendMessage": true,
}

func crashScenarios() []crashScenario {
	processedOnce := func(id string) func(t *testing.T, h *pt.Harness) {
		return func(t *testing.T, h *pt.Harness) {
			ev := h.Event(id)
			acts := pt.Actions(ev)
			if ev.Status != ledger.StatusProcessed || count(acts, "complete") != 1 || count(acts, "accept") != 1 {
				t.Fatalf("event %s, audit %v", ev.Status, acts)
			}
			requireSubscription(t, h, "active", true, version(created, 1))
			requireIntents(t, h, 1)
		}
	}
	large := func() []byte {
		b := subEvent("evt_cm_large", "customer.subscription.created", "active", created)
		pad := make([]byte, 64<<10)
		r := rand.New(rand.NewPCG(1, 2))
		for i := range pad {
			pad[i] = "abcdefghijklmnopqrstuvwxyz0123456789"[r.IntN(36)]
		}
		return []byte(strings.Replace(string(b), `"livemode":false`, `"livemode":false,"padding":"`+string(pad)+`"`, 1))
	}
	return []crashScenario{
		{
			name: "happy", id: "evt_cm_happy",
			body:    func() []byte { return subEvent("evt_cm_happy", "customer.subscription.created", "active", created) },
			options: func() pt.Options { return pt.Options{} },
			check:   processedOnce("evt_cm_happy"),
		},
		{
			name: "large-payload", id: "evt_cm_large", body: large,
			options: func() pt.Options { return pt.Options{} },
			check:   processedOnce("evt_cm_large"),
		},
		{
			name: "transient-then-ok", id: "evt_cm_retry",
			body: func() []byte { return subEvent("evt_cm_retry", "customer.subscription.created", "active", created) },
			options: func() pt.Options {
				reg, _ := flakyRegistry(1)
				return pt.Options{Registry: reg}
			},
			maxPolls: 2,
			check:    processedOnce("evt_cm_retry"),
		},
		{
			name: "quarantine", id: "evt_cm_quar",
			body: func() []byte {
				return pt.SubscriptionEvent("evt_cm_quar", "customer.subscription.created", sub, "active", created, "")
			},
			options: func() pt.Options { return pt.Options{} },
			check: func(t *testing.T, h *pt.Harness) {
				ev := h.Event("evt_cm_quar")
				if ev.Status != ledger.StatusQuarantined || ev.ErrorCode != "unknown_subject" {
					t.Fatalf("event %s %q", ev.Status, ev.ErrorCode)
				}
				requireIntents(t, h, 0)
			},
		},
		{
			name: "exhausted", id: "evt_cm_dead",
			body: func() []byte { return subEvent("evt_cm_dead", "customer.subscription.created", "active", created) },
			options: func() pt.Options {
				reg, _ := flakyRegistry(-1)
				return pt.Options{Registry: reg, MaxReceiveCount: 2}
			},
			maxPolls: 2,
			check: func(t *testing.T, h *pt.Harness) {
				// A crash can leave the ledger behind the queue; the DLQ
				// sweep (run by the reconciler) closes that gap.
				if _, err := processor.SweepDLQ(context.Background(), h.SQS, h.Queues.DLQ, h.Ledger, "dlq-sweep", 10, nil); err != nil {
					t.Fatal(err)
				}
				ev := h.Event("evt_cm_dead")
				if ev.Status != ledger.StatusDead || h.Depth(h.Queues.DLQ) == 0 {
					t.Fatalf("event %s, DLQ depth %d, audit %v", ev.Status, h.Depth(h.Queues.DLQ), pt.Actions(ev))
				}
				requireIntents(t, h, 0)
			},
		},
	}
}

type crashRun struct {
	crash    *awstrace.Crash
	inIntake bool
}

// run plays a scenario, optionally crashing the intake or the first worker,
// and returns the write calls each component made.
func (sc crashScenario) run(t *testing.T, cr crashRun) (intakeOps, workerOps map[string]int, rec runRecord) {
	h := pt.New(t, sc.options())
	body := sc.body()
	if cr.crash != nil && cr.inIntake {
		h.IntakeRec.Arm(*cr.crash)
	}
	r := h.Deliver(body, h.Sign(body, pt.SecretPrimary))
	intakeOps = h.IntakeRec.Counts()
	if h.IntakeRec.Crashed() {
		if r.Status < 500 {
			t.Fatalf("intake crashed (%s) but answered %d: the provider would not retry", cr.crash, r.Status)
		}
		h.IntakeRec.Reset() // a new intake instance takes the provider's retry
		r = h.Deliver(body, h.Sign(body, pt.SecretPrimary))
	}
	if r.Status != 202 {
		t.Fatalf("delivery answered %d: %s", r.Status, r.Body)
	}

	w1 := h.NewWorker("w1")
	if cr.crash != nil && !cr.inIntake {
		w1.Rec.Arm(*cr.crash)
	}
	polls := sc.maxPolls
	if polls == 0 {
		polls = 1
	}
	deadline := time.Now().Add(10 * time.Second)
	for polls > 0 && !w1.Rec.Crashed() && h.Depth(h.Queues.Queue) > 0 && time.Now().Before(deadline) {
		if w1.PollOnce(context.Background()) > 0 {
			polls--
			continue
		}
		h.Clock.Advance(time.Second)
		time.Sleep(50 * time.Millisecond)
	}
	workerOps = w1.Rec.Counts()
	// w1 is gone (crashed or retired); a fresh worker finishes the job once
	// the leases it may hold have expired.
	w2 := h.NewWorker("w2")
	h.Drain(20*time.Second, 31*time.Second, w2)
	sc.check(t, h)
	rec = runRecord{actions: pt.Actions(h.Event(sc.id)), intents: len(h.Intents()), lost: h.IntakeRec.Lost() + w1.Rec.Lost(),
		dynamo: dynamoCalls(intakeOps, "intake ", dynamoCalls(workerOps, "worker ", dynamoCalls(w2.Rec.Counts(), "worker2 ", nil)))}
	return intakeOps, workerOps, rec
}

// runRecord is what a run left in the business record: the event's audit
// actions and the number of intents; and how many answers it lost.
type runRecord struct {
	actions []string
	intents int
	lost    int
	dynamo  map[string]int // the intake's and the workers' DynamoDB calls
}

// dynamoCalls adds the DynamoDB calls of ops to into, named with prefix.
// (A lost SQS send is sent again as a new call, by design: queue.Sender.)
func dynamoCalls(ops map[string]int, prefix string, into map[string]int) map[string]int {
	if into == nil {
		into = map[string]int{}
	}
	for op, n := range ops {
		if strings.HasPrefix(op, "DynamoDB.") {
			into[prefix+op] = n
		}
	}
	return into
}

// requireUnseen checks a lost-answer run against the clean one: the SDK's
// retry of a write that was applied must leave no trace in the business
// record (the same audit, the same intents) and cost no lease expiry or
// redelivery, which would show as a takeover or a retry in the audit. (No
// answer is lost when the armed call fails on its own, as a claim refused
// by design does; the run must then match the clean one all the more.)
func requireUnseen(t *testing.T, c awstrace.Crash, clean, got runRecord) {
	t.Helper()
	if got.lost > 1 {
		t.Fatalf("%d answers lost, want at most 1", got.lost)
	}
	if !slices.Equal(clean.actions, got.actions) || clean.intents != got.intents {
		t.Fatalf("after a lost answer: audit %v and %d intents; clean run: %v and %d", got.actions, got.intents, clean.actions, clean.intents)
	}
	// A lost SQS send is sent again as another message, by design
	// (queue.Sender), and the worker claims that duplicate too: extra
	// calls, no extra trace.
	if !strings.HasPrefix(c.Op, "SQS.") && !maps.Equal(withoutRefusedReclaims(clean.dynamo, got.dynamo), clean.dynamo) {
		t.Fatalf("after a lost answer: DynamoDB calls %v; clean run %v", got.dynamo, clean.dynamo)
	}
}

// withoutRefusedReclaims is got less the second worker's extra claims: the
// events queue's visibility timeout is 1 s of real time, so on a loaded
// machine (the race detector, parallel tests) the message can come back
// while the first worker is still handling it (an SDK retry of the lost
// answer adds its backoff), and the second worker's claim of that copy is
// refused, the event being done. Such a claim changes nothing, which the
// audit comparison above proves; every other call must match the clean run.
func withoutRefusedReclaims(clean, got map[string]int) map[string]int {
	const claim = "worker2 DynamoDB.UpdateItem"
	out := maps.Clone(got)
	if out[claim] > clean[claim] {
		out[claim] = clean[claim]
		if out[claim] == 0 {
			delete(out, claim)
		}
	}
	return out
}

func writesOf(counts map[string]int) []awstrace.Crash {
	var out []awstrace.Crash
	for op, n := range counts {
		if !writeOps[op] {
			continue
		}
		for i := 1; i <= n; i++ {
			for _, when := range []awstrace.When{awstrace.Before, awstrace.After, awstrace.Lost} {
				out = append(out, awstrace.Crash{Op: op, Nth: i, When: when})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// TestCrashMatrix crashes the intake and the processor right before and
// right after every AWS write they make, in every scenario, and checks that
// each run converges to the same business facts: status, projection and
// version, one intent per operation, a complete audit.
func TestCrashMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("crash matrix skipped in -short mode")
	}
	for _, sc := range crashScenarios() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			var intakeOps, workerOps map[string]int
			var clean runRecord
			t.Run("clean", func(t *testing.T) { intakeOps, workerOps, clean = sc.run(t, crashRun{}) })
			if t.Failed() {
				return
			}
			points := 0
			for _, c := range writesOf(intakeOps) {
				points++
				t.Run("intake/"+strings.ReplaceAll(c.String(), " ", "_"), func(t *testing.T) {
					t.Parallel()
					if _, _, got := sc.run(t, crashRun{crash: &c, inIntake: true}); c.When == awstrace.Lost {
						requireUnseen(t, c, clean, got)
					}
				})
			}
			for _, c := range writesOf(workerOps) {
				points++
				t.Run("processor/"+strings.ReplaceAll(c.String(), " ", "_"), func(t *testing.T) {
					t.Parallel()
					if _, _, got := sc.run(t, crashRun{crash: &c}); c.When == awstrace.Lost {
						requireUnseen(t, c, clean, got)
					}
				})
			}
			if points < 4 {
				t.Fatalf("only %d crash points found (%v, %v): the matrix is not exercising the writes", points, intakeOps, workerOps)
			}
			t.Logf("%s: %d crash points; intake writes %v; worker writes %v", sc.name, points, intakeOps, workerOps)
		})
	}
}

// TestCrashMatrix_BeforeAnnouncement crashes the processor between a
// batch's commits and its announcement of their intents: after the first,
// second or third of three commits, and right before the effects
// SendMessageBatch. The crashed invocation deletes nothing, so every pointer
// comes back after the events queue's visibility timeout; a fresh worker
// finishes the events it did not commit and, for those it finds PROCESSED,
// announces the intents still PENDING. With the manual clock standing still
// (no lease expiry, no reconciler threshold) and no reconciler run, every
// intent is dispatched within that one redelivery, none twice.
func TestCrashMatrix_BeforeAnnouncement(t *testing.T) {
	if testing.Short() {
		t.Skip("crash matrix skipped in -short mode")
	}
	orders := []string{"O-1", "O-2", "O-3"}
	points := []awstrace.Crash{
		{Op: "DynamoDB.TransactWriteItems", Nth: 1, When: awstrace.After},
		{Op: "DynamoDB.TransactWriteItems", Nth: 2, When: awstrace.After},
		{Op: "DynamoDB.TransactWriteItems", Nth: 3, When: awstrace.After},
		{Op: "SQS.SendMessageBatch", Nth: 1, When: awstrace.Before},
	}
	for _, c := range points {
		t.Run(strings.ReplaceAll(c.String(), " ", "_"), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			h := pt.NewOrders(t, pt.Options{}, pt.OutboxOptions{})
			o := h.Outbox
			want := map[string]int{}
			for _, id := range orders {
				deliver(t, h, "msg_"+id, pt.OrderEvent("order.cancelled", id, 12, "", ""), 202)
				refund, notify := pt.OrderOps(id, 12)
				want[refund], want[notify] = 1, 1
			}
			w1 := h.NewWorker("proc-1")
			w1.Rec.Arm(c)
			if n := w1.PollOnce(ctx); n != len(orders) || !w1.Rec.Crashed() {
				t.Fatalf("setup: one batch of %d pointers and a crash wanted; got %d, %s", len(orders), n, w1.Rec)
			}
			if h.Depth(o.Queues.Queue) != 0 {
				t.Fatal("setup: an announcement was sent before the crash")
			}
			crashedAt, start := h.Clock.Now(), time.Now()

			// The redelivery, and nothing else: no reconciler, the
			// manual clock stands still.
			w2, d := h.NewWorker("proc-2"), o.NewDispatcher("disp-1")
			redelivered := 0
			deadline := time.Now().Add(drainTimeout)
			for h.Depth(h.Queues.Queue)+h.Depth(o.Queues.Queue) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("not drained without the reconciler: events %d, effects %d", h.Depth(h.Queues.Queue), h.Depth(o.Queues.Queue))
				}
				got := w2.PollOnce(ctx)
				redelivered += got
				if got+d.PollOnce(ctx) == 0 {
					time.Sleep(20 * time.Millisecond)
				}
			}
			took := time.Since(start)
			if !h.Clock.Now().Equal(crashedAt) {
				t.Fatalf("the manual clock moved %s", h.Clock.Now().Sub(crashedAt))
			}
			if redelivered != len(orders) {
				t.Fatalf("%d pointers redelivered, want each once (%d)", redelivered, len(orders))
			}
			for _, id := range orders {
				ev := requireEvent(t, h, "msg_"+id, ledger.StatusProcessed, ledger.OutcomeApplied)
				if count(pt.Actions(ev), "complete") != 1 {
					t.Fatalf("%s audit %v", id, pt.Actions(ev))
				}
			}
			for op := range want {
				requireIntentStatus(t, o, op, ledger.IntentStatusSucceeded, "")
			}
			requireEffective(t, o, want)
			if n := o.Reconcile(h.Clock.Now().Add(time.Hour)); n != 0 {
				t.Fatalf("intents still due: %d", n)
			}
			t.Logf("%s: %d intents dispatched once each, %s (real time) after the crash; events queue visibility timeout %s",
				c, len(want), took.Round(time.Millisecond), time.Second)
		})
	}
}

// TestCrashMatrix_DispatcherLostAnswers loses, once, the answer of every
// write the dispatcher makes, after the write was applied, and lets the SDK
// retry it, as it does after a reset connection or a 500. Two scenarios: an
// order cancellation's refund and notice, and a subscription's grant then
// revoke (the revoke takes the subject's cursor over from the grant). Each
// effect must be performed once, each intent end SUCCEEDED, and the
// intents' audit and the dispatcher's calls be the clean run's: a retried
// write that was applied leaves no trace, and no lease is waited out.
func TestCrashMatrix_DispatcherLostAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("crash matrix skipped in -short mode")
	}
	type record struct {
		ops   map[string]int
		audit map[string][]string
		lost  int
	}
	scenarios := []struct {
		name string
		// play runs the scenario with d armed and returns every operation
		// id it should perform once.
		play func(t *testing.T, lose *awstrace.Crash) (*pt.Outbox, *pt.Dispatcher, []string)
	}{
		{"order-cancellation", func(t *testing.T, lose *awstrace.Crash) (*pt.Outbox, *pt.Dispatcher, []string) {
			h, o, w, d := orderPipeline(t, pt.OutboxOptions{})
			deliver(t, h, "msg_o42_12", pt.OrderEvent("order.cancelled", o42, 12, "", ""), 202)
			if n := w.PollOnce(context.Background()); n != 1 {
				t.Fatalf("setup: processed %d pointers, want 1", n)
			}
			if lose != nil {
				d.Rec.Arm(*lose)
			}
			h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
			return o, d, []string{refund12, notify12}
		}},
		{"subscription-grant-then-revoke", func(t *testing.T, lose *awstrace.Crash) (*pt.Outbox, *pt.Dispatcher, []string) {
			h := pt.NewChaos(t, pt.Options{}, pt.OutboxOptions{})
			w, d := h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1")
			if lose != nil {
				d.Rec.Arm(*lose)
			}
			send := subscriptionSender(t, h, w, "sub_lost", "acct_lost")
			send("evt_lost_grant", "customer.subscription.created", "active", created)
			h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
			send("evt_lost_revoke", "customer.subscription.updated", "unpaid", created+1)
			h.DrainAll(drainTimeout, idle, []*pt.Worker{w}, d)
			grant, revoke := onlyIntent(t, h, "entitlement.grant"), onlyIntent(t, h, "entitlement.revoke")
			if view, ok := h.Outbox.Down.Subject("stripe", "acct_lost"); !ok || view.LastKind != "entitlement.revoke" || len(view.History) != 2 {
				rv := h.Outbox.Intent(revoke)
				t.Fatalf("downstream view %+v; want grant then revoke (the revoke is %s %s: %s)", view, rv.Status, rv.ErrorCode, rv.Detail)
			}
			return h.Outbox, d, []string{grant, revoke}
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			run := func(t *testing.T, lose *awstrace.Crash) record {
				o, d, ops := sc.play(t, lose)
				want := map[string]int{}
				rec := record{ops: d.Rec.Counts(), audit: map[string][]string{}, lost: d.Rec.Lost()}
				for _, op := range ops {
					want[op] = 1
					rec.audit[op] = pt.IntentActions(requireIntentStatus(t, o, op, ledger.IntentStatusSucceeded, ""))
				}
				requireEffective(t, o, want)
				return rec
			}
			var clean record
			t.Run("clean", func(t *testing.T) { clean = run(t, nil) })
			if t.Failed() {
				return
			}
			var points []awstrace.Crash
			for op, n := range clean.ops {
				if writeOps[op] || op == "SQS.SendMessageBatch" || op == "DynamoDB.DeleteItem" {
					for i := 1; i <= n; i++ {
						points = append(points, awstrace.Crash{Op: op, Nth: i, When: awstrace.Lost})
					}
				}
			}
			if len(points) < 4 {
				t.Fatalf("only %d write calls found (%v): the matrix is not exercising the dispatcher", len(points), clean.ops)
			}
			for _, c := range points {
				t.Run(strings.ReplaceAll(c.String(), " ", "_"), func(t *testing.T) {
					t.Parallel()
					got := run(t, &c)
					if got.lost > 1 {
						t.Fatalf("%d answers lost", got.lost)
					}
					for op, acts := range clean.audit {
						if !slices.Equal(acts, got.audit[op]) {
							t.Fatalf("intent %s audit %v after a lost answer; clean run %v", op, got.audit[op], acts)
						}
					}
					// No extra work either: a record taken for a lost
					// lease, say, leaves the message for a redelivery and
					// a second claim.
					if !maps.Equal(clean.ops, got.ops) {
						t.Fatalf("dispatcher calls %v after a lost answer; clean run %v", got.ops, clean.ops)
					}
				})
			}
			t.Logf("%s: %d lost-answer points; dispatcher calls %v", sc.name, len(points), clean.ops)
		})
	}
}

// TestCrashMatrix_TargetCalls crashes and loses answers at the awkward
// moment of an AWS target call: an order cancellation's refund is
// performed by a target (its notice still by the HTTP downstream), and
// the first dispatcher dies right before or right after the target call,
// or the call's answer is lost on the wire, or the target applies it and
// answers after the call's timeout. A fresh dispatcher finishes the work.
// The target's own record decides (executions started, events put per
// operation id):
//
//   - Step Functions deduplicates by execution name and can say what it
//     started (DescribeExecution): every point ends with one execution
//     and the intent SUCCEEDED.
//   - EventBridge does neither: a call that may have reached it is never
//     made again; the intent is QUARANTINED (idempotency_window_passed)
//     for its owner, with at most the one event put, never a second.
func TestCrashMatrix_TargetCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("crash matrix skipped in -short mode")
	}
	type point struct {
		name string
		arm  func(tg *pt.AWSTarget, d *pt.Dispatcher)
	}
	at := func(when awstrace.When) func(op string) func(*pt.AWSTarget, *pt.Dispatcher) {
		return func(op string) func(*pt.AWSTarget, *pt.Dispatcher) {
			return func(_ *pt.AWSTarget, d *pt.Dispatcher) { d.Rec.Arm(awstrace.Crash{Op: op, Nth: 1, When: when}) }
		}
	}
	for _, c := range []struct {
		kind outbox.TargetKind
		op   string // the call's operation, as awstrace names it and as X-Amz-Target names it
		wire string
		// dedups: the target deduplicates and can be asked, so every point
		// ends SUCCEEDED with one application.
		dedups bool
	}{
		{outbox.TargetStepFunctions, "SFN.StartExecution", "StartExecution", true},
		{outbox.TargetEventBridge, "EventBridge.PutEvents", "PutEvents", false},
	} {
		points := []point{
			{"clean", func(*pt.AWSTarget, *pt.Dispatcher) {}},
			{"crash-before-call", at(awstrace.Before)(c.op)},
			{"crash-after-call", at(awstrace.After)(c.op)},
			{"lost-answer", at(awstrace.Lost)(c.op)},
			{"timeout-after-apply", func(tg *pt.AWSTarget, _ *pt.Dispatcher) { tg.Proxy.HangAfterApply(c.wire) }},
		}
		for _, p := range points {
			t.Run(string(c.kind)+"/"+p.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				h := pt.NewOrders(t, pt.Options{}, pt.OutboxOptions{})
				tg := h.Outbox.UseTarget(c.kind, "refund")
				w, d1, d2 := h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1"), h.Outbox.NewDispatcher("disp-2")
				deliver(t, h, "msg_o42_12", pt.OrderEvent("order.cancelled", o42, 12, "", ""), 202)
				p.arm(tg, d1)
				// The first dispatcher works until it dies; a fresh one
				// takes its messages once they come back (and its lease
				// once it has expired, on the manual clock).
				deadline := time.Now().Add(drainTimeout)
				for h.Depth(h.Queues.Queue)+h.Depth(h.Outbox.Queues.Queue) > 0 {
					if time.Now().After(deadline) {
						t.Fatalf("not drained: events %d, effects %d", h.Depth(h.Queues.Queue), h.Depth(h.Outbox.Queues.Queue))
					}
					d := d1
					if d1.Rec.Crashed() {
						d = d2
					}
					if w.PollOnce(ctx)+d.PollOnce(ctx) == 0 {
						h.Clock.Advance(idle)
						time.Sleep(50 * time.Millisecond)
					}
				}
				crashed := d1.Rec.Crashed()
				if wantCrash := strings.HasPrefix(p.name, "crash-"); crashed != wantCrash {
					t.Fatalf("the first dispatcher crashed: %v, want %v (%s)", crashed, wantCrash, d1.Rec)
				}
				if p.name == "timeout-after-apply" && tg.Proxy.Held() != 1 {
					t.Fatalf("the proxy held %d answers", tg.Proxy.Held())
				}
				// The notice (HTTP, idempotent downstream) is always
				// performed once.
				requireIntentStatus(t, h.Outbox, notify12, ledger.IntentStatusSucceeded, "")
				requireEffective(t, h.Outbox, map[string]int{notify12: 1})
				applied := tg.Applied()
				in := h.Outbox.Intent(refund12)
				acts := pt.IntentActions(in)
				switch {
				case c.dedups || p.name == "clean":
					// One application, SUCCEEDED.
					requireIntentStatus(t, h.Outbox, refund12, ledger.IntentStatusSucceeded, "")
					if !maps.Equal(applied, map[string]int{refund12: 1}) {
						t.Fatalf("the target's record %v, want %s once", applied, refund12)
					}
				default:
					// Uncertain, and nothing to ask: QUARANTINED for the
					// owner, and never a second call.
					requireIntentStatus(t, h.Outbox, refund12, ledger.IntentStatusQuarantined, "idempotency_window_passed")
					want := map[string]int{refund12: 1}
					if p.name == "crash-before-call" {
						// The dispatcher died before the call: nothing was
						// put, but the lease it held says only that it may
						// have been, so the next claim does not call either.
						want = map[string]int{}
					}
					if !maps.Equal(applied, want) {
						t.Fatalf("the target's record %v, want %v: never a second call", applied, want)
					}
					// A call that ended without an answer was recorded
					// UNCERTAIN first, in the intent's audit.
					uncertain := false
					for _, a := range in.Audit {
						uncertain = uncertain || string(a.To) == string(ledger.IntentStatusUncertain)
					}
					if lost := p.name == "lost-answer" || p.name == "timeout-after-apply"; uncertain != lost {
						t.Fatalf("UNCERTAIN in the audit: %v (%v)", uncertain, acts)
					}
					if !strings.Contains(in.Detail, "does not deduplicate") {
						t.Fatalf("detail %q does not tell the owner why", in.Detail)
					}
				}
				t.Logf("%s %s: refund %s %s (audit %v); the target's record %v", c.kind, p.name, in.Status, in.ErrorCode, acts, applied)
			})
		}
	}
}
