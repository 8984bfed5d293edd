package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
)

// DueLister is the ledger query for unfinished intents that are due.
type DueLister interface {
	ListDueIntents(ctx context.Context, before time.Time, limit int) ([]ledger.IntentDueRef, error)
}

var _ DueLister = (*ledger.Ledger)(nil)

// Announcer sends intent pointers (queue.Sender).
type Announcer interface {
	SendIntents(ctx context.Context, ps []queue.IntentPointer) (unsent []string, err error)
}

// AnnounceDue re-announces intents that are due at or before `before`:
// PENDING ones whose announcement was lost (a crash or an SQS failure
// between the processor's commit and its send), expired leases, and due
// retries and checks. A pointer to an intent that another pointer already
// covers is harmless: the claim lets one dispatcher through. It returns how
// many pointers were sent. The reconciler calls it with `before` a few
// minutes in the past, so fresh intents are left to the processor's own
// announcement.
func AnnounceDue(ctx context.Context, l DueLister, a Announcer, before time.Time, limit int, reason string) (int, error) {
	due, err := l.ListDueIntents(ctx, before, limit)
	if err != nil {
		return 0, fmt.Errorf("list due intents: %w", err)
	}
	if len(due) == 0 {
		return 0, nil
	}
	ps := make([]queue.IntentPointer, len(due))
	for i, d := range due {
		ps[i] = queue.IntentPointer{OperationID: d.OperationID, Reason: reason}
	}
	unsent, err := a.SendIntents(ctx, ps)
	return len(ps) - len(unsent), err
}
