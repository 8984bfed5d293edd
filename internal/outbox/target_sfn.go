package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
)

// StepFunctionsClient is the part of the Step Functions client
// StepFunctionsEffect uses.
type StepFunctionsClient interface {
	DescribeStateMachine(ctx context.Context, in *sfn.DescribeStateMachineInput, opts ...func(*sfn.Options)) (*sfn.DescribeStateMachineOutput, error)
	StartExecution(ctx context.Context, in *sfn.StartExecutionInput, opts ...func(*sfn.Options)) (*sfn.StartExecutionOutput, error)
	DescribeExecution(ctx context.Context, in *sfn.DescribeExecutionInput, opts ...func(*sfn.Options)) (*sfn.DescribeExecutionOutput, error)
}

var _ StepFunctionsClient = (*sfn.Client)(nil)

// StepFunctionsEffect starts one execution of a STANDARD state machine
// per operation (StartExecution), named ExecutionName(operation id), with
// the call (TargetCall) as its input.
//
// Step Functions keeps an execution name unique per account, region and
// state machine for 90 days (DedupWindow), and StartExecution of a
// STANDARD workflow is idempotent: the same name and input as a running
// execution answers as the original start did. Once that execution has
// closed, or with another input, it answers ExecutionAlreadyExists; the
// effect then reads the execution (DescribeExecution): with the same
// input it is this operation's, started by an earlier attempt (success,
// replayed, whatever its status); with another input the name is taken
// by something else and the intent is QUARANTINED (execution_name_taken).
//
// It is a StatusLookup: DescribeExecution of the operation's execution.
// An execution with the operation's input exists: applied, whether it is
// RUNNING, SUCCEEDED, FAILED, TIMED_OUT, ABORTED or PENDING_REDRIVE: the
// effect is the start, and a second execution under the same name is
// impossible anyway; what the workflow did is the workflow's (its
// failures are seen and redriven in Step Functions). ExecutionDoesNotExist:
// not applied, and a retry with the same name is safe (StartExecution
// deduplicates it even when the lookup's eventual consistency missed a
// fresh start).
//
// An EXPRESS state machine is refused: its StartExecution is not
// idempotent and DescribeExecution does not see its executions, and the
// ARN does not tell the two apart, so the effect asks DescribeStateMachine
// once before its first start and QUARANTINES (express_workflow_refused)
// every call to an EXPRESS one. An input over 262,144 bytes is
// QUARANTINED (payload_too_large).
//
// Classification: ExecutionLimitExceeded, a throttle and KMS throttling
// are retryable; another 4xx (the state machine does not exist or is being
// deleted, access or its KMS key is denied) is QUARANTINED
// (target_refused); a 5xx or a timeout or lost connection after the
// request was written is uncertain, which the lookup resolves.
type StepFunctionsEffect struct {
	Name   string
	Target Target // an unqualified state machine ARN
	Client StepFunctionsClient
	// Timeout bounds the requests of one call together.
	Timeout time.Duration
	Scopes  []string

	mu       sync.Mutex
	standard bool // DescribeStateMachine said STANDARD
}

var (
	_ Effect       = (*StepFunctionsEffect)(nil)
	_ ScopeGuard   = (*StepFunctionsEffect)(nil)
	_ DedupWindow  = (*StepFunctionsEffect)(nil)
	_ StatusLookup = (*StepFunctionsEffect)(nil)
)

// Kind returns the intent kind.
func (e *StepFunctionsEffect) Kind() string { return e.Name }

// AllowsScope: see HTTPEffect.AllowsScope.
func (e *StepFunctionsEffect) AllowsScope(scope string) bool { return allowsScope(e.Scopes, scope) }

// DedupWindow is the 90 days an execution name stays taken.
func (e *StepFunctionsEffect) DedupWindow() time.Duration { return StepFunctionsNameWindow }

// ExecutionARN is the ARN of the operation's execution.
func (e *StepFunctionsEffect) ExecutionARN(op string) string {
	t := e.Target
	return "arn:" + t.Partition + ":states:" + t.Region + ":" + t.Account + ":execution:" + t.Name + ":" + ExecutionName(op)
}

func noSFNRetries(o *sfn.Options) { o.Retryer = aws.NopRetryer{} }

// checkStandard asks DescribeStateMachine once (until it answers) whether
// the state machine is STANDARD.
func (e *StepFunctionsEffect) checkStandard(ctx context.Context, key string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.standard {
		return nil
	}
	var a awsCall
	cctx, cancel := a.context(ctx, 0)
	defer cancel()
	out, err := e.Client.DescribeStateMachine(cctx, &sfn.DescribeStateMachineInput{StateMachineArn: aws.String(e.Target.ARN)}, noSFNRetries)
	if err != nil {
		code, status, ok := apiError(err)
		if ok && status >= 400 && status < 500 && !isThrottle(code) && status != http.StatusTooManyRequests {
			return &MisconfiguredError{Code: CodeTargetRefused, Err: fmt.Errorf("%s: DescribeStateMachine %s refused (%s, HTTP %d): %s", key, e.Target.ARN, code, status, errText(err))}
		}
		return &RetryableError{Err: fmt.Errorf("%s: DescribeStateMachine %s (nothing was started): %s", key, e.Target.ARN, errText(err))}
	}
	if out.Type != sfntypes.StateMachineTypeStandard {
		return &MisconfiguredError{Code: "express_workflow_refused",
			Err: fmt.Errorf("%s: state machine %s is %s: only a STANDARD workflow deduplicates executions by name; nothing was started", key, e.Target.ARN, out.Type)}
	}
	e.standard = true
	return nil
}

