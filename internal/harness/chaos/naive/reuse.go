package naive

import (
	"context"
	"errors"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/processor"
)

// ReuseDrop is the processor's ledger of the reuse-drop design: ours,
// except that an intent whose operation id another intent already holds
// is dropped silently before the commit, whatever it carries (the
// ledger's behaviour before it told a reused id from a retry). A rule
// that keys a latest intent without the revision then leaves the
// downstream at the first revision's state, and nothing says so.
type ReuseDrop struct {
	processor.Ledger
}

var _ processor.Ledger = ReuseDrop{}

// Commit drops the intents whose operation id exists, then commits.
func (l ReuseDrop) Commit(ctx context.Context, c ledger.Claim, w *ledger.ProjectionWrite, intents []ledger.Intent) (ledger.Committed, error) {
	kept := intents[:0:0]
	for _, in := range intents {
		_, err := l.GetIntentState(ctx, in.OperationID)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			kept = append(kept, in)
		case err != nil:
			return ledger.Committed{}, err
		}
	}
	return l.Ledger.Commit(ctx, c, w, kept)
}
