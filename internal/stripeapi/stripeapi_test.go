package stripeapi_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/effectively-once/webhooks/internal/harness/stripefake"
	"github.com/effectively-once/webhooks/internal/stripeapi"
)

const key = "rk_test_FAKE_stripeapi_0000"

var (
	// stripeNow is Stripe's clock (the fake's Date header); localNow is ours,
	// deliberately different, to tell which one ObservedAt came from.
	stripeNow = time.Date(2025, 3, 31, 12, 0, 7, 0, time.UTC)
	localNow  = time.Date(2025, 3, 31, 12, 0, 9, 500, time.UTC)
)

type env struct {
	fake    *stripefake.Server
	client  *stripeapi.Client
	keyUses atomic.Int32
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{fake: stripefake.New(key)}
	e.fake.Now = func() time.Time { return stripeNow }
	srv := httptest.NewServer(e.fake)
	t.Cleanup(srv.Close)
	t.Cleanup(e.fake.ReleaseHangs)
	e.client = &stripeapi.Client{
		Key:     func(context.Context) (string, error) { e.keyUses.Add(1); return key, nil },
		Backend: stripeapi.NewBackend(srv.URL, srv.Client()),
		Timeout: 2 * time.Second,
		Now:     func() time.Time { return localNow },
	}
	return e
}

func (e *env) put(t *testing.T, objType, id, body string) {
	t.Helper()
	if err := e.fake.PutObject(objType, id, []byte(body)); err != nil {
		t.Fatal(err)
	}
}

// noKey fails the test if an error mentions the API key.
func noKey(t *testing.T, err error, keys ...string) {
	t.Helper()
	for _, k := range append(keys, key) {
		if k != "" && err != nil && strings.Contains(err.Error(), k) {
			t.Fatalf("error shows an API key: %v", err)
		}
	}
}

func TestRetrieve(t *testing.T) {
	e := newEnv(t)
	tests := []struct{ objType, id, path, body string }{
		{"subscription", "sub_1MowQVLkdIwHu7ixeRlqHVzs", "/v1/subscriptions/sub_1MowQVLkdIwHu7ixeRlqHVzs",
			`{"id":"sub_1MowQVLkdIwHu7ixeRlqHVzs","object":"subscription","status":"canceled", "items":{"object":"list","data":[]}}`},
		{"invoice", "in_1", "/v1/invoices/in_1", "{\n \"object\": \"invoice\",\n \"id\": \"in_1\",\n \"amount_due\": 1000\n}"},
		{"payment_intent", "pi_1", "/v1/payment_intents/pi_1", `{"id":"pi_1","object":"payment_intent","amount":1000,"status":"succeeded"}`},
	}
	for _, tt := range tests {
		t.Run(tt.objType, func(t *testing.T) {
			e.put(t, tt.objType, tt.id, tt.body)
			obj, err := e.client.Retrieve(context.Background(), tt.objType, tt.id)
			if err != nil {
				t.Fatal(err)
			}
			if obj.Type != tt.objType || obj.ID != tt.id || string(obj.JSON) != tt.body {
				t.Fatalf("object %+v", obj)
			}
			if !obj.ObservedAt.Equal(stripeNow) || obj.ObservedAt.Location() != time.UTC {
				t.Fatalf("ObservedAt %v, want Stripe's Date %v", obj.ObservedAt, stripeNow)
			}
			if !strings.HasPrefix(obj.RequestID, "req_") {
				t.Fatalf("RequestID %q", obj.RequestID)
			}
			if n := e.fake.Count(tt.path); n != 1 {
				t.Fatalf("%d requests to %s", n, tt.path)
			}
		})
	}
	if n := len(e.fake.Requests()); n != len(tests) {
		t.Fatalf("%d requests for %d retrieves", n, len(tests))
	}
}

