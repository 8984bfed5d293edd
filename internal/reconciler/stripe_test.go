package reconciler_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/stripefake"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/reconciler"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

const stripeKey = "rk_test_FAKE_reconciler_0000"

func subscriptionEvent(id, subID, status string, created int64) string {
	return fmt.Sprintf(`{"id":%q,"object":"event","api_version":"2025-03-31.basil","created":%d,"type":"customer.subscription.updated","livemode":false,`+
		`"data":{"object":{"id":%q,"object":"subscription","customer":"cus_test_1","status":%q,"cancel_at_period_end":false,`+
		`"metadata":{"account_id":"acct_local_1"},"items":{"object":"list","data":[{"id":"si_1","current_period_end":%d,"price":{"id":"price_pro_monthly"}}]}}}}`,
		id, created, subID, status, created+30*24*3600)
}

// Stripe says two subscription events were never delivered; one we have
// (its webhook arrived after all), one we lack. The missing one is fed under
// its own Stripe event id, so the webhook that Stripe still retries is a
// duplicate when it lands.
func TestStripeTruthFeedsUndeliveredEvents(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	created := t0.Unix()
	have := subscriptionEvent("evt_have", "sub_A", "active", created)
	missing := subscriptionEvent("evt_missing", "sub_B", "past_due", created+5)
	f.accept("stripe", "evt_have", "customer.subscription.updated", []byte(have))
	f.Clock.Advance(6 * time.Minute)
	f.run(f.reconciler(nil)) // re-enqueue evt_have (its pointer was never sent)
	f.process()

	api := stripefake.New(stripeKey)
	api.Now = f.Clock.Now
	api.PageSize = 1 // one per page, to exercise pagination
	for _, raw := range []string{have, missing} {
		if err := api.AddEvent([]byte(raw), false); err != nil {
			t.Fatal(err)
		}
	}
	// Delivered, or older than the lookback (an hour): the reconciler's
	// query leaves them out, or they would be drift.
	if err := api.AddEvent([]byte(subscriptionEvent("evt_delivered", "sub_C", "active", created+1)), true); err != nil {
		t.Fatal(err)
	}
	if err := api.AddEvent([]byte(subscriptionEvent("evt_old", "sub_D", "active", created-2*3600)), false); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	defer srv.Close()
	truth := &reconciler.StripeTruth{Backend: reconciler.NewStripeBackend(srv.URL, srv.Client()),
		Key: func(context.Context) (string, error) { return stripeKey, nil }}
	rep := f.run(f.reconciler(map[string]reconciler.SourceOfTruth{"stripe": truth}))
	if rep.FactsChecked != 2 || rep.DriftFound != 1 || rep.DriftRepaired != 1 {
		t.Fatalf("report %+v", rep)
	}
	reqs := api.Requests()
	if len(reqs) != 2 || api.Count("/v1/events") != 2 ||
		reqs[0].Query.Get("delivery_success") != "false" || !reqs[0].Query.Has("created[gt]") ||
		reqs[1].Query.Get("starting_after") != "evt_missing" || reqs[1].Query.Get("delivery_success") != "false" {
		t.Fatalf("requests %+v", reqs)
	}
	f.process()
	ev := f.event("stripe", "evt_missing")
	if ev.Status != ledger.StatusProcessed || ev.Result.Outcome != ledger.OutcomeApplied {
		t.Fatalf("fed event %s %+v", ev.Status, ev.Result)
	}
	p, err := f.L.GetProjection(ctx, projection.ScopedName("stripe", builtin.StripeSubscriptionProjection), "sub_B")
	if err != nil || p.State["status"] != "past_due" {
		t.Fatalf("projection %+v %v", p, err)
	}
	// The webhook Stripe was still retrying arrives: a duplicate.
	acc, err := f.L.Accept(ctx, ledger.Delivery{Source: "stripe", EventID: "evt_missing", EventType: "customer.subscription.updated", DeliveryID: "late", Payload: []byte(missing)})
	if err != nil || !acc.Duplicate {
		t.Fatalf("late webhook: %+v %v", acc, err)
	}
	if again := f.run(f.reconciler(map[string]reconciler.SourceOfTruth{"stripe": truth})); again.DriftFound != 0 {
		t.Fatalf("second run: %+v", again)
	}

	badKey := &reconciler.StripeTruth{Backend: reconciler.NewStripeBackend(srv.URL, srv.Client()),
		Key: func(context.Context) (string, error) { return "rk_test_FAKE_wrong", nil }}
	if _, err := badKey.Facts(ctx, t0, 10); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("bad key: %v", err)
	}
}
