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
// operator.
//
// An intent whose operation id the ledger already holds is judged as the
// ledger judges it: the same action again (the same kind, policy and
// payload at the same revision, or a while_current intent whose reason
// still holds) is not written again; a once intent of another revision
// is the declared deduplication, not performed again; anything else (a
// latest intent of another revision or payload, another kind, policy,
// payload or condition, a while_current intent asked for again after a
// revision removed its reason) is a reused operation id: the pipeline
// quarantines the later event (operation_id_reused) and writes nothing of
// it. The events projected alone show every such pair before any run:
// each is reported once, first, under OneActionPerOperationID with the
// fix (put the revision in the id), and a run that disagrees with the
// model's prediction adds one failure, not one per mismatch.
//
// # What the downstream ends with
//
// The kit also checks, on the payloads its downstream received rather
// than on operation ids, what each subject's final revision asks of it:
// the last sync of each latest effect (per scope and downstream subject; a
// projection's latest kinds on one downstream subject are one sync)
// carries the final revision's payload (LatestEndsFinal), and a
// while_current effect whose condition the final state satisfies was
// performed since the reason last began to hold and not undone by a call
// of its compensation since (ReasonHeldInForce). Two subjects whose
// effects act on one downstream subject break them: only one can be last.
//
// # Warnings
//
// A Warning is something probably not meant that breaks no rule: a once
// effect whose payload differs between the revisions asking for it under
// one operation id (OncePayload; the downstream keeps the first one
// performed: did you mean latest?). Check logs each with the prefix
// "webhookstest: WARNING: " and does not fail; Report returns them beside
// the failures, for a test that asserts them.
//
// The Rule constants name these properties; each Failure names
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
// a test says that. The kit sees only the calls its downstream receives:
// effects a team's services perform outside the pipeline, rules that
// depend on time, a resolver's remote truth and the business meaning of
// a downstream subject that several subjects act on are beyond it
// (docs/testing.md lists what it cannot know).
//
// # Reproducing a run
//
// A failure names its run's seed and number: the same Pipeline (Seed
// included) and events play the same runs. PIPELINE_LOG=1 in the
// environment prints the intake's, processor's and dispatcher's logs.
//
// # Compatibility
//
// Pipeline, Event, Failure, Warning, Report and the Rule names are a
// promise: fields are only added, and a rule keeps its name. The wording
// of a Failure's or Warning's Detail may improve; assert the Rule (and,
// if needed, the subject or kind it names), not the sentence. A team's
// regression test for a mistake it must never make again runs its broken
// variant with Report (or Failures) and asserts the Rule of a failure or
// a warning.
package webhookstest
