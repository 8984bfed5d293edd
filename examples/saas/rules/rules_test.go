package rules_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/projection"
	"github.com/effectively-once/webhooks/pkg/webhookstest"

	"example.com/saas/rules"
)

// The SaaS's rules through the pipeline, with the kit: every order of the
// events, each delivered twice and one re-sent under another id, effects
// dispatched as they come or all at the end, instances crashed between
// steps; the kit checks the outcome against what the events declare.

// saas is the SaaS's configuration around a registry: its Stripe source
// and the two effects its rules ask for, each serving the source's scope.
func saas(reg *projection.Registry) webhookstest.Pipeline {
	return webhookstest.Pipeline{
		Rules:   app.Rules{Registry: reg},
		Sources: `{"sources":[{"name":"saas-stripe","kind":"stripe"}]}`,
		Effects: `{"effects":[` +
			`{"kind":"set_seat_limit","scopes":["saas-stripe"]},` +
			`{"kind":"send_dunning_email","scopes":["saas-stripe"]}]}`,
	}
}

// t0 is a Stripe event time (seconds): 2026-12-01T12:00:00Z.
const (
	t0  = 1796126400
	day = 86400
)

// endedTier is the subscription rule's tier of a deletion.
const endedTier = 1 << 40

var subRank = map[string]int64{"created": 1, "updated": 2, "deleted": 3}

// subscription is Stripe's customer.subscription.<typ> (API version
// 2025-03-31.basil) for the subscription sub of customer Acme, with seats
// seats of the team plan, created at second created: version created×4 +
// rank, a deletion in the ended tier.
func subscription(id, typ, sub, status string, seats, created int64) webhookstest.Event {
	v := created*4 + subRank[typ]
	want := map[string]any{"status": status, "quantity": seats, "seats": seats, "plan": "team_monthly", "ended": false}
	if typ == "deleted" {
		v += endedTier
		want["seats"], want["ended"] = 0, true
	}
	return webhookstest.Event{
		Body: fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2025-03-31.basil","created":%d,"type":"customer.subscription.%s","livemode":false,`+
			`"pending_webhooks":1,"request":{"id":null,"idempotency_key":null},`+
			`"data":{"object":{"id":%q,"object":"subscription","customer":"cus_saas_FAKE_acme","status":%q,"cancel_at_period_end":false,"collection_method":"charge_automatically",`+
			`"items":{"object":"list","data":[{"id":"si_saas_FAKE_1","object":"subscription_item","quantity":%d,"current_period_start":%d,"current_period_end":%d,`+
			`"price":{"id":"price_saas_FAKE_team","object":"price","lookup_key":"team_monthly","unit_amount":1200,"currency":"eur","recurring":{"interval":"month","usage_type":"licensed"}}}]},`+
			`"metadata":{}}}}`, id, created, typ, sub, status, seats, created, created+30*day),
		Subject: sub, Version: v, State: want,
	}
}

// invoice is Stripe's invoice.payment_failed or invoice.paid (typ
// "payment_failed", "paid") for invoice inv of subscription sub, at its
// attempt-th payment attempt, created at second created: version
// created×4 + rank (failed 1, paid 2).
func invoice(id, typ, inv, sub string, attempt, created int64) webhookstest.Event {
	status, paid, rank, access := "open", int64(0), int64(1), rules.AccessSuspended
	if typ == "paid" {
		status, paid, rank, access = "paid", 6000, 2, rules.AccessGranted
	}
	return webhookstest.Event{
		Body: fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2025-03-31.basil","created":%d,"type":"invoice.%s","livemode":false,`+
			`"pending_webhooks":1,"request":{"id":null,"idempotency_key":null},`+
			`"data":{"object":{"id":%q,"object":"invoice","customer":"cus_saas_FAKE_acme","status":%q,"currency":"eur","billing_reason":"subscription_cycle",`+
			`"amount_due":6000,"amount_paid":%d,"amount_remaining":%d,"attempt_count":%d,"attempted":true,`+
			`"parent":{"type":"subscription_details","subscription_details":{"subscription":%q,"metadata":{}}}}}}`,
			id, created, typ, inv, status, paid, 6000-paid, attempt, sub),
		Subject: sub, Version: created*4 + rank,
		State: map[string]any{"access": access, "invoice_id": inv, "amount_due": 6000},
	}
}

// Seats 5, then 8, then 3: whatever order Stripe's events arrive in, the
// subscription ends at 3 seats, and the seat service receives the limits
// in version order (each revision its own operation, older ones
// superseded when a newer one is committed first).
func TestTheSeatLimitFollowsEveryChangeToTheLastQuantity(t *testing.T) {
	saas(rules.Registry()).Check(t,
		subscription("evt_saas_FAKE_sub_1", "created", "sub_saas_FAKE_1", "active", 5, t0),
		subscription("evt_saas_FAKE_sub_2", "updated", "sub_saas_FAKE_1", "active", 8, t0+day),
		subscription("evt_saas_FAKE_sub_3", "updated", "sub_saas_FAKE_1", "active", 3, t0+2*day),
	)
}

// A deletion is final: an update stamped a second later (a clock skew)
// still leaves the subscription ended, with no seats.
func TestADeletedSubscriptionEndsWithNoSeatsWhateverComesAfter(t *testing.T) {
	late := subscription("evt_saas_FAKE_sub_6", "updated", "sub_saas_FAKE_2", "active", 8, t0+day+1)
	late.State = nil // never the highest version
	saas(rules.Registry()).Check(t,
		subscription("evt_saas_FAKE_sub_4", "created", "sub_saas_FAKE_2", "active", 5, t0),
		subscription("evt_saas_FAKE_sub_5", "deleted", "sub_saas_FAKE_2", "canceled", 5, t0+day),
		late,
	)
}

