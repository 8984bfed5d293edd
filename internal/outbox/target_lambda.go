package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
)

// LambdaInvoker is the part of the Lambda client LambdaEffect uses.
type LambdaInvoker interface {
	Invoke(ctx context.Context, in *lambda.InvokeInput, opts ...func(*lambda.Options)) (*lambda.InvokeOutput, error)
}

var _ LambdaInvoker = (*lambda.Client)(nil)

// LambdaEffect invokes a Lambda function synchronously (Invoke,
// RequestResponse) with the call as its event (TargetCall:
// operation_id, kind, scope, source, subject, version, payload).
//
// Lambda does not deduplicate invocations (DedupWindow 0) and has no
// status lookup: the function must be idempotent by operation_id, since a
// retryable failure is retried with the same call. Its answer decides the
// outcome (LambdaAnswer):
//
//	{"status":"applied"}                            SUCCEEDED ("replayed":true: it had applied it before)
//	{"status":"retry","retry_after_seconds":N}      RETRY_WAIT, not before N seconds
//	{"status":"rejected","reason":"…"}              FAILED
//	anything else                                   QUARANTINED (lambda_answer_invalid): it ran, and said nothing we understand
//
// A function error (the answer carries FunctionError: it threw, crashed or
// timed out) and a throttle (TooManyRequestsException, 429, with its
// RetryAfterSeconds) are retryable. An error status from Invoke itself
// means the function did not run (the Invoke reference reserves them for
// errors that prevent execution): 408, 409 (the function is being
// updated), 429 and 5xx are retryable; any other (the function does not
// exist, access denied) is QUARANTINED (target_refused) for the effect's
// owner. A timeout or lost connection after the request was written is
// uncertain: the function may have run. With no deduplication and no
// lookup, the dispatcher then does not call it again: the intent is
// QUARANTINED (idempotency_window_passed) for its owner at its next claim.
type LambdaEffect struct {
	Name   string // the intent kind it performs
	Target Target // a Lambda function ARN (ParseTarget), qualified or not
	Client LambdaInvoker
	// Timeout bounds one Invoke; the function must answer within it.
	Timeout time.Duration
	Scopes  []string
}

var (
	_ Effect      = (*LambdaEffect)(nil)
	_ ScopeGuard  = (*LambdaEffect)(nil)
	_ DedupWindow = (*LambdaEffect)(nil)
)

// Kind returns the intent kind.
func (e *LambdaEffect) Kind() string { return e.Name }

// AllowsScope: see HTTPEffect.AllowsScope.
func (e *LambdaEffect) AllowsScope(scope string) bool { return allowsScope(e.Scopes, scope) }

// DedupWindow is 0: Lambda runs every Invoke it accepts.
func (e *LambdaEffect) DedupWindow() time.Duration { return 0 }

// LambdaAnswer is the JSON a target function answers with.
type LambdaAnswer struct {
	Status            string `json:"status"` // applied, retry or rejected
	Replayed          bool   `json:"replayed,omitempty"`
	RetryAfterSeconds int64  `json:"retry_after_seconds,omitempty"`
	Reason            string `json:"reason,omitempty"`
}

// The statuses of a LambdaAnswer.
const (
	LambdaApplied  = "applied"
	LambdaRetry    = "retry"
	LambdaRejected = "rejected"
)

