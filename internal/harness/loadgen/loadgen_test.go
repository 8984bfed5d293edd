package loadgen

import (
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// The local stack's visibly fake secrets (scripts/devstack.json).
var testSecrets = Secrets{
	Stripe:     "whsec_local_FAKE_do_not_use_anywhere_0001",
	StripeNext: "whsec_local_FAKE_rotation_target_0002",
	Orders:     "whsec_bG9jYWxfRkFLRV9vcmRlcnNfc2lnbmluZ19rZXlfMDE=",
}

func TestCheckLoopback(t *testing.T) {
	for _, ok := range []string{"http://127.0.0.1:3000", "http://localhost:3000/", "http://[::1]:3000", "https://127.0.0.2"} {
		if err := CheckLoopback(ok); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"http://10.0.0.1:3000", "https://api.example.com", "http://0.0.0.0:3000", "ftp://127.0.0.1", "127.0.0.1:3000", "http://localhost.example.com"} {
		if err := CheckLoopback(bad); !errors.Is(err, ErrNotLoopback) {
			t.Errorf("%s accepted: %v", bad, err)
		}
	}
}

func TestPercentilesNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	p := NewPercentiles(ds)
	if p != (Percentiles{N: 100, P50: 50, P95: 95, P99: 99, Max: 100}) {
		t.Fatalf("%+v", p)
	}
	if p := NewPercentiles([]time.Duration{7 * time.Millisecond}); p.P50 != 7 || p.P99 != 7 || p.Max != 7 {
		t.Fatalf("one value: %+v", p)
	}
	if p := NewPercentiles(nil); p != (Percentiles{}) {
		t.Fatalf("none: %+v", p)
	}
}

func TestOptionsBounded(t *testing.T) {
	o := Options{Rate: 20, Duration: 5 * time.Second}
	if err := o.defaults(); err != nil || o.Count != 100 || o.MaxInFlight != 64 {
		t.Fatalf("%+v %v", o, err)
	}
	for name, bad := range map[string]Options{
		"rate":      {Rate: MaxRate + 1},
		"duration":  {Duration: MaxDuration + time.Second},
		"dup":       {DuplicateRatio: 1},
		"in flight": {MaxInFlight: MaxInFlight + 1},
		"share":     {StripeShare: 2},
	} {
		if err := bad.defaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s accepted: %v", name, err)
		}
	}
}

// TestSignedDeliveriesVerify checks every variant against the providers'
// own verification code, so a load run's 401s would be the stack's fault.
func TestSignedDeliveriesVerify(t *testing.T) {
	now := time.Now()
	m := newModel("t1", 1, 0.5, now)
	seen := map[string]bool{}
	for range 40 {
		ev := m.next()
		seen[ev.Source] = true
		for _, v := range []Variant{VariantPlain, VariantRotation} {
			r, err := Sign(ev, testSecrets, v, now)
			if err != nil {
				t.Fatal(err)
			}
			switch ev.Source {
			case SourceStripe:
				for _, secret := range []string{testSecrets.Stripe, testSecrets.StripeNext} {
					err := webhook.ValidatePayload(r.Body, r.Headers["Stripe-Signature"], secret)
					if rotation := secret == testSecrets.StripeNext; (err == nil) != (!rotation || v == VariantRotation) {
						t.Fatalf("%s variant %d secret %s: %v", ev.ID, v, secret, err)
					}
				}
			case SourceOrders:
				wh, _ := standardwebhooks.NewWebhook(testSecrets.Orders)
				h := http.Header{}
				for k, val := range r.Headers {
					h.Set(strings.Replace(k, "svix-", "webhook-", 1), val)
				}
				if err := wh.Verify(r.Body, h); err != nil {
					t.Fatalf("%s variant %d: %v", ev.ID, v, err)
				}
				if v == VariantRotation && r.Headers["svix-id"] != ev.ID {
					t.Fatalf("svix headers: %v", r.Headers)
				}
			}
		}
	}
	if !seen[SourceStripe] || !seen[SourceOrders] {
		t.Fatalf("sources %v", seen)
	}
}

// TestModelLifecycles: subjects move one step at a time, each applied
// event carries the intents its projection creates, and the same seed
// makes the same events.
func TestModelLifecycles(t *testing.T) {
	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	gen := func() []*Event {
		m := newModel("t2", 9, 0.5, base)
		var out []*Event
		for range 200 {
			out = append(out, m.next())
		}
		return out
	}
	a, b := gen(), gen()
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different events")
	}
	step := map[string]int{}
	ids := map[string]bool{}
	cancels := 0
	for _, ev := range a {
		if ids[ev.Key()] {
			t.Fatalf("event %s made twice", ev.Key())
		}
		ids[ev.Key()] = true
		if ev.Step != step[ev.Subject] {
			t.Fatalf("%s: step %d after %d steps", ev.Key(), ev.Step, step[ev.Subject])
		}
		step[ev.Subject]++
		switch {
		case ev.Source == SourceStripe && len(ev.Intents) != 1:
			t.Fatalf("%s: intents %v", ev.Key(), ev.Intents)
		case ev.Source == SourceOrders && ev.Status == "cancelled":
			cancels++
			if len(ev.Intents) != 2 || ev.Intents[0].Kind != "refund" || ev.Intents[1].Kind != "notify_cancellation" || !ev.Last {
				t.Fatalf("%s: intents %v", ev.Key(), ev.Intents)
			}
		case ev.Source == SourceOrders && len(ev.Intents) != 0:
			t.Fatalf("%s (%s): intents %v", ev.Key(), ev.Status, ev.Intents)
		}
	}
	if cancels == 0 {
		t.Fatal("no order was cancelled in 200 events")
	}
	// Only an applied event is expected to have created its intents.
	ev := a[0]
	if got := expected(ev, ledger.Event{Status: ledger.StatusProcessed, Result: &ledger.Result{Outcome: ledger.OutcomeStale}}); got != nil {
		t.Fatalf("stale event expected %v", got)
	}
	if got := expected(ev, ledger.Event{Status: ledger.StatusProcessed, Result: &ledger.Result{Outcome: ledger.OutcomeApplied}}); !reflect.DeepEqual(got, ev.Intents) {
		t.Fatalf("applied event expected %v", got)
	}
}

func TestLatencyChartFromResults(t *testing.T) {
	rs := []Result{
		{OfferedRate: 10, Intake: Percentiles{P50: 4, P95: 9, P99: 18}, EndToEnd: Percentiles{P50: 200, P95: 280, P99: 300}},
		{OfferedRate: 25, Intake: Percentiles{P50: 5, P95: 20, P99: 27}, EndToEnd: Percentiles{P50: 210, P95: 290, P99: 310}},
		{OfferedRate: 100, Intake: Percentiles{P50: 2800, P95: 3300, P99: 3400}, EndToEnd: Percentiles{P50: 5400, P95: 9000, P99: 9500}},
	}
	for _, c := range []struct {
		name string
		img  func() error
	}{
		{"latency", func() error { _, err := LatencyChart(rs).Image(); return err }},
		{"end to end", func() error { _, err := EndToEndChart(rs).Image(); return err }},
	} {
		if err := c.img(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	if c := LatencyChart(rs); !c.LogX || len(c.Series) != 3 || c.Series[2].Y[2] != 3400 {
		t.Fatalf("chart %+v", c)
	}
	if LatencyChart(rs[:2]).LogX {
		t.Fatal("10 to 25/s drawn on a log scale")
	}
}
