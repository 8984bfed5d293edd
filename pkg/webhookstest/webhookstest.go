package webhookstest

import (
	"testing"

	"github.com/effectively-once/webhooks/pkg/app"
)

// Pipeline is a team's rules and configuration, as the kit runs them: the
// same Rules every function of the team gets, the SOURCES document its
// sources are configured with and the EFFECTS document its dispatcher
// performs. The zero values of Orders, Crashes and Seed are sensible.
type Pipeline struct {
	// Rules are the team's rules; Rules.Registry is required. Provider
	// kinds in Rules.Providers are registered as app.Main registers them.
	Rules app.Rules
	// Sources is the SOURCES document. Every source is delivered over
	// HTTPS and signed by the kit with a visibly fake secret of its own:
	// its "secrets", "delivery", "event_source", "api" and "truth" are
	// replaced or dropped, so the document may be the one deployed. The
	// kit signs the kinds "stripe" and "standard-webhooks".
	Sources string
	// Effects is the EFFECTS document. Every effect, an HTTP endpoint or
	// an AWS target, calls the kit's fake downstream instead: its "url",
	// "target", "status_url" and "secret" are replaced or dropped (and may
	// be left out); its kind, scopes and idempotency window are kept.
	Effects string
	// Orders bounds the runs without a crash. Each permutation of the
	// events is played twice (effects dispatched after each event, and
	// only after the last one) when all of them fit; else Orders runs of
	// permutations chosen with Seed, the first the declared order, the
	// two dispatch modes taking turns. Default 24: every order of up to
	// three events.
	Orders int
	// Crashes is how many more runs (of the declared order) crash one
	// instance (the intake, the processor or the dispatcher) right before
	// or right after one of its DynamoDB or SQS writes, and replace it, as
	// Lambda does. The points are chosen with Seed among the writes of a
	// clean run. Default: one for each instance, write operation and side
	// the clean run has; negative: none.
	Crashes int
	// Seed chooses the orders, where the re-sent copies go and the crash
	// points. A failure message names it: the same seed plays the same
	// runs.
	Seed uint64
	// Warehouse turns the warehouse sink on in every run (as
	// WAREHOUSE_BUCKET does on AWS): each applied revision becomes a
	// change record in an in-process S3, and the kit checks the rule
	// WarehouseFollows.
	Warehouse bool
	// Combined are values the team's read code combines from several
	// projections of one subject (see Combined); the kit checks each
	// after every event of every run (rule CombinedValue).
	Combined []Combined
}

// Event is one provider event of the team's subjects, with what the team
// says it means.
type Event struct {
	// Source names the source that delivers it; it may be left out when
	// Sources configures one source.
	Source string
	// ID is the event id a provider sends beside the body (Standard
	// Webhooks' webhook-id); empty, the kit derives one from the body.
	// Stripe's id is in the body: ID is not used.
	ID string
	// Body is the payload exactly as the provider sends it.
	Body []byte
	// Subject is the subject the event is about, and Version the version
	// the team's ordering rule gives it: the projection must write this
	// subject at this version. Two events of one subject at one version
	// must carry one state (else the pipeline keeps the first processed).
	Subject string
	Version int64
	// State, when set, is what the subject's state must hold when this
	// event is its highest version: each field it names must equal the
	// projected state's, compared as JSON; fields it does not name are
	// not checked. Whether set or not, the final state must be the one
	// the highest version's event projects alone.
	State map[string]any
}

// Rule names one property the kit checks. A Failure says which one broke.
type Rule string

