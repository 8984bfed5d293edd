// Package projection provides the projection API: pure functions from one
// verified event to the new business state of one subject (with its source
// version) and the outbox intents that state change implies, plus a registry
// keyed by provider kind and event type.
//
// This package is the contract between a team's business rules and the
// pipeline: it depends on the standard library only, so writing a
// projection pulls in no AWS SDK. The built-in projections live in package
// builtin; a team registers its own next to any of them.
//
// # Compatibility
//
// Event, Result, Write, Intent, Policy, Projection, Registry, Permanent,
// Fingerprint, OperationID, Validate, Resolver, Resolved, ResolverFactory,
// ResolverSource, SourceAPI and RetryAfter are a promise: fields are only
// added, never renamed or re-typed, and OperationID and Fingerprint never
// change their output for the same input (an operation id is a
// downstream's idempotency key, and a fingerprint is stored with every
// projection item). Validate may learn a rule the pipeline learns; the
// codes it returns do not change.
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
//		return projection.Result{Write: &projection.Write{
//			Name: "invoice", Subject: e.Data.Object.ID, Version: e.Created,
//			Fingerprint: projection.Fingerprint(state), State: state,
//		}}, nil
//	}
//
//	reg.Register("stripe", []string{"invoice.paid"}, invoicePaid{})
//
// Return Permanent errors for input no retry can fix (the event is
// quarantined); any other error is retried.
//
// A result the pipeline cannot apply (an intent without an operation id,
// a policy it does not know, a value DynamoDB cannot store; see Validate)
// and a panic are the projection's bugs: the event is quarantined, with
// a code naming the rule and a message naming the projection, and the
// rest of its batch goes on. Call Validate on your projections' results
// in your own tests to find them first.
//
// # Events that only name their object
//
// Some providers send an event that names the object that changed and
// carries none of its state (Stripe's thin events). A Resolver, built
// per source by the ResolverFactory registered for its kind, fetches the
// object's current state and returns the event the projections read in
// its place (see Resolver).
//
// # Effects and their dispatch policy
//
// An effect is an intent in the Result, keyed by a stable operation id
// (the downstream's idempotency key). The projection declares, per kind,
// what the dispatcher must check against the current truth before it
// performs it, and says so in its doc comment:
//
//	// A state sync: only the newest state per subject reaches the
//	// downstream, in version order; an older one ends SUPERSEDED.
//	projection.Intent{OperationID: projection.OperationID(sub, "grant", v), Kind: "entitlement.grant", Subject: sub,
//		Policy: projection.PolicyLatest, Payload: ...}
//
//	// An action justified by a state: performed only while the state
//	// still holds; OBSOLETE otherwise. Performed and contradicted later:
//	// the compensation intent is written with the contradicting revision
//	// (without one, the intent becomes CONTRADICTED for its owner).
//	projection.Intent{OperationID: projection.OperationID(order, "notify_cancellation", rev), Kind: "notify_cancellation", Subject: order,
//		Policy: projection.PolicyWhileCurrent, Condition: map[string]string{"status": "cancelled"},
//		Compensation: "notify_reinstatement", Payload: ...}
//
//	// A fact that must be acted on whatever happens later.
//	projection.Intent{OperationID: projection.OperationID(addr, "suppress", v), Kind: "suppression.add", Subject: addr,
//		Policy: projection.PolicyOnce, Payload: ...}
//
// A Condition compares projection state fields as text
// (as the dispatcher does when it claims the intent). Every kind needs an effect in the dispatcher's
// EFFECTS document, compensation kinds included; an intent of a kind
// without one is QUARANTINED (no_effect), never dropped.
package projection
