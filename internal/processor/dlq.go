package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
)

// GiveUpper is the part of the ledger the DLQ sweep uses.
type GiveUpper interface {
	GiveUp(ctx context.Context, source, eventID, actor, reason, letter string) (ledger.Event, error)
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
// which are deleted. The reconciler runs this on its schedule; actor names
// it in the audit of the events it marks DEAD.
func SweepDLQ(ctx context.Context, c queue.DLQClient, dlqURL string, l GiveUpper, actor string, maxMessages int, log *slog.Logger) (SweepReport, error) {
	if log == nil {
		log = slog.Default()
	}
	var rep SweepReport
	seen, err := queue.SweepDLQ(ctx, c, dlqURL, maxMessages, func(ctx context.Context, body string) (bool, error) {
		ptr, err := queue.ParsePointer(body)
		if err != nil {
			rep.Unreadable++
			return false, nil
		}
		// The pointer's id is recorded as a dead letter of the event, so a
		// console redrive of this message may reopen it (ledger.ClaimOptions).
		_, gerr := l.GiveUp(ctx, ptr.Source, ptr.EventID, actor, "message reached the dead-letter queue", ptr.ID)
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
			return true, nil
		default:
			return false, fmt.Errorf("sweep %s/%s: %w", ptr.Source, ptr.EventID, gerr)
		}
		return false, nil
	})
	rep.Seen = seen
	return rep, err
}
