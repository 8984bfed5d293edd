package devstack

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/internal/outbox"
)

// apiStack is a Stack with only what the dev HTTP API's downstream
// routes need: a fake downstream of two kinds and a log.
func apiStack(t *testing.T) (*Stack, *TestLog) {
	t.Helper()
	cfgs, err := outbox.ParseEffects([]byte(`{"effects":[
		{"kind":"refund","url":"http://127.0.0.1:3002/refunds","status_url":"http://127.0.0.1:3002/refunds/status","secret":"env:TOKEN","scopes":["orders"]},
		{"kind":"notify_cancellation","url":"http://127.0.0.1:3002/notifications","secret":"env:TOKEN","scopes":["orders"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDownstream("127.0.0.1:0", cfgs, func(string) string { return "local_FAKE_downstream_test_token" })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	var log TestLog
	return &Stack{logs: NewLogs(&log), Downstream: d}, &log
}

// A scripted answer no call used shows in GET /_dev/downstream until
// DELETE /_dev/downstream/script (one kind, or every kind) drops it.
func TestDownstreamPendingScriptsShownAndCleared(t *testing.T) {
	s, log := apiStack(t)
	api := s.httpAPI()
	do := func(method, target, body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, httptest.NewRequest(method, target, strings.NewReader(body)))
		return rec
	}
	state := func() DownstreamState {
		var st DownstreamState
		rec := do(http.MethodGet, "/_dev/downstream", "")
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
			t.Fatalf("GET: %d %s", rec.Code, rec.Body)
		}
		return st
	}
	for _, body := range []string{
		`{"kind":"refund","then":[{"mode":"hang_after_apply"},{"mode":"throttle_429","retry_after_seconds":2}]}`,
		`{"kind":"notify_cancellation","then":[{"mode":"fail_500"}]}`,
	} {
		if rec := do(http.MethodPost, "/_dev/downstream/script", body); rec.Code != http.StatusAccepted {
			t.Fatalf("script: %d %s", rec.Code, rec.Body)
		}
	}
	st := state()
	if st.Pending != 3 || len(st.Effects) != 2 {
		t.Fatalf("pending %d in %+v", st.Pending, st.Effects)
	}
	want := map[string][]Behavior{
		"refund":              {{Mode: "hang_after_apply"}, {Mode: "throttle_429", RetryAfterSeconds: 2}},
		"notify_cancellation": {{Mode: "fail_500"}},
	}
	for _, e := range st.Effects {
		if !reflect.DeepEqual(e.Pending, want[e.Kind]) {
			t.Fatalf("%s pending %+v, want %+v", e.Kind, e.Pending, want[e.Kind])
		}
	}

	rec := do(http.MethodDelete, "/_dev/downstream/script?kind=refund", "")
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"cleared":{"refund":2},"total":2}` {
		t.Fatalf("DELETE ?kind=refund: %d %s", rec.Code, rec.Body)
	}
	if st := state(); st.Pending != 1 || len(s.Downstream.Fake("refund").Pending()) != 0 {
		t.Fatalf("after clearing refund: %+v", st)
	}
	if rec := do(http.MethodDelete, "/_dev/downstream/script?kind=teleport", ""); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "no effect kind") {
		t.Fatalf("unknown kind: %d %s", rec.Code, rec.Body)
	}
	rec = do(http.MethodDelete, "/_dev/downstream/script", "")
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"cleared":{"notify_cancellation":1},"total":1}` {
		t.Fatalf("DELETE: %d %s", rec.Code, rec.Body)
	}
	if st := state(); st.Pending != 0 {
		t.Fatalf("after clearing all: %+v", st)
	}
	if !strings.Contains(log.String(), "downstream   | cleared 2 pending scripted answers (refund)\n") ||
		!strings.Contains(log.String(), "downstream   | cleared 1 pending scripted answers (every kind)\n") {
		t.Fatalf("log:\n%s", log)
	}
}
