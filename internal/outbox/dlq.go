package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
)

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
func SweepDLQ(ctx context.Context, c queue.DLQClient, dlqURL string, l IntentReader, maxMessages int, log *slog.Logger) (DLQReport, error) {
	if log == nil {
		log = slog.Default()
	}
	var rep DLQReport
	seen, err := queue.SweepDLQ(ctx, c, dlqURL, maxMessages, func(ctx context.Context, body string) (bool, error) {
		ptr, err := queue.ParseIntentPointer(body)
		if err != nil {
			rep.Unreadable++
			return false, nil
		}
		st, err := l.GetIntentState(ctx, ptr.OperationID)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
		case err != nil:
			return false, fmt.Errorf("sweep effects DLQ: %w", err)
		case !st.Status.Terminal():
			rep.Kept++
			return false, nil
		}
		rep.Deleted++
		log.Info("effects DLQ message of a finished intent deleted", "operation_id", ptr.OperationID, "intent_status", st.Status)
		return true, nil
	})
	rep.Seen = seen
	return rep, err
}
