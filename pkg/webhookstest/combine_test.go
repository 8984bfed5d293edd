package webhookstest_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
	"github.com/effectively-once/webhooks/pkg/webhookstest"
)

// billing is a seat-billing team's rules: builtin.StripeSubscriptions on
// the subscription id, and its invoices projected onto the same id by
// pt.SubscriptionPayments; access combines the two.
func billing(access func(map[string]map[string]any) map[string]any) webhookstest.Pipeline {
	reg := projection.NewRegistry()
	subs := builtin.NewStripeSubscriptions(builtin.StripeOptions{})
	reg.Register("stripe", subs.EventTypes(), subs)
	reg.Register("stripe", pt.SubscriptionPayments{}.EventTypes(), pt.SubscriptionPayments{})
	return webhookstest.Pipeline{
		Rules:   app.Rules{Registry: reg},
		Sources: `{"sources":[{"name":"billing","kind":"stripe"}]}`,
		Effects: `{"effects":[{"kind":"entitlement.grant","scopes":["billing"]},{"kind":"entitlement.revoke","scopes":["billing"]}]}`,
		Combined: []webhookstest.Combined{{
			Name:        "access",
			Projections: []string{builtin.StripeSubscriptionProjection, pt.SubscriptionPaymentProjection},
			Combine:     access,
			Want:        map[string]map[string]any{"sub_1": {"access": "ended"}},
			Always:      paidNeverRestoresAnEndedSubscription,
		}},
	}
}

// paidNeverRestoresAnEndedSubscription is the business rule, at every
// moment a reader may look.
func paidNeverRestoresAnEndedSubscription(states map[string]map[string]any, combined map[string]any) error {
	if sub := states[builtin.StripeSubscriptionProjection]; sub != nil && sub["deleted"] == true && combined["access"] != "ended" {
		return errors.New("a paid invoice restored an ended subscription")
	}
	return nil
}

// endedThenPaid: sub_1 is created, its payment fails, it is deleted, and
// then its last invoice is paid (Stripe collects an open invoice after a
// cancellation). Each family keeps its own versions.
func endedThenPaid() []webhookstest.Event {
	const t0 = 1796040000
	return []webhookstest.Event{
		subscription("created", "active", t0, t0*4+1),
		{Body: pt.InvoiceEvent("evt_inv_failed", "invoice.payment_failed", "in_1", "sub_1", t0+60), Subject: "sub_1", Version: (t0+60)*4 + 1},
		subscription("deleted", "canceled", t0+120, builtin.DeletedVersionBase+(t0+120)*4+3),
		{Body: pt.InvoiceEvent("evt_inv_paid", "invoice.paid", "in_1", "sub_1", t0+180), Subject: "sub_1", Version: (t0+180)*4 + 2,
			State: map[string]any{"payment": "paid"}},
	}
}

// The combined access of a subscription and its invoices ends "ended"
// under every order, copy and crash, and a paid invoice never restores
// the ended subscription after any event.
func TestPaidNeverRestoresAnEndedSubscription(t *testing.T) {
	billing(pt.Access).Check(t, endedThenPaid()...)
}

// A combine function where paid restores access first, whatever the
// subscription says, is caught: after the last event (Want) and at the
// moment it happens (Always), with the value named.
func TestACombineWherePaidRestoresAnEndedSubscriptionFailsCombinedValue(t *testing.T) {
	broken := func(states map[string]map[string]any) map[string]any {
		if pay := states[pt.SubscriptionPaymentProjection]; pay != nil && pay["payment"] == "paid" {
			return map[string]any{"access": "active"}
		}
		return pt.Access(states)
	}
	for name, change := range map[string]func(*webhookstest.Combined){
		"want":   func(c *webhookstest.Combined) { c.Always = nil },
		"always": func(c *webhookstest.Combined) { c.Want = nil },
	} {
		t.Run(name, func(t *testing.T) {
			p := billing(broken)
			change(&p.Combined[0])
			got := mustReport(t, p, webhookstest.CombinedValue, endedThenPaid()...)
			if !strings.Contains(got[0], "access of sub_1") || !strings.Contains(got[0], `"active"`) {
				t.Fatalf("the failure does not name the value and what it was: %s", got[0])
			}
		})
	}
}

// A combine function that is not a function of its states (here a
// counter) is caught, and so is one that panics.
func TestACombineThatIsNotPureFailsCombinedValue(t *testing.T) {
	var n atomic.Int64
	counting := func(states map[string]map[string]any) map[string]any {
		out := pt.Access(states)
		out["read"] = n.Add(1)
		return out
	}
	got := mustReport(t, billing(counting), webhookstest.CombinedValue, endedThenPaid()...)
	if !strings.Contains(got[0], "pure function") {
		t.Fatalf("not named impure: %s", got[0])
	}
	panics := func(states map[string]map[string]any) map[string]any {
		return map[string]any{"access": states[pt.SubscriptionPaymentProjection]["payment"].(string)}
	}
	got = mustReport(t, billing(panics), webhookstest.CombinedValue, endedThenPaid()...)
	if !strings.Contains(got[0], "panicked") {
		t.Fatalf("not named a panic: %s", got[0])
	}
}

// A combined value that names a projection no event writes, or a subject
// none of its events has, is a configuration the kit refuses at once.
func TestACombinedValueOverNothingFailsAtOnce(t *testing.T) {
	for name, change := range map[string]func(*webhookstest.Combined){
		"projection": func(c *webhookstest.Combined) { c.Projections = append(c.Projections, "subscription_seats") },
		"subject":    func(c *webhookstest.Combined) { c.Want = map[string]map[string]any{"sub_2": {"access": "ended"}} },
		"combine":    func(c *webhookstest.Combined) { c.Combine = nil },
	} {
		t.Run(name, func(t *testing.T) {
			p := billing(pt.Access)
			change(&p.Combined[0])
			if _, err := p.Failures(endedThenPaid()...); err == nil {
				t.Fatal("the kit ran it")
			}
		})
	}
}
