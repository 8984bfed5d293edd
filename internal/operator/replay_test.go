package operator_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/operator"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/source"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// switchable is a projection whose downstream lookup fails (transiently)
// until it is repaired; it counts the events it applied.
type switchable struct {
	mu      sync.Mutex
	broken  bool
	applied []string
}

func (*switchable) Name() string { return "test_orders" }

func (p *switchable) Project(ev projection.Event) (projection.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.broken {
		return projection.Result{}, errors.New("order lookup timed out")
	}
	p.applied = append(p.applied, ev.EventID)
	return projection.Result{
		Write:   &ledger.ProjectionWrite{Name: "test_orders", Subject: "O-42", Version: 12, Fingerprint: "cancelled", State: map[string]any{"status": "CANCELLED"}},
		Intents: []ledger.Intent{{OperationID: "O-42:refund:12", Kind: "refund", Subject: "O-42", Payload: map[string]any{"amount": 1200}}},
	}, nil
}

// newProcessor is the real processor over the fixture's table, with the
// projection above for stripe events of type "order.cancelled".
func newProcessor(t *testing.T, f *fixture, p *switchable) *processor.Processor {
	t.Helper()
	sources, err := source.Parse([]byte(`{"sources":[{"name":"stripe","kind":"stripe","secrets":["env:STRIPE_TEST_FAKE"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	reg := projection.NewRegistry()
	reg.Register("stripe", []string{"order.cancelled"}, p)
	proc, err := processor.New(f.L, sources, reg, processor.Options{
		Owner: "processor-1", Lease: time.Minute, MaxAttempts: 2, RetryBase: time.Second, RetryCap: time.Second,
		Now: f.Clock.Now, Rand: func() float64 { return 0.5 }, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return proc
}

// deliver hands the events queue's messages to the processor, as the event
// source mapping does, and deletes the acknowledged ones.
func deliver(t *testing.T, f *fixture, proc *processor.Processor) int {
	t.Helper()
	ctx := context.Background()
	out, err := localaws.Receive(ctx, f.SQS, &sqs.ReceiveMessageInput{QueueUrl: aws.String(f.Events.Queue), MaxNumberOfMessages: 10, VisibilityTimeout: 30})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []processor.Message
	for _, m := range out.Messages {
		msgs = append(msgs, processor.Message{ID: aws.ToString(m.MessageId), Body: aws.ToString(m.Body)})
	}
	failed := proc.Process(ctx, msgs)
	for _, m := range out.Messages {
		if !slices.Contains(failed, aws.ToString(m.MessageId)) {
			if _, err := f.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(f.Events.Queue), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return len(msgs)
}

// A DEAD event replayed by the operator is processed once, keeps its
// identity, and carries the operator and reason in its audit.
func TestReplayOfADeadEventIsProcessedOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	proj := &switchable{broken: true}
	proc := newProcessor(t, f, proj)
	ctx := context.Background()
	f.accept("stripe", "evt_o42", "order.cancelled", `{"id":"evt_o42"}`)
	ptr := processor.Message{ID: "m1", Body: queue.Pointer{Source: "stripe", EventID: "evt_o42", Reason: "accept"}.Encode()}
	proc.Process(ctx, []processor.Message{ptr})
	f.Clock.Advance(2 * time.Second)
	proc.Process(ctx, []processor.Message{ptr})
	if ev := f.event("stripe", "evt_o42"); ev.Status != ledger.StatusDead || ev.Attempts != 2 {
		t.Fatalf("setup: %s after %d attempts", ev.Status, ev.Attempts)
	}

	proj.broken = false // the repair
	f.Clock.Advance(time.Hour)
	out := f.mustRun("replay", "stripe", "evt_o42", "--reason", "order service restored (INC-7)", "--actor", "ops:alice")
	requireEqual(t, "replay", out, "replayed stripe/evt_o42 -> RECEIVED (same identity; audit: replay by ops:alice ("+callerARN+"): order service restored (INC-7))\nenqueued\n")
	if n := deliver(t, f, proc); n != 1 {
		t.Fatalf("the replay enqueued %d messages", n)
	}
	if n := deliver(t, f, proc); n != 0 {
		t.Fatalf("%d more messages", n)
	}
	ev := f.event("stripe", "evt_o42")
	if ev.Status != ledger.StatusProcessed || ev.Attempts != 1 || ev.TotalAttempts != 3 || ev.Result.Intents != 1 {
		t.Fatalf("after replay: %s attempts %d/%d result %+v", ev.Status, ev.Attempts, ev.TotalAttempts, ev.Result)
	}
	if !slices.Equal(proj.applied, []string{"evt_o42"}) {
		t.Fatalf("projection applied %v, want once", proj.applied)
	}
	want := []string{"accept", "claim", "retry_later", "retry", "dead", "replay", "claim", "complete"}
	if got := actions(ev.Audit); !slices.Equal(got, want) {
		t.Fatalf("audit %v, want %v", got, want)
	}
	replay := ev.Audit[5]
	if replay != (ledger.AuditEntry{At: t0.Add(time.Hour + 2*time.Second), From: ledger.StatusDead, To: ledger.StatusReceived, Actor: "ops:alice (" + callerARN + ")", Action: "replay", Reason: "order service restored (INC-7)"}) {
		t.Fatalf("replay audit %+v", replay)
	}
	// In the source's scope.
	in, err := f.L.GetIntentState(ctx, projection.ScopedOperationID("stripe", "O-42:refund:12"))
	if err != nil || in.Causation != "stripe/evt_o42" {
		t.Fatalf("intent: %+v %v", in, err)
	}

	// A second replay is refused: the event is finished.
	_, errOut, code := f.run("replay", "stripe", "evt_o42", "--reason", "again")
	if code != 1 || errOut != "webhookctl: refused: stripe/evt_o42 is PROCESSED; only DEAD or QUARANTINED events can be replayed\n" {
		t.Fatalf("second replay: exit %d %q", code, errOut)
	}
	if got := f.event("stripe", "evt_o42"); count(got.Audit, "replay") != 1 {
		t.Fatalf("audit after a refused replay: %v", actions(got.Audit))
	}
}

// The default actor is $USER@hostname, with the caller's verified AWS
// identity; JSON output names it.
func TestReplayJSONAndDefaultActor(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.dead("stripe", "evt_1", "invoice.paid")
	var got map[string]any
	if err := json.Unmarshal([]byte(f.mustRun("replay", "stripe", "evt_1", "--reason", "retry after fix", "--json")), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"source": "stripe", "event_id": "evt_1", "status": "RECEIVED", "actor": aliceActor, "reason": "retry after fix", "enqueued": true, "note": "enqueued"}
	if len(got) != len(want) {
		t.Fatalf("json %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("json %s = %v, want %v", k, got[k], v)
		}
	}
	if e := f.event("stripe", "evt_1").Audit; e[len(e)-1].Actor != aliceActor {
		t.Fatalf("audit actor %q", e[len(e)-1].Actor)
	}
	if p := f.pointers(f.Events.Queue); len(p) != 1 || p[0].ID == "" || p[0] != (queue.Pointer{V: 1, Source: "stripe", EventID: "evt_1", Reason: "replay", ID: p[0].ID}) {
		t.Fatalf("queue: %+v", p)
	}
}

// If the send fails, the event stays RECEIVED (for the reconciler) and the
// output says so.
func TestReplayWhoseSendFailsStaysReceived(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.dead("stripe", "evt_1", "invoice.paid")
	out, errOut, code := f.run("--events-queue-url", f.Events.Queue+"-gone", "replay", "stripe", "evt_1", "--reason", "fixed")
	if code != 1 || !strings.Contains(out, "NOT enqueued (") || !strings.Contains(out, "the event stays RECEIVED and the reconciler re-enqueues it\n") ||
		errOut != "webhookctl: incomplete: replayed but not enqueued\n" {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if ev := f.event("stripe", "evt_1"); ev.Status != ledger.StatusReceived {
		t.Fatalf("status %s", ev.Status)
	}
	due, err := f.L.ListDue(context.Background(), f.Clock.Now(), 10)
	if err != nil || len(due) != 1 || due[0].EventID != "evt_1" {
		t.Fatalf("not findable by the reconciler: %+v %v", due, err)
	}
}

// interruptAfter lets n waits through, then cancels the run (Ctrl-C).
type interruptAfter struct {
	n      int
	waits  int
	cancel context.CancelFunc
}

func (l *interruptAfter) Wait(ctx context.Context) error {
	l.waits++
	if l.waits > l.n {
		l.cancel()
	}
	return ctx.Err()
}

func TestBulkReplayInterruptedAndResumedWithoutDoubleReplays(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, id := range []string{"evt_a", "evt_b", "evt_c", "evt_d", "evt_e"} {
		f.dead("stripe", id, "invoice.paid")
		f.Clock.Advance(time.Second)
	}
	f.dead("shopify", "evt_other", "orders/create")
	f.Clock.Advance(time.Minute)
	cp := filepath.Join(t.TempDir(), "replay.json")
	args := []string{"replay", "--status", "DEAD", "--source", "stripe", "--reason", "INC-12 downstream fixed", "--checkpoint", cp}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.Limiter = &interruptAfter{n: 2, cancel: cancel}
	out, errOut, code := f.runCtx(ctx, args...)
	requireEqual(t, "first run", out, `[1/5] stripe/evt_a DEAD -> RECEIVED, enqueued
[2/5] stripe/evt_b DEAD -> RECEIVED, enqueued
replayed 2 of 5 DEAD events; skipped 0 in the checkpoint, 0 no longer DEAD
interrupted: run the same command again to resume
`)
	if code != 1 || errOut != "webhookctl: incomplete: bulk replay interrupted; run the same command again to resume\n" {
		t.Fatalf("first run: exit %d %q", code, errOut)
	}
	var saved struct {
		Status string
		Done   []struct {
			Source  string `json:"source"`
			EventID string `json:"event_id"`
		}
	}
	b, err := os.ReadFile(cp)
	if err != nil || json.Unmarshal(b, &saved) != nil || saved.Status != "DEAD" || len(saved.Done) != 2 || saved.Done[1].EventID != "evt_b" {
		t.Fatalf("checkpoint %s %v", b, err)
	}

	// evt_a is processed and dies again before the operator resumes: the
	// checkpoint keeps this bulk replay from replaying it a second time.
	if err := f.L.Dead(context.Background(), f.claim("stripe", "evt_a"), "commit_failed", "again"); err != nil {
		t.Fatal(err)
	}
	counter := &interruptAfter{n: 100, cancel: func() {}}
	f.Limiter = counter
	out = f.mustRun(args...)
	// (evt_a died again last, so it is the newest DEAD event.)
	requireEqual(t, "resumed run", out, `[1/4] stripe/evt_c DEAD -> RECEIVED, enqueued
[2/4] stripe/evt_d DEAD -> RECEIVED, enqueued
[3/4] stripe/evt_e DEAD -> RECEIVED, enqueued
[4/4] stripe/evt_a skipped: already replayed (checkpoint)
replayed 3 of 4 DEAD events; skipped 1 in the checkpoint, 0 no longer DEAD
`)
	if counter.waits != 3 {
		t.Fatalf("the rate limiter was asked %d times for 3 replays", counter.waits)
	}
	for id, want := range map[string]ledger.Status{"evt_a": ledger.StatusDead, "evt_b": ledger.StatusReceived, "evt_c": ledger.StatusReceived, "evt_d": ledger.StatusReceived, "evt_e": ledger.StatusReceived} {
		ev := f.event("stripe", id)
		if ev.Status != want || count(ev.Audit, "replay") != 1 {
			t.Fatalf("%s: %s, %d replays", id, ev.Status, count(ev.Audit, "replay"))
		}
		if r := ev.Audit[slices.Index(actions(ev.Audit), "replay")]; r.Actor != aliceActor || r.Reason != "INC-12 downstream fixed" {
			t.Fatalf("%s replay audit %+v", id, r)
		}
	}
	if ev := f.event("shopify", "evt_other"); ev.Status != ledger.StatusDead {
		t.Fatalf("other source replayed: %s", ev.Status)
	}
	var ids []string
	for _, p := range f.pointers(f.Events.Queue) {
		ids = append(ids, p.EventID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"evt_a", "evt_b", "evt_c", "evt_d", "evt_e"}) {
		t.Fatalf("enqueued %v", ids)
	}

	// A checkpoint belongs to one filter.
	_, errOut, code = f.run("replay", "--status", "QUARANTINED", "--reason", "x", "--checkpoint", cp)
	if code != 2 || !strings.Contains(errOut, "was written for --status DEAD --source \"stripe\"") {
		t.Fatalf("other filter: exit %d %q", code, errOut)
	}
}

// Without a checkpoint, a rerun still skips what was replayed: it is no
// longer DEAD. A dry run changes nothing.
func TestBulkReplayRerunAndDryRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.dead("stripe", "evt_a", "invoice.paid")
	f.dead("stripe", "evt_b", "charge.failed")
	out := f.mustRun("replay", "--status", "dead", "--reason", "x", "--dry-run")
	requireEqual(t, "dry run", out, `[1/2] stripe/evt_a would replay (DEAD, commit_failed)
[2/2] stripe/evt_b would replay (DEAD, commit_failed)
dry run: would replay 2 of 2 DEAD events; skipped 0 in the checkpoint, 0 no longer DEAD
`)
	if ev := f.event("stripe", "evt_a"); ev.Status != ledger.StatusDead {
		t.Fatalf("dry run replayed: %s", ev.Status)
	}
	f.mustRun("replay", "--status", "DEAD", "--type", "invoice.paid", "--reason", "x")
	var sum operator.BulkSummary
	if err := json.Unmarshal([]byte(f.mustRun("replay", "--status", "DEAD", "--reason", "x", "--json")), &sum); err != nil {
		t.Fatal(err)
	}
	if sum != (operator.BulkSummary{Matched: 1, Replayed: 1}) {
		t.Fatalf("rerun: %+v", sum)
	}
	if ev := f.event("stripe", "evt_a"); count(ev.Audit, "replay") != 1 {
		t.Fatalf("evt_a replayed %d times", count(ev.Audit, "replay"))
	}
}

// The pacer lets one replay through per interval: counted through an
// injected clock and sleep, not timed.
func TestPacerSpacesReplaysByTheRate(t *testing.T) {
	interval, err := operator.ParseRate("4/s")
	if err != nil || interval != 250*time.Millisecond {
		t.Fatalf("4/s = %v %v", interval, err)
	}
	now := t0
	var slept []time.Duration
	p := &operator.Pacer{Interval: interval, Now: func() time.Time { return now }, Sleep: func(_ context.Context, d time.Duration) error {
		slept = append(slept, d)
		now = now.Add(d)
		return nil
	}}
	for range 4 {
		if err := p.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(slept, []time.Duration{250 * time.Millisecond, 250 * time.Millisecond, 250 * time.Millisecond}) {
		t.Fatalf("slept %v", slept)
	}
	now = now.Add(time.Second) // idle: the next one goes at once
	if err := p.Wait(context.Background()); err != nil || len(slept) != 3 {
		t.Fatalf("after idling: slept %v %v", slept, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	for in, want := range map[string]time.Duration{"5/s": 200 * time.Millisecond, "30/m": 2 * time.Second, "2": 500 * time.Millisecond} {
		if got, err := operator.ParseRate(in); err != nil || got != want {
			t.Fatalf("%s = %v %v, want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"0/s", "-1/s", "fast", "5/h", ""} {
		if _, err := operator.ParseRate(bad); !errors.Is(err, operator.ErrUsage) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
}
