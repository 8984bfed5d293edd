package webhookstest_test

import (
	"bytes"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
	"github.com/effectively-once/webhooks/pkg/webhookstest"
)

// The kit's own tests: our projections pass it, and a team's usual
// mistakes, made on purpose around them, fail it with the rule named.

// orders is builtin.Orders behind a Standard Webhooks source, with its
// three effects: a while_current refund and notice, the notice's
// compensation.
func orders(p projection.Projection) webhookstest.Pipeline {
	reg := projection.NewRegistry()
	reg.Register("standard-webhooks", builtin.NewOrders(builtin.OrderOptions{}).EventTypes(), p)
	return webhookstest.Pipeline{
		Rules:   app.Rules{Registry: reg},
		Sources: `{"sources":[{"name":"orders","kind":"standard-webhooks","options":{"subject_path":"data.id","version_path":"data.revision"}}]}`,
		Effects: `{"effects":[{"kind":"refund","scopes":["orders"]},{"kind":"notify_cancellation","scopes":["orders"]},` +
			`{"kind":"notify_reinstatement","scopes":["orders"]}]}`,
	}
}

// order is an order event of O-42 at a revision.
func order(revision int64, status string) webhookstest.Event {
	return webhookstest.Event{
		ID:      fmt.Sprintf("msg_O-42_r%d", revision),
		Body:    fmt.Appendf(nil, `{"type":"order.updated","data":{"id":"O-42","revision":%d,"status":%q,"customer_id":"cus_test_42","total_minor":12900}}`, revision, status),
		Subject: "O-42", Version: revision, State: map[string]any{"status": status},
	}
}

// cancelledThenConfirmed: a cancellation (refund and notice due while it
// holds) that an operator's confirmation takes back.
var cancelledThenConfirmed = []webhookstest.Event{order(1, "created"), order(2, "cancelled"), order(3, "confirmed")}

func TestOurOrderWorkflowPasses(t *testing.T) {
	orders(builtin.NewOrders(builtin.OrderOptions{})).Check(t, cancelledThenConfirmed...)
}

// subscription is a Stripe customer.subscription.* event of sub_1 (for
// account acct_1), created at second created.
func subscription(typ, status string, created, version int64) webhookstest.Event {
	return webhookstest.Event{
		Body: fmt.Appendf(nil, `{"id":"evt_sub_%d","object":"event","type":"customer.subscription.%s","created":%d,"data":{"object":`+
			`{"id":"sub_1","object":"subscription","customer":"cus_1","status":%q,"metadata":{"account_id":"acct_1"},`+
			`"items":{"object":"list","data":[{"id":"si_1","current_period_end":1798000000,"price":{"id":"price_pro"}}]}}}}`,
			version, typ, created, status),
		Subject: "sub_1", Version: version,
	}
}

func TestOurSubscriptionsPass(t *testing.T) {
	const t0 = 1796040000
	reg := projection.NewRegistry()
	subs := builtin.NewStripeSubscriptions(builtin.StripeOptions{})
	reg.Register("stripe", subs.EventTypes(), subs)
	p := webhookstest.Pipeline{
		Rules:   app.Rules{Registry: reg},
		Sources: `{"sources":[{"name":"billing","kind":"stripe"}]}`,
		Effects: `{"effects":[{"kind":"entitlement.grant","scopes":["billing"]},{"kind":"entitlement.revoke","scopes":["billing"]}]}`,
	}
	// Entitled, still entitled while Stripe retries, then not: three
	// latest syncs, in version order at the downstream whatever the order
	// of the events.
	p.Check(t,
		subscription("created", "active", t0, t0*4+1),
		subscription("updated", "past_due", t0+60, (t0+60)*4+2),
		subscription("updated", "unpaid", t0+120, (t0+120)*4+2),
	)
}

// emptyPrices is builtin.StripeSubscriptions with the price ids of a
// subscription without items as an empty list (the builtin projects none:
// null), the way a team's projection may hold one.
type emptyPrices struct{ projection.Projection }

func (e emptyPrices) Project(ev projection.Event) (projection.Result, error) {
	res, err := e.Projection.Project(ev)
	if err != nil || res.Write == nil {
		return res, err
	}
	w := *res.Write
	w.State = maps.Clone(w.State)
	if p, _ := w.State["price_ids"].([]string); len(p) == 0 {
		w.State["price_ids"] = []string{}
		w.Fingerprint = projection.Fingerprint(w.State)
	}
	res.Write = &w
	intents := make([]projection.Intent, len(res.Intents))
	for i, in := range res.Intents {
		in.Payload = maps.Clone(in.Payload)
		if p, _ := in.Payload["price_ids"].([]string); len(p) == 0 {
			in.Payload["price_ids"] = []string{}
		}
		intents[i] = in
	}
	res.Intents = intents
	return res, nil
}