func TestRetrieveErrors(t *testing.T) {
	const path = "/v1/subscriptions/sub_1"
	tests := []struct {
		name       string
		arrange    func(*testing.T, *env)
		key        string // "" means the right key
		want       error
		retryAfter time.Duration // -1: none
		mention    string
	}{
		{name: "unknown id", want: stripeapi.ErrNotFound, retryAfter: -1, mention: "HTTP 404 resource_missing"},
		{name: "rate limited with Retry-After", arrange: func(t *testing.T, e *env) { e.fake.Script(path, stripefake.RateLimited(7*time.Second)) },
			want: stripeapi.ErrUnavailable, retryAfter: 7 * time.Second, mention: "HTTP 429 rate_limit"},
		{name: "rate limited without Retry-After", arrange: func(t *testing.T, e *env) { e.fake.Script(path, stripefake.RateLimited(0)) },
			want: stripeapi.ErrUnavailable, retryAfter: -1, mention: "HTTP 429 rate_limit"},
		{name: "Retry-After capped", arrange: func(t *testing.T, e *env) { e.fake.Script(path, stripefake.RateLimited(3*time.Hour)) },
			want: stripeapi.ErrUnavailable, retryAfter: stripeapi.MaxRetryAfter},
		{name: "lock timeout", arrange: func(t *testing.T, e *env) { e.fake.Script(path, stripefake.LockTimeout()) },
			want: stripeapi.ErrUnavailable, retryAfter: -1, mention: "lock_timeout"},
		{name: "500", arrange: func(t *testing.T, e *env) { e.fake.Script(path, stripefake.ServerError(500)) },
			want: stripeapi.ErrUnavailable, retryAfter: -1, mention: "HTTP 500"},
		{name: "503", arrange: func(t *testing.T, e *env) { e.fake.Script(path, stripefake.ServerError(503)) },
			want: stripeapi.ErrUnavailable, retryAfter: -1, mention: "HTTP 503"},
		{name: "wrong key", key: "rk_test_FAKE_wrong_key_9999", want: stripeapi.ErrAuth, retryAfter: -1, mention: "HTTP 401"},
		{name: "key without the permission", arrange: func(t *testing.T, e *env) {
			e.fake.Script(path, stripefake.Fail(403, "invalid_request_error", "", "The provided key 'rk_test_****0000' does not have the required permissions for this endpoint"))
		}, want: stripeapi.ErrAuth, retryAfter: -1, mention: "HTTP 403"},
		{name: "other 4xx", arrange: func(t *testing.T, e *env) {
			e.fake.Script(path, stripefake.Fail(400, "invalid_request_error", "parameter_invalid", "Invalid id"))
		}, want: stripeapi.ErrInvalid, retryAfter: -1, mention: "HTTP 400 parameter_invalid"},
		{name: "another object answered", arrange: func(t *testing.T, e *env) {
			e.put(t, "subscription", "sub_1", `{"id":"sub_2","object":"subscription"}`)
		}, want: stripeapi.ErrInvalid, retryAfter: -1, mention: `"sub_2"`},
		{name: "another type answered", arrange: func(t *testing.T, e *env) {
			e.put(t, "subscription", "sub_1", `{"id":"sub_1","object":"invoice"}`)
		}, want: stripeapi.ErrInvalid, retryAfter: -1},
		{name: "JSON that is not an object", arrange: func(t *testing.T, e *env) {
			e.put(t, "subscription", "sub_1", `["sub_1"]`)
		}, want: stripeapi.ErrInvalid, retryAfter: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			if tt.arrange != nil {
				tt.arrange(t, e)
			}
			if tt.key != "" {
				e.client.Key = func(context.Context) (string, error) { return tt.key, nil }
			}
			obj, err := e.client.Retrieve(context.Background(), "subscription", "sub_1")
			if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v (object %+v)", err, tt.want, obj)
			}
			noKey(t, err, tt.key)
			if !strings.Contains(err.Error(), "subscription sub_1") || !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("error %q does not say what failed (%q)", err, tt.mention)
			}
			d, ok := stripeapi.RetryAfter(err)
			if tt.retryAfter < 0 && ok || tt.retryAfter >= 0 && (!ok || d != tt.retryAfter) {
				t.Fatalf("RetryAfter = %v %t, want %v", d, ok, tt.retryAfter)
			}
			if n := e.fake.Count(path); n != 1 {
				t.Fatalf("%d requests: the backend must not retry on its own", n)
			}
		})
	}
}

func TestRetrieveTimeout(t *testing.T) {
	e := newEnv(t)
	e.put(t, "payment_intent", "pi_1", `{"id":"pi_1","object":"payment_intent"}`)
	e.fake.Script("/v1/payment_intents/", stripefake.Hang())
	e.client.Timeout = 100 * time.Millisecond

	start := time.Now()
	_, err := e.client.Retrieve(context.Background(), "payment_intent", "pi_1")
	if !errors.Is(err, stripeapi.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung answer: %v", err)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Fatalf("Timeout not honoured: %v", elapsed)
	}
	noKey(t, err)
	if _, ok := stripeapi.RetryAfter(err); ok {
		t.Fatal("a timeout has no Retry-After")
	}

	// The caller's own cancellation: unavailable too, and says so.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.client.Retrieve(ctx, "payment_intent", "pi_1"); !errors.Is(err, stripeapi.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}

	// The hang was scripted once: the next retrieve is answered.
	if obj, err := e.client.Retrieve(context.Background(), "payment_intent", "pi_1"); err != nil || obj.ID != "pi_1" {
		t.Fatalf("after the hang: %+v %v", obj, err)
	}
}

