package capacity

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"slices"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/stripefake"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// ThinRow compares one event format's cost: requests, write units and
// processing latency per event, over N events.
type ThinRow struct {
	Format       string // "snapshot" or "thin"
	Events       int
	IntakeCalls  Calls // AWS requests accepting one new event (the last one measured)
	ProcessCalls Calls // AWS requests processing it
	// StripeRequests is the Stripe API requests per event (total / N).
	StripeRequests float64
	// WriteUnits is the write units from delivery to processed (the last
	// event measured; every event is the same shape).
	WriteUnits int
	// ProcessP50, ProcessP95: wall time of the processor core for one
	// event (claim, fetch when thin, project, commit, announce).
	ProcessP50, ProcessP95 time.Duration
}

// thinKey is the fake Stripe API's key in measurements (visibly fake).
const thinKey = "rk_test_FAKE_capacity_stripe_api_0000"

// MeasureThin sends n Stripe subscription events of each format (a
// realistic 4 KB snapshot event, the figure BENCHMARKS.md budgets; a
// thin event of Stripe's documented shape, about 450 bytes) through
// the real intake and processor cores (minidyn, goaws), the thin ones
// resolved against a fake Stripe API served over loopback HTTP by
// stripeapi (stripe-go), and reports what each costs per event. The
// fake answers in microseconds: the latency difference is our side of a
// fetch (the client, HTTP, decoding), not Stripe's own response time.
func MeasureThin(ctx context.Context, n int) ([]ThinRow, error) {
	api := stripefake.New(thinKey)
	srv := httptest.NewServer(api)
	defer srv.Close()
	var rows []ThinRow
	for _, format := range []string{"snapshot", "thin"} {
		rg, err := newRig(ctx, srv.URL, thinKey)
		if err != nil {
			return nil, err
		}
		api.Now = rg.clock.Now
		row := ThinRow{Format: format, Events: n}
		before := len(api.Requests())
		var took []time.Duration
		for i := range n {
			id := fmt.Sprintf("evt_test_65RFAKEcapacity%s%04d", format, i)
			sub := "sub_" + id // PaddedSubscriptionEvent's subscription id
			at := rg.clock.Now().Add(-time.Minute)
			body := PaddedSubscriptionEvent(id, 4<<10, at, Realistic)
			if format == "thin" {
				obj := fmt.Appendf(nil, `{"id":%q,"object":"subscription","status":"active","metadata":{"account_id":"acct_42"}}`, sub)
				if err := api.PutObject("subscription", sub, obj); err != nil {
					rg.close()
					return nil, err
				}
				// The shape of Stripe's documented thin event, with ids of
				// Stripe's length.
				body = fmt.Appendf(nil, `{"id":%q,"object":"v2.core.event","type":"v1.customer.subscription.created","livemode":false,"created":%q,`+
					`"related_object":{"id":%q,"type":"subscription","url":"/v1/subscriptions/%s"},"context":null,`+
					`"reason":{"type":"request","request":{"id":"req_v2FAKE0a1b2c3d4e5f6","idempotency_key":"5f0c8a2e-7b1d-4c3a-9e8f-FAKE00000001"}},"snapshot_event":null}`,
					id, at.UTC().Format("2006-01-02T15:04:05.000Z"), sub, sub)
			}
			rg.m.Reset()
			rg.rec.Reset()
			if st := rg.deliver(ctx, body); st != 202 {
				rg.close()
				return nil, fmt.Errorf("%s intake answered %d", format, st)
			}
			row.IntakeCalls = calls(rg.rec)
			units := rg.m.Totals().Units()
			rg.m.Reset()
			rg.rec.Reset()
			start := time.Now()
			if err := rg.process(ctx, id); err != nil {
				rg.close()
				return nil, err
			}
			took = append(took, time.Since(start))
			row.ProcessCalls = calls(rg.rec)
			row.WriteUnits = units + rg.m.Totals().Units()
			ev, err := rg.led.Get(ctx, "stripe", id)
			if err != nil || ev.Status != ledger.StatusProcessed || ev.Result.Outcome != ledger.OutcomeApplied {
				rg.close()
				return nil, fmt.Errorf("%s event %s not applied: %+v %v", format, id, ev.Result, err)
			}
			rg.clock.Advance(time.Second)
		}
		rg.close()
		row.StripeRequests = float64(len(api.Requests())-before) / float64(n)
		slices.Sort(took)
		row.ProcessP50, row.ProcessP95 = took[len(took)/2], took[len(took)*95/100]
		rows = append(rows, row)
	}
	return rows, nil
}

// WriteThinTable renders the comparison as Markdown.
func WriteThinTable(w io.Writer, rows []ThinRow) {
	fmt.Fprintln(w, "| format | events | intake requests | processing requests (AWS) | Stripe API requests per event | write units delivery → processed | processing p50 | processing p95 |")
	fmt.Fprintln(w, "|---|---:|---|---|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %d | %d (%s) | %d (%s) | %.2f | %d | %s | %s |\n", r.Format, r.Events,
			r.IntakeCalls.Total, r.IntakeCalls.Detail, r.ProcessCalls.Total, r.ProcessCalls.Detail, r.StripeRequests, r.WriteUnits,
			r.ProcessP50.Round(10*time.Microsecond), r.ProcessP95.Round(10*time.Microsecond))
	}
}