// A subscription without items whose state holds "price_ids": [] (an
// empty list) runs as any other: the kit's DynamoDB stores and reads back
// empty lists as DynamoDB does.
func TestASubscriptionWithoutItemsHoldsAnEmptyList(t *testing.T) {
	const t0 = 1796040000
	reg := projection.NewRegistry()
	subs := builtin.NewStripeSubscriptions(builtin.StripeOptions{})
	reg.Register("stripe", subs.EventTypes(), emptyPrices{subs})
	p := webhookstest.Pipeline{
		Rules:   app.Rules{Registry: reg},
		Sources: `{"sources":[{"name":"billing","kind":"stripe"}]}`,
		Effects: `{"effects":[{"kind":"entitlement.grant","scopes":["billing"]},{"kind":"entitlement.revoke","scopes":["billing"]}]}`,
	}
	noItems := func(ev webhookstest.Event) webhookstest.Event {
		ev.Body = bytes.Replace(ev.Body, []byte(`"data":[{"id":"si_1","current_period_end":1798000000,"price":{"id":"price_pro"}}]`), []byte(`"data":[]`), 1)
		ev.State = map[string]any{"price_ids": []any{}}
		return ev
	}
	p.Check(t,
		noItems(subscription("created", "active", t0, t0*4+1)),
		noItems(subscription("updated", "past_due", t0+60, (t0+60)*4+2)),
	)
}

// recorder is a testing.TB that records what the kit reports instead of
// failing the test that runs it.
type recorder struct {
	testing.TB
	errors []string
	logs   []string
	fatal  string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Logf(format string, a ...any) { r.logs = append(r.logs, fmt.Sprintf(format, a...)) }
func (r *recorder) Log(a ...any)                 { r.logs = append(r.logs, fmt.Sprint(a...)) }
func (r *recorder) Errorf(format string, a ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, a...))
}
func (r *recorder) Fatalf(format string, a ...any) { r.fatal = fmt.Sprintf(format, a...) }
func (r *recorder) reported(rule webhookstest.Rule) []string {
	var out []string
	for _, e := range r.errors {
		if strings.Contains(e, string(rule)) {
			out = append(out, e)
		}
	}
	return out
}

// mustReport runs the check on a recorder and returns the errors filed
// under rule, failing t when there are none.
func mustReport(t *testing.T, p webhookstest.Pipeline, rule webhookstest.Rule, events ...webhookstest.Event) []string {
	t.Helper()
	r := &recorder{}
	p.Check(r, events...)
	if r.fatal != "" {
		t.Fatalf("the kit could not run: %s", r.fatal)
	}
	got := r.reported(rule)
	if len(got) == 0 {
		t.Fatalf("the kit reported nothing under %q; it reported:\n%s", rule, strings.Join(r.errors, "\n"))
	}
	for _, e := range r.errors {
		t.Log(e)
	}
	return got
}

// reversion is a projection whose version rule is broken: version says
// what it writes instead of the revision.
type reversion struct {
	projection.Projection
	version func(projection.Event, projection.Write) int64
}

func (r reversion) Project(ev projection.Event) (projection.Result, error) {
	res, err := r.Projection.Project(ev)
	if err == nil && res.Write != nil {
		w := *res.Write
		w.Version = r.version(ev, w)
		res.Write = &w
	}
	return res, err
}

func TestAVersionRuleThatIgnoresTheProvidersVersionFailsTheStateOfTheHighestVersion(t *testing.T) {
	var counter atomic.Int64
	broken := map[string]func(projection.Event, projection.Write) int64{
		"always zero":       func(projection.Event, projection.Write) int64 { return 0 },
		"the time received": func(ev projection.Event, _ projection.Write) int64 { return ev.ReceivedAt.Unix() },
		"a counter":         func(projection.Event, projection.Write) int64 { return counter.Add(1) },
	}
	for name, version := range broken {
		t.Run(name, func(t *testing.T) {
			p := orders(reversion{builtin.NewOrders(builtin.OrderOptions{}), version})
			got := mustReport(t, p, webhookstest.HighestVersion, cancelledThenConfirmed...)
			// One of them names the subject, the versions and states, and
			// the order of events that showed it.
			for _, e := range got {
				if strings.Contains(e, "subject O-42 (orders/order) ends at version") && strings.Contains(e, "want version 3") &&
					strings.Contains(e, `"status":"confirmed"`) && strings.Contains(e, "run: order ") {
					return
				}
			}
			t.Fatalf("no %q failure names the subject's final version and state and the run:\n%s", webhookstest.HighestVersion, strings.Join(got, "\n"))
		})
	}
}