// An object of a connected account is read in its context: RetrieveIn
// sends the Stripe-Context header (an account, or a path of them), and
// Retrieve sends none. A context that is not ids joined by "/" is refused
// before any request.
func TestRetrieveInAConnectedAccountsContext(t *testing.T) {
	e := newEnv(t)
	e.put(t, "subscription", "sub_1", `{"id":"sub_1","object":"subscription","status":"active"}`)
	for _, c := range []string{"acct_1TestFAKEMine", "acct_1TestFAKEMine/acct_1TestFAKERecipient", ""} {
		if _, err := e.client.RetrieveIn(context.Background(), c, "subscription", "sub_1"); err != nil {
			t.Fatalf("context %q: %v", c, err)
		}
	}
	if _, err := e.client.Retrieve(context.Background(), "subscription", "sub_1"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range e.fake.Requests() {
		got = append(got, r.Context)
	}
	if want := []string{"acct_1TestFAKEMine", "acct_1TestFAKEMine/acct_1TestFAKERecipient", "", ""}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("Stripe-Context headers %q, want %q", got, want)
	}
	n := len(e.fake.Requests())
	for _, bad := range []string{"acct_1\r\nX-Evil: 1", "acct_1/", "/acct_1", "acct_1//acct_2", "acct 1", strings.Repeat("acct_1/", 8) + "acct_1"} {
		if _, err := e.client.RetrieveIn(context.Background(), bad, "subscription", "sub_1"); !errors.Is(err, stripeapi.ErrInvalid) {
			t.Errorf("context %q: %v, want ErrInvalid", bad, err)
		}
	}
	if len(e.fake.Requests()) != n {
		t.Fatal("a refused context was sent")
	}
}

func TestRetrieveRefusesBeforeAnyRequest(t *testing.T) {
	tests := []struct {
		objType, id string
		want        error
	}{
		{"subscription", "", stripeapi.ErrInvalid},
		{"subscription", "../events", stripeapi.ErrInvalid},
		{"subscription", "sub_1/../../events", stripeapi.ErrInvalid},
		{"subscription", "sub_1?expand[]=customer", stripeapi.ErrInvalid},
		{"subscription", "sub_1#x", stripeapi.ErrInvalid},
		{"subscription", "sub%2F1", stripeapi.ErrInvalid},
		{"subscription", "sub 1", stripeapi.ErrInvalid},
		{"subscription", "sub-1", stripeapi.ErrInvalid},
		{"subscription", "süb_1", stripeapi.ErrInvalid},
		{"invoice", "in_1\n", stripeapi.ErrInvalid},
		{"payment_intent", strings.Repeat("a", 256), stripeapi.ErrInvalid},
		{"customer", "cus_1", stripeapi.ErrUnsupported},
		{"Subscription", "sub_1", stripeapi.ErrUnsupported},
		{"v1.billing.meter", "mtr_1", stripeapi.ErrUnsupported},
		{"", "sub_1", stripeapi.ErrUnsupported},
	}
	e := newEnv(t)
	for _, tt := range tests {
		t.Run(tt.objType+" "+tt.id, func(t *testing.T) {
			_, err := e.client.Retrieve(context.Background(), tt.objType, tt.id)
			if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			if len(err.Error()) > 200 {
				t.Fatalf("error quotes too much of its input: %d bytes", len(err.Error()))
			}
		})
	}
	if n := len(e.fake.Requests()); n != 0 || e.keyUses.Load() != 0 {
		t.Fatalf("%d requests sent, key asked %d times, for refused input", n, e.keyUses.Load())
	}

	// The longest id Stripe allows is asked for.
	long := strings.Repeat("a", 255)
	if _, err := e.client.Retrieve(context.Background(), "payment_intent", long); !errors.Is(err, stripeapi.ErrNotFound) {
		t.Fatalf("255-character id: %v", err)
	}
	if p, err := stripeapi.Path("payment_intent", "pi_1"); p != "/v1/payment_intents/pi_1" || err != nil {
		t.Fatalf("Path: %q %v", p, err)
	}
}

