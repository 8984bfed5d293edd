package rules_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
	"github.com/effectively-once/webhooks/pkg/webhookstest"

	"example.com/shop/rules"
)

// The shop's rules through the pipeline, with the kit: every order of the
// events, each delivered twice and one re-sent under another id, effects
// dispatched as they come or all at the end, instances crashed between
// steps; the kit checks the outcome against what the events declare.

// shop is the shop's configuration around a registry: its Stripe source
// and the effects its rules ask for, each serving the source's scope,
// with the warehouse on: the shop records its orders for its analysts.
func shop(reg *projection.Registry) webhookstest.Pipeline {
	return webhookstest.Pipeline{
		Warehouse: true,
		Rules:     app.Rules{Registry: reg},
		Sources:   `{"sources":[{"name":"shop-stripe","kind":"stripe"}]}`,
		Effects: `{"effects":[` +
			`{"kind":"ship_order","scopes":["shop-stripe"]},` +
			`{"kind":"cancel_shipment","scopes":["shop-stripe"]},` +
			`{"kind":"send_confirmation","scopes":["shop-stripe"]},` +
			`{"kind":"entitlement.grant","scopes":["shop-stripe"]},` +
			`{"kind":"entitlement.revoke","scopes":["shop-stripe"]}]}`,
	}
}

// t0 is a Stripe event time (seconds): 2026-12-01T12:00:00Z.
const t0 = 1796126400

const amount = 12900

// paid is Stripe's payment_intent.succeeded for an order, created at
// second created: version created×10 + 1.
func paid(id, order string, created int64) webhookstest.Event {
	return webhookstest.Event{
		Body: fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2025-03-31.basil","created":%d,"type":"payment_intent.succeeded","livemode":false,`+
			`"data":{"object":{"id":"pi_%s","object":"payment_intent","amount":%d,"amount_received":%d,"currency":"eur","customer":"cus_shop_42",`+
			`"status":"succeeded","metadata":{"order_id":%q}}}}`, id, created, order, amount, amount, order),
		Subject: order, Version: created*10 + 1,
		State: map[string]any{"status": "paid", "amount_refunded": 0},
	}
}

// refund is Stripe's charge.refunded for an order's charge, created at
// second created, refunded in full (version created×10 + 3) or in part
// (created×10 + 2: the order stays paid).
func refund(id, order string, created, refunded int64) webhookstest.Event {
	full := refunded == amount
	ev := webhookstest.Event{
		Body: fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2025-03-31.basil","created":%d,"type":"charge.refunded","livemode":false,`+
			`"data":{"object":{"id":"ch_%s","object":"charge","amount":%d,"amount_refunded":%d,"refunded":%t,"currency":"eur","customer":"cus_shop_42",`+
			`"payment_intent":"pi_%s","metadata":{"order_id":%q}}}}`, id, created, order, amount, refunded, full, order, order),
		Subject: order, Version: created*10 + 2,
		State: map[string]any{"status": "paid", "amount_refunded": refunded},
	}
	if full {
		ev.Version, ev.State["status"] = created*10+3, "refunded"
	}
	return ev
}

// Dispatched after the last event, the shipment is obsolete; dispatched
// as they come, it is sent and then cancelled (cancel_shipment, once).
func TestAPaidOrderShipsOnceAndAFullRefundStopsOrCancelsItsShipment(t *testing.T) {
	shop(rules.Registry()).Check(t,
		paid("evt_shop_paid_1", "O-1001", t0),
		refund("evt_shop_part_1", "O-1001", t0+60, 2900),
		refund("evt_shop_full_1", "O-1001", t0+3600, amount),
	)
}

func TestARefundMadeInThePaymentsSecondStillWins(t *testing.T) {
	shop(rules.Registry()).Check(t,
		paid("evt_shop_paid_2", "O-1002", t0),
		refund("evt_shop_full_2", "O-1002", t0, amount),
	)
}

// member is Stripe's customer.subscription.<typ> for the shop's member
// acct_7 (builtin.StripeSubscriptions: version created×4 + rank).
func member(id, typ, status string, created, rank int64) webhookstest.Event {
	return webhookstest.Event{
		Body: fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2025-03-31.basil","created":%d,"type":"customer.subscription.%s","livemode":false,`+
			`"data":{"object":{"id":"sub_shop_7","object":"subscription","customer":"cus_shop_7","status":%q,"cancel_at_period_end":false,`+
			`"metadata":{"account_id":"acct_7"},"items":{"object":"list","data":[{"id":"si_7","current_period_end":%d,"price":{"id":"price_member"}}]}}}}`,
			id, created, typ, status, t0+30*86400),
		Subject: "sub_shop_7", Version: created*4 + rank,
	}
}

func TestOrdersAndMembershipsShareTheStripeSource(t *testing.T) {
	shop(rules.Registry()).Check(t,
		paid("evt_shop_paid_3", "O-1003", t0),
		member("evt_shop_member_1", "created", "active", t0, 1),
		member("evt_shop_member_2", "updated", "unpaid", t0+600, 2),
	)
}

