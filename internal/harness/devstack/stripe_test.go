package devstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/source"
	"github.com/effectively-once/webhooks/internal/stripeapi"
)

const fakeStripeKey = "rk_local_FAKE_stripe_api_test"

// TestStripeAPIDevEndpoints drives the fake Stripe API the way the demo and
// the processor do: the dev endpoints set a subscription and script one
// rate-limited answer, the processor's own client (internal/stripeapi) meets the
// 429 with its Retry-After and then the object, and the request log shows
// both answers.
func TestStripeAPIDevEndpoints(t *testing.T) {
	var logBuf bytes.Buffer
	logs := devstack.NewLogs(&logBuf)
	a, err := devstack.NewStripeAPI("127.0.0.1:0", fakeStripeKey, logs)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	dev := httptest.NewServer(a.DevHandler())
	defer dev.Close()
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, dev.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	// GIVEN Stripe's truth and one rate-limited answer for it.
	sub := `{"id":"sub_local_1","object":"subscription","status":"canceled","metadata":{"account_id":"acct_local_1"}}`
	if code, body := do(http.MethodPut, "/_dev/stripe/objects/subscription/sub_local_1", sub); code != http.StatusOK {
		t.Fatalf("put: %d %s", code, body)
	}
	if code, body := do(http.MethodPost, "/_dev/stripe/script", `{"path":"/v1/subscriptions/sub_local_1","then":[{"mode":"rate_limited","retry_after_seconds":1}]}`); code != http.StatusAccepted {
		t.Fatalf("script: %d %s", code, body)
	}

	// WHEN the processor's client retrieves it twice.
	client := &stripeapi.Client{
		Key:     func(context.Context) (string, error) { return fakeStripeKey, nil },
		Backend: stripeapi.NewBackend("http://"+a.Addr(), nil),
		Timeout: 2 * time.Second,
	}
	ctx := context.Background()
	_, err = client.Retrieve(ctx, "subscription", "sub_local_1")
	if wait, ok := stripeapi.RetryAfter(err); !errors.Is(err, stripeapi.ErrUnavailable) || !ok || wait != time.Second {
		t.Fatalf("first retrieve: %v (retry after %s, %v), want a 429 with Retry-After 1 s", err, wait, ok)
	}
	obj, err := client.Retrieve(ctx, "subscription", "sub_local_1")
	if err != nil || string(obj.JSON) != sub || time.Since(obj.ObservedAt) > time.Minute {
		t.Fatalf("second retrieve: %s at %s, %v", obj.JSON, obj.ObservedAt, err)
	}

	// THEN the request log holds both answers, oldest first.
	code, body := do(http.MethodGet, "/_dev/stripe/requests?path=/v1/subscriptions/sub_local_1", "")
	var reqs devstack.StripeRequests
	if err := json.Unmarshal([]byte(body), &reqs); code != http.StatusOK || err != nil {
		t.Fatalf("requests: %d %s %v", code, body, err)
	}
	if reqs.Count != 2 || reqs.Requests[0].Status != 429 || reqs.Requests[1].Status != 200 || reqs.Requests[0].Method != "GET" ||
		reqs.Requests[0].At.IsZero() || reqs.Addr != a.Addr() {
		t.Fatalf("requests %+v", reqs)
	}

	// A missing object, a deleted one and a wrong key are Stripe's answers too.
	if _, err := client.Retrieve(ctx, "subscription", "sub_local_missing"); !errors.Is(err, stripeapi.ErrNotFound) {
		t.Fatalf("missing object: %v", err)
	}
	if code, body := do(http.MethodDelete, "/_dev/stripe/objects/subscription/sub_local_1", ""); code != http.StatusOK {
		t.Fatalf("delete: %d %s", code, body)
	}
	if _, err := client.Retrieve(ctx, "subscription", "sub_local_1"); !errors.Is(err, stripeapi.ErrNotFound) {
		t.Fatalf("deleted object: %v", err)
	}
	stranger := *client
	stranger.Key = func(context.Context) (string, error) { return "rk_local_FAKE_wrong", nil }
	if _, err := stranger.Retrieve(ctx, "subscription", "sub_local_1"); !errors.Is(err, stripeapi.ErrAuth) {
		t.Fatalf("wrong key: %v", err)
	}
	if all := a.Requests(""); all.Count != 5 {
		t.Fatalf("%d requests in all, want 5: %+v", all.Count, all.Requests)
	}

	// Bad requests to the dev endpoints are refused and change nothing.
	for _, bad := range []struct{ method, path, body string }{
		{http.MethodPut, "/_dev/stripe/objects/customer/cus_1", `{"id":"cus_1","object":"customer"}`},
		{http.MethodPut, "/_dev/stripe/objects/subscription/sub_2", `{"id":"sub_3","object":"subscription"}`},
		{http.MethodPut, "/_dev/stripe/objects/subscription/sub_2", `{"id":"sub_2","object":"invoice"}`},
		{http.MethodPut, "/_dev/stripe/objects/subscription/sub_2", `not json`},
		{http.MethodPost, "/_dev/stripe/script", `{"path":"/v1/subscriptions/sub_2","then":[{"mode":"explode"}]}`},
		{http.MethodPost, "/_dev/stripe/script", `{"path":"/v1/subscriptions/sub_2","then":[]}`},
		{http.MethodPost, "/_dev/stripe/script", `{"path":"/subscriptions/sub_2","then":[{"mode":"hang"}]}`},
		{http.MethodPost, "/_dev/stripe/script", `{"path":"/v1/subscriptions/sub_2","then":[{"mode":"server_error","status":404}]}`},
		{http.MethodPost, "/_dev/stripe/script", `{"kind":"refund","then":[{"mode":"apply"}]}`},
	} {
		if code, body := do(bad.method, bad.path, bad.body); code != http.StatusBadRequest || !strings.Contains(body, "message") {
			t.Errorf("%s %s %s: %d %s, want 400", bad.method, bad.path, bad.body, code, body)
		}
	}
	if code, _ := do(http.MethodGet, "/_dev/stripe/nothing", ""); code != http.StatusNotFound {
		t.Errorf("unknown dev route: %d, want 404", code)
	}
	if _, err := client.Retrieve(ctx, "subscription", "sub_2"); !errors.Is(err, stripeapi.ErrNotFound) {
		t.Fatalf("a refused put stored sub_2: %v", err)
	}

	logged := logBuf.String()
	for _, want := range []string{"stripe-api   | put subscription sub_local_1 (status canceled)", "scripted /v1/subscriptions/sub_local_1: next rate_limited (Retry-After 1 s)",
		"GET /v1/subscriptions/sub_local_1 → 429", "GET /v1/subscriptions/sub_local_1 → 200"} {
		if !strings.Contains(logged, want) {
			t.Errorf("log lacks %q:\n%s", want, logged)
		}
	}
	if strings.Contains(logged, fakeStripeKey) {
		t.Errorf("the API key was logged:\n%s", logged)
	}
}