func TestKeySource(t *testing.T) {
	secretsDown := errors.New("secretsmanager: ThrottlingException")
	tests := []struct {
		name  string
		key   func(context.Context) (string, error)
		want  error
		cause error
	}{
		{"key source fails", func(context.Context) (string, error) { return "", secretsDown }, stripeapi.ErrUnavailable, secretsDown},
		{"no key source", nil, stripeapi.ErrAuth, nil},
		{"empty key", func(context.Context) (string, error) { return "", nil }, stripeapi.ErrAuth, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.put(t, "subscription", "sub_1", `{"id":"sub_1","object":"subscription"}`)
			e.client.Key = tt.key
			_, err := e.client.Retrieve(context.Background(), "subscription", "sub_1")
			if !errors.Is(err, tt.want) || tt.cause != nil && !errors.Is(err, tt.cause) {
				t.Fatalf("error %v, want %v wrapping %v", err, tt.want, tt.cause)
			}
			if n := len(e.fake.Requests()); n != 0 {
				t.Fatalf("%d requests sent without a key", n)
			}
		})
	}
}

// The following answers are ones the fake never gives (it always sends
// Date and JSON), so they come from small handlers of their own.
func serve(t *testing.T, h http.HandlerFunc) *stripeapi.Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &stripeapi.Client{
		Key:     func(context.Context) (string, error) { return key, nil },
		Backend: stripeapi.NewBackend(srv.URL, srv.Client()),
		Now:     func() time.Time { return localNow },
	}
}

func TestResponsesTheFakeDoesNotGive(t *testing.T) {
	t.Run("no Date header: ObservedAt from Now", func(t *testing.T) {
		c := serve(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Date"] = nil // keep net/http from adding one
			w.Write([]byte(`{"id":"in_1","object":"invoice"}`))
		})
		obj, err := c.Retrieve(context.Background(), "invoice", "in_1")
		if err != nil || !obj.ObservedAt.Equal(localNow) {
			t.Fatalf("%+v %v", obj, err)
		}
	})
	t.Run("Retry-After as an HTTP date, against the answer's Date", func(t *testing.T) {
		c := serve(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Date", stripeNow.Format(http.TimeFormat))
			w.Header().Set("Retry-After", stripeNow.Add(30*time.Second).Format(http.TimeFormat))
			w.WriteHeader(503)
			w.Write([]byte(`{"error":{"type":"api_error","message":"down"}}`))
		})
		_, err := c.Retrieve(context.Background(), "invoice", "in_1")
		if d, ok := stripeapi.RetryAfter(err); !errors.Is(err, stripeapi.ErrUnavailable) || !ok || d != 30*time.Second {
			t.Fatalf("%v: %v %t", err, d, ok)
		}
	})
	t.Run("2xx that is not JSON", func(t *testing.T) {
		c := serve(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`<html>maintenance</html>`)) })
		if _, err := c.Retrieve(context.Background(), "invoice", "in_1"); !errors.Is(err, stripeapi.ErrInvalid) {
			t.Fatalf("%v", err)
		}
	})
	t.Run("a proxy's 502 page", func(t *testing.T) {
		c := serve(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(502)
			w.Write([]byte(`<html>bad gateway</html>`))
		})
		if _, err := c.Retrieve(context.Background(), "invoice", "in_1"); !errors.Is(err, stripeapi.ErrUnavailable) {
			t.Fatalf("%v", err)
		}
	})
	t.Run("Stripe-Version", func(t *testing.T) {
		var got atomic.Value
		c := serve(t, func(w http.ResponseWriter, r *http.Request) {
			got.Store(r.Header.Get("Stripe-Version"))
			w.Write([]byte(`{"id":"in_1","object":"invoice"}`))
		})
		if _, err := c.Retrieve(context.Background(), "invoice", "in_1"); err != nil || got.Load() != stripe.APIVersion {
			t.Fatalf("default version %v, %v", got.Load(), err)
		}
		c.APIVersion = "2025-03-31.basil"
		if _, err := c.Retrieve(context.Background(), "invoice", "in_1"); err != nil || got.Load() != "2025-03-31.basil" {
			t.Fatalf("pinned version %v, %v", got.Load(), err)
		}
	})
}

// A redirect is not followed: nothing but the configured base URL ever
// receives the key.
func TestRedirectNotFollowed(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.Write([]byte(`{"id":"sub_1","object":"subscription"}`))
	}))
	defer other.Close()
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusFound)
	})
	_, err := c.Retrieve(context.Background(), "subscription", "sub_1")
	if !errors.Is(err, stripeapi.ErrUnavailable) || elsewhere.Load() != 0 {
		t.Fatalf("%v; %d requests reached the redirect target", err, elsewhere.Load())
	}
	noKey(t, err)
}