// Do starts the operation's execution, once.
func (e *StepFunctionsEffect) Do(ctx context.Context, c Call) (Result, error) {
	input, err := targetJSON(c)
	if err != nil {
		return Result{}, fmt.Errorf("%w: encode %s: %v", ErrPermanent, c.Key, err)
	}
	if len(input) > MaxStepFunctionsInput {
		return Result{}, tooLarge(c.Key, len(input), MaxStepFunctionsInput, "a Step Functions execution's input")
	}
	// Timeout bounds the call's requests together (the type check, the
	// start, and the read of an execution already under its name), so a
	// dispatch stays inside the dispatcher's lease.
	if e.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.Timeout)
		defer cancel()
	}
	if err := e.checkStandard(ctx, c.Key); err != nil {
		return Result{}, err
	}
	name := ExecutionName(c.Key)
	var a awsCall
	cctx, cancel := a.context(ctx, 0)
	defer cancel()
	out, err := e.Client.StartExecution(cctx, &sfn.StartExecutionInput{StateMachineArn: aws.String(e.Target.ARN),
		Name: aws.String(name), Input: aws.String(string(input))}, noSFNRetries)
	if err == nil {
		return Result{StatusCode: http.StatusOK, Detail: "execution " + aws.ToString(out.ExecutionArn) + " started"}, nil
	}
	var exists *sfntypes.ExecutionAlreadyExists
	if !errors.As(err, &exists) {
		return Result{}, e.startFailed(&a, c.Key, err)
	}
	// The name is taken: this operation's own execution (an earlier
	// attempt started it, and it has closed since, or the answer was
	// lost), or something else's.
	d, derr := e.describe(ctx, c.Key)
	if derr != nil {
		return Result{}, &RetryableError{Err: fmt.Errorf("%s: execution %s already exists and could not be read (nothing new was started): %v", c.Key, name, derr)}
	}
	if d == nil {
		return Result{}, &RetryableError{Err: fmt.Errorf("%s: StartExecution says execution %s exists, DescribeExecution does not see it yet (nothing new was started)", c.Key, name)}
	}
	same, known := sameInput(d, input)
	switch {
	case !known:
		return Result{}, &MisconfiguredError{Code: CodeTargetRefused, Err: fmt.Errorf("%s: execution %s exists and its input cannot be read to tell whose it is", c.Key, name)}
	case !same:
		return Result{}, &MisconfiguredError{Code: "execution_name_taken", Err: fmt.Errorf("%s: execution %s of %s exists with another input: its name is taken; nothing was started", c.Key, name, e.Target.Name)}
	}
	return Result{StatusCode: http.StatusOK, Replayed: true,
		Detail: fmt.Sprintf("execution %s (%s) was started by an earlier attempt", aws.ToString(d.ExecutionArn), d.Status)}, nil
}

// describe reads the operation's execution; nil when it does not exist.
func (e *StepFunctionsEffect) describe(ctx context.Context, key string) (*sfn.DescribeExecutionOutput, error) {
	var a awsCall
	cctx, cancel := a.context(ctx, 0)
	defer cancel()
	d, err := e.Client.DescribeExecution(cctx, &sfn.DescribeExecutionInput{ExecutionArn: aws.String(e.ExecutionARN(key))}, noSFNRetries)
	var missing *sfntypes.ExecutionDoesNotExist
	switch {
	case errors.As(err, &missing):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("describe execution: %s", errText(err))
	}
	return d, nil
}

// sameInput compares an execution's input with the operation's: equal
// text, or equal JSON values. known is false when the execution's input
// was not returned.
func sameInput(d *sfn.DescribeExecutionOutput, input []byte) (same, known bool) {
	if d.Input == nil || (d.InputDetails != nil && !d.InputDetails.Included) {
		return false, false
	}
	if bytes.Equal([]byte(*d.Input), input) {
		return true, true
	}
	var a, b any
	if json.Unmarshal([]byte(*d.Input), &a) != nil || json.Unmarshal(input, &b) != nil {
		return false, true
	}
	return reflect.DeepEqual(a, b), true
}

// Lookup reports whether the operation's execution was started: an
// execution under the operation's name exists, whatever its status. Its
// input is not compared (a lookup has only the key): a name derived from
// an operation id is taken as that operation's; Do, which has the input,
// compares it.
func (e *StepFunctionsEffect) Lookup(ctx context.Context, key string) (applied, known bool, err error) {
	if e.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.Timeout)
		defer cancel()
	}
	d, err := e.describe(ctx, key)
	switch {
	case err != nil:
		return false, false, fmt.Errorf("status lookup %s: %w", key, err)
	case d == nil:
		return false, true, nil
	}
	return true, true, nil
}

func (e *StepFunctionsEffect) startFailed(a *awsCall, key string, err error) error {
	code, status, ok := apiError(err)
	switch {
	case !ok:
		return a.transportError(key, "step functions start", err)
	case code == "ExecutionLimitExceeded" || code == "KmsThrottlingException" || isThrottle(code) || status == http.StatusTooManyRequests:
		return &RetryableError{Err: fmt.Errorf("%s: %s", key, errText(err))}
	case status >= 400 && status < 500:
		return &MisconfiguredError{Code: CodeTargetRefused, Err: fmt.Errorf("%s: step functions refused StartExecution (%s, HTTP %d); nothing was started: %s", key, code, status, errText(err))}
	default:
		return fmt.Errorf("%w: %s: step functions answered %s (HTTP %d): the execution may have started: %s", ErrUncertain, key, code, status, errText(err))
	}
}