// Stripe retries a failed invoice: two payment_failed events (attempts 1
// and 2), then the invoice is paid. One dunning email for the invoice,
// and access ends restored.
func TestAFailedInvoiceSendsOneDunningEmailHoweverOftenStripeRetriesIt(t *testing.T) {
	saas(rules.Registry()).Check(t,
		invoice("evt_saas_FAKE_inv_1", "payment_failed", "in_saas_FAKE_1", "sub_saas_FAKE_3", 1, t0),
		invoice("evt_saas_FAKE_inv_2", "payment_failed", "in_saas_FAKE_1", "sub_saas_FAKE_3", 2, t0+3*day),
		invoice("evt_saas_FAKE_inv_3", "paid", "in_saas_FAKE_1", "sub_saas_FAKE_3", 3, t0+5*day),
	)
}

// A second invoice of the same subscription fails two months later: it
// gets its own email, and access ends suspended.
func TestEveryFailedInvoiceGetsItsOwnDunningEmail(t *testing.T) {
	saas(rules.Registry()).Check(t,
		invoice("evt_saas_FAKE_inv_4", "payment_failed", "in_saas_FAKE_2", "sub_saas_FAKE_4", 1, t0),
		invoice("evt_saas_FAKE_inv_5", "paid", "in_saas_FAKE_2", "sub_saas_FAKE_4", 2, t0+2*day),
		invoice("evt_saas_FAKE_inv_6", "payment_failed", "in_saas_FAKE_3", "sub_saas_FAKE_4", 1, t0+60*day),
	)
}

// One subscription's seats and dunning together: it starts with 5 seats,
// its invoice fails, the customer cancels, and the invoice is paid after
// the deletion. Both projections converge on their own; combined, as a
// billing service reads them, the customer's standing ends "ended" under
// every order, copy and crash, and after no event does a payment restore
// the ended subscription.
func TestSeatsAndDunningOfOneSubscriptionAndALatePaymentAfterItsEnd(t *testing.T) {
	p := saas(rules.Registry())
	p.Combined = []webhookstest.Combined{standing(access)}
	p.Check(t, endedThenPaid("sub_saas_FAKE_5")...)
}

// A combine where a payment restores access before it looks at the
// subscription is caught, naming the combined value.
func TestRegressionACombineWherePaidRestoresAnEndedSubscriptionIsRefused(t *testing.T) {
	paidFirst := func(states map[string]map[string]any) map[string]any {
		if states[rules.DunningProjection]["access"] == rules.AccessGranted {
			return map[string]any{"standing": string(rules.StandingActive)}
		}
		return access(states)
	}
	p := saas(rules.Registry())
	p.Combined = []webhookstest.Combined{standing(paidFirst)}
	r, err := p.Report(endedThenPaid("sub_saas_FAKE_5")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range r.Failures {
		t.Log(f)
		if f.Rule == webhookstest.CombinedValue && strings.Contains(f.Detail, "standing of sub_saas_FAKE_5") {
			return
		}
	}
	t.Fatalf("the kit reported %d failures, none of %q naming the standing of sub_saas_FAKE_5", len(r.Failures), webhookstest.CombinedValue)
}

// endedThenPaid is a subscription with 5 seats whose invoice fails, which
// the customer cancels, and whose invoice is paid after the deletion.
func endedThenPaid(sub string) []webhookstest.Event {
	return []webhookstest.Event{
		subscription("evt_saas_FAKE_sub_7", "created", sub, "active", 5, t0),
		invoice("evt_saas_FAKE_inv_7", "payment_failed", "in_saas_FAKE_4", sub, 1, t0+30*day),
		subscription("evt_saas_FAKE_sub_8", "deleted", sub, "canceled", 5, t0+32*day),
		invoice("evt_saas_FAKE_inv_8", "paid", "in_saas_FAKE_4", sub, 2, t0+33*day),
	}
}

// access is rules.Access over the components' states, as a billing
// service calls it over what state.Reader.Components returns.
func access(states map[string]map[string]any) map[string]any {
	return map[string]any{"standing": string(rules.Access(states[rules.SubscriptionProjection], states[rules.DunningProjection]))}
}

// standing declares the combined standing of sub_saas_FAKE_5 with the
// combine function combine: it ends "ended", and whenever the
// subscription is ended, a reader sees it ended.
func standing(combine func(map[string]map[string]any) map[string]any) webhookstest.Combined {
	return webhookstest.Combined{
		Name:        "standing",
		Projections: []string{rules.SubscriptionProjection, rules.DunningProjection},
		Combine:     combine,
		Want:        map[string]map[string]any{"sub_saas_FAKE_5": {"standing": string(rules.StandingEnded)}},
		Always: func(states map[string]map[string]any, v map[string]any) error {
			if states[rules.SubscriptionProjection]["ended"] == true && v["standing"] != string(rules.StandingEnded) {
				return errors.New("a payment restored an ended subscription")
			}
			return nil
		},
	}
}

// project runs one projection on one event's body, as the processor does.
func project(t *testing.T, p projection.Projection, typ string, ev webhookstest.Event) map[string]any {
	t.Helper()
	res, err := p.Project(projection.Event{Source: "saas-stripe", Kind: "stripe", EventID: "evt_saas_FAKE", Type: typ, Payload: ev.Body})
	if err != nil || res.Write == nil {
		t.Fatalf("%s: %+v %v", typ, res, err)
	}
	return res.Write.State
}
