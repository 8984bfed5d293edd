package rules_test

import (
	"testing"

	"example.com/saas/rules"
)

func TestAccessCombinesTheSubscriptionAndItsDunning(t *testing.T) {
	running := map[string]any{"status": "active", "seats": 5, "ended": false}
	ended := map[string]any{"status": "canceled", "seats": 0, "ended": true}
	failed := map[string]any{"access": rules.AccessSuspended, "invoice_id": "in_saas_FAKE_1"}
	paid := map[string]any{"access": rules.AccessGranted, "invoice_id": "in_saas_FAKE_1"}
	for _, c := range []struct {
		name         string
		sub, dunning map[string]any
		want         rules.Standing
	}{
		{"no subscription yet", nil, failed, rules.StandingNone},
		{"running, no invoice event yet", running, nil, rules.StandingActive},
		{"running, its invoice paid", running, paid, rules.StandingActive},
		{"running, its invoice failed", running, failed, rules.StandingSuspended},
		{"trialing", map[string]any{"status": "trialing", "ended": false}, nil, rules.StandingActive},
		{"past_due with a failed invoice", map[string]any{"status": "past_due", "ended": false}, failed, rules.StandingSuspended},
		{"unpaid, whatever the dunning", map[string]any{"status": "unpaid", "ended": false}, paid, rules.StandingSuspended},
		{"incomplete: never started", map[string]any{"status": "incomplete", "ended": false}, paid, rules.StandingNone},
		{"ended, then paid: a payment never restores it", ended, paid, rules.StandingEnded},
		{"ended with a failed invoice", ended, failed, rules.StandingEnded},
		{"a state without the fields", map[string]any{}, map[string]any{}, rules.StandingNone},
	} {
		if got := rules.Access(c.sub, c.dunning); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