// Regression tests: mistakes the shop must never make again, each a
// variant of its orders that the kit must refuse, naming the rule.

// versionedByArrival is the shop's orders, versioned by when an event
// arrived instead of by Stripe's created: a late payment would overwrite
// its refund.
type versionedByArrival struct{ rules.Orders }

func (p versionedByArrival) Project(ev projection.Event) (projection.Result, error) {
	res, err := p.Orders.Project(ev)
	if res.Write != nil {
		res.Write.Version = ev.ReceivedAt.Unix()
	}
	return res, err
}

// keyedByEvent is the shop's orders with operation ids made of the event
// id: one payment re-sent under another id ships the order twice.
type keyedByEvent struct{ rules.Orders }

func (p keyedByEvent) Project(ev projection.Event) (projection.Result, error) {
	res, err := p.Orders.Project(ev)
	for i, in := range res.Intents {
		res.Intents[i].OperationID = projection.OperationID(in.Subject, in.Kind, ev.EventID)
	}
	return res, err
}

// variant registers orders in place of the shop's.
func variant(orders projection.Projection) *projection.Registry {
	reg := projection.NewRegistry()
	reg.Register("stripe", rules.NewOrders().EventTypes(), orders)
	return reg
}

// failures runs the kit on a variant and returns the failures filed under
// rule, failing t when there are none.
func failures(t *testing.T, reg *projection.Registry, rule webhookstest.Rule, events ...webhookstest.Event) []string {
	t.Helper()
	fs, err := shop(reg).Failures(events...)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fs {
		t.Log(f)
		if f.Rule == rule {
			got = append(got, f.Detail)
		}
	}
	if len(got) == 0 {
		t.Fatalf("the kit found nothing under %q", rule)
	}
	return got
}

func TestRegressionAVersionTakenFromTheArrivalTimeIsRefused(t *testing.T) {
	got := failures(t, variant(versionedByArrival{}), webhookstest.HighestVersion,
		paid("evt_shop_paid_4", "O-1004", t0),
		refund("evt_shop_full_4", "O-1004", t0+3600, amount),
	)
	for _, d := range got {
		if strings.Contains(d, "subject O-1004 (shop-stripe/order) ends at version") && strings.Contains(d, `"status":"refunded"`) && strings.Contains(d, "run: order ") {
			return
		}
	}
	t.Fatalf("no failure names the order's final version and state and the order of events:\n%s", strings.Join(got, "\n"))
}

func TestRegressionAnOperationIDMadeOfTheEventIDIsRefused(t *testing.T) {
	got := failures(t, variant(keyedByEvent{}), webhookstest.OneCallPerOperation,
		paid("evt_shop_paid_5", "O-1005", t0),
		refund("evt_shop_full_5", "O-1005", t0+3600, amount),
	)
	for _, d := range got {
		if strings.Contains(d, "ship_order") && strings.Contains(d, "gives operation id") {
			return
		}
	}
	t.Fatalf("no failure names ship_order and its two operation ids:\n%s", strings.Join(got, "\n"))
}

// What the downstream ends with. The kit also checks, on the payloads
// the fake downstream received, that each subject's final revision got
// what it asks for: the last sync of a latest effect carries its
// payload, a while_current effect whose reason holds at the end is in
// force, and an operation id names one action. A once effect whose
// payload differs between revisions is a warning.

// membersKeyedWithoutVersion is the pipeline's Stripe subscriptions with
// the entitlement sync keyed by the subscription and the kind alone: the
// ledger holds the first revision's sync under that id, so a newer
// revision's sync would never reach the membership service.
type membersKeyedWithoutVersion struct{ *builtin.StripeSubscriptions }

func (p membersKeyedWithoutVersion) Project(ev projection.Event) (projection.Result, error) {
	res, err := p.StripeSubscriptions.Project(ev)
	for i, in := range res.Intents {
		res.Intents[i].OperationID = projection.OperationID(builtin.StripeSubscriptionProjection, res.Write.Subject, in.Kind)
	}
	return res, err
}

// shippedPerCustomer is the shop's orders with the shipment addressed to
// the customer instead of the order: one order's refund cancels "the
// customer's shipment", which another paid order still justifies.
type shippedPerCustomer struct{ rules.Orders }

func (p shippedPerCustomer) Project(ev projection.Event) (projection.Result, error) {
	res, err := p.Orders.Project(ev)
	for i, in := range res.Intents {
		if in.Kind == "ship_order" {
			res.Intents[i].Subject = fmt.Sprint(res.Write.State["customer"])
		}
	}
	return res, err
}

// confirmationWithRefunds is the shop's orders with the confirmation
// carrying what was refunded so far: a payment and its partial refund ask
// for one confirmation with two payloads, and the customer gets whichever
// is processed first.
type confirmationWithRefunds struct{ rules.Orders }

func (p confirmationWithRefunds) Project(ev projection.Event) (projection.Result, error) {
	res, err := p.Orders.Project(ev)
	for i, in := range res.Intents {
		if in.Kind == "send_confirmation" {
			payload := map[string]any{"amount_refunded": res.Write.State["amount_refunded"]}
			for k, v := range in.Payload {
				payload[k] = v
			}
			res.Intents[i].Payload = payload
		}
	}
	return res, err
}

