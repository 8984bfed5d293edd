package processor_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/pkg/builtin"
)

// A batch of three events that each write an intent announces all three in
// one SendMessageBatch after the commits, not one request per event.
func TestBatchAnnouncesItsIntentsOnce(t *testing.T) {
	ctx := context.Background()
	h := pt.New(t, pt.Options{})
	sq, err := localaws.StartSQS("")
	if err != nil {
		t.Fatal(err)
	}
	effects, err := queue.Create(ctx, sq.Client(), queue.Spec{Name: localaws.UniqueName("announce"), VisibilityTimeout: time.Minute, MaxReceiveCount: 3, DLQRetention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rec := &awstrace.Recorder{}
	p, err := processor.New(h.Ledger, h.Sources, builtin.Default(builtin.StripeOptions{}), processor.Options{
		Owner: "a", Lease: time.Minute, Now: h.Clock.Now, Log: slog.New(slog.DiscardHandler),
		Effects: queue.Sender{Client: sq.Client(rec.APIOption), URL: effects.Queue}})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []processor.Message
	for i, sub := range []string{"sub_a", "sub_b", "sub_c"} {
		id := "evt_" + sub
		b := pt.SubscriptionEvent(id, "customer.subscription.created", sub, "active", pt.Start.Unix(), "acct_1")
		if r := h.Deliver(b, h.Sign(b, pt.SecretPrimary)); r.Status != 202 {
			t.Fatalf("deliver %s: %d", id, r.Status)
		}
		msgs = append(msgs, processor.Message{ID: string(rune('1' + i)), Body: queue.Pointer{Source: "stripe", EventID: id}.Encode()})
	}
	if failed := p.Process(ctx, msgs); len(failed) != 0 {
		t.Fatalf("failed %v", failed)
	}
	if n := rec.Count("SQS.SendMessageBatch"); n != 1 || rec.Total("SQS") != 1 {
		t.Fatalf("announcements cost %s, want one SendMessageBatch", rec)
	}
	var announced []string
	got, err := localaws.Drain(ctx, sq.Client(), effects.Queue)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range got {
		ip, err := queue.ParseIntentPointer(aws.ToString(m.Body))
		if err != nil {
			t.Fatal(err)
		}
		announced = append(announced, ip.OperationID)
	}
	var written []string
	for _, in := range h.Intents() {
		written = append(written, in.OperationID)
	}
	slices.Sort(announced)
	slices.Sort(written)
	if len(written) != 3 || !slices.Equal(announced, written) {
		t.Fatalf("announced %v, written %v", announced, written)
	}
}
