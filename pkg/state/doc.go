// Package state reads the canonical state the pipeline maintains, for a
// team's own services: a subject's projected state, its version, when it
// was last written, and the outcomes of the intents it led to (SUCCEEDED,
// FAILED, UNCERTAIN, OBSOLETE, SUPERSEDED, QUARANTINED, ...).
//
//	r := state.New(dynamodb.NewFromConfig(cfg), os.Getenv("LEDGER_TABLE"))
//	s, err := r.Subject(ctx, "orders", "order", "O-42")
//	switch {
//	case errors.Is(err, state.ErrNotFound):
//		// no event of this subject has been processed (in this scope)
//	case err != nil:
//		return err // DynamoDB failed or throttled: worth a retry
//	}
//	fmt.Println(s.State["status"], s.Version, s.UpdatedAt)
//	for _, in := range s.Intents {
//		fmt.Println(in.Kind, in.OperationID, in.Status, in.FinishedAt)
//	}
//
// It reads the ledger's DynamoDB table with strongly consistent GetItem
// calls, of projection items (State, Subject) and intent items (Subject,
// Intent), and with TransactGetItems of projection items (Components),
// never an event or its payload: the construct's GrantReadState and
// GrantReadIntents are all a service's role needs (IAM authorizes a
// TransactGetItems as a GetItem of each item). It never writes. The items it reads, and the
// attributes a reader in another language may rely on, are described in
// docs/state.md.
//
// # One subject, several projections
//
// A subject fed by two event families (a subscription's own events and
// its invoices) is two projections on one subject id, each under its own
// version rule. Components reads their states as of one instant, and the
// team's pure combine function gives the combined value (access, say);
// docs/combining.md has the pattern, and pkg/webhookstest checks the
// same function (Pipeline.Combined).
//
//	c, err := r.Components(ctx, "saas", "sub_1", "stripe_subscription", "subscription_payment")
//	if err != nil {
//		return err // ErrNotFound: neither has the subject yet
//	}
//	access := rules.Access(c.States())
//
// # Scopes
//
// The business state a source writes belongs to its scope (the source's
// "domain" in SOURCES, else its name): the same subject id in two scopes
// is two subjects. Every read names the scope; "" is an unscoped source's.
//
// # Which intents a subject lists
//
// The table has no index from a subject to its intents, and this package
// adds none. Subject returns the intents the subject's own items record:
//
//   - the newest intent of each kind family whose policy is latest (an
//     entitlement sync): the one that carries the current state;
//   - the while_current intents the subject still watches (a refund
//     justified by a cancellation), up to the last 32, newest last;
//   - every other intent the revision that wrote the current state
//     created (once intents, compensations), which its projection item
//     records. An item last written before it recorded them lists none
//     of these until the subject's next revision.
//
// An intent of an earlier revision that none of these name (a once
// intent of an older version, a while_current intent a later revision
// contradicted, a latest intent a newer one superseded), or whose item
// has expired, is not listed. A service that needs one reads it by its
// operation id with Intent: the id a projection gives it, scoped with
// projection.ScopedOperationID, which is also the Idempotency-Key the
// downstream received.
package state
