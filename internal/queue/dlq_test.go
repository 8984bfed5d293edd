package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/queue"
)

// sampledDLQ answers ReceiveMessage as SQS documents it: a short poll
// (WaitTimeSeconds 0) samples some of the servers that hold the queue and
// returns only their messages, so with few messages it may answer empty
// while messages wait; a long poll queries all of them. Here three
// servers are sampled in turn, the first one empty. Received messages stay
// in flight (the sweep's 30 s) until deleted.
type sampledDLQ struct {
	mu      sync.Mutex
	servers [3][]string
	turn    int
	waits   []int32 // WaitTimeSeconds of each receive
	empty   int     // empty answers
	deleted int
}

func newSampledDLQ(n int) *sampledDLQ {
	d := &sampledDLQ{}
	for i := range n {
		d.servers[1+i%2] = append(d.servers[1+i%2], fmt.Sprintf("dead-%02d", i))
	}
	return d
}

func (d *sampledDLQ) ReceiveMessage(_ context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.waits = append(d.waits, in.WaitTimeSeconds)
	sample := []int{0, 1, 2}
	if in.WaitTimeSeconds == 0 {
		sample = []int{d.turn % 3}
		d.turn++
	}
	out := &sqs.ReceiveMessageOutput{}
	for _, s := range sample {
		for len(d.servers[s]) > 0 && int32(len(out.Messages)) < max(in.MaxNumberOfMessages, 1) {
			body := d.servers[s][0]
			d.servers[s] = d.servers[s][1:]
			out.Messages = append(out.Messages, sqstypes.Message{Body: aws.String(body), ReceiptHandle: aws.String("rh-" + body)})
		}
	}
	if len(out.Messages) == 0 {
		d.empty++
	}
	return out, nil
}

func (d *sampledDLQ) DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deleted++
	return &sqs.DeleteMessageOutput{}, nil
}

func deleteAll(context.Context, string) (bool, error) { return true, nil }

// A sweep long-polls and stops only at an empty long-polled answer, so it
// sees every dead letter even where a short poll would have answered
// empty (before: it short-polled, met the empty server, and saw none of
// the 25).
func TestSweepDLQLongPollsUntilAnEmptyAnswer(t *testing.T) {
	d := newSampledDLQ(25)
	seen, err := queue.SweepDLQ(context.Background(), d, "dlq", 100, deleteAll)
	if err != nil || seen != 25 || d.deleted != 25 {
		t.Fatalf("swept %d, deleted %d of 25 (%v); receives waited %v", seen, d.deleted, err, d.waits)
	}
	want := int32(queue.DefaultDLQWait / time.Second)
	for i, w := range d.waits {
		if w != want {
			t.Fatalf("receive %d waited %d s, want %d (every receive long-polls)", i, w, want)
		}
	}
	if d.empty != 1 || len(d.waits) != 4 {
		t.Fatalf("%d receives, %d empty; want three answers then one empty long poll", len(d.waits), d.empty)
	}
	// maxMessages still bounds the sweep.
	d = newSampledDLQ(25)
	if seen, err := queue.SweepDLQ(context.Background(), d, "dlq", 12, deleteAll); err != nil || seen != 12 || d.empty != 0 {
		t.Fatalf("bounded sweep: seen %d, empty answers %d, %v", seen, d.empty, err)
	}
}

// The wait is the client's (queue.DLQWait), within SQS's 1-20 s, and
// within the context's deadline, keeping a second for the answer; a
// deadline too close for a one-second poll ends the sweep with an error
// before any receive. A negative wait short-polls.
func TestSweepDLQWait(t *testing.T) {
	for _, tc := range []struct {
		name     string
		wait     time.Duration
		deadline time.Duration // 0: none
		want     int32
		err      bool
	}{
		{name: "default", want: 1},
		{name: "5 s", wait: 5 * time.Second, want: 5},
		{name: "1.5 s rounds up", wait: 1500 * time.Millisecond, want: 2},
		{name: "at most 20 s", wait: time.Minute, want: 20},
		{name: "deadline in 3.5 s", wait: 5 * time.Second, deadline: 3500 * time.Millisecond, want: 2},
		{name: "deadline in 1.5 s", deadline: 1500 * time.Millisecond, err: true},
		{name: "negative: short poll", wait: -1, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			d := newSampledDLQ(3)
			var c queue.DLQClient = d
			if tc.wait != 0 {
				c = queue.DLQWait{DLQClient: d, Wait: tc.wait}
			}
			_, err := queue.SweepDLQ(ctx, c, "dlq", 10, deleteAll)
			if tc.err {
				if !errors.Is(err, context.DeadlineExceeded) || len(d.waits) != 0 {
					t.Fatalf("err %v after %d receives; want a deadline error before any", err, len(d.waits))
				}
				return
			}
			if err != nil || len(d.waits) == 0 || d.waits[0] != tc.want {
				t.Fatalf("waits %v, err %v; want %d s", d.waits, err, tc.want)
			}
		})
	}
}

// waitRecorder passes receives to goaws and notes their wait and length.
type waitRecorder struct {
	queue.DLQClient
	mu    sync.Mutex
	waits []int32
	took  []time.Duration
	got   []int
}

func (r *waitRecorder) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	start := time.Now()
	out, err := r.DLQClient.ReceiveMessage(ctx, in, opts...)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits, r.took = append(r.waits, in.WaitTimeSeconds), append(r.took, time.Since(start))
	if out != nil {
		r.got = append(r.got, len(out.Messages))
	}
	return out, err
}

// On goaws, which honours WaitTimeSeconds: 23 dead letters are all swept
// with long polls, and the last, empty, receive waited for its second.
func TestSweepDLQDrainsAQueueWithLongPolls(t *testing.T) {
	ctx := context.Background()
	sq, err := localaws.StartSQS("")
	if err != nil {
		t.Fatal(err)
	}
	q, err := sq.Client().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(localaws.UniqueName("sweep-dlq"))})
	if err != nil {
		t.Fatal(err)
	}
	url := aws.ToString(q.QueueUrl)
	for i := range 23 {
		if _, err := sq.Client().SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(fmt.Sprintf("dead-%02d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	rec := &waitRecorder{DLQClient: sq.Client()}
	seen, err := queue.SweepDLQ(ctx, queue.DLQWait{DLQClient: rec, Wait: time.Second}, url, 100, deleteAll)
	if err != nil || seen != 23 {
		t.Fatalf("swept %d of 23: %v (receives %v)", seen, err, rec.got)
	}
	for i, w := range rec.waits {
		if w != 1 {
			t.Fatalf("receive %d waited %d s, want 1", i, w)
		}
	}
	last := len(rec.got) - 1
	if rec.got[last] != 0 || rec.took[last] < 900*time.Millisecond {
		t.Fatalf("last receive got %d messages in %s; want an empty answer after the 1 s wait", rec.got[last], rec.took[last])
	}
	left, err := sq.Client().ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	if err != nil || len(left.Messages) != 0 {
		t.Fatalf("left in the DLQ: %d (%v)", len(left.Messages), err)
	}
}
