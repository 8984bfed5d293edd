// Package webhookstest checks a team's rules the way the pipeline runs
// them, from the team's own tests: it runs the team's registry through the
// real intake, processor and dispatcher in process (DynamoDB and SQS
// emulated in process, a fake downstream that deduplicates by idempotency
// key and keeps the versions it applied per scope and subject), signs the
// deliveries itself (no secret is needed), and checks the outcome against
// a reference model built from what the test declares.
//
//	func TestAPaidOrderShipsOnceAndARefundStopsItsShipment(t *testing.T) {
//		p := webhookstest.Pipeline{
//			Rules:   rules.Rules(),
//			Sources: `{"sources":[{"name":"shop-stripe","kind":"stripe"}]}`,
//			Effects: `{"effects":[{"kind":"ship_order","scopes":["shop-stripe"]},` +
//				`{"kind":"cancel_shipment","scopes":["shop-stripe"]},` +
//				`{"kind":"send_confirmation","scopes":["shop-stripe"]}]}`,
//		}
//		// paid and refunded are Stripe event bodies (payment_intent.succeeded
//		// created at 1796040000, charge.refunded ten seconds later); the
//		// versions are the shop's rule: created×10 + rank.
//		p.Check(t,
//			webhookstest.Event{Body: paid, Subject: "O-1", Version: 17960400001},
//			webhookstest.Event{Body: refunded, Subject: "O-1", Version: 17960400103,
//				State: map[string]any{"status": "refunded"}},
//		)
//	}
//
// # What a run is
//
// Each run is a fresh pipeline. The events are delivered in some order,
// each twice in a row (a provider's retry under the same id) and each
// processed before the next is sent; one of them is also re-sent under
// another event id (the same fact again) somewhere in the order. The
// effects are dispatched after each event, or only after the last one.
// Every order of the events is played in both modes when that makes at
// most Pipeline.Orders runs, else that many seeded random orders; then
// more runs of the declared order each crash one instance (the intake, the
// processor or the dispatcher) right before or after one of its writes
// and replace it, as Lambda does, and let the pipeline's clock run until
// leases expire and the reconciler has run. By default there is one crash
// run for each instance, write operation and side a clean run has.
//
// # The reference model
//
// Each event is first projected alone, as the processor would project it
// (a panic or a result projection.Validate refuses is the quarantine the
// processor would record): its subject and version must be the declared ones, its state must hold
// the declared fields, and re-sent under another id an hour later it must
// give the same version, state and operation ids. Then each run's order is
// replayed on the model with the contract's version rule (a newer version
// with another state applies and writes its intents, the same state only
// advances the version, the same version changes nothing, an older one or
// anything after a terminal state is stale), and at each dispatch the
// model decides every intent as the dispatch policies say (once: perform;
// while_current: perform only if the state satisfies the condition and no
// revision removed its reason since; latest: perform only if the subject
// still holds the state it carries; a performed while_current effect whose
// reason a later revision removes has its compensation due). The run must
// end with each subject at the version and state its highest-version
// event projects alone, every due effect performed exactly once, none
// performed twice or against the model, latest effects in version order
// per scope and subject, and every event and intent processed without an
// operator. The Rule constants name these properties; each Failure names
// the one it broke, the subject, operation or event, what was expected and
// what happened, and the run (order, copies, dispatch mode, crash, seed).
//
// # Combined values
//
// A value the team's read code combines from several projections of one
// subject (a subscription's access, from its own projection and the one
// its invoices feed) is declared in Pipeline.Combined: the team's pure
// combine function, the value it must end with and, optionally, what must
// hold after every event. In every run the kit reads the components after
// each event with state.Reader.Components, as the team's service reads
// them, and checks the combined value (rule CombinedValue). The pattern
// is in docs/combining.md.
//
// # Limits
//
// The kit signs Stripe and Standard Webhooks deliveries; Stripe events
// must be snapshot events (a thin event's object would be fetched from the
// Stripe API, which the kit does not fake). The downstream always
// answers; its failures, concurrency between instances and the
// reconciler's checks against a provider's truth are the product's own
// tests' concern. The model takes each intent's kind, policy and condition
// from the team's projection: it checks that the pipeline does what they
// say, not that they say what the business needs (a refund declared once
// instead of while_current passes); the events' declared states are where
// a test says that.
//
// # Reproducing a run
//
// A failure names its run's seed and number: the same Pipeline (Seed
// included) and events play the same runs. PIPELINE_LOG=1 in the
// environment prints the intake's, processor's and dispatcher's logs.
//
// # Compatibility
//
// Pipeline, Event, Failure and the Rule names are a promise: fields are
// only added, and a rule keeps its name. The wording of a Failure's
// Detail may improve; assert the Rule (and, if needed, the subject or
// kind it names), not the sentence. A team's regression test for a
// mistake it must never make again runs its broken variant with
// Failures and asserts the Rule.
package webhookstest
