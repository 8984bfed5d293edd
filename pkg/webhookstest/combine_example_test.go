package webhookstest_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
	"github.com/effectively-once/webhooks/pkg/webhookstest"
)

// payments is a seat-billing team's projection of a subscription's
// invoices onto the subscription id: the outcome of its latest invoice
// event, version created×4 + rank (failed 1 < paid 2).
type payments struct{}

func (payments) Name() string { return "subscription_payment" }

func (payments) Project(ev projection.Event) (projection.Result, error) {
	var e struct {
		Created int64
		Data    struct {
			Object struct{ ID, Subscription string }
		}
	}
	if err := json.Unmarshal(ev.Payload, &e); err != nil || e.Data.Object.Subscription == "" {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("not an invoice of a subscription: %v", err))
	}
	rank := map[string]int64{"invoice.payment_failed": 1, "invoice.paid": 2}[ev.Type]
	st := map[string]any{"invoice_id": e.Data.Object.ID, "payment": map[int64]string{1: "failed", 2: "paid"}[rank]}
	return projection.Result{Write: &projection.Write{Name: "subscription_payment", Subject: e.Data.Object.Subscription,
		Version: e.Created*4 + rank, Fingerprint: projection.Fingerprint(st), State: st}}, nil
}

// access is the team's combine function, the one its read code calls with
// state.Components.States(): an ended subscription stays ended whatever
// its invoices say.
func access(states map[string]map[string]any) map[string]any {
	sub, pay := states["stripe_subscription"], states["subscription_payment"]
	switch {
	case sub == nil:
		return map[string]any{"access": "none"}
	case sub["deleted"] == true:
		return map[string]any{"access": "ended"}
	case pay != nil && pay["payment"] == "failed":
		return map[string]any{"access": "suspended"}
	}
	return map[string]any{"access": "active"}
}

// One subscription, two event families: its own events and its invoices,
// each projected onto the subscription id under its own version rule.
// The kit checks the combined access under every order of the events,
// after every event and at the end.
func ExampleCombined() {
	reg := projection.NewRegistry()
	subs := builtin.NewStripeSubscriptions(builtin.StripeOptions{})
	reg.Register("stripe", subs.EventTypes(), subs)
	reg.Register("stripe", []string{"invoice.paid", "invoice.payment_failed"}, payments{})
	p := webhookstest.Pipeline{
		Rules:   app.Rules{Registry: reg},
		Sources: `{"sources":[{"name":"billing","kind":"stripe"}]}`,
		Effects: `{"effects":[{"kind":"entitlement.grant","scopes":["billing"]},{"kind":"entitlement.revoke","scopes":["billing"]}]}`,
		Combined: []webhookstest.Combined{{
			Name:        "access",
			Projections: []string{"stripe_subscription", "subscription_payment"},
			Combine:     access,
			Want:        map[string]map[string]any{"sub_1": {"access": "ended"}},
			Always: func(states map[string]map[string]any, v map[string]any) error {
				if states["stripe_subscription"]["deleted"] == true && v["access"] != "ended" {
					return errors.New("a paid invoice restored an ended subscription")
				}
				return nil
			},
		}},
	}
	const t0 = 1796040000
	sub := func(id, typ, status string, created int64) []byte {
		return fmt.Appendf(nil, `{"id":%q,"object":"event","type":"customer.subscription.%s","created":%d,"data":{"object":`+
			`{"id":"sub_1","object":"subscription","customer":"cus_1","status":%q,"metadata":{"account_id":"acct_1"},`+
			`"items":{"data":[{"current_period_end":1798000000,"price":{"id":"price_seat"}}]}}}}`, id, typ, created, status)
	}
	inv := func(id, typ string, created int64) []byte {
		return fmt.Appendf(nil, `{"id":%q,"object":"event","type":%q,"created":%d,"data":{"object":`+
			`{"id":"in_1","object":"invoice","subscription":"sub_1"}}}`, id, typ, created)
	}
	fs, err := p.Failures(
		webhookstest.Event{Body: sub("evt_1", "created", "active", t0), Subject: "sub_1", Version: t0*4 + 1},
		webhookstest.Event{Body: sub("evt_2", "deleted", "canceled", t0+120), Subject: "sub_1", Version: builtin.DeletedVersionBase + (t0+120)*4 + 3},
		webhookstest.Event{Body: inv("evt_3", "invoice.paid", t0+180), Subject: "sub_1", Version: (t0+180)*4 + 2},
	)
	for _, f := range fs {
		fmt.Println(f)
	}
	fmt.Println(len(fs), err)
	// Output: 0 <nil>
}
