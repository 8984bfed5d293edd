package stripefake_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/stripefake"
)

const key = "rk_test_FAKE_stripefake_0000"

// t0 is Stripe's clock in these tests.
var t0 = time.Date(2025, 3, 31, 12, 0, 0, 0, time.UTC)

func newServer(t *testing.T) (*stripefake.Server, *httptest.Server) {
	t.Helper()
	fake := stripefake.New(key)
	fake.Now = func() time.Time { return t0 }
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Cleanup(fake.ReleaseHangs) // never leave a handler blocked behind Close
	return fake, srv
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// stripeError is the body of every Stripe error.
type stripeError struct {
	Error struct {
		Type    string `json:"type"`
		Code    string `json:"code"`
		Param   string `json:"param"`
		Message string `json:"message"`
	} `json:"error"`
}

func (r response) err(t *testing.T) stripeError {
	t.Helper()
	var e stripeError
	if err := json.Unmarshal(r.body, &e); err != nil || e.Error.Type == "" || e.Error.Message == "" {
		t.Fatalf("not a Stripe error (%v): %s", err, r.body)
	}
	return e
}

func get(t *testing.T, srv *httptest.Server, path string) response {
	t.Helper()
	return do(t, srv, http.MethodGet, path, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+key) })
}

func do(t *testing.T, srv *httptest.Server, method, path string, auth func(*http.Request)) response {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != nil {
		auth(req)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: body}
}

func mustPut(t *testing.T, f *stripefake.Server, objType, id, body string) {
	t.Helper()
	if err := f.PutObject(objType, id, []byte(body)); err != nil {
		t.Fatal(err)
	}
}

func TestAuthentication(t *testing.T) {
	fake, srv := newServer(t)
	mustPut(t, fake, "subscription", "sub_1", `{"id":"sub_1","object":"subscription"}`)
	tests := []struct {
		name   string
		auth   func(*http.Request)
		path   string
		status int
	}{
		{"bearer key", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+key) }, "/v1/subscriptions/sub_1", 200},
		{"basic auth, key as user", func(r *http.Request) { r.SetBasicAuth(key, "") }, "/v1/subscriptions/sub_1", 200},
		{"no authorization", nil, "/v1/subscriptions/sub_1", 401},
		{"wrong bearer key", func(r *http.Request) { r.Header.Set("Authorization", "Bearer rk_test_FAKE_wrong_key_1234") }, "/v1/subscriptions/sub_1", 401},
		{"key without Bearer", func(r *http.Request) { r.Header.Set("Authorization", key) }, "/v1/subscriptions/sub_1", 401},
		{"basic auth, wrong user", func(r *http.Request) { r.SetBasicAuth("rk_test_FAKE_wrong_key_1234", "") }, "/v1/subscriptions/sub_1", 401},
		{"basic auth, key as password only", func(r *http.Request) { r.SetBasicAuth("", key) }, "/v1/subscriptions/sub_1", 401},
		{"authentication before routing", nil, "/v1/nothing_here", 401},
		{"authentication before scripts", nil, "/v1/events", 401},
	}
	fake.Script("/v1/events", stripefake.ServerError(500))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := do(t, srv, http.MethodGet, tt.path, tt.auth)
			if res.status != tt.status {
				t.Fatalf("status %d, want %d: %s", res.status, tt.status, res.body)
			}
			if tt.status != 401 {
				return
			}
			e := res.err(t)
			if e.Error.Type != "invalid_request_error" {
				t.Fatalf("type %q", e.Error.Type)
			}
			if strings.Contains(e.Error.Message, "wrong_key_1234") || strings.Contains(e.Error.Message, key) {
				t.Fatalf("the answer echoes a key: %q", e.Error.Message)
			}
		})
	}
	// The scripted 500 was not consumed by the unauthenticated request.
	if res := get(t, srv, "/v1/events"); res.status != 500 {
		t.Fatalf("scripted answer after authentication: %d %s", res.status, res.body)
	}
}

