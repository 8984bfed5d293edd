package processor

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

// DLQClient is the part of the SQS client the DLQ sweep uses.
type DLQClient interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
}

// GiveUpper is the part of the ledger the DLQ sweep uses.
type GiveUpper interface {
	GiveUp(ctx context.Context, source, eventID, actor, reason string) (ledger.Event, error)
}

// SweepReport counts what one sweep did.
type SweepReport struct {
	Seen, MarkedDead, AlreadyDead, Finished, Leased, Unreadable int
}

// SweepDLQ reconciles the dead-letter queue with the ledger. SQS can give up
// on a message before the ledger's attempt count is exhausted (claims that
// found a live lease, crashes before a claim, or an emulator that does not
// count receives). Every event whose pointer reached the DLQ but whose row is
// still unfinished is marked DEAD here, so it is visible and never waits in
// RETRY_WAIT forever. Messages stay in the DLQ for an operator's console
// redrive, except those whose event already finished (nothing to redrive),
// which are deleted. The reconciler runs this on its schedule.
func SweepDLQ(ctx context.Context, c DLQClient, dlqURL string, l GiveUpper, maxMessages int, log *slog.Logger) (SweepReport, error) {
	if log == nil {
		log = slog.Default()
	}
	var rep SweepReport
	for rep.Seen < maxMessages {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(dlqURL), MaxNumberOfMessages: int32(min(10, maxMessages-rep.Seen)),
			VisibilityTimeout: 30, WaitTimeSeconds: 0,
		})
		if err != nil {
			return rep, fmt.Errorf("receive from DLQ: %w", err)
		}
		if len(out.Messages) == 0 {
			return rep, nil
		}
		for _, m := range out.Messages {
			rep.Seen++
			keep := true
			ptr, err := queue.ParsePointer(aws.ToString(m.Body))
			switch {
			case err != nil:
				rep.Unreadable++
			default:
				_, gerr := l.GiveUp(ctx, ptr.Source, ptr.EventID, "dlq-sweep", "message reached the dead-letter queue")
				var nc *ledger.NotClaimableError
				switch {
				case gerr == nil:
					rep.MarkedDead++
					log.Warn("queue gave up before the ledger: marked DEAD", "source", ptr.Source, "event_id", ptr.EventID)
				case errors.As(gerr, &nc) && nc.Event.Status == ledger.StatusDead:
					rep.AlreadyDead++
				case errors.As(gerr, &nc) && nc.Event.Status == ledger.StatusProcessing:
					rep.Leased++ // a live worker has it; look again next sweep
				case errors.As(gerr, &nc), errors.Is(gerr, ledger.ErrNotFound):
					rep.Finished++
					keep = false
				default:
					return rep, fmt.Errorf("sweep %s/%s: %w", ptr.Source, ptr.EventID, gerr)
				}
			}
			// A kept message becomes visible again when its 30 s visibility
			// ends, for the console redrive; within this sweep it is not seen twice.
			if !keep {
				if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(dlqURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
					return rep, fmt.Errorf("delete finished DLQ message: %w", err)
				}
			}
		}
	}
	return rep, nil
}
