package processor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/projection"
	"github.com/effectively-once/webhooks/pkg/provider"
)

// A team's provider kind: acme's shop sends "order.changed" pings that
// name an order and carry nothing else; its API answers the order's
// current state.

const (
	acmeKind   = "acme-orders"
	acmeSecret = "acme_test_FAKE_webhook_token_0000"
	acmeAPIKey = "acme_test_FAKE_api_key_0000"
)

// acmeVerifier checks the shared token header and reads the event's id,
// type and order from its body.
type acmeVerifier struct{}

func (acmeVerifier) Verify(_ context.Context, req provider.Request, cfg provider.Config) (provider.Verified, error) {
	if tok := req.Header("x-acme-token"); tok == "" {
		return provider.Verified{}, provider.ErrNotSigned
	} else if len(cfg.Secrets) == 0 || tok != cfg.Secrets[0] {
		return provider.Verified{}, provider.ErrBadSignature
	}
	var ev struct{ ID, Type, Order string }
	if err := json.Unmarshal(req.Body, &ev); err != nil || ev.ID == "" {
		return provider.Verified{Unidentified: "no event id"}, nil
	}
	return provider.Verified{Events: []provider.Identity{{EventID: ev.ID, Type: ev.Type, Subject: ev.Order}}}, nil
}

func newAcmeVerifier(map[string]string) (provider.Verifier, error) { return acmeVerifier{}, nil }

// orderResolver is the team's resolver: it fetches the order an
// "order.changed" ping names from the shop's API (the source's api: its
// URL and key), and resolves the ping to an "order.snapshot" of it.
type orderResolver struct {
	api    projection.SourceAPI
	secret func(ctx context.Context, ref string) (string, error)
}

func newOrderResolver(src projection.ResolverSource) (projection.Resolver, error) {
	if src.API == nil {
		return nil, fmt.Errorf("source %s: the order resolver needs an api", src.Name)
	}
	return &orderResolver{api: *src.API, secret: src.Secret}, nil
}

