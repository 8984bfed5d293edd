package pipelinetest_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/queue"
)

// What the emulators let pass and AWS does otherwise, across the
// pipeline (intake, queue, processor, DLQ sweep, redrive).

// A second pointer never reopens a DEAD event. The event is delivered
// twice while it waits (intake re-enqueues the duplicate), its projection
// fails every attempt, and it ends DEAD on one pointer while the other is
// still in the queue. That other pointer is acknowledged and changes
// nothing (no new round, no "redrive" in the audit), as is a late
// reconciler re-enqueue; only the message that reached the DLQ, brought
// back by a console redrive, reopens it, audited as a redrive naming the
// dead letter.
func TestASecondPointerLeavesADeadEventDeadAndARedriveReopensIt(t *testing.T) {
	ctx := context.Background()
	reg, f := flakyRegistry(-1)
	h := pt.New(t, pt.Options{Registry: reg, MaxReceiveCount: 3})
	body := subEvent("evt_dead_twice", "customer.subscription.created", "active", created)
	for range 2 {
		if r := h.Deliver(body, h.Sign(body, pt.SecretPrimary)); r.Status != 202 {
			t.Fatalf("delivery: %d %s", r.Status, r.Body)
		}
	}
	if d := h.Depth(h.Queues.Queue); d != 2 {
		t.Fatalf("queue depth %d, want the pointer and the duplicate's", d)
	}
	w := h.NewWorker("w")
	h.Drain(30*time.Second, time.Second, w)
	dead := h.Event("evt_dead_twice")
	if dead.Status != ledger.StatusDead || count(pt.Actions(dead), "dead") != 1 || count(pt.Actions(dead), "redrive") != 0 {
		t.Fatalf("after the attempts: %s %v", dead.Status, pt.Actions(dead))
	}
	if d := h.Depth(h.Queues.DLQ); d != 1 {
		t.Fatalf("DLQ depth %d, want the one message that exhausted the attempts", d)
	}

	// A re-enqueue that was decided before the event went DEAD arrives late.
	if err := (queue.Sender{Client: h.SQS, URL: h.Queues.Queue}).Send(ctx, queue.Pointer{Source: "stripe", EventID: "evt_dead_twice", Reason: "reconcile"}); err != nil {
		t.Fatal(err)
	}
	h.Drain(10*time.Second, time.Second, w)
	if ev := h.Event("evt_dead_twice"); ev.Status != ledger.StatusDead || !reflect.DeepEqual(ev.Audit, dead.Audit) {
		t.Fatalf("a late pointer changed the DEAD event: %s %v", ev.Status, pt.Actions(ev))
	}
	if d := h.Depth(h.Queues.Queue); d != 0 {
		t.Fatalf("the late pointer was not acknowledged: depth %d", d)
	}
	if open, err := h.Ledger.ListOpen(ctx, "event", 10, ledger.StatusDead); err != nil || len(open) != 1 {
		t.Fatalf("DEAD event not listed: %+v %v", open, err)
	}

	// The console redrive, once the cause is fixed.
	f.set(0)
	if n := h.Redrive(); n != 1 {
		t.Fatalf("redrove %d messages", n)
	}
	h.Drain(10*time.Second, time.Second, w)
	ev := h.Event("evt_dead_twice")
	if ev.Status != ledger.StatusProcessed || count(pt.Actions(ev), "redrive") != 1 || count(pt.Actions(ev), "complete") != 1 {
		t.Fatalf("after the redrive: %s %v", ev.Status, pt.Actions(ev))
	}
	for _, a := range ev.Audit {
		if a.Action == "redrive" && !strings.Contains(a.Reason, "dead letter ") {
			t.Fatalf("redrive audited as %q", a.Reason)
		}
	}
	requireIntents(t, h, 1)
}

// The same when SQS gives up first: the DLQ sweep marks the event DEAD and
// records the message as its dead letter; a copy of the pointer that is
// not that message does not reopen it, the console redrive of the dead
// letter does.
func TestADeadLetterTheSweepFoundIsRedriven(t *testing.T) {
	ctx := context.Background()
	reg, f := flakyRegistry(1)
	h := pt.New(t, pt.Options{Registry: reg, MaxReceiveCount: 3, RetryCap: time.Hour})
	body := subEvent("evt_swept", "customer.subscription.created", "active", created)
	h.Deliver(body, h.Sign(body, pt.SecretPrimary))
	w := h.NewWorker("w")
	// Real time only: the retry is never due, so SQS gives up first.
	deadline := time.Now().Add(15 * time.Second)
	for h.Depth(h.Queues.Queue) > 0 && time.Now().Before(deadline) {
		w.PollOnce(ctx)
		time.Sleep(100 * time.Millisecond)
	}
	// The sweep hides what it reads for 30 s; here for 1 s, so the
	// console redrive below finds the message without a wait.
	if rep, err := processor.SweepDLQ(ctx, shortHide{h.SQS}, h.Queues.DLQ, h.Ledger, "dlq-sweep", 100, nil); err != nil || rep.MarkedDead != 1 {
		t.Fatalf("sweep: %+v %v", rep, err)
	}
	time.Sleep(1100 * time.Millisecond)
	dead := h.Event("evt_swept")
	if dead.Status != ledger.StatusDead {
		t.Fatalf("after the sweep: %s", dead.Status)
	}
	if failed := w.Handle(ctx, queue.Pointer{Source: "stripe", EventID: "evt_swept", Reason: "duplicate", ID: "not-a-dead-letter"}); len(failed) != 0 {
		t.Fatalf("a second pointer was not acknowledged: %v", failed)
	}
	if ev := h.Event("evt_swept"); ev.Status != ledger.StatusDead || !reflect.DeepEqual(ev.Audit, dead.Audit) {
		t.Fatalf("a second pointer changed the DEAD event: %s %v", ev.Status, pt.Actions(ev))
	}
	f.set(0)
	h.Clock.Advance(time.Hour)
	if n := h.Redrive(); n != 1 {
		t.Fatalf("redrove %d messages", n)
	}
	h.Drain(10*time.Second, time.Second, w)
	if ev := h.Event("evt_swept"); ev.Status != ledger.StatusProcessed || count(pt.Actions(ev), "redrive") != 1 {
		t.Fatalf("after the redrive: %s %v", ev.Status, pt.Actions(ev))
	}
}

// shortHide is an SQS client whose receives hide messages for 1 s.
type shortHide struct{ *sqs.Client }

func (c shortHide) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	in.VisibilityTimeout = 1
	return c.Client.ReceiveMessage(ctx, in, opts...)
}
