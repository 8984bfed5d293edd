package outbox_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/downstream"
	"github.com/effectively-once/webhooks/internal/outbox"
)

func TestHTTPEffectClassification(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		header     map[string]string
		want       outbox.Class
		retryAfter time.Duration
		replayed   bool
	}{
		{"200", 200, nil, outbox.ClassOK, 0, false},
		{"201", 201, nil, outbox.ClassOK, 0, false},
		{"409 same key", 409, map[string]string{"Idempotency-Key": "k1"}, outbox.ClassOK, 0, true},
		{"409 other", 409, nil, outbox.ClassPermanent, 0, false},
		{"429 retry-after", 429, map[string]string{"Retry-After": "7"}, outbox.ClassRetryable, 7 * time.Second, false},
		{"503 retry-after", 503, map[string]string{"Retry-After": "3"}, outbox.ClassRetryable, 3 * time.Second, false},
		{"503 bare", 503, nil, outbox.ClassRetryable, 0, false},
		{"500", 500, nil, outbox.ClassRetryable, 0, false},
		{"502", 502, nil, outbox.ClassRetryable, 0, false},
		{"408", 408, nil, outbox.ClassRetryable, 0, false},
		{"400", 400, nil, outbox.ClassPermanent, 0, false},
		{"401", 401, nil, outbox.ClassPermanent, 0, false},
		{"404", 404, nil, outbox.ClassPermanent, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got http.Header
			var body []byte
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = r.Header.Clone()
				body, _ = io.ReadAll(r.Body)
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
			}))
			defer srv.Close()
			eff := &outbox.HTTPEffect{Name: "k", URL: srv.URL, Secret: "tok"}
			res, err := eff.Do(context.Background(), outbox.Call{Key: "k1", Kind: "k", Subject: "s", Payload: map[string]any{"a": 1}})
			class, ra := outbox.Classify(err)
			if class != tc.want || ra != tc.retryAfter || res.Replayed != tc.replayed {
				t.Fatalf("class %v retryAfter %s replayed %v err %v", class, ra, res.Replayed, err)
			}
			if got.Get("Idempotency-Key") != "k1" || got.Get("Authorization") != "Bearer tok" || got.Get("Content-Type") != "application/json" {
				t.Fatalf("headers %v", got)
			}
			if string(body) != `{"key":"k1","kind":"k","subject":"s","payload":{"a":1}}` {
				t.Fatalf("body %s", body)
			}
			if err != nil && strings.Contains(err.Error(), "tok") {
				t.Fatalf("secret leaked into error: %v", err)
			}
		})
	}
}

func TestHTTPEffectTransportErrors(t *testing.T) {
	t.Run("not sent is retryable", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		_, err := (&outbox.HTTPEffect{Name: "k", URL: url}).Do(context.Background(), outbox.Call{Key: "k1"})
		if c, _ := outbox.Classify(err); c != outbox.ClassRetryable {
			t.Fatalf("class %v: %v", c, err)
		}
	})
	t.Run("timeout after sending is uncertain", func(t *testing.T) {
		down := &downstream.Fake{}
		down.Then(downstream.Behavior{Mode: downstream.HangAfterApply})
		srv := httptest.NewServer(down)
		defer srv.Close()
		_, err := (&outbox.HTTPEffect{Name: "k", URL: srv.URL, Client: &http.Client{Timeout: 100 * time.Millisecond}}).Do(context.Background(), outbox.Call{Key: "k1"})
		if !errors.Is(err, outbox.ErrUncertain) {
			t.Fatalf("err %v", err)
		}
		if down.Effective("k1") != 1 {
			t.Fatalf("effective %d", down.Effective("k1"))
		}
	})
}

// The status endpoint answers for applied, unapplied and forgotten keys;
// the bearer token comes from Token (a rotating secret) on every request.
func TestHTTPEffectStatusLookup(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	down := &downstream.Fake{Window: time.Hour, Now: func() time.Time { return now }, Secret: "tok_test_FAKE"}
	srv := httptest.NewServer(down)
	defer srv.Close()
	eff := &outbox.HTTPEffect{Name: "k", URL: srv.URL, StatusURL: srv.URL + "/status",
		Token: func(context.Context) (string, error) { return "tok_test_FAKE", nil }}
	if applied, known, err := eff.Lookup(ctx, "op-1"); err != nil || applied || !known {
		t.Fatalf("before: applied=%v known=%v err=%v", applied, known, err)
	}
	if _, err := eff.Do(ctx, outbox.Call{Key: "op-1", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	if applied, known, err := eff.Lookup(ctx, "op-1"); err != nil || !applied || !known {
		t.Fatalf("after: applied=%v known=%v err=%v", applied, known, err)
	}
	now = now.Add(2 * time.Hour)
	if applied, known, err := eff.Lookup(ctx, "op-1"); err != nil || applied || known {
		t.Fatalf("past the window: applied=%v known=%v err=%v", applied, known, err)
	}
	noStatus := &outbox.HTTPEffect{Name: "k", URL: srv.URL}
	if _, known, err := noStatus.Lookup(ctx, "op-1"); known || err != nil {
		t.Fatalf("without a status URL the answer must be unknown: known=%v err=%v", known, err)
	}
	badToken := &outbox.HTTPEffect{Name: "k", URL: srv.URL, Token: func(context.Context) (string, error) { return "", errors.New("secrets unavailable") }}
	_, err := badToken.Do(ctx, outbox.Call{Key: "op-2", Kind: "k"})
	if class, _ := outbox.Classify(err); class != outbox.ClassRetryable || len(down.Calls()) != 1 {
		t.Fatalf("unreadable secret: class %v err %v, requests %d (nothing may be sent)", class, err, len(down.Calls()))
	}
}
