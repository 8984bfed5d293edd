package localaws

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
)

// Lambda is a local endpoint of Lambda's Invoke (REST JSON, POST
// /2015-03-31/functions/{FunctionName}/invocations) in front of real
// functions: each is a real bootstrap run by aws-lambda-rie (the Runtime
// Interface Emulator, pinned as a tool in go.mod; StartFunction), which
// serves Invoke for one function named "function" only and answers as
// Lambda does not in places. The front does what Lambda does and RIE
// does not:
//
//   - FunctionName is a name, an ARN of the front's region and account, or
//     a partial ARN, optionally qualified by $LATEST (no versions or
//     aliases here); another is ResourceNotFoundException (404);
//   - only RequestResponse invocations (X-Amz-Invocation-Type absent or
//     RequestResponse); a request over 6,291,456 bytes is
//     RequestEntityTooLargeException (413), a body that is not JSON
//     InvalidRequestContentException (400);
//   - a function error is answered 200 with X-Amz-Function-Error:
//     Unhandled (RIE answers the error object with no header), a
//     function timeout likewise with errorType Sandbox.Timedout (RIE
//     answers the text "Task timed out after …"), a runtime that exited
//     with errorType Runtime.ExitError; the front tells a function error
//     from an answer by its shape: an object of errorMessage and
//     errorType (and stackTrace) only;
//   - X-Amz-Executed-Version: $LATEST on every answer;
//   - throttling is injected by the test (Throttle: 429
//     TooManyRequestsException with Retry-After), as RIE never throttles.
//
// An invocation runs to its end even when the caller hangs up, as in
// Lambda. What only AWS shows: concurrency (RIE runs one invocation at a
// time, so the front runs a function's invocations one by one), versions
// and aliases, asynchronous invocation, permissions, and Lambda's own
// retries.
type Lambda struct {
	URL     string
	Region  string
	Account string
	srv     *httptest.Server

	mu        sync.Mutex
	functions map[string]*frontFunction
	throttles []int // Retry-After seconds of injected 429s, first first
}

type frontFunction struct {
	rie     string // the RIE's address
	mu      sync.Mutex
	invokes int
}

// MaxLambdaSyncRequest is the largest synchronous Invoke request body.
const MaxLambdaSyncRequest = 6291456

// NewLambda starts a local Lambda front for region and account.
func NewLambda(region, account string) *Lambda {
	l := &Lambda{Region: region, Account: account, functions: map[string]*frontFunction{}}
	l.srv = httptest.NewServer(http.HandlerFunc(l.serve))
	l.URL = l.srv.URL
	return l
}

// Close stops the front (not the functions).
func (l *Lambda) Close() { l.srv.Close() }

// Client returns a Lambda client for it.
func (l *Lambda) Client(apiOptions ...func(*middlewareStack) error) *lambda.Client {
	cfg := Config()
	cfg.Region = l.Region
	return lambda.NewFromConfig(cfg, func(o *lambda.Options) {
		o.BaseEndpoint = aws.String(l.URL)
		o.APIOptions = append(o.APIOptions, apiOptions...)
	})
}

// AddFunction serves the function name with the RIE at fn and returns
// its ARN.
func (l *Lambda) AddFunction(name string, fn *Function) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.functions[name] = &frontFunction{rie: fn.Addr}
	return "arn:aws:lambda:" + l.Region + ":" + l.Account + ":function:" + name
}

// Throttle arms a throttle: the next Invoke is answered 429
// TooManyRequestsException with Retry-After retryAfterSeconds, and the
// function does not run.
func (l *Lambda) Throttle(retryAfterSeconds int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.throttles = append(l.throttles, retryAfterSeconds)
}

// Invocations returns how many invocations of name reached its runtime.
func (l *Lambda) Invocations(name string) int {
	l.mu.Lock()
	f := l.functions[name]
	l.mu.Unlock()
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.invokes
}

var (
	invokePathRE = regexp.MustCompile(`^/2015-03-31/functions/([^/]+)/invocations$`)
	fnRefRE      = regexp.MustCompile(`^(?:arn:aws:lambda:([a-z0-9-]+):)?(?:([0-9]{12}):function:)?([a-zA-Z0-9_-]{1,64})(?::(\$LATEST|[a-zA-Z0-9_-]+))?$`)
)

func lambdaError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-ErrorType", code)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"Type": "User", "Message": msg})
}