func TestObjects(t *testing.T) {
	fake, srv := newServer(t)
	// Whitespace and key order are kept: the body is served as put.
	objects := []struct{ objType, id, path, body string }{
		{"subscription", "sub_1", "/v1/subscriptions/sub_1", `{"id":"sub_1", "object":"subscription","status":"active"}`},
		{"invoice", "in_1", "/v1/invoices/in_1", "{\n  \"object\": \"invoice\",\n  \"id\": \"in_1\"\n}"},
		{"payment_intent", "pi_1", "/v1/payment_intents/pi_1", `{"id":"pi_1","object":"payment_intent","amount":1000}`},
	}
	for _, o := range objects {
		mustPut(t, fake, o.objType, o.id, o.body)
	}
	for _, o := range objects {
		t.Run(o.objType, func(t *testing.T) {
			res := get(t, srv, o.path)
			if res.status != 200 || string(res.body) != o.body {
				t.Fatalf("GET %s: %d %q", o.path, res.status, res.body)
			}
			if ct := res.header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q", ct)
			}
			if !strings.HasPrefix(res.header.Get("Request-Id"), "req_") {
				t.Fatalf("Request-Id %q", res.header.Get("Request-Id"))
			}

			missing := get(t, srv, strings.Replace(o.path, o.id, o.id+"_missing", 1))
			e := missing.err(t)
			if missing.status != 404 || e.Error.Type != "invalid_request_error" || e.Error.Code != "resource_missing" ||
				e.Error.Message != fmt.Sprintf("No such %s: '%s_missing'", o.objType, o.id) || e.Error.Param != "id" {
				t.Fatalf("unknown id: %d %s", missing.status, missing.body)
			}

			if err := fake.DeleteObject(o.objType, o.id); err != nil {
				t.Fatal(err)
			}
			if res := get(t, srv, o.path); res.status != 404 || res.err(t).Error.Code != "resource_missing" {
				t.Fatalf("deleted: %d %s", res.status, res.body)
			}
		})
	}

	mustPut(t, fake, "subscription", "sub_1", `{"id":"sub_1","object":"subscription","status":"active"}`)
	mustPut(t, fake, "subscription", "sub_1", `{"id":"sub_1","object":"subscription","status":"canceled"}`)
	if res := get(t, srv, "/v1/subscriptions/sub_1"); !strings.Contains(string(res.body), `"canceled"`) {
		t.Fatalf("replaced object: %s", res.body)
	}
	if a, b := get(t, srv, "/v1/subscriptions/sub_1"), get(t, srv, "/v1/subscriptions/sub_1"); a.header.Get("Request-Id") == b.header.Get("Request-Id") {
		t.Fatalf("two requests share the Request-Id %q", a.header.Get("Request-Id"))
	}

	if err := fake.PutObject("customer", "cus_1", []byte(`{}`)); !errors.Is(err, stripefake.ErrUnknownType) {
		t.Fatalf("unknown type: %v", err)
	}
	if err := fake.DeleteObject("customer", "cus_1"); !errors.Is(err, stripefake.ErrUnknownType) {
		t.Fatalf("unknown type: %v", err)
	}
	if err := fake.PutObject("invoice", "in_1", []byte(`{"id":`)); !errors.Is(err, stripefake.ErrInvalidJSON) {
		t.Fatalf("invalid JSON: %v", err)
	}
}

func TestUnrecognizedURL(t *testing.T) {
	fake, srv := newServer(t)
	mustPut(t, fake, "subscription", "sub_1", `{"id":"sub_1","object":"subscription"}`)
	for _, tt := range []struct{ method, path string }{
		{"GET", "/v1/customers/cus_1"},
		{"GET", "/v1/subscriptions"},
		{"GET", "/v1/subscriptions/"},
		{"GET", "/v1/subscriptions/sub_1/items"},
		{"GET", "/v2/core/events"},
		{"GET", "/"},
		{"POST", "/v1/subscriptions/sub_1"},
		{"DELETE", "/v1/subscriptions/sub_1"},
	} {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			res := do(t, srv, tt.method, tt.path, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+key) })
			e := res.err(t)
			want := fmt.Sprintf("Unrecognized request URL (%s: %s)", tt.method, tt.path)
			if res.status != 404 || e.Error.Type != "invalid_request_error" || !strings.HasPrefix(e.Error.Message, want) {
				t.Fatalf("%d %s", res.status, res.body)
			}
		})
	}
}