func (r *orderResolver) Resolve(ctx context.Context, ev projection.Event) (projection.Resolved, error) {
	if ev.Type != "order.changed" {
		return projection.Resolved{}, projection.ErrNothingToResolve
	}
	var ping struct{ Order string }
	if err := json.Unmarshal(ev.Payload, &ping); err != nil || ping.Order == "" {
		return projection.Resolved{}, projection.Permanent("malformed", fmt.Errorf("order.changed without an order: %v", err))
	}
	if strings.HasSuffix(ping.Order, "-panic") {
		_ = strings.Split(ping.Order, "-")[2] // the team's bug: an id of another shape than it expects
	}
	key, err := r.secret(ctx, r.api.Secret)
	if err != nil {
		return projection.Resolved{}, projection.Retryable("shop_api_key", err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.api.Timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.api.URL+"/orders/"+ping.Order, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return projection.Resolved{}, projection.Retryable("shop_api_unavailable", err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return projection.Resolved{}, projection.Permanent("order_not_found", fmt.Errorf("the shop has no order %s", ping.Order))
	case resp.StatusCode != http.StatusOK:
		wait, _ := time.ParseDuration(resp.Header.Get("Retry-After") + "s")
		return projection.Resolved{}, projection.RetryAfter("shop_api_unavailable", fmt.Errorf("GET order %s: HTTP %d", ping.Order, resp.StatusCode), wait)
	}
	var body json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return projection.Resolved{}, projection.Retryable("shop_api_unavailable", err)
	}
	return projection.Resolved{Type: "order.snapshot", Payload: body, Note: "fetched order " + ping.Order + " from the shop API"}, nil
}

// orderSnapshots projects the fetched order.
type orderSnapshots struct{}

func (orderSnapshots) Name() string { return "order" }

func (orderSnapshots) Project(ev projection.Event) (projection.Result, error) {
	var o struct {
		ID       string
		Status   string
		Revision int64
	}
	if err := json.Unmarshal(ev.Payload, &o); err != nil {
		return projection.Result{}, projection.Permanent("malformed", err)
	}
	state := map[string]any{"status": o.Status}
	return projection.Result{Write: &projection.Write{Name: "order", Subject: o.ID, Version: o.Revision, Fingerprint: projection.Fingerprint(state), State: state}}, nil
}

// shopAPI serves the shop's orders: O-1 shipped; O-5 after one 503 with
// Retry-After: 2; any other is not found. It counts its requests and
// refuses any key but the source's.
type shopAPI struct {
	mu       sync.Mutex
	requests map[string]int
}

func (s *shopAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+acmeAPIKey {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	id := strings.TrimPrefix(r.URL.Path, "/orders/")
	s.mu.Lock()
	s.requests[id]++
	n := s.requests[id]
	s.mu.Unlock()
	switch {
	case id == "O-5" && n == 1:
		w.Header().Set("Retry-After", "2")
		http.Error(w, "busy", http.StatusServiceUnavailable)
	case id == "O-1", id == "O-5":
		fmt.Fprintf(w, `{"id":%q,"status":"shipped","revision":7}`, id)
	default:
		http.NotFound(w, r)
	}
}

func (s *shopAPI) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[id]
}

// A team's own resolver, for its own provider kind, through the real
// processor: the resolver is built from its source's api in SOURCES
// (URL, key reference read through the processor's secret store), a ping
// is projected from the fetched order (the audit says where it came
// from), a missing order is QUARANTINED with the team's code, a 503 waits
// in RETRY_WAIT at least its Retry-After and is then applied, an event
// the resolver has nothing to do with is projected as delivered, and a
// panic in the resolver is quarantined (resolver_panic) without costing
// the rest.
func TestATeamsResolverForItsOwnKind(t *testing.T) {
	if err := provider.Register(acmeKind, newAcmeVerifier); err != nil {
		t.Fatal(err)
	}
	api := &shopAPI{requests: map[string]int{}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	reg := projection.NewRegistry()
	reg.Register(acmeKind, []string{"order.snapshot"}, orderSnapshots{})
	h := pt.New(t, pt.Options{
		SourcesDoc: `{"sources":[{"name":"shop","kind":"` + acmeKind + `","secrets":["env:ACME_SECRET"],` +
			`"api":{"secret":"env:ACME_API_KEY","url":"` + srv.URL + `","timeout_seconds":2}}]}`,
		Secrets:   map[string]string{"ACME_SECRET": acmeSecret, "ACME_API_KEY": acmeAPIKey},
		Registry:  reg,
		Resolvers: map[string]projection.ResolverFactory{acmeKind: newOrderResolver},
		RetryCap:  3 * time.Second, MaxReceiveCount: 5,
	})
	deliver := func(id, typ, order string) {
		t.Helper()
		body := fmt.Appendf(nil, `{"id":%q,"type":%q,"order":%q}`, id, typ, order)
		if r := h.DeliverTo("shop", body, map[string]string{"x-acme-token": acmeSecret}); r.Status != 202 {
			t.Fatalf("deliver %s: %d %s", id, r.Status, r.Body)
		}
	}
	deliver("ev_1", "order.changed", "O-1")
	deliver("ev_missing", "order.changed", "O-404")
	deliver("ev_busy", "order.changed", "O-5")
	deliver("ev_note", "order.note_added", "O-1")
	deliver("ev_panic", "order.changed", "O-panic")
	w := h.NewWorker("w")
	w.PollOnce(t.Context())

	busy := h.EventOf("shop", "ev_busy")
	if busy.Status != ledger.StatusRetryWait || busy.ErrorCode != "shop_api_unavailable" || busy.NextAttemptAt.Sub(h.Clock.Now()) < 2*time.Second {
		t.Fatalf("after a 503: %s %q due in %s; want RETRY_WAIT shop_api_unavailable, not before the Retry-After (2 s)", busy.Status, busy.ErrorCode, busy.NextAttemptAt.Sub(h.Clock.Now()))
	}
	h.Drain(20*time.Second, time.Second, w)

	for _, id := range []string{"ev_1", "ev_busy"} {
		ev := h.EventOf("shop", id)
		if ev.Status != ledger.StatusProcessed || ev.Result.Outcome != ledger.OutcomeApplied {
			t.Fatalf("%s: %s %+v; want applied", id, ev.Status, ev.Result)
		}
		if last := ev.Audit[len(ev.Audit)-1]; !strings.Contains(last.Reason, "fetched order O-") {
			t.Errorf("%s: completion audit %q; want where the state came from", id, last.Reason)
		}
	}
	p, err := h.Ledger.GetProjection(t.Context(), projection.ScopedName("shop", "order"), "O-1")
	if err != nil || p.State["status"] != "shipped" || p.Version != 7 {
		t.Fatalf("projection %+v %v", p, err)
	}
	if ev := h.EventOf("shop", "ev_missing"); ev.Status != ledger.StatusQuarantined || ev.ErrorCode != "order_not_found" || ev.ErrorMessage != "the shop has no order O-404" {
		t.Errorf("ev_missing: %s %s %q; want QUARANTINED order_not_found", ev.Status, ev.ErrorCode, ev.ErrorMessage)
	}
	if ev := h.EventOf("shop", "ev_note"); ev.Status != ledger.StatusProcessed || ev.Result.Outcome != ledger.OutcomeIgnored {
		t.Errorf("ev_note: %s %+v; want projected as delivered (no projection: ignored)", ev.Status, ev.Result)
	}
	if ev := h.EventOf("shop", "ev_panic"); ev.Status != ledger.StatusQuarantined || ev.ErrorCode != projection.CodeResolverPanic ||
		!strings.Contains(ev.ErrorMessage, `the resolver of kind "acme-orders" panicked: runtime error: index out of range [2] with length 2`) {
		t.Errorf("ev_panic: %s %s %q; want QUARANTINED resolver_panic", ev.Status, ev.ErrorCode, ev.ErrorMessage)
	}
	if api.count("O-1") != 1 || api.count("O-5") != 2 || api.count("O-404") != 1 || api.count("O-panic") != 0 {
		t.Errorf("requests %v; want one per resolved ping, two for the retried one", api.requests)
	}
	if dead := h.Receive(h.Queues.DLQ); len(dead) != 0 {
		t.Errorf("%d messages on the dead-letter queue", len(dead))
	}
}
