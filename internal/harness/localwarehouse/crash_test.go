package localwarehouse_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	"github.com/effectively-once/webhooks/internal/harness/localwarehouse"
	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/builtin"
)

// storeTimeout bounds the sink's requests of one call in these tests (a
// held PutObject ends there): long enough that a loaded machine's local
// S3 answers within it, so only the held requests time out.
const storeTimeout = time.Second

// sink is an orders pipeline with the warehouse sink on: a worker, and two
// dispatchers whose S3 clients carry their own recorders, so a crash or a
// lost answer can hit the sink's PutObject. The second worker and
// dispatcher take over once the first ones crash (a Lambda restart).
type sink struct {
	h      *pt.Harness
	wh     *pt.Warehouse
	w1, w2 *pt.Worker
	d1, d2 *pt.Dispatcher
}

func newSink(t *testing.T, oo pt.OutboxOptions) *sink {
	h := pt.NewOrders(t, pt.Options{}, oo)
	wh := h.EnableWarehouse(0)
	wh.PerDispatcher, wh.Effect.Timeout = true, storeTimeout
	return &sink{h: h, wh: wh, w1: h.NewWorker("w1"), w2: h.NewWorker("w2"),
		d1: h.Outbox.NewDispatcher("d1"), d2: h.Outbox.NewDispatcher("d2")}
}

// run polls both stages (a crashed instance replaced by its second) until
// every intent is finished and both queues are empty, advancing the
// manual clock while nothing is received (leases and backoffs pass).
func (s *sink) run(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	h := s.h
	deadline := time.Now().Add(drainTimeout)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("not settled after %s: events %d, effects %d; intents %v", drainTimeout, h.Depth(h.Queues.Queue), h.Depth(h.Outbox.Queues.Queue), s.statuses(t))
		}
		w, d := s.w1, s.d1
		if w.Rec.Crashed() {
			w = s.w2
		}
		if d.Rec.Crashed() {
			d = s.d2
		}
		if w.PollOnce(ctx)+d.PollOnce(ctx) > 0 {
			continue
		}
		if s.settled(t) && h.Depth(h.Queues.Queue)+h.Depth(h.Outbox.Queues.Queue) == 0 {
			return
		}
		h.Clock.Advance(idle)
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *sink) statuses(t *testing.T) map[string]ledger.IntentStatus {
	snap, err := ledger.TakeSnapshot(context.Background(), s.h.DB, s.h.Table)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]ledger.IntentStatus{}
	for _, in := range snap.Intents {
		out[in.OperationID] = ledger.IntentStatus(in.Status)
	}
	return out
}

func (s *sink) settled(t *testing.T) bool {
	for _, st := range s.statuses(t) {
		if !st.Terminal() {
			return false
		}
	}
	return true
}

// writes counts the objects the store wrote at key.
func (s *sink) writes(key string) int {
	n := 0
	for _, w := range s.wh.S3.Writes() {
		if w.Key == s.wh.Bucket+"/"+key {
			n++
		}
	}
	return n
}

// requireOnce: the revision's record is in the store once (one write, one
// row of the change log, the current row), with its state, version and
// event; its intent SUCCEEDED (the store answered) and the order's
// refund and notice were each effective once.
func (s *sink) requireOnce(t *testing.T, order string, rev int64, status, event string) {
	t.Helper()
	h, wh := s.h, s.wh
	op := warehouse.OperationID("orders", builtin.OrderProjection, order, rev)
	key := wh.Key("orders", builtin.OrderProjection, order, rev)
	if n := s.writes(key); n != 1 {
		t.Fatalf("the store wrote %s %d times, want once", key, n)
	}
	log, err := localwarehouse.ChangeLog(context.Background(), wh.S3.Client(), wh.Bucket, wh.Prefix+"/")
	if err != nil {
		t.Fatal(err)
	}
	var rows []localwarehouse.Row
	for _, r := range log {
		if r.Subject == order && r.Version == rev {
			rows = append(rows, r)
		}
	}
	if len(rows) != 1 || rows[0].State["status"] != status || rows[0].EventID != event || rows[0].Scope != "orders" {
		t.Fatalf("change log rows of %s r%d: %+v, want one %s by %s", order, rev, rows, status, event)
	}
	in := h.Outbox.Intent(op)
	if in.Status != ledger.IntentStatusSucceeded {
		t.Fatalf("record intent %s %s (%s), want SUCCEEDED; audit %v", in.Status, in.ErrorCode, in.Detail, pt.IntentActions(in))
	}
	refund, notify := pt.OrderOps(order, int(rev))
	want := map[string]int{}
	if status == "cancelled" {
		want = map[string]int{refund: 1, notify: 1}
	}
	if got := h.Outbox.Down.EffectiveByKey(); !maps.Equal(got, want) {
		t.Fatalf("effective calls %v, want %v", got, want)
	}
}

