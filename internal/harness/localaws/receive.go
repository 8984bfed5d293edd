package localaws

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// SQSReceiver is the part of an SQS client Receive and Drain use.
type SQSReceiver interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
}

// receiveAttempts bounds Receive's tries after lost answers.
const receiveAttempts = 4

// Receive is one ReceiveMessage whose answer a test can count on: the
// messages it returns are all the visible messages the request took.
//
// A plain receive cannot promise that. Now and then the SDK fails to read a
// 200 answer ("deserialization failed … use of closed network connection",
// a known net/http behaviour: aws/aws-sdk-go-v2#1825 and #2737; against
// goaws about once in 300 runs of a 4-receive test under -race, never in
// 3,000 without it, with one client or one per call) and retries the call;
// the messages the lost answer took stay hidden for the visibility
// timeout, as they would in SQS, and the retry returns the others. A test
// that asserts on one receive then fails at random.
//
// So Receive makes the request without the SDK's retry, with a short
// visibility (in.VisibilityTimeout, 2 s when unset), and after a lost answer
// waits until what it took is visible again and asks once more, up to 4
// times. A caller that needs longer than the visibility to handle the
// messages sets a longer one.
func Receive(ctx context.Context, c SQSReceiver, in *sqs.ReceiveMessageInput) (*sqs.ReceiveMessageOutput, error) {
	req := *in
	if req.VisibilityTimeout == 0 {
		req.VisibilityTimeout = 2
	}
	var err error
	for range receiveAttempts {
		var out *sqs.ReceiveMessageOutput
		out, err = c.ReceiveMessage(ctx, &req, func(o *sqs.Options) { o.RetryMaxAttempts = 1 })
		if err == nil {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(req.VisibilityTimeout)*time.Second + 200*time.Millisecond):
		}
	}
	return nil, fmt.Errorf("receive from %s: %d attempts: %w", aws.ToString(in.QueueUrl), receiveAttempts, err)
}

// Drain receives and deletes every message of a queue and returns them in
// the order received, each message once (by MessageId: a message whose
// delete came after its visibility ended is received again). It stops at
// the first empty answer: goaws answers a short poll from every message,
// unlike SQS, which samples its servers.
func Drain(ctx context.Context, c SQSReceiver, url string) ([]sqstypes.Message, error) {
	seen := map[string]bool{}
	var got []sqstypes.Message
	for {
		out, err := Receive(ctx, c, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10})
		if err != nil {
			return got, err
		}
		if len(out.Messages) == 0 {
			return got, nil
		}
		for _, m := range out.Messages {
			if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				return got, fmt.Errorf("delete from %s: %w", url, err)
			}
			if id := aws.ToString(m.MessageId); !seen[id] {
				seen[id] = true
				got = append(got, m)
			}
		}
	}
}
