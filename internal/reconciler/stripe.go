package reconciler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/form"

	"github.com/effectively-once/webhooks/internal/stripeapi"
)

// StripeTruth asks the Stripe API for events whose webhook delivery has
// not succeeded (delivery_success=false: still being retried, or given up).
// A delivery we answered 2xx was durably accepted by intake, so these are
// the only events the ledger can be missing. Each is returned under its
// own event id, so feeding it is exactly what the webhook would have done,
// and a webhook that arrives later is a duplicate.
type StripeTruth struct {
	// Key returns the API key (a restricted key with read access to events).
	Key func(ctx context.Context) (string, error)
	// Backend defaults to Stripe's API backend; tests point it at a fake.
	Backend stripe.Backend
	// Types limits the event types asked for (at most 20); empty means all.
	Types []string
}

var _ SourceOfTruth = (*StripeTruth)(nil)

// NewStripeBackend returns a Stripe API backend for baseURL ("" for
// api.stripe.com) that does not retry on its own (the reconciler's next run
// is the retry), refuses redirects and logs nothing: stripeapi.NewBackend,
// the one the processor uses too.
func NewStripeBackend(baseURL string, client *http.Client) stripe.Backend {
	return stripeapi.NewBackend(baseURL, client)
}

// rawEventPage keeps each event's JSON exactly as Stripe sent it: that is
// the body the projection reads, as for a webhook.
type rawEventPage struct {
	stripe.APIResource
	Data    []json.RawMessage `json:"data"`
	HasMore bool              `json:"has_more"`
}

// Facts lists undelivered events created since `since`, newest first as
// Stripe returns them, at most limit.
func (s *StripeTruth) Facts(ctx context.Context, since time.Time, limit int) ([]Fact, error) {
	if s.Key == nil {
		return nil, fmt.Errorf("%w: no API key", ErrTruthInvalid)
	}
	key, err := s.Key(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: API key: %v", ErrTruthUnavailable, err)
	}
	backend := s.Backend
	if backend == nil {
		backend = NewStripeBackend("", nil)
	}
	var out []Fact
	startingAfter := ""
	for len(out) < limit {
		p := &stripe.EventListParams{
			CreatedRange:    &stripe.RangeQueryParams{GreaterThan: since.Unix()},
			DeliverySuccess: stripe.Bool(false),
		}
		p.Context = ctx
		p.Limit = stripe.Int64(int64(min(100, limit-len(out))))
		if startingAfter != "" {
			p.StartingAfter = stripe.String(startingAfter)
		}
		for _, t := range s.Types {
			p.Types = append(p.Types, stripe.String(t))
		}
		var page rawEventPage
		q := &form.Values{}
		form.AppendTo(q, p)
		if err := backend.CallRaw(http.MethodGet, "/v1/events", key, []byte(q.Encode()), p.GetParams(), &page); err != nil {
			var se *stripe.Error
			if errors.As(err, &se) && se.HTTPStatusCode >= 400 && se.HTTPStatusCode < 500 && se.HTTPStatusCode != 429 {
				return nil, fmt.Errorf("%w: stripe: %s (HTTP %d)", ErrTruthInvalid, se.Msg, se.HTTPStatusCode)
			}
			return nil, fmt.Errorf("%w: stripe: %v", ErrTruthUnavailable, err)
		}
		for _, raw := range page.Data {
			var ev struct {
				ID   string `json:"id"`
				Type string `json:"type"`
			}
			if err := json.Unmarshal(raw, &ev); err != nil || ev.ID == "" || ev.Type == "" {
				return nil, fmt.Errorf("%w: stripe event without id or type", ErrTruthInvalid)
			}
			out = append(out, Fact{EventID: ev.ID, EventType: ev.Type, Payload: []byte(raw)})
			startingAfter = ev.ID
		}
		if !page.HasMore || len(page.Data) == 0 {
			break
		}
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
