package rules_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/pkg/app"
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
