package operator_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/operator"
	"github.com/effectively-once/webhooks/internal/queue"
)

func (f *fixture) send(url string, p queue.Pointer) {
	f.t.Helper()
	if err := (queue.Sender{Client: f.SQS, URL: url}).Send(context.Background(), p); err != nil {
		f.t.Fatal(err)
	}
}

func TestStatsTheDashboard(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	seedEvents(f) // RECEIVED since 12:00, DEAD, QUARANTINED, PROCESSED; now 13:00
	f.accept("stripe", "evt_recv2", "invoice.paid", `{}`)
	f.accept("stripe", "evt_recv3", "invoice.paid", `{}`)
	seedIntents(t, f)
	f.send(f.Events.DLQ, queue.Pointer{Source: "stripe", EventID: "evt_dead"})
	f.send(f.Events.DLQ, queue.Pointer{Source: "stripe", EventID: "evt_x"})

	requireEqual(t, "stats", f.mustRun("stats"), `at 2026-11-30T13:03:00Z (counts from the due index, each capped at 1000)
events accepted but not finished
  RECEIVED      3
  PROCESSING    0
  RETRY_WAIT    0
events waiting for an operator
  DEAD          1
  QUARANTINED   1
oldest open event  1h03m: stripe/evt_recv RECEIVED since 2026-11-30T12:00:00Z
outbox intents
  PENDING       1
  DISPATCHING   2
  RETRY_WAIT    0
  UNCERTAIN     1
  QUARANTINED   0
effects performed, then contradicted by a newer revision (the recovery owner's)
  CONTRADICTED  0
dead-letter queues (visible + in flight)
  events        2
  effects       0
`)
	out := f.mustRun("stats", "--max", "2", "--json")
	var got operator.Stats
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.Unfinished["RECEIVED"] != (operator.Count{N: 2, Capped: true}) || got.Attention["DEAD"] != (operator.Count{N: 1}) ||
		got.Intents["DISPATCHING"] != (operator.Count{N: 2}) || got.Cap != 2 {
		t.Fatalf("json counts: %+v", got)
	}
	if o := got.Oldest; o == nil || *o != (operator.Oldest{Source: "stripe", EventID: "evt_recv", Status: "RECEIVED", Since: t0, AgeSeconds: 3780}) {
		t.Fatalf("oldest: %+v", got.Oldest)
	}
	if len(got.DLQ) != 2 || got.DLQ[0] != (operator.DLQDepth{Queue: "events", URL: f.Events.DLQ, Visible: 2, Depth: 2}) || got.DLQ[1].Depth != 0 {
		t.Fatalf("dlq: %+v", got.DLQ)
	}
	if out := f.mustRun("stats", "--max", "2"); !strings.Contains(out, "  RECEIVED      2+ (capped)\n") {
		t.Fatalf("capped count not said:\n%s", out)
	}

	// A DLQ that cannot be read is reported, the rest still shown, exit 1.
	out, errOut, code := f.run("--effects-dlq-url", f.Effects.DLQ+"-gone", "stats")
	if code != 1 || !strings.Contains(out, "  DEAD          1\n") || !strings.Contains(out, "  effects       unavailable: get attributes of "+f.Effects.DLQ+"-gone") ||
		errOut != "webhookctl: incomplete: a dead-letter queue could not be read\n" {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
}

func TestDLQStatusPeeksWithoutTakingMessages(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, id := range []string{"evt_1", "evt_2", "evt_3"} {
		f.send(f.Events.DLQ, queue.Pointer{Source: "stripe", EventID: id})
	}
	// goaws stamps SentTimestamp at receive time, so the age here is the
	// distance to the real clock: set the manual clock an hour ahead of it.
	f.Clock = ledger.NewManualClock(time.Now().Add(time.Hour).Truncate(time.Second))
	var got struct {
		DLQ []operator.DLQStatus `json:"dlq"`
	}
	if err := json.Unmarshal([]byte(f.mustRun("dlq", "status", "--json")), &got); err != nil {
		t.Fatal(err)
	}
	ev, eff := got.DLQ[0], got.DLQ[1]
	if ev.Queue != "events" || ev.URL != f.Events.DLQ || ev.Visible != 3 || ev.Depth != 3 || ev.Sampled != 3 ||
		ev.OldestSampledSeconds == nil || *ev.OldestSampledSeconds < 3590 || *ev.OldestSampledSeconds > 3600 {
		t.Fatalf("events DLQ: %+v (oldest %v)", ev, ev.OldestSampledSeconds)
	}
	if eff.Queue != "effects" || eff.Depth != 0 || eff.Sampled != 0 || eff.OldestSampledSeconds != nil {
		t.Fatalf("effects DLQ: %+v", eff)
	}
	// Nothing was deleted and nothing stays hidden: all three can be
	// received again right away.
	if p := f.pointers(f.Events.DLQ); len(p) != 3 {
		t.Fatalf("after the peek the DLQ gives %d messages, want 3", len(p))
	}
}

// fakeSQS answers the peek with fixed SentTimestamps, to check the age
// arithmetic exactly; it records what the peek asked for.
type fakeSQS struct {
	operator.SQS
	sent         []time.Time
	receives     []*sqs.ReceiveMessageInput
	visibilities []int32
}

func (s *fakeSQS) GetQueueAttributes(context.Context, *sqs.GetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return &sqs.GetQueueAttributesOutput{Attributes: map[string]string{"ApproximateNumberOfMessages": "12", "ApproximateNumberOfMessagesNotVisible": "1"}}, nil
}

func (s *fakeSQS) ReceiveMessage(_ context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	s.receives = append(s.receives, in)
	var out sqs.ReceiveMessageOutput
	for i, at := range s.sent {
		out.Messages = append(out.Messages, sqstypes.Message{ReceiptHandle: aws.String("rh" + string(rune('0'+i))),
			Attributes: map[string]string{"SentTimestamp": strconvMillis(at)}})
	}
	return &out, nil
}

func (s *fakeSQS) ChangeMessageVisibility(_ context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	s.visibilities = append(s.visibilities, in.VisibilityTimeout)
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

func strconvMillis(t time.Time) string {
	b, _ := json.Marshal(t.UnixMilli())
	return string(b)
}

func TestDLQStatusAgeIsTheOldestOfTheSample(t *testing.T) {
	t.Parallel()
	fake := &fakeSQS{sent: []time.Time{t0.Add(-90 * time.Minute), t0.Add(-26 * time.Hour), t0.Add(-time.Minute)}}
	var out strings.Builder
	a := &operator.App{SQS: fake, Out: &out, Clock: ledger.NewManualClock(t0),
		Queues: operator.Queues{EventsDLQ: "https://sqs.test/000000000000/prod-events-dlq", EffectsDLQ: "https://sqs.test/000000000000/prod-effects-dlq"}}
	if err := a.DLQStatus(context.Background()); err != nil {
		t.Fatal(err)
	}
	requireEqual(t, "dlq status", out.String(), `DLQ      URL                                             VISIBLE  IN_FLIGHT  DEPTH  OLDEST  SAMPLE
events   https://sqs.test/000000000000/prod-events-dlq   12       1          13     1d02h   3 sampled
effects  https://sqs.test/000000000000/prod-effects-dlq  12       1          13     1d02h   3 sampled
OLDEST is the age of the oldest of the sampled messages (up to 10 per queue), not necessarily of the queue's oldest.
`)
	r := fake.receives[0]
	if len(fake.receives) != 2 || r.MaxNumberOfMessages != 10 || r.VisibilityTimeout != 1 || len(r.MessageSystemAttributeNames) != 1 || r.MessageSystemAttributeNames[0] != "SentTimestamp" {
		t.Fatalf("peek asked %+v", r)
	}
	if len(fake.visibilities) != 6 || fake.visibilities[0] != 0 || fake.visibilities[5] != 0 {
		t.Fatalf("messages not made visible again: %v", fake.visibilities)
	}
}

// A performed effect that a newer revision contradicted is an attention
// item: stats counts it, intents list --status CONTRADICTED names it, and
// the recovery owner closes it with a reason.
func TestContradictedEffectIsVisibleUntilResolved(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.accept("stripe", "evt_c", "order.cancelled", `{}`)
	w := &ledger.ProjectionWrite{Name: "orders", Subject: "O-c", Version: 1, Fingerprint: "c", State: map[string]any{"status": "cancelled"}}
	in := ledger.Intent{OperationID: "op-refund-c", Kind: "refund", Subject: "O-c", Policy: ledger.PolicyWhileCurrent, Condition: map[string]string{"status": "cancelled"}}
	if _, err := f.L.Commit(ctx, f.claim("stripe", "evt_c"), w, []ledger.Intent{in}); err != nil {
		t.Fatal(err)
	}
	c, err := f.L.ClaimIntent(ctx, "op-refund-c", ledger.ClaimOptions{Owner: "dispatcher-1", Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.L.RecordIntent(ctx, c, ledger.IntentOutcome{Status: ledger.IntentStatusSucceeded, Code: "ok_200"}); err != nil {
		t.Fatal(err)
	}
	// The customer kept the order: revision 2 contradicts the refund.
	f.accept("stripe", "evt_k", "order.confirmed", `{}`)
	w2 := &ledger.ProjectionWrite{Name: "orders", Subject: "O-c", Version: 2, Fingerprint: "k", State: map[string]any{"status": "confirmed"}}
	done, err := f.L.Commit(ctx, f.claim("stripe", "evt_k"), w2, nil)
	if err != nil || len(done.Contradicted) != 1 {
		t.Fatalf("commit r2: %+v %v", done, err)
	}
	var s operator.Stats
	if err := json.Unmarshal([]byte(f.mustRun("--json", "stats")), &s); err != nil {
		t.Fatal(err)
	}
	if s.Intents["CONTRADICTED"].N != 1 {
		t.Fatalf("stats intents %+v; want one CONTRADICTED", s.Intents)
	}
	if out := f.mustRun("intents", "list", "--status", "CONTRADICTED"); !strings.Contains(out, "op-refund-c") || !strings.Contains(out, "CONTRADICTED") {
		t.Fatalf("intents list:\n%s", out)
	}
	if out := f.mustRun("intents", "show", "op-refund-c"); !strings.Contains(out, "contradicted  by version 2") {
		t.Fatalf("intents show:\n%s", out)
	}
	f.mustRun("intents", "resolve", "op-refund-c", "--outcome", "succeeded", "--reason", "refund reversed by hand, ticket 81")
	if out := f.mustRun("intents", "list", "--status", "CONTRADICTED"); strings.Contains(out, "op-refund-c") {
		t.Fatalf("still listed after the resolve:\n%s", out)
	}
}
