// Package projection provides the projection API: pure functions from one
// verified event to the new business state of one subject (with its source
// version) and the outbox intents that state change implies, plus a registry
// keyed by provider kind and event type.
//
// A projection never reads or writes storage. The ledger applies its result
// in one transaction under the version guard, so the same event can be
// projected any number of times (retries, redrives, replays) and the outcome
// is decided by versions, not by arrival order.
//
// # Writing your own
//
// Implement Projection and register it for the provider kind and event types
// it understands:
//
//	type invoicePaid struct{}
//
//	func (invoicePaid) Name() string { return "invoice" }
//
//	func (invoicePaid) Project(ev projection.Event) (projection.Result, error) {
//		var e struct{ Created int64; Data struct{ Object struct{ ID, Status string } } }
//		if err := json.Unmarshal(ev.Payload, &e); err != nil {
//			return projection.Result{}, projection.Permanent("malformed", err)
//		}
//		state := map[string]any{"status": e.Data.Object.Status}
//		return projection.Result{Write: &ledger.ProjectionWrite{
//			Name: "invoice", Subject: e.Data.Object.ID, Version: e.Created,
//			Fingerprint: projection.Fingerprint(state), State: state,
//		}}, nil
//	}
//
//	reg.Register("stripe", []string{"invoice.paid"}, invoicePaid{})
//
// Return Permanent errors for input no retry can fix (the event is
// quarantined); any other error is retried.
package projection
