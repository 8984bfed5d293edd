package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/pkg/ledger"
	"github.com/effectively-once/webhooks/pkg/queue"
)

// DLQClient is the part of the SQS client the effects DLQ sweep uses.
type DLQClient interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
}

// IntentReader reads an intent's state.
type IntentReader interface {
	GetIntentState(ctx context.Context, op string) (ledger.IntentState, error)
}

// DLQReport counts what one sweep of the effects DLQ did.
type DLQReport struct {
	Seen       int `json:"seen"`
	Deleted    int `json:"deleted"`    // the intent is finished (or unknown): nothing to redrive
	Kept       int `json:"kept"`       // the intent is unfinished: kept for a console redrive
	Unreadable int `json:"unreadable"` // not an intent pointer; kept for an operator
}

// SweepDLQ reconciles the effects DLQ with the ledger. A pointer lands
// there when SQS gave up on it (maxReceiveCount), which says nothing about
// the intent: the ledger does. Messages whose intent is finished
// (SUCCEEDED, FAILED, or QUARANTINED and so listed for an operator) or
// unknown are deleted, so the DLQ alarm means "unfinished work"; messages
// of unfinished intents stay for a console redrive, and the reconciler
// re-announces those intents from the ledger anyway.
func SweepDLQ(ctx context.Context, c DLQClient, dlqURL string, l IntentReader, maxMessages int, log *slog.Logger) (DLQReport, error) {
	if log == nil {
		log = slog.Default()
	}
	var rep DLQReport
	for rep.Seen < maxMessages {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(dlqURL), MaxNumberOfMessages: int32(min(10, maxMessages-rep.Seen)), VisibilityTimeout: 30,
		})
		if err != nil {
			return rep, fmt.Errorf("receive from effects DLQ: %w", err)
		}
		if len(out.Messages) == 0 {
			return rep, nil
		}
		for _, m := range out.Messages {
			rep.Seen++
			ptr, err := queue.ParseIntentPointer(aws.ToString(m.Body))
			if err != nil {
				rep.Unreadable++
				continue
			}
			st, err := l.GetIntentState(ctx, ptr.OperationID)
			switch {
			case errors.Is(err, ledger.ErrNotFound):
			case err != nil:
				return rep, fmt.Errorf("sweep effects DLQ: %w", err)
			case !st.Status.Terminal():
				rep.Kept++
				continue
			}
			if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(dlqURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
				return rep, fmt.Errorf("delete from effects DLQ: %w", err)
			}
			rep.Deleted++
			log.Info("effects DLQ message of a finished intent deleted", "operation_id", ptr.OperationID, "intent_status", st.Status)
		}
	}
	return rep, nil
}
