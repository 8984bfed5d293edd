package localaws_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/queue"
)

// losingClient loses the answer of its first n receives after goaws has
// handed their messages out, as a failed read of a 200 answer does.
type losingClient struct {
	*sqs.Client
	lose int
}

func (c *losingClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := c.Client.ReceiveMessage(ctx, in, opts...)
	if err == nil && c.lose > 0 {
		c.lose--
		return nil, errors.New("deserialization failed: use of closed network connection")
	}
	return out, err
}

// A lost answer hides the messages it took for the receive's visibility,
// as in SQS; Receive and Drain still return every message, once.
func TestReceiveAndDrainSurviveALostAnswer(t *testing.T) {
	ctx := context.Background()
	sq, err := localaws.StartSQS("")
	if err != nil {
		t.Fatal(err)
	}
	urls, err := queue.Create(ctx, sq.Client(), queue.Spec{Name: localaws.UniqueName("rcv"), VisibilityTimeout: 30e9, MaxReceiveCount: 3, DLQRetention: 3600e9})
	if err != nil {
		t.Fatal(err)
	}
	send := func(n int) {
		for i := range n {
			if _, err := sq.Client().SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(urls.Queue), MessageBody: aws.String(fmt.Sprint("m", i))}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// WHEN the first answer is lost, Receive asks again after the 1 s visibility
	send(3)
	c := &losingClient{Client: sq.Client(), lose: 1}
	start := time.Now()
	out, err := localaws.Receive(ctx, c, &sqs.ReceiveMessageInput{QueueUrl: aws.String(urls.Queue), MaxNumberOfMessages: 10, VisibilityTimeout: 1})
	if err != nil || len(out.Messages) != 3 {
		t.Fatalf("Receive after a lost answer: %d messages, %v", len(out.Messages), err)
	}
	if took := time.Since(start); took < time.Second {
		t.Fatalf("Receive asked again after %s, before the lost messages were visible", took)
	}
	// a plain receive in its place would have seen nothing
	if _, err := localaws.Drain(ctx, sq.Client(), urls.Queue); err != nil {
		t.Fatal(err)
	}

	// AND Drain returns 23 messages, each once, though two answers are lost
	send(23)
	msgs, err := localaws.Drain(ctx, &losingClient{Client: sq.Client(), lose: 2}, urls.Queue)
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, m := range msgs {
		bodies = append(bodies, aws.ToString(m.Body))
	}
	slices.Sort(bodies)
	if len(bodies) != 23 || len(slices.Compact(slices.Clone(bodies))) != 23 {
		t.Fatalf("drained %d: %v", len(bodies), bodies)
	}

	// AND a queue that always loses its answers ends in an error, not a hang
	send(1)
	if _, err := localaws.Receive(ctx, &losingClient{Client: sq.Client(), lose: 10}, &sqs.ReceiveMessageInput{QueueUrl: aws.String(urls.Queue), VisibilityTimeout: 1}); err == nil {
		t.Fatal("Receive after 4 lost answers returned no error")
	}
}