// ev is an event's raw JSON, with irregular spacing to prove it is served
// byte for byte.
func ev(id, typ string, created int64) string {
	return fmt.Sprintf(`{"id":%q,  "object":"event","type":%q,"created":%d,"data":{"object":{"id":"sub_x"}}}`, id, typ, created)
}

type eventPage struct {
	Object  string            `json:"object"`
	URL     string            `json:"url"`
	HasMore bool              `json:"has_more"`
	Data    []json.RawMessage `json:"data"`
}

func listEvents(t *testing.T, srv *httptest.Server, query string) (eventPage, []string) {
	t.Helper()
	res := get(t, srv, "/v1/events?"+query)
	if res.status != 200 {
		t.Fatalf("GET /v1/events?%s: %d %s", query, res.status, res.body)
	}
	var page eventPage
	if err := json.Unmarshal(res.body, &page); err != nil {
		t.Fatal(err)
	}
	if page.Object != "list" || page.URL != "/v1/events" {
		t.Fatalf("list shape: %s", res.body)
	}
	var ids []string
	for _, raw := range page.Data {
		var e struct{ ID string }
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.ID)
	}
	return page, ids
}

// events is a small history: evt_3 and evt_4 share a created second
// (evt_4 was added later, so it lists first).
func addEvents(t *testing.T, fake *stripefake.Server) map[string]string {
	t.Helper()
	raws := map[string]string{}
	for _, e := range []struct {
		id, typ   string
		created   int64
		delivered bool
	}{
		{"evt_1", "customer.subscription.created", 100, true},
		{"evt_2", "invoice.paid", 200, false},
		{"evt_3", "customer.subscription.updated", 300, false},
		{"evt_4", "invoice.payment_failed", 300, true},
		{"evt_5", "customer.subscription.deleted", 400, false},
		{"evt_6", "payment_intent.succeeded", 500, true},
	} {
		raws[e.id] = ev(e.id, e.typ, e.created)
		if err := fake.AddEvent([]byte(raws[e.id]), e.delivered); err != nil {
			t.Fatal(err)
		}
	}
	return raws
}

func TestEventsPagination(t *testing.T) {
	fake, srv := newServer(t)
	raws := addEvents(t, fake)
	want := []string{"evt_6", "evt_5", "evt_4", "evt_3", "evt_2", "evt_1"}

	for _, tt := range []struct {
		name     string
		pageSize int
		limit    string
		perPage  int
	}{
		{"page size 1", 1, "", 1},
		{"limit 4", 0, "limit=4", 4},
		{"page size 2 under limit 100", 2, "limit=100", 2},
		{"default limit", 0, "", 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fake.PageSize = tt.pageSize // no request in flight: safe to change
			var got []string
			after := ""
			for pages := 1; ; pages++ {
				q := url.Values{}
				if after != "" {
					q.Set("starting_after", after)
				}
				query := strings.Trim(tt.limit+"&"+q.Encode(), "&")
				page, ids := listEvents(t, srv, query)
				if len(ids) > tt.perPage || pages > len(want) {
					t.Fatalf("page %d has %d events", pages, len(ids))
				}
				for i, raw := range page.Data {
					if string(raw) != raws[ids[i]] {
						t.Fatalf("event %s not served as added: %s", ids[i], raw)
					}
				}
				got = append(got, ids...)
				if !page.HasMore {
					break
				}
				after = ids[len(ids)-1]
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("walked %v, want %v", got, want)
			}
		})
	}
	fake.PageSize = 0

	// ending_before: the page just newer than the cursor, newest first.
	page, ids := listEvents(t, srv, "ending_before=evt_2&limit=2")
	if strings.Join(ids, ",") != "evt_4,evt_3" || !page.HasMore {
		t.Fatalf("ending_before: %v has_more=%t", ids, page.HasMore)
	}
	page, ids = listEvents(t, srv, "ending_before=evt_4&limit=2")
	if strings.Join(ids, ",") != "evt_6,evt_5" || page.HasMore {
		t.Fatalf("ending_before: %v has_more=%t", ids, page.HasMore)
	}

	res := get(t, srv, "/v1/events/evt_3")
	if res.status != 200 || string(res.body) != raws["evt_3"] {
		t.Fatalf("retrieve event: %d %s", res.status, res.body)
	}
	if res := get(t, srv, "/v1/events/evt_404"); res.status != 404 || res.err(t).Error.Code != "resource_missing" {
		t.Fatalf("retrieve unknown event: %d %s", res.status, res.body)
	}
}

