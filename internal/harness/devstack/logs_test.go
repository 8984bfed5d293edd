package devstack

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A request path with a NUL (%00) or an escape sequence reaches the log
// escaped, as every log line's control characters are.
func TestLogLinesEscapeControlCharacters(t *testing.T) {
	s, log := apiStack(t)
	rec := httptest.NewRecorder()
	s.httpAPI().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/webhooks/stripe%00%1b%5b2J%0aforged", strings.NewReader(`{}`)))
	if rec.Code != http.StatusInternalServerError { // no intake function runs here
		t.Fatalf("status %d", rec.Code)
	}
	got := log.String()
	if strings.ContainsAny(got[:len(got)-1], "\x00\x1b\n") {
		t.Fatalf("a control character reached the log: %q", got)
	}
	if !strings.Contains(got, `http-api     | POST /webhooks/stripe\x00\x1b[2J\nforged → 500`) {
		t.Fatalf("log line %q", got)
	}

	var buf bytes.Buffer
	l := NewLogs(&buf)
	l.Printf("x", "%s", "tab\there, bell\a, del\x7f, c1\u0085, bad \xff, fine é ✓")
	w := l.Writer("y")
	_, _ = w.Write([]byte("line one\x00\nline two\n"))
	_ = w.Close()
	logged := func() string { // the writer's goroutine prints through Printf, under l.mu
		l.mu.Lock()
		defer l.mu.Unlock()
		return buf.String()
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logged(), "line two") && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	want := "x            | tab\\there, bell\\x07, del\\x7f, c1\\u0085, bad \\xff, fine é ✓\n" +
		"y            | line one\\x00\n" +
		"y            | line two\n"
	if got := logged(); got != want {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
}
