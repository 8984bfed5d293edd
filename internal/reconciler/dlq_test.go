package reconciler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
)

// receiveRecorder is goaws's client, noting every receive per queue: its
// wait and how many messages it got.
type receiveRecorder struct {
	*sqs.Client
	mu       sync.Mutex
	receives map[string][]receive
}

type receive struct {
	wait int32
	got  int
}

func (r *receiveRecorder) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := r.Client.ReceiveMessage(ctx, in, opts...)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.receives == nil {
		r.receives = map[string][]receive{}
	}
	n := 0
	if out != nil {
		n = len(out.Messages)
	}
	r.receives[aws.ToString(in.QueueUrl)] = append(r.receives[aws.ToString(in.QueueUrl)], receive{wait: in.WaitTimeSeconds, got: n})
	return out, err
}

// With its default options the reconciler's DLQ sweeps long-poll
// (queue.DefaultDLQWait) and stop at an empty long-polled answer: every
// one of 12 events' dead letters (two receives' worth) becomes DEAD, the
// effects DLQ's letters of unknown intents are deleted. Before, they
// short-polled, and SQS may answer a short poll empty with messages there.
func TestDLQSweepsLongPoll(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	for i := range 12 {
		id := fmt.Sprintf("evt_lost_%02d", i)
		f.accept("stripe", id, "customer.subscription.updated", []byte(`{"id":"`+id+`"}`))
		if _, err := f.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(f.Q.EventsDLQ),
			MessageBody: aws.String(queue.Pointer{Source: "stripe", EventID: id}.Encode())}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if _, err := f.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(f.Q.EffectsDLQ),
			MessageBody: aws.String(queue.IntentPointer{OperationID: fmt.Sprintf("op_gone_%d", i)}.Encode())}); err != nil {
			t.Fatal(err)
		}
	}
	rec := &receiveRecorder{Client: f.SQS}
	r := f.reconciler(nil)
	r.SQS, r.Opts.DLQWait = rec, 0 // the default
	rep := f.run(r)
	if rep.DLQ.Seen != 12 || rep.DLQ.MarkedDead != 12 || rep.EffectsDLQ.Seen != 3 || rep.EffectsDLQ.Deleted != 3 {
		t.Fatalf("events DLQ %+v, effects DLQ %+v", rep.DLQ, rep.EffectsDLQ)
	}
	for i := range 12 {
		if ev := f.event("stripe", fmt.Sprintf("evt_lost_%02d", i)); ev.Status != ledger.StatusDead {
			t.Fatalf("%s is %s", ev.EventID, ev.Status)
		}
	}
	want := int32(queue.DefaultDLQWait.Seconds())
	for _, url := range []string{f.Q.EventsDLQ, f.Q.EffectsDLQ} {
		rs := rec.receives[url]
		if len(rs) == 0 || rs[len(rs)-1].got != 0 {
			t.Fatalf("%s: receives %+v; want the sweep to end at an empty answer", url, rs)
		}
		for _, x := range rs {
			if x.wait != want {
				t.Fatalf("%s: receives %+v; want each to long-poll %d s", url, rs, want)
			}
		}
	}
}
