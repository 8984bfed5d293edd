package queue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/queue"
)

// lossy sends through goaws and then loses the answer of its first `lose`
// calls, as a reset connection after SQS took the message does; the error
// is a connection error, which the SDK's policy retries.
type lossy struct {
	*sqs.Client
	lose  int
	calls int
	fail  error // when set, every call fails with it and sends nothing
}

type connReset struct{}

func (connReset) Error() string         { return "read: connection reset by peer" }
func (connReset) ConnectionError() bool { return true }

func (c *lossy) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	c.calls++
	if c.fail != nil {
		return nil, c.fail
	}
	out, err := c.Client.SendMessage(ctx, in, opts...)
	if err == nil && c.lose > 0 {
		c.lose--
		return nil, connReset{}
	}
	return out, err
}

func (c *lossy) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	c.calls++
	out, err := c.Client.SendMessageBatch(ctx, in, opts...)
	if err == nil && c.lose > 0 {
		c.lose--
		return nil, connReset{}
	}
	return out, err
}

// A send whose answer is lost is sent again, as the SDK would, but as
// another send: the two messages carry different pointer ids, so the second
// can never pass for a dead letter of the first (ledger.ClaimOptions).
func TestARetriedSendIsAnotherPointer(t *testing.T) {
	ctx := context.Background()
	sq, err := localaws.StartSQS("")
	if err != nil {
		t.Fatal(err)
	}
	urls, err := queue.Create(ctx, sq.Client(), queue.Spec{Name: localaws.UniqueName("att"), VisibilityTimeout: 30e9, MaxReceiveCount: 3, DLQRetention: 3600e9})
	if err != nil {
		t.Fatal(err)
	}
	pointers := func() []queue.Pointer {
		msgs, err := localaws.Drain(ctx, sq.Client(), urls.Queue)
		if err != nil {
			t.Fatal(err)
		}
		var ps []queue.Pointer
		for _, m := range msgs {
			p, err := queue.ParsePointer(aws.ToString(m.Body))
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		return ps
	}

	// WHEN one SendMessage answer is lost
	c := &lossy{Client: sq.Client(), lose: 1}
	if err := (queue.Sender{Client: c, URL: urls.Queue}).Send(ctx, queue.Pointer{Source: "stripe", EventID: "evt_1", Reason: "accept"}); err != nil {
		t.Fatal(err)
	}
	ps := pointers()
	if c.calls != 2 || len(ps) != 2 || ps[0].ID == ps[1].ID || ps[0].ID == "" || ps[0].EventID != "evt_1" || ps[1].EventID != "evt_1" {
		t.Fatalf("%d calls, pointers %+v: want two sends with two ids", c.calls, ps)
	}

	// AND one SendMessageBatch answer of a re-enqueue
	c = &lossy{Client: sq.Client(), lose: 1}
	unsent, err := (queue.Sender{Client: c, URL: urls.Queue}).SendEvents(ctx, []queue.Pointer{{Source: "stripe", EventID: "evt_2"}, {Source: "stripe", EventID: "evt_3"}})
	if err != nil || unsent != nil {
		t.Fatal(unsent, err)
	}
	ids := map[string]bool{}
	for _, p := range pointers() {
		ids[p.ID] = true
	}
	if c.calls != 2 || len(ids) != 4 {
		t.Fatalf("%d calls, %d distinct ids for 4 messages", c.calls, len(ids))
	}

	// AND an error the SDK would not retry is not retried
	c = &lossy{Client: sq.Client(), fail: errors.New("AccessDenied")}
	if err := (queue.Sender{Client: c, URL: urls.Queue}).Send(ctx, queue.Pointer{Source: "stripe", EventID: "evt_4"}); !errors.Is(err, queue.ErrUnavailable) || c.calls != 1 {
		t.Fatalf("calls %d, err %v", c.calls, err)
	}
	// AND a lost answer each time ends after the SDK's 3 attempts, reported
	c = &lossy{Client: sq.Client(), fail: connReset{}}
	if err := (queue.Sender{Client: c, URL: urls.Queue}).Send(ctx, queue.Pointer{Source: "stripe", EventID: "evt_5"}); !errors.Is(err, queue.ErrUnavailable) || c.calls != 3 {
		t.Fatalf("calls %d, err %v", c.calls, err)
	}
}
