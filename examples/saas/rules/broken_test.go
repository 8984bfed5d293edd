package rules_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/pkg/projection"
	"github.com/effectively-once/webhooks/pkg/webhookstest"

	"example.com/saas/rules"
)

// Regression tests: the mistakes a new team makes with these rules, each
// a variant of the SaaS's projections. The kit refuses (or warns about)
// those it can tell from the correct rules, naming the rule and the
// effect; those it cannot, it passes, and their tests say why.

// seatLimitKeyedWithoutVersion keys set_seat_limit by the subscription
// alone: the second revision reuses the first one's operation id, and the
// seat service stays at the first limit.
type seatLimitKeyedWithoutVersion struct{ rules.Subscriptions }

func (p seatLimitKeyedWithoutVersion) Project(ev projection.Event) (projection.Result, error) {
	res, err := p.Subscriptions.Project(ev)
	for i, in := range res.Intents {
		res.Intents[i].OperationID = projection.OperationID(rules.SubscriptionProjection, in.Subject, in.Kind)
	}
	return res, err
}

// seatLimitAsOnce declares set_seat_limit once where latest was meant:
// every revision's limit is performed, in whatever order the dispatcher
// takes them, so the seat service may end at an older limit.
type seatLimitAsOnce struct{ rules.Subscriptions }

func (p seatLimitAsOnce) Project(ev projection.Event) (projection.Result, error) {
	res, err := p.Subscriptions.Project(ev)
	for i := range res.Intents {
		res.Intents[i].Policy = projection.PolicyOnce
	}
	return res, err
}

// dunningAsLatest declares send_dunning_email latest where once was
// meant: a payment committed before the email is sent supersedes it, and
// the customer is never told the payment failed.
type dunningAsLatest struct{ rules.Dunning }

func (p dunningAsLatest) Project(ev projection.Event) (projection.Result, error) {
	res, err := p.Dunning.Project(ev)
	for i := range res.Intents {
		res.Intents[i].Policy = projection.PolicyLatest
	}
	return res, err
}

// dunningPerAttempt keys the email by the invoice and its attempt: every
// retry of one failed invoice sends another email.
type dunningPerAttempt struct{ rules.Dunning }

func (p dunningPerAttempt) Project(ev projection.Event) (projection.Result, error) {
	res, err := p.Dunning.Project(ev)
	for i, in := range res.Intents {
		attempt, _ := res.Write.State["attempt_count"].(int64)
		res.Intents[i].OperationID = projection.OperationID(rules.DunningProjection, in.Payload["invoice_id"].(string), in.Kind, strconv.FormatInt(attempt, 10))
	}
	return res, err
}

// dunningPerSubscription keys the email by the subscription only: a
// second invoice that fails months later reuses the first one's operation
// id and sends no email.
type dunningPerSubscription struct{ rules.Dunning }

func (p dunningPerSubscription) Project(ev projection.Event) (projection.Result, error) {
	res, err := p.Dunning.Project(ev)
	for i, in := range res.Intents {
		res.Intents[i].OperationID = projection.OperationID(rules.DunningProjection, in.Subject, in.Kind)
	}
	return res, err
}

// with is the SaaS's registry with one projection replaced by a variant.
func with(v projection.Projection) *projection.Registry {
	reg := projection.NewRegistry()
	var subs, dunning projection.Projection = rules.NewSubscriptions(), rules.NewDunning()
	if v.Name() == rules.SubscriptionProjection {
		subs = v
	} else {
		dunning = v
	}
	reg.Register("stripe", rules.NewSubscriptions().EventTypes(), subs)
	reg.Register("stripe", rules.NewDunning().EventTypes(), dunning)
	return reg
}

// refused runs the kit on a variant and fails t unless it reports a
// failure or a warning of rule naming the effect kind; the SaaS's own
// rules, on the same events, must report nothing.
func refused(t *testing.T, reg *projection.Registry, rule webhookstest.Rule, kind string, events ...webhookstest.Event) {
	t.Helper()
	clean(t, events...)
	r := report(t, reg, events...)
	for _, f := range r.Failures {
		if f.Rule == rule && strings.Contains(f.Detail, kind) {
			return
		}
	}
	for _, w := range r.Warnings {
		if w.Rule == rule && strings.Contains(w.Detail, kind) {
			return
		}
	}
	t.Fatalf("the kit reported %d failures and %d warnings, none of %q naming %s", len(r.Failures), len(r.Warnings), rule, kind)
}

// unnoticed runs the kit on a variant it cannot tell from a correct one
// and fails t if it reports anything: the day it does, the variant's test
// becomes a refused one. The SaaS's own rules must report nothing either.
func unnoticed(t *testing.T, reg *projection.Registry, events ...webhookstest.Event) {
	t.Helper()
	clean(t, events...)
	if r := report(t, reg, events...); len(r.Failures)+len(r.Warnings) > 0 {
		t.Fatalf("the kit now reports this variant (%d failures, %d warnings): assert its rule with refused", len(r.Failures), len(r.Warnings))
	}
}

