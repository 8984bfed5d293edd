package source

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Outbound calls (an effect, its status lookup, a source of truth) go only
// to the URL the configuration names: they never follow a
// redirect. Go's default client follows up to ten, re-sending a 307's
// body and, to the same host, its Authorization header, and turning a
// POST answered 302 into a GET whose 200 looks like success. A 3xx is the
// caller's answer, returned as a RedirectError.

// NoRedirects returns a copy of c (nil: a client with a 10 s timeout) that
// never follows a redirect: the 3xx response itself is returned.
func NoRedirects(c *http.Client) *http.Client {
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	cp := *c
	cp.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cp
}

// RedirectError is a 3xx answer to an outbound call: a configuration
// error (the configured URL is not the endpoint), never a success.
type RedirectError struct {
	Status   int
	Location string // as sent, truncated; "" when absent
}

func (e *RedirectError) Error() string {
	return fmt.Sprintf("HTTP %d redirect to %q refused: outbound calls never follow redirects; configure the endpoint's final URL", e.Status, e.Location)
}

// CheckRedirect returns a *RedirectError for a 3xx response, nil otherwise.
func CheckRedirect(resp *http.Response) error {
	if resp.StatusCode < 300 || resp.StatusCode > 399 {
		return nil
	}
	loc := strings.ToValidUTF8(resp.Header.Get("Location"), "")
	if len(loc) > 200 {
		loc = loc[:200] + "…"
	}
	return &RedirectError{Status: resp.StatusCode, Location: loc}
}
