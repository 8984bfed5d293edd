package downstream_test

import (
	"context"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/downstream"
	"github.com/effectively-once/webhooks/internal/outbox"
)

// The fake is driven by the real HTTP effect, as the dispatcher drives it.

func TestDeduplicatesWithinWindow(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	down := &downstream.Fake{Window: time.Minute, Now: func() time.Time { return now }, Conflict: true}
	srv := httptest.NewServer(down)
	defer srv.Close()
	eff := &outbox.HTTPEffect{Name: "k", URL: srv.URL}
	ctx := context.Background()
	if res, err := eff.Do(ctx, outbox.Call{Key: "a"}); err != nil || res.Replayed {
		t.Fatalf("first: %+v %v", res, err)
	}
	if res, err := eff.Do(ctx, outbox.Call{Key: "a"}); err != nil || !res.Replayed {
		t.Fatalf("duplicate (409 same key): %+v %v", res, err)
	}
	if down.Effective("a") != 1 {
		t.Fatalf("effective %d", down.Effective("a"))
	}
	now = now.Add(time.Minute)
	if applied, known := down.Lookup("a"); applied || known {
		t.Fatalf("lookup after window: %v %v", applied, known)
	}
	if _, err := eff.Do(ctx, outbox.Call{Key: "a"}); err != nil {
		t.Fatal(err)
	}
	if down.Effective("a") != 2 {
		t.Fatalf("past the window the fake applies again; effective %d", down.Effective("a"))
	}
	if len(down.Calls()) != 3 {
		t.Fatalf("calls %d", len(down.Calls()))
	}
}

// A scripted answer no call used stays pending, would meet the next
// unrelated call, and can be seen and cleared.
func TestPendingScriptCanBeCleared(t *testing.T) {
	down := &downstream.Fake{}
	srv := httptest.NewServer(down)
	defer srv.Close()
	eff := &outbox.HTTPEffect{Name: "k", URL: srv.URL}
	ctx := context.Background()
	down.Then(downstream.Behavior{Mode: downstream.Fail500}, downstream.Behavior{Mode: downstream.Throttle429, RetryAfter: 2 * time.Second})
	if _, err := eff.Do(ctx, outbox.Call{Key: "a"}); err == nil {
		t.Fatal("the scripted 500 did not answer")
	}
	want := []downstream.Behavior{{Mode: downstream.Throttle429, RetryAfter: 2 * time.Second}}
	if got := down.Pending(); !slices.Equal(got, want) {
		t.Fatalf("pending %+v, want %+v", got, want)
	}
	if n := down.ClearScript(); n != 1 || len(down.Pending()) != 0 {
		t.Fatalf("cleared %d, pending %+v", n, down.Pending())
	}
	if res, err := eff.Do(ctx, outbox.Call{Key: "b"}); err != nil || res.Replayed {
		t.Fatalf("an unrelated call after the clear: %+v %v", res, err)
	}
	if down.Effective("b") != 1 || down.ClearScript() != 0 {
		t.Fatalf("effective %d", down.Effective("b"))
	}
}
