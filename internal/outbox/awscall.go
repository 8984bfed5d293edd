package outbox

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptrace"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
)

// awsCall is one request to an AWS target, made so that the dispatcher
// (not the SDK) decides what a failure means: the SDK's own retries are
// off for it (a retry the SDK makes after a lost answer would repeat the
// effect where the target does not deduplicate, and would hide the
// attempt from the ledger), and it records whether the request was
// written to the connection, which separates "not sent" (retryable) from
// "sent, answer lost" (uncertain).
type awsCall struct {
	sent atomic.Bool
}

// context returns ctx with a deadline of timeout (when positive) and the
// trace that records the write of the request.
func (a *awsCall) context(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	// A first byte of the answer also says the request was sent: net/http
	// calls WroteRequest from its writing goroutine, which may run after
	// the answer has been read and the call has returned.
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				a.sent.Store(true)
			}
		},
		GotFirstResponseByte: func() { a.sent.Store(true) },
	})
	if timeout > 0 {
		return context.WithTimeout(ctx, timeout)
	}
	return context.WithCancel(ctx)
}

// apiError returns the service's error code and HTTP status when err is
// an answer from the service (as opposed to a transport failure).
func apiError(err error) (code string, status int, ok bool) {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return "", 0, false
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	return ae.ErrorCode(), status, true
}

// isThrottle reports whether an error code is one the SDK knows as a
// throttle: the request was refused before it was acted on.
func isThrottle(code string) bool {
	_, ok := retry.DefaultThrottleErrorCodes[code]
	return ok
}

// transportError classifies a call that got no answer from the service:
// before the request was written, nothing reached the target (retryable);
// after, the target may have acted on it (uncertain).
func (a *awsCall) transportError(key, what string, err error) error {
	why := "connection lost"
	if os.IsTimeout(err) || errors.Is(err, context.DeadlineExceeded) {
		why = "timeout"
	}
	if a.sent.Load() {
		return fmt.Errorf("%w: %s: %s %s after the request was sent: %v", ErrUncertain, key, what, why, err)
	}
	return &RetryableError{Err: fmt.Errorf("%s: %s %s before the request was sent: %v", key, what, why, err)}
}

// retryAfterSeconds reads a count of seconds a service sent (Lambda's
// RetryAfterSeconds), bounded by MaxRetryAfter; anything else is 0.
func retryAfterSeconds(v string) time.Duration {
	s, err := strconv.ParseInt(v, 10, 64)
	if err != nil || s <= 0 {
		return 0
	}
	return time.Duration(min(s, int64(MaxRetryAfter/time.Second))) * time.Second
}

// errText is an error's text bounded for the audit trail.
func errText(err error) string { return truncate(err.Error(), MaxDetail) }
