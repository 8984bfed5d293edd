package rules_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/effectively-once/webhooks/pkg/webhookstest"

	"example.com/saas/rules"
)

// The sample events of events/ (what the README sends with curl) tell one
// subscription's story: 5 seats, then 8, its second invoice fails and is
// paid on Stripe's retry, then the customer cancels. Whatever order they
// arrive in, the seat service ends at 0 seats, the dunning at a paid
// invoice, and the customer's access is ended.
func TestTheSampleEventsTellOneSubscriptionsStory(t *testing.T) {
	sample := func(name string, version int64, state map[string]any) webhookstest.Event {
		b, err := os.ReadFile(filepath.Join("..", "events", name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		return webhookstest.Event{Body: b, Subject: "sub_saas_FAKE_0001", Version: version, State: state}
	}
	const sub, cycle = 1796126400, 1798804800
	events := []webhookstest.Event{
		sample("customer.subscription.created", sub*4+1, map[string]any{"seats": 5, "plan": "team_monthly"}),
		sample("customer.subscription.updated", (sub+day)*4+2, map[string]any{"seats": 8, "plan": "team_monthly"}),
		sample("invoice.payment_failed", (cycle+3600)*4+1, map[string]any{"access": rules.AccessSuspended, "amount_due": 9600}),
		sample("invoice.paid", (cycle+3*day+3600)*4+2, map[string]any{"access": rules.AccessGranted, "invoice_id": "in_saas_FAKE_0002"}),
		sample("customer.subscription.deleted", endedTier+(cycle+10*day)*4+3, map[string]any{"seats": 0, "ended": true, "status": "canceled"}),
	}
	saas(rules.Registry()).Check(t, events...)

	subState := project(t, rules.NewSubscriptions(), "customer.subscription.deleted", events[4])
	dunning := project(t, rules.NewDunning(), "invoice.paid", events[3])
	if got := rules.Access(subState, dunning); got != rules.StandingEnded {
		t.Errorf("access: %s, want %s", got, rules.StandingEnded)
	}
}
