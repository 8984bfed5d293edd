package stripefake

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

type answerKind int

const (
	kindApply answerKind = iota
	kindError
	kindHang
)

// Answer is one scripted answer; build it with Apply, RateLimited,
// LockTimeout, ServerError, Fail or Hang.
type Answer struct {
	kind   answerKind
	status int
	apiErr apiError
	header http.Header
}

// Apply answers normally (a scripted success between failures).
func Apply() Answer { return Answer{kind: kindApply} }

// RateLimited answers 429 as Stripe's rate limiter does: type
// "invalid_request_error", code "rate_limit", Stripe-Rate-Limited-Reason
// "global-rate". With retryAfter > 0 it also sends Retry-After in whole
// seconds (rounded up), which Stripe does not document.
func RateLimited(retryAfter time.Duration) Answer {
	h := http.Header{"Stripe-Rate-Limited-Reason": {"global-rate"}}
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64((retryAfter+time.Second-1)/time.Second), 10))
	}
	return Answer{kind: kindError, status: http.StatusTooManyRequests, header: h, apiErr: apiError{
		Type: "invalid_request_error", Code: "rate_limit", DocURL: "https://stripe.com/docs/error-codes/rate-limit",
		Message: "Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits.",
	}}
}

// LockTimeout answers 429 with code "lock_timeout": another request holds
// the object, not a rate limit.
func LockTimeout() Answer {
	return Answer{kind: kindError, status: http.StatusTooManyRequests, apiErr: apiError{
		Type: "invalid_request_error", Code: "lock_timeout", DocURL: "https://stripe.com/docs/error-codes/lock-timeout",
		Message: "This object cannot be accessed right now because another API request or Stripe process is currently accessing it. If you see this error intermittently, retry the request.",
	}}
}

// ServerError answers status (500, 502, 503, …) with type "api_error".
func ServerError(status int) Answer {
	return Answer{kind: kindError, status: status, apiErr: apiError{
		Type: "api_error", Message: "An unknown error occurred",
	}}
}

// Fail answers any Stripe error, for example 403 "invalid_request_error"
// for a restricted key without the permission.
func Fail(status int, errType, code, message string) Answer {
	return Answer{kind: kindError, status: status, apiErr: apiError{Type: errType, Code: code, Message: message}}
}

// Hang answers nothing until the client gives up (its context ends, the
// connection closes) or ReleaseHangs is called; a released request is then
// answered normally.
func Hang() Answer { return Answer{kind: kindHang} }

// Script queues answers for requests whose path starts with pathPrefix
// ("" for every path), after any already queued for it. A request takes
// the next answer of the longest matching prefix that still has one;
// authentication comes first and does not consume answers.
func (s *Server) Script(pathPrefix string, answers ...Answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scripts[pathPrefix] = append(s.scripts[pathPrefix], answers...)
}

// ReleaseHangs lets every request hanging now go on and be answered
// normally. Requests that hang later wait for the next call.
func (s *Server) ReleaseHangs() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.release)
	s.release = make(chan struct{})
}

func (s *Server) nextAnswer(path string) (Answer, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	best, found := "", false
	for prefix, answers := range s.scripts {
		if len(answers) > 0 && strings.HasPrefix(path, prefix) && (!found || len(prefix) > len(best)) {
			best, found = prefix, true
		}
	}
	if !found {
		return Answer{}, false
	}
	a := s.scripts[best][0]
	s.scripts[best] = s.scripts[best][1:]
	return a, true
}