// redriveEffectsDLQ moves the effects DLQ's messages back to the effects
// queue, as the console's "start DLQ redrive" does.
func (s *sink) redriveEffectsDLQ(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	h := s.h
	n := 0
	for _, m := range h.Receive(h.Outbox.Queues.DLQ) {
		if _, err := h.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(h.Outbox.Queues.Queue), MessageBody: m.Body}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(h.Outbox.Queues.DLQ), ReceiptHandle: m.ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

// The crash matrix of the warehouse sink: an order cancelled at r12 (a
// refund, a notice and the revision's change record), and at each point
// the pipeline breaks once where the sink is exposed: the dispatcher dies
// right before or right after its PutObject (written, not recorded
// SUCCEEDED), the PutObject's answer is lost or held past the timeout
// after or before the write, the processor dies between its commit and
// its ack (the pointer comes back and the operations are announced
// again), the record's pointer is announced again after it SUCCEEDED or
// redriven from the effects DLQ, and the event is delivered again and its
// revision sent under a new delivery id. Every point ends with one record
// of r12 (one write, one change-log row), its intent SUCCEEDED, and the
// refund and the notice effective once each.
func TestWarehouseCrashMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("crash matrix skipped in -short mode")
	}
	crash := func(when awstrace.When) func(*testing.T, *sink) {
		return func(_ *testing.T, s *sink) {
			s.d1.Rec.Arm(awstrace.Crash{Op: "S3.PutObject", Nth: 1, When: when})
		}
	}
	points := []struct {
		name string
		// before arms the point before the event is delivered; after
		// acts once the pipeline has settled.
		before func(*testing.T, *sink)
		after  func(*testing.T, *sink)
		// code is how the record intent's last dispatch ended.
		code string
	}{
		{name: "clean", code: "ok_200"},
		{name: "dispatcher-crash-before-put", before: crash(awstrace.Before), code: "ok_200"},
		{name: "dispatcher-crash-after-put", before: crash(awstrace.After), code: "replayed"},
		{name: "lost-put-answer", before: crash(awstrace.Lost), code: "replayed"},
		{name: "put-held-past-timeout-after-write", before: func(_ *testing.T, s *sink) { s.wh.S3.HangNext(true) }, code: "replayed"},
		{name: "put-held-past-timeout-before-write", before: func(_ *testing.T, s *sink) { s.wh.S3.HangNext(false) }, code: "ok_200"},
		{name: "processor-crash-between-commit-and-ack", code: "ok_200", before: func(_ *testing.T, s *sink) {
			s.w1.Rec.Arm(awstrace.Crash{Op: "DynamoDB.TransactWriteItems", Nth: 1, When: awstrace.After})
		}},
		{name: "reannounced-after-succeeded", code: "ok_200", after: func(_ *testing.T, s *sink) {
			op := warehouse.OperationID("orders", builtin.OrderProjection, o42, 12)
			s.h.Outbox.Announce("redrive", op, op)
			if n := s.h.Outbox.Reconcile(s.h.Clock.Now().Add(time.Hour)); n != 0 {
				panic("the reconciler re-announced a finished intent")
			}
		}},
		{name: "redriven-from-the-effects-dlq", code: "ok_200", after: func(t *testing.T, s *sink) {
			op := warehouse.OperationID("orders", builtin.OrderProjection, o42, 12)
			// SQS gave up on a pointer of it (maxReceiveCount): the sweep
			// keeps nothing of a finished intent, and a console redrive of
			// what was there adds nothing.
			if _, err := s.h.SQS.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(s.h.Outbox.Queues.DLQ),
				MessageBody: aws.String(`{"operation_id":"` + op + `","reason":"announce"}`)}); err != nil {
				t.Fatal(err)
			}
			if n := s.redriveEffectsDLQ(t); n != 1 {
				t.Fatalf("redrove %d messages", n)
			}
		}},
		{name: "event-delivered-again-and-revision-under-a-new-id", code: "ok_200", after: func(t *testing.T, s *sink) {
			if r := s.h.DeliverOrder("msg-12", pt.OrderEvent("order.cancelled", o42, 12, "", "")); r.Status >= 300 {
				t.Fatalf("redelivery: %d", r.Status)
			}
			if r := s.h.DeliverOrder("msg-12-replay", pt.OrderEvent("order.cancelled", o42, 12, "", "")); r.Status >= 300 {
				t.Fatalf("the revision under a new id: %d", r.Status)
			}
		}},
	}
	for _, p := range points {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			s := newSink(t, pt.OutboxOptions{})
			if p.before != nil {
				p.before(t, s)
			}
			if r := s.h.DeliverOrder("msg-12", pt.OrderEvent("order.cancelled", o42, 12, "", "")); r.Status != 202 {
				t.Fatalf("delivery: %d %s", r.Status, r.Body)
			}
			s.run(t)
			if p.after != nil {
				p.after(t, s)
				s.run(t)
			}
			s.requireOnce(t, o42, 12, "cancelled", "msg-12")
			in := s.h.Outbox.Intent(warehouse.OperationID("orders", builtin.OrderProjection, o42, 12))
			if in.ErrorCode != p.code {
				t.Fatalf("the record's last dispatch ended %q, want %q; audit %v", in.ErrorCode, p.code, pt.IntentActions(in))
			}
			if p.name == "processor-crash-between-commit-and-ack" && !s.w1.Rec.Crashed() {
				t.Fatal("the first worker did not crash")
			}
			if crashed := s.d1.Rec.Crashed(); crashed != (p.name == "dispatcher-crash-before-put" || p.name == "dispatcher-crash-after-put") {
				t.Fatalf("the first dispatcher crashed: %v", crashed)
			}
			t.Logf("%s: record intent %s %s, audit %v; S3 %v", p.name, in.Status, in.ErrorCode, pt.IntentActions(in), s.wh.S3.Requests())
		})
	}
}

