package naive

import (
	"context"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
)

// TruthBlind is the ledger of the dispatch-everything design: the real
// dispatcher made blind to the truth, so that it performs every intent
// once whatever happened to its subject since. It passes everything
// through to the real ledger but hides the truth an intent is checked
// against:
//
//   - GetProjection answers ledger.ErrNotFound, so the dispatcher treats
//     every while_current and latest intent as still current (a refund
//     for an order an operator has since confirmed is performed; a grant
//     retried after the revoke is performed);
//   - LockSubject always succeeds, so latest intents of one subject are
//     not serialized (an older state may reach the downstream after a
//     newer one).
//
// The processor, the commit and everything else stay ours.
type TruthBlind struct {
	outbox.Ledger
}

var _ outbox.Ledger = TruthBlind{}

// GetProjection pretends the projection does not exist.
func (TruthBlind) GetProjection(context.Context, string, string) (ledger.Projection, error) {
	return ledger.Projection{}, ledger.ErrNotFound
}

// LockSubject takes no cursor and always succeeds.
func (TruthBlind) LockSubject(context.Context, ledger.IntentClaim) error { return nil }