// deliveryKeyed is a projection whose operation ids contain the event id,
// which differs for every delivery of one fact under another id.
type deliveryKeyed struct{ projection.Projection }

func (d deliveryKeyed) Project(ev projection.Event) (projection.Result, error) {
	res, err := d.Projection.Project(ev)
	for i, in := range res.Intents {
		res.Intents[i].OperationID = projection.OperationID(in.Subject, in.Kind, ev.EventID)
	}
	return res, err
}

func TestAnOperationIDMadeOfTheEventIDFailsOneEffectiveCallPerOperation(t *testing.T) {
	p := orders(deliveryKeyed{builtin.NewOrders(builtin.OrderOptions{})})
	got := mustReport(t, p, webhookstest.OneCallPerOperation, cancelledThenConfirmed...)
	for _, e := range got {
		if strings.Contains(e, "intent refund of subject O-42") && strings.Contains(e, "gives operation id") {
			return
		}
	}
	t.Fatalf("no %q failure names the refund and its two operation ids:\n%s", webhookstest.OneCallPerOperation, strings.Join(got, "\n"))
}

func TestAnIntentKindWithoutAnEffectFailsProcessed(t *testing.T) {
	p := orders(builtin.NewOrders(builtin.OrderOptions{}))
	p.Effects = `{"effects":[{"kind":"refund","scopes":["orders"]},{"kind":"notify_cancellation","scopes":["other"]}]}`
	got := mustReport(t, p, webhookstest.Processed, cancelledThenConfirmed...)
	joined := strings.Join(got, "\n")
	for _, want := range []string{"notify_reinstatement, which no effect in Effects performs", `notify_cancellation, whose effect serves scopes [other], not "orders"`} {
		if !strings.Contains(joined, want) {
			t.Errorf("no %q failure says %q:\n%s", webhookstest.Processed, want, joined)
		}
	}
}

// unreachable is builtin.Orders with a refund condition its own state
// never satisfies (the field's case is wrong).
type unreachable struct{ projection.Projection }

func (u unreachable) Project(ev projection.Event) (projection.Result, error) {
	res, err := u.Projection.Project(ev)
	for i := range res.Intents {
		res.Intents[i].Condition = map[string]string{"status": "CANCELLED"}
	}
	return res, err
}

// A result the pipeline refuses (projection.Validate) is reported as the
// processor's quarantine, with its code and message.
func TestAResultThePipelineRefusesFailsProcessed(t *testing.T) {
	got := mustReport(t, orders(unreachable{builtin.NewOrders(builtin.OrderOptions{})}), webhookstest.Processed, cancelledThenConfirmed...)
	for _, e := range got {
		if strings.Contains(e, "event msg_O-42_r2 (order.updated): the processor quarantines it ("+projection.CodeInvalidResult+")") &&
			strings.Contains(e, "status=CANCELLED") {
			return
		}
	}
	t.Fatalf("no failure names the cancellation's quarantine and its condition:\n%s", strings.Join(got, "\n"))
}

func TestAConfigurationTheKitCannotRunFailsTheTestAtOnce(t *testing.T) {
	cases := map[string]struct {
		edit func(*webhookstest.Pipeline)
		want string
	}{
		"an effect without scopes": {func(p *webhookstest.Pipeline) { p.Effects = `{"effects":[{"kind":"refund"}]}` }, "scopes is required"},
		"no registry":              {func(p *webhookstest.Pipeline) { p.Rules = app.Rules{} }, "Pipeline.Rules.Registry is required"},
		"a kind the kit cannot sign": {func(p *webhookstest.Pipeline) {
			p.Sources = `{"sources":[{"name":"orders","kind":"github"}]}`
		}, "the kit signs stripe and standard-webhooks deliveries, not github"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := orders(builtin.NewOrders(builtin.OrderOptions{}))
			c.edit(&p)
			r := &recorder{}
			p.Check(r, cancelledThenConfirmed...)
			if !strings.Contains(r.fatal, c.want) || len(r.errors) > 0 {
				t.Fatalf("fatal %q and errors %q, want a fatal naming %q", r.fatal, r.errors, c.want)
			}
		})
	}
}

// With the warehouse on, the kit's runs record every applied revision and
// check that each subject's current row is its canonical version and
// state: our order workflow passes, across orders and crashes.
func TestOurOrderWorkflowPassesWithTheWarehouse(t *testing.T) {
	p := orders(builtin.NewOrders(builtin.OrderOptions{}))
	p.Warehouse = true
	p.Orders, p.Crashes = 6, 4
	p.Check(t, cancelledThenConfirmed...)
}