func (l *Lambda) serve(w http.ResponseWriter, r *http.Request) {
	m := invokePathRE.FindStringSubmatch(r.URL.EscapedPath())
	if r.Method != http.MethodPost || m == nil {
		lambdaError(w, http.StatusNotFound, "UnknownOperationException", "this local Lambda serves Invoke only")
		return
	}
	ref, err := url.PathUnescape(m[1])
	if err != nil {
		lambdaError(w, http.StatusBadRequest, "InvalidParameterValueException", err.Error())
		return
	}
	fm := fnRefRE.FindStringSubmatch(ref)
	qualifier := r.URL.Query().Get("Qualifier")
	if fm != nil && fm[4] != "" {
		qualifier = fm[4]
	}
	l.mu.Lock()
	var fn *frontFunction
	if fm != nil && (fm[1] == "" || fm[1] == l.Region) && (fm[2] == "" || fm[2] == l.Account) && (qualifier == "" || qualifier == "$LATEST") {
		fn = l.functions[fm[3]]
	}
	l.mu.Unlock()
	if fn == nil {
		lambdaError(w, http.StatusNotFound, "ResourceNotFoundException", "Function not found: "+ref)
		return
	}
	if t := r.Header.Get("X-Amz-Invocation-Type"); t != "" && t != "RequestResponse" {
		lambdaError(w, http.StatusBadRequest, "InvalidParameterValueException", "this local Lambda runs RequestResponse invocations only, not "+t)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxLambdaSyncRequest+1))
	if err != nil {
		lambdaError(w, http.StatusBadRequest, "InvalidRequestContentException", err.Error())
		return
	}
	if len(body) > MaxLambdaSyncRequest {
		lambdaError(w, http.StatusRequestEntityTooLarge, "RequestEntityTooLargeException", "Request must be smaller than 6291456 bytes for the InvokeFunction operation")
		return
	}
	if len(body) > 0 && !json.Valid(body) {
		lambdaError(w, http.StatusBadRequest, "InvalidRequestContentException", "Could not parse request body into json")
		return
	}
	l.mu.Lock()
	throttled, retryAfter := len(l.throttles) > 0, 0
	if throttled {
		retryAfter, l.throttles = l.throttles[0], l.throttles[1:]
	}
	l.mu.Unlock()
	if throttled {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		lambdaError(w, http.StatusTooManyRequests, "TooManyRequestsException", "Rate Exceeded.")
		return
	}
	status, fnErr, payload := fn.invoke(body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amz-Executed-Version", "$LATEST")
	if fnErr != "" {
		w.Header().Set("X-Amz-Function-Error", fnErr)
	}
	w.WriteHeader(status)
	_, _ = w.Write(payload)
}

// invoke runs one invocation on the function's RIE to its end (the
// caller hanging up does not stop it, as in Lambda) and translates RIE's
// answer into Lambda's.
func (f *frontFunction) invoke(body []byte) (status int, fnErr string, payload []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.invokes++
	resp, err := http.Post("http://"+f.rie+"/2015-03-31/functions/function/invocations", "application/json", bytes.NewReader(body))
	if err != nil {
		return http.StatusInternalServerError, "", []byte(`{"Type":"Service","Message":"` + err.Error() + `"}`)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	unhandled := func(typ, msg string) (int, string, []byte) {
		b, _ := json.Marshal(map[string]string{"errorType": typ, "errorMessage": msg})
		return http.StatusOK, "Unhandled", b
	}
	switch {
	case resp.StatusCode == http.StatusOK && bytes.HasPrefix(out, []byte("Task timed out after")):
		return unhandled("Sandbox.Timedout", string(out))
	case resp.StatusCode == http.StatusOK && isFunctionError(out):
		return http.StatusOK, "Unhandled", out
	case resp.StatusCode == http.StatusOK:
		return http.StatusOK, "", out
	case resp.StatusCode == http.StatusBadGateway:
		return unhandled("Runtime.ExitError", strings.TrimSpace(string(out)))
	}
	return http.StatusInternalServerError, "", []byte(`{"Type":"Service","Message":"runtime interface emulator answered HTTP ` + strconv.Itoa(resp.StatusCode) + `"}`)
}

// isFunctionError reports whether an answer is the error object the
// runtime reports for a failed invocation.
func isFunctionError(b []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return false
	}
	_, t := m["errorType"]
	_, msg := m["errorMessage"]
	_, st := m["stackTrace"]
	return t && msg && len(m) == 2+map[bool]int{true: 1}[st]
}

// Function is a Lambda function running under aws-lambda-rie.
type Function struct {
	Addr string // the emulator's invoke address (host:port)
	cmd  *exec.Cmd
	done chan struct{}
}

// BuildFunction builds the function main at pkg (an import path of this
// module) for this host with the lambda.norpc tag, and the Runtime
// Interface Emulator this module pins, into dir; it returns the paths of
// the bootstrap and the emulator. The go command caches both builds.
func BuildFunction(ctx context.Context, dir, pkg string) (bootstrap, rie string, err error) {
	bootstrap, rie = filepath.Join(dir, "bootstrap"), filepath.Join(dir, "aws-lambda-rie")
	for _, args := range [][]string{
		{"build", "-trimpath", "-tags", "lambda.norpc", "-o", bootstrap, pkg},
		{"build", "-trimpath", "-o", rie, "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie"},
	} {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return "", "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
	}
	return bootstrap, rie, nil
}

// StartFunction runs bootstrap under the emulator rie on free loopback
// ports, with env added to a minimal environment and the function timeout
// timeout (whole seconds, at least 1). Stop it with Stop.
func StartFunction(ctx context.Context, rie, bootstrap string, env []string, timeout time.Duration) (*Function, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	cmd := exec.Command(rie, "--runtime-interface-emulator-address", addr,
		"--runtime-api-address", "127.0.0.1:"+strconv.Itoa(ports[1]), "--log-level", "warn", bootstrap)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "AWS_REGION=" + Region,
		"AWS_LAMBDA_FUNCTION_TIMEOUT=" + strconv.Itoa(max(1, int(timeout.Seconds())))}, env...)
	cmd.Dir = filepath.Dir(bootstrap)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	// Its own process group, so stopping it stops the bootstrap too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", rie, err)
	}
	f := &Function{Addr: addr, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(f.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return f, nil
		}
		select {
		case <-f.done:
			return nil, errors.New("aws-lambda-rie exited before it listened on " + addr)
		case <-ctx.Done():
			f.Stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			f.Stop()
			return nil, fmt.Errorf("aws-lambda-rie did not listen on %s: %v", addr, err)
		}
	}
}

// Stop ends the emulator and its bootstrap (its process group).
func (f *Function) Stop() {
	if f.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-f.cmd.Process.Pid, syscall.SIGKILL)
	<-f.done
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