// TestStripeAPISourcesFollowTheFake: the checked-in stripe source reads
// thin events' objects from the fake at its default address with the local
// key; when the fake listens elsewhere (DEV_STRIPE_ADDR, AutoPorts) its
// api.url and a truth.url naming the default address follow it, and
// nothing else in the sources document changes.
func TestStripeAPISourcesFollowTheFake(t *testing.T) {
	f, _, err := devstack.LoadFile("../../../scripts/devstack.json")
	if err != nil {
		t.Fatal(err)
	}
	set, err := source.Parse(f.Sources)
	if err != nil {
		t.Fatal(err)
	}
	stripe, ok := set.Lookup("stripe")
	if !ok || stripe.API == nil || stripe.API.URL != "http://"+devstack.DefaultStripeAddr || stripe.API.Secret != "env:"+devstack.StripeKeyEnv {
		t.Fatalf("checked-in stripe source api: %+v", stripe.API)
	}
	if !strings.Contains(f.Secrets[devstack.StripeKeyEnv], "local_FAKE") {
		t.Fatalf("%s is %q, want a visibly fake key", devstack.StripeKeyEnv, f.Secrets[devstack.StripeKeyEnv])
	}

	a, err := devstack.NewStripeAPI("127.0.0.1:0", fakeStripeKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	moved, err := a.Sources(f.Sources)
	if err != nil {
		t.Fatal(err)
	}
	movedSet, err := source.Parse(moved)
	if err != nil {
		t.Fatalf("rewritten document no longer valid: %v\n%s", err, moved)
	}
	got, _ := movedSet.Lookup("stripe")
	if got.API == nil || got.API.URL != "http://"+a.Addr() || got.API.Secret != stripe.API.Secret || got.API.TimeoutSeconds != stripe.API.TimeoutSeconds {
		t.Fatalf("moved api %+v, want url http://%s", got.API, a.Addr())
	}
	if got.Delivery != stripe.Delivery || got.EventSource != stripe.EventSource || strings.Join(got.Secrets, ",") != strings.Join(stripe.Secrets, ",") {
		t.Fatalf("moved source %+v, was %+v", got, stripe)
	}
	if len(movedSet.Names()) != len(set.Names()) {
		t.Fatalf("sources %v, were %v", movedSet.Names(), set.Names())
	}

	// A truth naming the default address follows too; other hosts stay.
	doc := []byte(`{"sources":[
		{"name":"stripe","kind":"stripe","secrets":["env:S"],"api":{"secret":"env:K","url":"http://127.0.0.1:3003"},
		 "truth":{"kind":"stripe","secret":"env:K","url":"http://127.0.0.1:3003"}},
		{"name":"other","kind":"stripe","secrets":["env:S"],"api":{"secret":"env:K","url":"http://127.0.0.1:3999"}}]}`)
	moved, err = a.Sources(doc)
	if err != nil {
		t.Fatal(err)
	}
	movedSet, err = source.Parse(moved)
	if err != nil {
		t.Fatal(err)
	}
	one, _ := movedSet.Lookup("stripe")
	other, _ := movedSet.Lookup("other")
	if one.API.URL != "http://"+a.Addr() || one.Truth == nil || one.Truth.URL != "http://"+a.Addr() || other.API.URL != "http://127.0.0.1:3999" {
		t.Fatalf("api %+v truth %+v other %+v", one.API, one.Truth, other.API)
	}
	// Nothing to move: the document comes back byte for byte.
	plain := []byte(`{"sources":[{"name":"github","kind":"github","secrets":["env:G"]}]}`)
	if same, err := a.Sources(plain); err != nil || !bytes.Equal(same, plain) {
		t.Fatalf("%s, %v", same, err)
	}
}

func TestFromEnvStripeAddr(t *testing.T) {
	c, err := devstack.FromEnv(func(k string) string {
		return map[string]string{"DEV_STRIPE_ADDR": "127.0.0.1:7400"}[k]
	})
	if err != nil || c.StripeAddr != "127.0.0.1:7400" {
		t.Fatalf("%+v %v", c, err)
	}
}