// withMembers registers the shop's orders and the given membership
// projection.
func withMembers(members projection.Projection) *projection.Registry {
	reg := projection.NewRegistry()
	reg.Register("stripe", rules.NewOrders().EventTypes(), rules.NewOrders())
	reg.Register("stripe", builtin.NewStripeSubscriptions(builtin.StripeOptions{}).EventTypes(), members)
	return reg
}

// report runs the kit on a registry and returns everything it found.
func report(t *testing.T, reg *projection.Registry, events ...webhookstest.Event) webhookstest.Report {
	t.Helper()
	r, err := shop(reg).Report(events...)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range r.Failures {
		t.Log(f)
	}
	for _, w := range r.Warnings {
		t.Log("WARNING: ", w)
	}
	return r
}

func TestTheShopsRulesEndWithWhatTheirFinalRevisionsAskForWithoutWarnings(t *testing.T) {
	r := report(t, rules.Registry(),
		paid("evt_shop_paid_6", "O-1006", t0),
		refund("evt_shop_part_6", "O-1006", t0+60, 2900),
		member("evt_shop_member_6a", "created", "active", t0, 1),
		member("evt_shop_member_6b", "updated", "past_due", t0+600, 2),
		member("evt_shop_member_6c", "updated", "active", t0+1200, 2),
	)
	if len(r.Failures) > 0 || len(r.Warnings) > 0 {
		t.Fatalf("the shop's rules: %d failures, %d warnings", len(r.Failures), len(r.Warnings))
	}
}

func TestRegressionAMembershipSyncKeyedWithoutItsVersionIsRefused(t *testing.T) {
	r := report(t, withMembers(membersKeyedWithoutVersion{builtin.NewStripeSubscriptions(builtin.StripeOptions{})}),
		member("evt_shop_member_7a", "created", "active", t0, 1),
		member("evt_shop_member_7b", "updated", "past_due", t0+600, 2),
	)
	if len(r.Failures) == 0 || r.Failures[0].Rule != webhookstest.OneActionPerOperationID {
		t.Fatalf("the first failure is not %q", webhookstest.OneActionPerOperationID)
	}
	d := r.Failures[0].Detail
	if !strings.Contains(d, "entitlement.grant") || !strings.Contains(d, "shop-stripe/stripe_subscription") || !strings.Contains(d, "include the revision in the operation id") {
		t.Fatalf("the failure does not name the projection, the kind and the fix: %s", d)
	}
}

func TestRegressionAShipmentAddressedToTheCustomerIsRefused(t *testing.T) {
	r := report(t, variant(shippedPerCustomer{}),
		paid("evt_shop_paid_8a", "O-1008", t0),
		paid("evt_shop_paid_8b", "O-1009", t0+1),
		refund("evt_shop_full_8b", "O-1009", t0+3600, amount),
	)
	for _, f := range r.Failures {
		if f.Rule == webhookstest.ReasonHeldInForce && strings.Contains(f.Detail, "subject O-1008") && strings.Contains(f.Detail, "cancel_shipment of cus_shop_42") {
			return
		}
	}
	t.Fatalf("no %q failure says O-1008's shipment was cancelled by the other order's refund", webhookstest.ReasonHeldInForce)
}

func TestAConfirmationWhosePayloadChangesWithTheRevisionIsAWarningNotAFailure(t *testing.T) {
	r := report(t, variant(confirmationWithRefunds{}),
		paid("evt_shop_paid_9", "O-1010", t0),
		refund("evt_shop_part_9", "O-1010", t0+60, 2900),
	)
	if len(r.Failures) > 0 {
		t.Fatalf("%d failures, want none", len(r.Failures))
	}
	if len(r.Warnings) != 1 || r.Warnings[0].Rule != webhookstest.OncePayload || !strings.Contains(r.Warnings[0].Detail, "send_confirmation") {
		t.Fatalf("warnings %v, want one %q naming send_confirmation", r.Warnings, webhookstest.OncePayload)
	}
}

// A member with two subscriptions: the pipeline's Stripe subscriptions
// sync the member's account, so the account ends with whichever
// subscription's sync came last. The shop sells one membership per
// account; the kit says what a second would do.
func TestTwoSubscriptionsOfOneMemberEndWithWhicheverSyncCameLast(t *testing.T) {
	second := member("evt_shop_member_10b", "created", "canceled", t0+60, 1)
	second.Body = []byte(strings.ReplaceAll(string(second.Body), "sub_shop_7", "sub_shop_8"))
	second.Subject = "sub_shop_8"
	r := report(t, rules.Registry(), member("evt_shop_member_10a", "created", "active", t0, 1), second)
	for _, f := range r.Failures {
		if f.Rule == webhookstest.LatestEndsFinal && strings.Contains(f.Detail, "acct_7") && strings.Contains(f.Detail, "only one of them can be last") {
			return
		}
	}
	t.Fatalf("no %q failure names the account both subscriptions sync", webhookstest.LatestEndsFinal)
}