// The rules.
const (
	// HighestVersion: after every order of the events, each subject holds
	// the version and state that its highest-version event alone
	// projects; each event projects the subject and version the test
	// declares, and projects the same whenever and under whatever event
	// id it is delivered.
	HighestVersion Rule = "state of the highest version"
	// OneCallPerOperation: no operation id is effective at the downstream
	// more than once, and one fact gives one operation id however often
	// and under whatever event id it is delivered.
	OneCallPerOperation Rule = "one effective call per operation"
	// LatestInOrder: a latest effect never reaches the downstream after a
	// newer one of its subject (per scope and subject), nor while its
	// subject holds another state.
	LatestInOrder Rule = "latest effects in version order"
	// WhileCurrent: a while_current effect is performed only while its
	// subject's state satisfies its condition, and never once a newer
	// revision has removed its reason.
	WhileCurrent Rule = "while_current only while its reason holds"
	// ImpliedEffects: every effect the reference model says is due is
	// performed exactly once (once effects of every event that changed
	// the state, while_current effects whose reason held when dispatched,
	// the latest effects of each subject's final state, compensations of
	// performed effects whose reason a newer revision removed), and no
	// effect is performed that no event implies.
	ImpliedEffects Rule = "implied effects performed exactly once"
	// Processed: every event is processed (not quarantined, not dead)
	// and every intent ends performed, obsolete, superseded or
	// contradicted; an intent kind without an effect in EFFECTS, or one
	// whose effect does not serve the source's scope, breaks it.
	Processed Rule = "every event and intent processed"
	// WarehouseFollows (with Pipeline.Warehouse): per subject, the
	// warehouse's current row (its highest-version record) is the version
	// and state of HighestVersion, and no record is of a version above it.
	WarehouseFollows Rule = "the warehouse follows the canonical state"
	// OneActionPerOperationID: no two events ask for different actions
	// under one operation id (another kind or policy; a latest intent of
	// another revision or payload; a while_current intent of another
	// payload or condition, or asked for again after a revision removed
	// its reason). The ledger refuses such a commit and quarantines the
	// later event (operation_id_reused): the downstream never gets what
	// it asks for. Found by projecting the events alone, reported once
	// per operation id with the fix (put the revision in the id), before
	// any run; the runs then expect the quarantine.
	OneActionPerOperationID Rule = "one operation id, one action"
	// LatestEndsFinal: for each latest intent of each subject's final
	// revision, the last effective call of its kind at the downstream,
	// per scope and intent subject, carries that intent's payload. It is
	// checked on the payloads the downstream received, not on operation
	// ids: two subjects whose latest effects sync one downstream subject
	// break it (only one of them can be last).
	LatestEndsFinal Rule = "the downstream ends with the final latest payload"
	// ReasonHeldInForce: for each while_current intent of each subject's
	// final revision whose condition the final state satisfies, its
	// effect was performed exactly once since the reason last began to
	// hold, and, when it declares a compensation, no call of that
	// compensation for its intent subject came after it (the effect is
	// still in force at the downstream).
	ReasonHeldInForce Rule = "a while_current effect whose reason holds is in force"
	// OncePayload (a warning, never a failure): a once effect whose
	// payload differs between the revisions that ask for it under one
	// operation id. The pipeline performs the first one it processes and
	// records the others as deduplicated, so the downstream may keep an
	// older payload: the effect is probably meant latest, or its payload
	// should not depend on the revision.
	OncePayload Rule = "a once effect carries one payload"
)

// Warning is something in the events' projections that is probably not
// what the team means but breaks no rule: Check logs it (prefixed
// "webhookstest: WARNING: ") and does not fail, and Report returns it so
// a test can assert it.
type Warning struct {
	Rule   Rule
	Detail string
}

// String is the rule and the detail.
func (w Warning) String() string { return string(w.Rule) + ": " + w.Detail }

// Report is everything one check found: the broken rules (as Failures
// returns them) and the warnings.
type Report struct {
	Failures []Failure
	Warnings []Warning
}

// Failure is one broken rule, with what the kit saw.
type Failure struct {
	Rule   Rule
	Detail string
}

// String is the rule and the detail.
func (f Failure) String() string { return string(f.Rule) + ": " + f.Detail }

// Check runs the events through the pipeline in process (the real intake,
// processor and dispatcher over in-process DynamoDB and SQS, a fake
// downstream) in every order the Pipeline asks for, and fails t with one
// error per broken rule (see Failures). A configuration the kit cannot run
// (an invalid document, an event it cannot sign) fails t at once.
func (p Pipeline) Check(t testing.TB, events ...Event) {
	t.Helper()
	r, err := p.Report(events...)
	if err != nil {
		t.Fatalf("webhookstest: %v", err)
	}
	for _, w := range r.Warnings {
		t.Logf("webhookstest: WARNING: %s", w)
	}
	for _, f := range r.Failures {
		t.Errorf("webhookstest: %s", f)
	}
}

// Report runs what Check runs and returns its failures (as Failures
// does) and its warnings, which Check only logs. It returns an error
// when the kit cannot run the configuration.
func (p Pipeline) Report(events ...Event) (Report, error) {
	k, err := newKit(p, events)
	if err != nil {
		return Report{}, err
	}
	fs, err := k.failures()
	if err != nil {
		return Report{}, err
	}
	return Report{Failures: fs, Warnings: k.warnings}, nil
}

// Failures runs what Check runs and returns the broken rules instead of
// failing a test: first those of the events projected alone, then those
// of the first run that broke any (its order, re-sent copies, dispatch
// mode and crash named in each message). It returns an error, and no
// failures, when the kit cannot run the configuration.
func (p Pipeline) Failures(events ...Event) ([]Failure, error) {
	k, err := newKit(p, events)
	if err != nil {
		return nil, err
	}
	return k.failures()
}
