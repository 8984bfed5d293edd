package rules

// Standing is whether a subscription's customer may use the SaaS, as the
// subscription and dunning projections decide it together.
type Standing string

// The standings.
const (
	// StandingNone: no subscription state yet (its events are not
	// processed), or a subscription that never started (incomplete).
	StandingNone Standing = "none"
	// StandingActive: the subscription runs and its newest invoice event
	// is not a failed payment.
	StandingActive Standing = "active"
	// StandingSuspended: the newest invoice event is a failed payment, or
	// Stripe holds the subscription (unpaid, paused).
	StandingSuspended Standing = "suspended"
	// StandingEnded: the subscription ended; no payment restores it.
	StandingEnded Standing = "ended"
)

// runningStatuses are the subscription statuses under which access is
// given, unless a failed payment suspends it.
var runningStatuses = map[string]bool{"active": true, "trialing": true, "past_due": true}

// heldStatuses are those under which Stripe holds the subscription.
var heldStatuses = map[string]bool{"unpaid": true, "paused": true}

// Access combines a subscription's two projections, each the State of one
// subject (nil when the ledger has none): sub from Subscriptions and
// dunning from Dunning, both keyed by the subscription id.
//
// A payment never restores an ended subscription: an invoice.paid after
// the deletion (a final invoice settled late) leaves it ended. A failed
// payment suspends a running subscription until a newer payment; a
// subscription without any invoice event yet follows its own status.
//
// The pipeline applies each projection on its own, in its own version
// order; a service calls Access over the states state.Reader.Components
// reads of both in one consistent read, so the combination is computed on
// read and never stored.
func Access(sub, dunning map[string]any) Standing {
	if sub == nil {
		return StandingNone
	}
	status, _ := sub["status"].(string)
	switch ended, _ := sub["ended"].(bool); {
	case ended:
		return StandingEnded
	case heldStatuses[status]:
		return StandingSuspended
	case !runningStatuses[status]:
		return StandingNone
	}
	if access, _ := dunning["access"].(string); access == AccessSuspended {
		return StandingSuspended
	}
	return StandingActive
}