func TestEventsFilters(t *testing.T) {
	fake, srv := newServer(t)
	addEvents(t, fake)
	tests := []struct {
		query string
		want  string
	}{
		{"", "evt_6,evt_5,evt_4,evt_3,evt_2,evt_1"},
		{"created[gt]=300", "evt_6,evt_5"},
		{"created[gte]=300", "evt_6,evt_5,evt_4,evt_3"},
		{"created[lt]=300", "evt_2,evt_1"},
		{"created[lte]=300", "evt_4,evt_3,evt_2,evt_1"},
		{"created[gt]=100&created[lt]=400", "evt_4,evt_3,evt_2"},
		{"created=300", "evt_4,evt_3"},
		{"delivery_success=false", "evt_5,evt_3,evt_2"},
		{"delivery_success=true", "evt_6,evt_4,evt_1"},
		{"type=invoice.paid", "evt_2"},
		{"type=customer.subscription.*", "evt_5,evt_3,evt_1"},
		{"types[0]=invoice.paid&types[1]=customer.subscription.deleted", "evt_5,evt_2"},
		{"types[]=invoice.paid&types[]=payment_intent.succeeded", "evt_6,evt_2"},
		{"delivery_success=false&created[gt]=200&types[0]=customer.subscription.updated", "evt_3"},
		{"delivery_success=false&starting_after=evt_4", "evt_3,evt_2"},
		{"delivery_success=false&starting_after=evt_5&limit=1", "evt_3"},
		{"created[gt]=1000", ""},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			_, ids := listEvents(t, srv, tt.query)
			if got := strings.Join(ids, ","); got != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
		})
	}

	bad := []struct{ query, code, param string }{
		{"limit=0", "parameter_invalid_integer", "limit"},
		{"limit=101", "parameter_invalid_integer", "limit"},
		{"limit=ten", "parameter_invalid_integer", "limit"},
		{"created[gt]=yesterday", "parameter_invalid_integer", "created[gt]"},
		{"delivery_success=maybe", "parameter_invalid", "delivery_success"},
		{"delivery_success=1", "parameter_invalid", "delivery_success"},
		{"colour=blue", "parameter_unknown", "colour"},
		{"starting_after=evt_404", "resource_missing", "starting_after"},
		{"starting_after=evt_1&ending_before=evt_2", "parameter_invalid", "ending_before"},
	}
	for _, tt := range bad {
		t.Run("bad "+tt.query, func(t *testing.T) {
			res := get(t, srv, "/v1/events?"+tt.query)
			e := res.err(t)
			if res.status != 400 || e.Error.Type != "invalid_request_error" || e.Error.Code != tt.code || e.Error.Param != tt.param {
				t.Fatalf("%d %s", res.status, res.body)
			}
		})
	}

	if err := fake.SetDelivered("evt_5", true); err != nil {
		t.Fatal(err)
	}
	if _, ids := listEvents(t, srv, "delivery_success=false"); strings.Join(ids, ",") != "evt_3,evt_2" {
		t.Fatalf("after SetDelivered: %v", ids)
	}
	if err := fake.SetDelivered("evt_404", true); !errors.Is(err, stripefake.ErrNoSuchEvent) {
		t.Fatalf("SetDelivered unknown: %v", err)
	}
	for _, tt := range []struct {
		raw  string
		want error
	}{
		{ev("evt_1", "invoice.paid", 1), stripefake.ErrDuplicateEvent},
		{`{"id":"evt_x","type":"invoice.paid"}`, stripefake.ErrInvalidEvent},
		{`{"id":"evt_x","created":1}`, stripefake.ErrInvalidEvent},
		{`{"type":"invoice.paid","created":1}`, stripefake.ErrInvalidEvent},
		{`{"id":"evt_x","type":"invoice.paid","created":"1"}`, stripefake.ErrInvalidEvent},
		{`not json`, stripefake.ErrInvalidJSON},
	} {
		if err := fake.AddEvent([]byte(tt.raw), false); !errors.Is(err, tt.want) {
			t.Fatalf("AddEvent(%s): %v, want %v", tt.raw, err, tt.want)
		}
	}
}

