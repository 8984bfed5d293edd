package builtin_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/stripefake"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

const resolverKey = "rk_test_FAKE_builtin_resolver_0000"

// The Stripe resolver answers a thin event with the snapshot event of the
// object's current state, or with the code the event is quarantined or
// retried with; a snapshot event, and a thin event no projection reads,
// cost no request.
func TestStripeResolver(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	sub := func(status string) []byte {
		return []byte(`{"id":"sub_1","object":"subscription","status":"` + status + `","metadata":{"account_id":"acct_42"}}`)
	}
	thin := func(typ, objType, objID string) projection.Event {
		return projection.Event{Source: "stripe", Kind: "stripe", EventID: "evt_thin", Type: typ, Payload: thinBody("evt_thin", typ, objType, objID, "")}
	}
	updated := thin("v1.customer.subscription.updated", "subscription", "sub_1")
	tests := []struct {
		name     string
		ev       projection.Event
		object   []byte // the subscription Stripe holds; nil: none
		script   []stripefake.Answer
		noAPI    bool
		readsNot bool
		// want
		typ       string
		permanent string
		retryable string
		after     time.Duration
		nothing   bool
		requests  int
	}{
		{name: "the current state", ev: updated, object: sub("past_due"), typ: "customer.subscription.updated", requests: 1},
		{name: "a deletion", ev: updated, object: sub("canceled"), typ: "customer.subscription.deleted", requests: 1},
		{name: "a snapshot event", ev: event("customer.subscription.updated", "active", `"cus_1"`, `{}`, 1000), nothing: true},
		{name: "a type no projection reads", ev: updated, readsNot: true, nothing: true},
		{name: "malformed", ev: projection.Event{Payload: []byte(`{"object":"v2.core.event","type":"v1.customer.subscription.updated"}`)}, permanent: "malformed"},
		{name: "an object of another type", ev: thin("v1.customer.subscription.updated", "invoice", "in_1"), permanent: "unsupported_object"},
		{name: "no api", ev: updated, noAPI: true, permanent: "stripe_api_not_configured"},
		{name: "not found", ev: updated, permanent: "stripe_object_not_found", requests: 1},
		{name: "rate limited", ev: updated, object: sub("active"), script: []stripefake.Answer{stripefake.RateLimited(2 * time.Second)},
			retryable: "stripe_api_unavailable", after: 2 * time.Second, requests: 1},
		{name: "a server error", ev: updated, object: sub("active"), script: []stripefake.Answer{stripefake.ServerError(503)}, retryable: "stripe_api_unavailable", requests: 1},
		{name: "the key refused", ev: updated, object: sub("active"),
			script:    []stripefake.Answer{stripefake.Fail(http.StatusForbidden, "invalid_request_error", "", "The provided key does not have the required permissions")},
			retryable: "stripe_api_auth", requests: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := stripefake.New(resolverKey)
			fake.Now = func() time.Time { return now }
			srv := httptest.NewServer(fake)
			defer srv.Close()
			if tc.object != nil {
				if err := fake.PutObject("subscription", "sub_1", tc.object); err != nil {
					t.Fatal(err)
				}
			}
			fake.Script("/v1/subscriptions/", tc.script...)
			src := projection.ResolverSource{Name: "stripe", Kind: "stripe",
				API: &projection.SourceAPI{Secret: "env:KEY", URL: srv.URL, Timeout: time.Second},
				Secret: func(_ context.Context, ref string) (string, error) {
					if ref != "env:KEY" {
						return "", errors.New("unknown ref " + ref)
					}
					return resolverKey, nil
				},
				Reads: func(string) bool { return !tc.readsNot },
			}
			if tc.noAPI {
				src.API = nil
			}
			r, err := builtin.Resolvers()["stripe"](src)
			if err != nil {
				t.Fatal(err)
			}
			out, err := r.Resolve(t.Context(), tc.ev)
			code, _ := projection.AsPermanent(err)
			rcode, after, _ := projection.AsRetryable(err)
			switch {
			case tc.nothing:
				if !errors.Is(err, projection.ErrNothingToResolve) {
					t.Fatalf("resolved %+v %v; want nothing to resolve", out, err)
				}
			case tc.permanent != "":
				if code != tc.permanent {
					t.Fatalf("error %v; want permanent %s", err, tc.permanent)
				}
			case tc.retryable != "":
				if rcode != tc.retryable || after != tc.after {
					t.Fatalf("error %v (%s after %s); want retryable %s after %s", err, rcode, after, tc.retryable, tc.after)
				}
			default:
				if err != nil || out.Type != tc.typ || !strings.Contains(string(out.Payload), `"fetched":true`) || out.Note != "fetched from Stripe at 2026-11-30T12:00:00Z" {
					t.Fatalf("resolved %s %s %q %v; want %s", out.Type, out.Payload, out.Note, err, tc.typ)
				}
			}
			if n := len(fake.Requests()); n != tc.requests {
				t.Fatalf("%d requests to Stripe; want %d", n, tc.requests)
			}
		})
	}
}

// An api without a way to read its secret cannot be built.
func TestStripeResolverNeedsItsSecret(t *testing.T) {
	_, err := builtin.StripeResolver(projection.ResolverSource{Name: "stripe", Kind: "stripe", API: &projection.SourceAPI{Secret: "env:KEY"}})
	if err == nil {
		t.Fatal("built without a secret reader")
	}
}
