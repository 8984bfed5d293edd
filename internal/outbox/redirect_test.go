package outbox_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
)

// elsewhere records what reaches a server the configuration never named.
type elsewhere struct {
	mu    sync.Mutex
	calls []string // "METHOD auth=<header> body=<body>"
}

func (s *elsewhere) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.calls = append(s.calls, r.Method+" auth="+r.Header.Get("Authorization")+" body="+string(b))
	s.mu.Unlock()
	_, _ = w.Write([]byte(`{"ok":true}`))
}

// An attack on the effect: the configured URL answers a
// redirect. Whatever the code, the dispatcher does not follow it (the
// other server receives neither the bearer token nor the refund body), and
// the intent is QUARANTINED with redirect_refused naming the Location,
// never SUCCEEDED.
func TestEffectNeverFollowsRedirects(t *testing.T) {
	for _, code := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusFound, http.StatusSeeOther, http.StatusMovedPermanently} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			e := setup(t)
			other := &elsewhere{}
			target := httptest.NewServer(other) // another port of the same host (a login page answering 200)
			t.Cleanup(target.Close)
			redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, target.URL+"/login", code)
			}))
			t.Cleanup(redirector.Close)
			e.Eff.URL = redirector.URL
			o := e.dispatch(t, ledger.IntentStatusQuarantined)
			in, err := e.L.GetIntentState(context.Background(), op)
			if err != nil || !o.Called || in.ErrorCode != "redirect_refused" || !strings.Contains(in.Detail, target.URL+"/login") {
				t.Fatalf("outcome %+v, intent %s %s: %s (%v)", o, in.Status, in.ErrorCode, in.Detail, err)
			}
			if len(other.calls) != 0 {
				t.Fatalf("the redirect target received %v", other.calls)
			}
		})
	}
}

// An https effect redirected to plain http: nothing is sent in clear text.
func TestEffectHTTPSRedirectToHTTPSendsNothing(t *testing.T) {
	e := setup(t)
	other := &elsewhere{}
	plain := httptest.NewServer(other)
	t.Cleanup(plain.Close)
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, plain.URL+"/refunds", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(tlsSrv.Close)
	client := tlsSrv.Client()
	client.Timeout = e.Eff.Client.Timeout
	e.Eff.URL, e.Eff.Client = tlsSrv.URL, client
	e.dispatch(t, ledger.IntentStatusQuarantined)
	if len(other.calls) != 0 {
		t.Fatalf("sent in clear text: %v", other.calls)
	}
}

// The status lookup is held to the same rule: a redirected lookup is an
// error (the intent stays uncertain), never an answer from another host.
func TestStatusLookupNeverFollowsRedirects(t *testing.T) {
	other := &elsewhere{}
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		other.ServeHTTP(w, r)
	}))
	t.Cleanup(target.Close)
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/status?key=x", http.StatusFound)
	}))
	t.Cleanup(redirector.Close)
	eff := &outbox.HTTPEffect{Name: kind, URL: redirector.URL, StatusURL: redirector.URL + "/status", Secret: "tok_test_FAKE"}
	if _, _, err := eff.Lookup(context.Background(), "op_1"); err == nil || !strings.Contains(err.Error(), "redirect") {
		t.Fatalf("lookup: %v", err)
	}
	if _, _, err := eff.SubjectVersion(context.Background(), "stripe", "acct_1"); err == nil || !strings.Contains(err.Error(), "redirect") {
		t.Fatalf("subject version: %v", err)
	}
	if len(other.calls) != 0 {
		t.Fatalf("the redirect target received %v", other.calls)
	}
}

// A Retry-After too large for time.Duration is bounded, not wrapped.
func TestRetryAfterIsBounded(t *testing.T) {
	for _, v := range []string{"99999999999", "9300000000", "Fri, 31 Dec 9999 23:59:59 GMT"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", v)
			w.WriteHeader(http.StatusTooManyRequests)
		}))
		eff := &outbox.HTTPEffect{Name: kind, URL: srv.URL}
		_, err := eff.Do(context.Background(), outbox.Call{Key: "op_1", Kind: kind})
		srv.Close()
		var re *outbox.RetryableError
		if !errors.As(err, &re) || re.RetryAfter != outbox.MaxRetryAfter {
			t.Fatalf("Retry-After %q: %v", v, err)
		}
	}
}