// clean fails t unless the SaaS's own rules pass the events without a
// failure or a warning.
func clean(t *testing.T, events ...webhookstest.Event) {
	t.Helper()
	r, err := saas(rules.Registry()).Report(events...)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range r.Failures {
		t.Error("the SaaS's rules: FAILURE", f)
	}
	for _, w := range r.Warnings {
		t.Error("the SaaS's rules: WARNING", w)
	}
}

// report runs the kit on a variant and logs what it found.
func report(t *testing.T, reg *projection.Registry, events ...webhookstest.Event) webhookstest.Report {
	t.Helper()
	r, err := saas(reg).Report(events...)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range r.Failures {
		t.Log("FAILURE", f)
	}
	for _, w := range r.Warnings {
		t.Log("WARNING", w)
	}
	return r
}

// seats538 is a subscription whose seats go 5, 8, 3: the seat service
// must end at 3.
func seats538(sub string) []webhookstest.Event {
	return []webhookstest.Event{
		subscription("evt_saas_FAKE_"+sub+"_1", "created", sub, "active", 5, t0),
		subscription("evt_saas_FAKE_"+sub+"_2", "updated", sub, "active", 8, t0+day),
		subscription("evt_saas_FAKE_"+sub+"_3", "updated", sub, "active", 3, t0+2*day),
	}
}

// The second revision asks for another payload under the first one's
// operation id: the ledger quarantines it (operation_id_reused), and the
// kit reports the pair before any run.
func TestRegressionASeatLimitKeyedWithoutTheVersionIsRefused(t *testing.T) {
	refused(t, with(seatLimitKeyedWithoutVersion{}), webhookstest.OneActionPerOperationID, rules.SetSeatLimit, seats538("sub_saas_FAKE_10")...)
}

// The kit cannot know: each revision has its own operation id and its
// own payload, and a once effect's due calls are each revision's, in
// whatever order they are dispatched. The model takes the policy from the
// projection; LatestEndsFinal checks only latest effects, so nothing says
// the seat service must end at the final quantity.
func TestRegressionASeatLimitDeclaredOncePassesTheKit(t *testing.T) {
	unnoticed(t, with(seatLimitAsOnce{}), seats538("sub_saas_FAKE_11")...)
}

// The kit cannot know: a latest email superseded by the payment is what
// latest means, so the model expects no email, and the payment's
// revision asks for none that LatestEndsFinal could check. That the
// customer must be told the payment failed is the business meaning of
// the policy.
func TestRegressionADunningEmailDeclaredLatestPassesTheKit(t *testing.T) {
	unnoticed(t, with(dunningAsLatest{}),
		invoice("evt_saas_FAKE_inv_20", "payment_failed", "in_saas_FAKE_20", "sub_saas_FAKE_12", 1, t0),
		invoice("evt_saas_FAKE_inv_21", "paid", "in_saas_FAKE_20", "sub_saas_FAKE_12", 2, t0+2*day),
	)
}

// The kit cannot know: each attempt is its own operation id, so each
// email is a distinct action the model expects performed once. Whether
// two failed attempts of one invoice are one email or two is what the
// operation id says, and the kit takes it from the projection.
func TestRegressionADunningEmailPerRetryAttemptPassesTheKit(t *testing.T) {
	unnoticed(t, with(dunningPerAttempt{}),
		invoice("evt_saas_FAKE_inv_22", "payment_failed", "in_saas_FAKE_22", "sub_saas_FAKE_13", 1, t0),
		invoice("evt_saas_FAKE_inv_23", "payment_failed", "in_saas_FAKE_22", "sub_saas_FAKE_13", 2, t0+3*day),
	)
}

// The second invoice's email reuses the first one's operation id with
// another invoice in its payload: the pipeline records it as the
// declared deduplication and sends nothing, and the kit warns (did you
// mean latest?).
func TestRegressionADunningEmailPerSubscriptionIsRefused(t *testing.T) {
	refused(t, with(dunningPerSubscription{}), webhookstest.OncePayload, rules.SendDunningEmail,
		invoice("evt_saas_FAKE_inv_24", "payment_failed", "in_saas_FAKE_24", "sub_saas_FAKE_14", 1, t0),
		invoice("evt_saas_FAKE_inv_25", "paid", "in_saas_FAKE_24", "sub_saas_FAKE_14", 2, t0+2*day),
		invoice("evt_saas_FAKE_inv_26", "payment_failed", "in_saas_FAKE_25", "sub_saas_FAKE_14", 1, t0+60*day),
	)
}