// The record waits on a store that is down longer than the dispatcher's
// attempts' backoff lets its pointer be received: SQS gives up on the
// pointer (the effects queue's maxReceiveCount, 2 here) and moves it to
// the effects DLQ. The sweep keeps it (the intent is unfinished); once the
// store is back, a console redrive of the DLQ and the reconciler's
// re-announcement of the due intent both point at it: the record is
// written once, its intent SUCCEEDED, and nothing else is called again.
func TestWarehouseRecordRedrivenFromTheEffectsDLQ(t *testing.T) {
	ctx := context.Background()
	s := newSink(t, pt.OutboxOptions{MaxReceiveCount: 2})
	h := s.h
	s.wh.S3.SetDown(true)
	if r := h.DeliverOrder("msg-12", pt.OrderEvent("order.cancelled", o42, 12, "", "")); r.Status != 202 {
		t.Fatalf("delivery: %d", r.Status)
	}
	op := warehouse.OperationID("orders", builtin.OrderProjection, o42, 12)
	deadline := time.Now().Add(drainTimeout)
	for h.Depth(h.Outbox.Queues.DLQ) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the record's pointer never reached the effects DLQ; intent %v", h.Outbox.Intent(op).Status)
		}
		if s.w1.PollOnce(ctx)+s.d1.PollOnce(ctx) == 0 {
			h.Clock.Advance(idle)
			time.Sleep(50 * time.Millisecond)
		}
	}
	if st := h.Outbox.Intent(op).Status; st.Terminal() {
		t.Fatalf("record intent %s while the store is down, want it waiting", st)
	}
	rep, err := outbox.SweepDLQ(ctx, visibleAgain{h.SQS}, h.Outbox.Queues.DLQ, h.Ledger, 1, nil)
	if err != nil || rep.Kept != 1 || rep.Deleted != 0 {
		t.Fatalf("sweep of the effects DLQ: %+v %v", rep, err)
	}
	s.wh.S3.SetDown(false)
	if n := s.redriveEffectsDLQ(t); n != 1 {
		t.Fatalf("redrove %d messages", n)
	}
	h.Outbox.Reconcile(h.Clock.Now().Add(time.Hour))
	s.run(t)
	s.requireOnce(t, o42, 12, "cancelled", "msg-12")
	if n := s.redriveEffectsDLQ(t); n != 0 {
		t.Fatalf("the DLQ still held %d messages", n)
	}
}

// visibleAgain makes what it receives visible again at once: a message
// the sweep keeps is there for the console redrive that follows it (the
// sweep's own hold is 30 s of real time).
type visibleAgain struct{ *sqs.Client }

func (c visibleAgain) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := c.Client.ReceiveMessage(ctx, in, opts...)
	if err != nil {
		return out, err
	}
	for _, m := range out.Messages {
		if _, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: in.QueueUrl, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
			return out, err
		}
	}
	return out, nil
}