// Do invokes the function once.
func (e *LambdaEffect) Do(ctx context.Context, c Call) (Result, error) {
	body, err := targetJSON(c)
	if err != nil {
		return Result{}, fmt.Errorf("%w: encode %s: %v", ErrPermanent, c.Key, err)
	}
	if len(body) > MaxLambdaSyncPayload {
		return Result{}, tooLarge(c.Key, len(body), MaxLambdaSyncPayload, "a synchronous Lambda Invoke")
	}
	var a awsCall
	cctx, cancel := a.context(ctx, e.Timeout)
	defer cancel()
	out, err := e.Client.Invoke(cctx, &lambda.InvokeInput{FunctionName: aws.String(e.Target.ARN),
		InvocationType: lambdatypes.InvocationTypeRequestResponse, Payload: body},
		func(o *lambda.Options) { o.Retryer = aws.NopRetryer{} })
	if err != nil {
		return Result{}, e.failed(&a, c.Key, err)
	}
	if out.FunctionError != nil {
		return Result{}, &RetryableError{Err: fmt.Errorf("%s: function error (%s): %s", c.Key, aws.ToString(out.FunctionError), truncate(string(out.Payload), MaxDetail))}
	}
	var ans LambdaAnswer
	dec := json.NewDecoder(strings.NewReader(string(out.Payload)))
	if err := dec.Decode(&ans); err != nil {
		return Result{}, invalidAnswer(c.Key, out.Payload)
	}
	switch ans.Status {
	case LambdaApplied:
		return Result{StatusCode: int(out.StatusCode), Replayed: ans.Replayed, Detail: "lambda " + e.Target.Name + ": applied"}, nil
	case LambdaRetry:
		if ans.RetryAfterSeconds < 0 {
			return Result{}, invalidAnswer(c.Key, out.Payload)
		}
		return Result{}, &RetryableError{RetryAfter: time.Duration(min(ans.RetryAfterSeconds, int64(MaxRetryAfter/time.Second))) * time.Second,
			Err: fmt.Errorf("%s: the function asked for a retry", c.Key)}
	case LambdaRejected:
		return Result{}, fmt.Errorf("%w: %s: the function rejected it: %s", ErrPermanent, c.Key, truncate(ans.Reason, MaxDetail))
	}
	return Result{}, invalidAnswer(c.Key, out.Payload)
}

func invalidAnswer(key string, payload []byte) error {
	return &MisconfiguredError{Code: "lambda_answer_invalid",
		Err: fmt.Errorf(`%s: the function ran and answered %q, not {"status":"applied"|"retry"|"rejected"}; whether it applied the call is unknown`, key, truncate(string(payload), MaxDetail))}
}

// failed classifies an error from Invoke.
func (e *LambdaEffect) failed(a *awsCall, key string, err error) error {
	code, status, ok := apiError(err)
	if !ok {
		return a.transportError(key, "lambda invoke", err)
	}
	var tm *lambdatypes.TooManyRequestsException
	switch {
	case errors.As(err, &tm):
		return &RetryableError{RetryAfter: retryAfterSeconds(aws.ToString(tm.RetryAfterSeconds)), Err: fmt.Errorf("%s: %s", key, errText(err))}
	case isThrottle(code) || status == http.StatusTooManyRequests:
		return &RetryableError{Err: fmt.Errorf("%s: %s", key, errText(err))}
	case code == "RequestTooLargeException" || status == http.StatusRequestEntityTooLarge:
		return &MisconfiguredError{Code: CodePayloadTooLarge, Err: fmt.Errorf("%s: %s", key, errText(err))}
	case status == http.StatusRequestTimeout || status == http.StatusConflict || status >= 500:
		return &RetryableError{Err: fmt.Errorf("%s: the function did not run: %s", key, errText(err))}
	default:
		return &MisconfiguredError{Code: CodeTargetRefused, Err: fmt.Errorf("%s: lambda refused the invoke (%s, HTTP %d); the function did not run: %s", key, code, status, errText(err))}
	}
}

// CodeTargetRefused is the code of an intent QUARANTINED because the AWS
// target refused the request for a reason only its owner can fix (it
// does not exist, access is denied, the request is invalid for it).
const CodeTargetRefused = "target_refused"

// allowsScope is ScopeGuard over a list of scopes: a scope in it, or
// AllScopes alone for every scope (intents without one included).
func allowsScope(scopes []string, scope string) bool {
	for _, s := range scopes {
		if s == AllScopes || (s == scope && scope != "") {
			return true
		}
	}
	return false
}