func TestScriptedFailures(t *testing.T) {
	fake, srv := newServer(t)
	mustPut(t, fake, "subscription", "sub_1", `{"id":"sub_1","object":"subscription"}`)
	mustPut(t, fake, "invoice", "in_1", `{"id":"in_1","object":"invoice"}`)
	const sub, inv = "/v1/subscriptions/sub_1", "/v1/invoices/in_1"

	fake.Script("/v1/subscriptions/", stripefake.RateLimited(3*time.Second), stripefake.Apply(), stripefake.ServerError(503), stripefake.LockTimeout(),
		stripefake.RateLimited(0), stripefake.Fail(403, "invalid_request_error", "", "The provided key does not have the required permissions"))
	fake.Script("", stripefake.ServerError(500)) // any path, when no longer prefix has an answer

	steps := []struct {
		path            string
		status          int
		errType, code   string
		retryAfter, rlr string
	}{
		{sub, 429, "invalid_request_error", "rate_limit", "3", "global-rate"},
		{inv, 500, "api_error", "", "", ""}, // the "" script; the subscriptions one is longer but does not match
		{sub, 200, "", "", "", ""},          // Apply
		{inv, 200, "", "", "", ""},          // the "" script is used up
		{sub, 503, "api_error", "", "", ""},
		{sub, 429, "invalid_request_error", "lock_timeout", "", ""},
		{sub, 429, "invalid_request_error", "rate_limit", "", "global-rate"}, // no Retry-After unless asked
		{sub, 403, "invalid_request_error", "", "", ""},
		{sub, 200, "", "", "", ""}, // script used up: normal behaviour
	}
	for i, st := range steps {
		res := get(t, srv, st.path)
		if res.status != st.status {
			t.Fatalf("step %d %s: %d, want %d: %s", i, st.path, res.status, st.status, res.body)
		}
		if res.header.Get("Date") == "" || res.header.Get("Request-Id") == "" || res.header.Get("Content-Type") != "application/json" {
			t.Fatalf("step %d headers %v", i, res.header)
		}
		if got := res.header.Get("Retry-After"); got != st.retryAfter {
			t.Fatalf("step %d Retry-After %q, want %q", i, got, st.retryAfter)
		}
		if got := res.header.Get("Stripe-Rate-Limited-Reason"); got != st.rlr {
			t.Fatalf("step %d Stripe-Rate-Limited-Reason %q, want %q", i, got, st.rlr)
		}
		if st.status == 200 {
			continue
		}
		if e := res.err(t); e.Error.Type != st.errType || e.Error.Code != st.code {
			t.Fatalf("step %d error %+v", i, e)
		}
	}

	// Retry-After is whole seconds, rounded up.
	fake.Script(sub, stripefake.RateLimited(1500*time.Millisecond))
	if res := get(t, srv, sub); res.header.Get("Retry-After") != "2" {
		t.Fatalf("Retry-After %q", res.header.Get("Retry-After"))
	}

	var statuses []int
	for _, r := range fake.Requests() {
		if r.Path == sub {
			statuses = append(statuses, r.Status)
		}
	}
	if fmt.Sprint(statuses) != "[429 200 503 429 429 403 200 429]" || fake.Count(sub) != 8 || fake.Count(inv) != 2 || fake.Count("/v1/invoices/") != 0 {
		t.Fatalf("recorded %v, counts %d %d", statuses, fake.Count(sub), fake.Count(inv))
	}
}

