package pipelinetest_test

import (
	"context"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/pkg/harness/awstrace"
	pt "github.com/effectively-once/webhooks/pkg/harness/pipelinetest"
	"github.com/effectively-once/webhooks/pkg/ledger"
	"github.com/effectively-once/webhooks/pkg/processor"
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
func (sc crashScenario) run(t *testing.T, cr crashRun) (intakeOps, workerOps map[string]int) {
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
	h.Drain(20*time.Second, 31*time.Second, h.NewWorker("w2"))
	sc.check(t, h)
	return intakeOps, workerOps
}

func writesOf(counts map[string]int) []awstrace.Crash {
	var out []awstrace.Crash
	for op, n := range counts {
		if !writeOps[op] {
			continue
		}
		for i := 1; i <= n; i++ {
			out = append(out, awstrace.Crash{Op: op, Nth: i, When: awstrace.Before}, awstrace.Crash{Op: op, Nth: i, When: awstrace.After})
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
			t.Run("clean", func(t *testing.T) { intakeOps, workerOps = sc.run(t, crashRun{}) })
			if t.Failed() {
				return
			}
			points := 0
			for _, c := range writesOf(intakeOps) {
				points++
				t.Run("intake/"+strings.ReplaceAll(c.String(), " ", "_"), func(t *testing.T) {
					t.Parallel()
					sc.run(t, crashRun{crash: &c, inIntake: true})
				})
			}
			for _, c := range writesOf(workerOps) {
				points++
				t.Run("processor/"+strings.ReplaceAll(c.String(), " ", "_"), func(t *testing.T) {
					t.Parallel()
					sc.run(t, crashRun{crash: &c})
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
