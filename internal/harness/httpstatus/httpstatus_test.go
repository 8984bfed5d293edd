package httpstatus_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/effectively-once/webhooks/internal/harness/httpstatus"
)

func TestWriterKeepsTheFirstStatus(t *testing.T) {
	for name, tc := range map[string]struct {
		h    http.HandlerFunc
		want int
	}{
		"nothing":     {func(http.ResponseWriter, *http.Request) {}, 0},
		"write alone": {func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("x")) }, 200},
		"429 then body": {func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte("slow down"))
		}, 429},
	} {
		rec := httptest.NewRecorder()
		w := &httpstatus.Writer{ResponseWriter: rec}
		tc.h(w, httptest.NewRequest(http.MethodGet, "/", nil))
		if w.Code != tc.want || (tc.want != 0 && rec.Code != tc.want) {
			t.Errorf("%s: recorded %d, answered %d; want %d", name, w.Code, rec.Code, tc.want)
		}
	}
}