func TestHang(t *testing.T) {
	fake, srv := newServer(t)
	mustPut(t, fake, "payment_intent", "pi_1", `{"id":"pi_1","object":"payment_intent"}`)
	const path = "/v1/payment_intents/pi_1"
	fake.Script(path, stripefake.Hang(), stripefake.Hang())

	// The client gives up: its timeout ends the request, not the fake.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	start := time.Now()
	_, err := srv.Client().Do(req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung request: %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("the client's deadline was not honoured")
	}

	// The second hang is released: answered normally.
	done := make(chan response, 1)
	go func() { done <- get(t, srv, path) }()
	waitFor(t, func() bool { return fake.Count(path) == 2 })
	select {
	case res := <-done:
		t.Fatalf("answered before release: %d", res.status)
	case <-time.After(20 * time.Millisecond):
	}
	fake.ReleaseHangs()
	if res := <-done; res.status != 200 {
		t.Fatalf("released: %d %s", res.status, res.body)
	}
	waitFor(t, func() bool { return fake.Requests()[0].Status == 0 && fake.Requests()[1].Status == 200 })
	if res := get(t, srv, path); res.status != 200 {
		t.Fatalf("after the script: %d", res.status)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestDateAndRequestsFromClock(t *testing.T) {
	fake, srv := newServer(t)
	now := t0
	var mu sync.Mutex
	fake.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }

	for _, path := range []string{"/v1/events?limit=3&delivery_success=false", "/v1/subscriptions/sub_404", "/v1/unknown"} {
		res := get(t, srv, path)
		if res.header.Get("Date") != "Mon, 31 Mar 2025 12:00:00 GMT" {
			t.Fatalf("%s: Date %q", path, res.header.Get("Date"))
		}
	}
	mu.Lock()
	now = now.Add(90 * time.Second)
	mu.Unlock()
	res := do(t, srv, http.MethodGet, "/v1/events", nil)
	if d, err := http.ParseTime(res.header.Get("Date")); err != nil || !d.Equal(t0.Add(90*time.Second)) {
		t.Fatalf("Date %q after the clock moved", res.header.Get("Date"))
	}

	reqs := fake.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests", len(reqs))
	}
	first := reqs[0]
	if first.Method != "GET" || first.Path != "/v1/events" || first.Query.Get("delivery_success") != "false" ||
		first.RawQuery != "limit=3&delivery_success=false" || !first.Time.Equal(t0) || first.Status != 200 {
		t.Fatalf("first request %+v", first)
	}
	if reqs[1].Status != 404 || reqs[2].Status != 404 || reqs[3].Status != 401 || !reqs[3].Time.Equal(t0.Add(90*time.Second)) {
		t.Fatalf("requests %+v", reqs)
	}
	reqs[0].Query.Set("limit", "99") // a copy: the record does not change
	if fake.Requests()[0].Query.Get("limit") != "3" {
		t.Fatal("Requests shares its query maps")
	}
}

// Many clients at once, while the state changes: run with -race.
func TestConcurrentUse(t *testing.T) {
	fake, srv := newServer(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 20 {
				id := fmt.Sprintf("sub_%d_%d", i, j)
				mustPut(t, fake, "subscription", id, `{"object":"subscription"}`)
				if err := fake.AddEvent([]byte(ev("evt_"+id, "customer.subscription.updated", int64(j))), j%2 == 0); err != nil {
					t.Error(err)
				}
				fake.Script("/v1/events/evt_"+id, stripefake.ServerError(500))
				if res := get(t, srv, "/v1/subscriptions/"+id); res.status != 200 {
					t.Errorf("%s: %d", id, res.status)
				}
				if res := get(t, srv, "/v1/events/evt_"+id); res.status != 500 {
					t.Errorf("scripted %s: %d", id, res.status)
				}
				listEvents(t, srv, "limit=5&delivery_success=true")
				_ = fake.Requests()
			}
		})
	}
	wg.Wait()
	if n := len(fake.Requests()); n != 8*20*3 {
		t.Fatalf("%d requests recorded", n)
	}
}
