package localaws

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
)

// StepFunctions is a local endpoint of Step Functions' StartExecution,
// DescribeExecution and DescribeStateMachine, on their wire protocol (AWS
// JSON 1.0, X-Amz-Target AWSStepFunctions.<Operation>), written from the
// API reference; no emulator of it is reachable here. It runs no
// workflow: an execution stays RUNNING until the test closes it (Close
// with SUCCEEDED, FAILED, TIMED_OUT or ABORTED).
//
// What it does as Step Functions does: an execution name is 1 to 80
// characters without white space, brackets, wildcards, the special
// characters " # % \ ^ | ~ ` $ & , ; : / or control characters
// (InvalidName); the input is JSON (InvalidExecutionInput) of at most
// 262,144 bytes, "{}" when absent; a name is unique per state machine (no
// expiry here: Step Functions frees it after 90 days). For a STANDARD
// state machine, StartExecution with the name and input of a RUNNING
// execution answers as the original start did; a closed execution's name,
// or another input, is ExecutionAlreadyExists. An EXPRESS state machine
// starts every call (it is not idempotent) and DescribeExecution does not
// see its executions (ExecutionDoesNotExist). A state machine ARN must be
// unqualified and exist (InvalidArn, StateMachineDoesNotExist). Tests
// inject request failures (FailNext).
//
// What only AWS shows: running the workflow, the 90-day expiry of names,
// DescribeExecution's eventual consistency (here it sees a start at
// once), versions and aliases, KMS encryption, quotas and throttling.
type StepFunctions struct {
	URL     string
	Region  string
	Account string
	// OnStart, when set, is called with every execution StartExecution
	// starts (not with one an idempotent start answered again), before
	// the start is answered: a test's stand-in for the workflow's first
	// state. It runs under the endpoint's lock, so it must not call the
	// endpoint.
	OnStart func(Execution)
	srv     *httptest.Server
	api     *jsonAPI

	mu         sync.Mutex
	machines   map[string]string // name → STANDARD or EXPRESS
	executions map[string]*Execution
	starts     []string // every execution ARN started, in order (EXPRESS ones too)
}

// Execution is an execution the local Step Functions started.
type Execution struct {
	ARN, StateMachineARN, Name string
	Input                      string
	Status                     string // RUNNING, SUCCEEDED, FAILED, TIMED_OUT, ABORTED
	Started, Stopped           time.Time
}

// MaxStepFunctionsInput is the most UTF-8 bytes an execution's input has.
const MaxStepFunctionsInput = 262144

// NewStepFunctions starts a local Step Functions for region and account.
func NewStepFunctions(region, account string) *StepFunctions {
	s := &StepFunctions{Region: region, Account: account, machines: map[string]string{}, executions: map[string]*Execution{},
		api: &jsonAPI{prefix: "AWSStepFunctions", contentType: "application/x-amz-json-1.0", maxBody: 1 << 20}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.api.serve(w, r, s.handle) }))
	s.URL = s.srv.URL
	return s
}

// Close stops it.
func (s *StepFunctions) Close() { s.srv.Close() }

// Client returns a Step Functions client for it.
func (s *StepFunctions) Client(apiOptions ...func(*middlewareStack) error) *sfn.Client {
	cfg := Config()
	cfg.Region = s.Region
	return sfn.NewFromConfig(cfg, func(o *sfn.Options) {
		o.BaseEndpoint = aws.String(s.URL)
		o.APIOptions = append(o.APIOptions, apiOptions...)
	})
}

// CreateStateMachine registers a state machine of type STANDARD or
// EXPRESS and returns its ARN.
func (s *StepFunctions) CreateStateMachine(name, typ string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.machines[name] = typ
	return s.machineARN(name)
}

func (s *StepFunctions) machineARN(name string) string {
	return "arn:aws:states:" + s.Region + ":" + s.Account + ":stateMachine:" + name
}

// FailNext arms a request failure: the next request of op
// ("StartExecution", …; "" for any) is answered status with error code
// and not acted on.
func (s *StepFunctions) FailNext(op string, status int, code string) {
	s.api.failNext(op, status, code)
}

// Finish closes a running execution with status.
func (s *StepFunctions) Finish(executionARN, status string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ex, ok := s.executions[executionARN]
	if !ok || ex.Status != "RUNNING" {
		return fmt.Errorf("no running execution %s", executionARN)
	}
	ex.Status, ex.Stopped = status, time.Now().UTC()
	return nil
}

// Executions returns the executions of a state machine (by name) that
// StartExecution started, in order, EXPRESS ones included: a start that
// an idempotent StartExecution answered again is not counted twice.
func (s *StepFunctions) Executions(machine string) []Execution {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Execution
	for _, arn := range s.starts {
		if ex := s.executions[arn]; ex != nil && ex.StateMachineARN == s.machineARN(machine) {
			out = append(out, *ex)
		}
	}
	return out
}

var smARNRE = regexp.MustCompile(`^arn:aws:states:([a-z0-9-]+):([0-9]{12}):stateMachine:([^:]+)$`)

// validName is Step Functions' rule for execution names.
func validName(n string) bool {
	if n == "" || !utf8.ValidString(n) || utf8.RuneCountInString(n) > 80 {
		return false
	}
	for _, r := range n {
		if r <= 0x20 || (r >= 0x7f && r <= 0x9f) || r == 0xfffe || r == 0xffff || (r >= 0xd800 && r <= 0xdfff) ||
			strings.ContainsRune("<>{}[]?*\"#%\\^|~`$&,;:/", r) {
			return false
		}
	}
	return true
}

func epoch(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func (s *StepFunctions) machine(arn string) (string, string, *apiError) {
	m := smARNRE.FindStringSubmatch(arn)
	if m == nil || m[1] != s.Region || m[2] != s.Account {
		return "", "", &apiError{Status: http.StatusBadRequest, Code: "InvalidArn", Message: "Invalid Arn: '" + arn + "'"}
	}
	typ, ok := s.machines[m[3]]
	if !ok {
		return "", "", &apiError{Status: http.StatusBadRequest, Code: "StateMachineDoesNotExist", Message: "State Machine Does Not Exist: '" + arn + "'"}
	}
	return m[3], typ, nil
}

func (s *StepFunctions) handle(op string, body []byte) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch op {
	case "DescribeStateMachine":
		var in struct {
			StateMachineArn string `json:"stateMachineArn"`
			IncludedData    string `json:"includedData,omitempty"`
		}
		if err := decodeStrict(body, &in); err != nil {
			return nil, err
		}
		name, typ, err := s.machine(in.StateMachineArn)
		if err != nil {
			return nil, err
		}
		return map[string]any{"stateMachineArn": in.StateMachineArn, "name": name, "status": "ACTIVE", "type": typ,
			"definition": `{"StartAt":"Done","States":{"Done":{"Type":"Succeed"}}}`,
			"roleArn":    "arn:aws:iam::" + s.Account + ":role/local", "creationDate": epoch(time.Now())}, nil
	case "StartExecution":
		var in struct {
			StateMachineArn string  `json:"stateMachineArn"`
			Name            *string `json:"name"`
			Input           *string `json:"input"`
			TraceHeader     *string `json:"traceHeader"`
		}
		if err := decodeStrict(body, &in); err != nil {
			return nil, err
		}
		name, typ, err := s.machine(in.StateMachineArn)
		if err != nil {
			return nil, err
		}
		exName := newID()
		if in.Name != nil {
			exName = *in.Name
		}
		if !validName(exName) {
			return nil, &apiError{Status: http.StatusBadRequest, Code: "InvalidName", Message: "Invalid Name: '" + exName + "'"}
		}
		input := "{}"
		if in.Input != nil {
			input = *in.Input
		}
		if len(input) > MaxStepFunctionsInput {
			return nil, validation("1 validation error detected: Value at 'input' failed to satisfy constraint: Member must have length less than or equal to %d", MaxStepFunctionsInput)
		}
		if !json.Valid([]byte(input)) {
			return nil, &apiError{Status: http.StatusBadRequest, Code: "InvalidExecutionInput", Message: "Invalid State Machine Execution Input: not valid JSON"}
		}
		arn := "arn:aws:states:" + s.Region + ":" + s.Account + ":execution:" + name + ":" + exName
		if typ == "EXPRESS" {
			arn = "arn:aws:states:" + s.Region + ":" + s.Account + ":express:" + name + ":" + exName + ":" + newID()
		} else if ex, ok := s.executions[arn]; ok {
			if ex.Status == "RUNNING" && ex.Input == input {
				return map[string]any{"executionArn": ex.ARN, "startDate": epoch(ex.Started)}, nil
			}
			return nil, &apiError{Status: http.StatusBadRequest, Code: "ExecutionAlreadyExists", Message: "Execution Already Exists: '" + arn + "'"}
		}
		ex := &Execution{ARN: arn, StateMachineARN: in.StateMachineArn, Name: exName, Input: input, Status: "RUNNING", Started: time.Now().UTC()}
		s.executions[arn] = ex
		s.starts = append(s.starts, arn)
		if s.OnStart != nil {
			s.OnStart(*ex)
		}
		return map[string]any{"executionArn": arn, "startDate": epoch(ex.Started)}, nil
	case "DescribeExecution":
		var in struct {
			ExecutionArn string `json:"executionArn"`
			IncludedData string `json:"includedData,omitempty"`
		}
		if err := decodeStrict(body, &in); err != nil {
			return nil, err
		}
		if !strings.HasPrefix(in.ExecutionArn, "arn:aws:states:"+s.Region+":"+s.Account+":execution:") {
			return nil, &apiError{Status: http.StatusBadRequest, Code: "InvalidArn", Message: "Invalid Arn: '" + in.ExecutionArn + "'"}
		}
		ex, ok := s.executions[in.ExecutionArn]
		if !ok {
			return nil, &apiError{Status: http.StatusBadRequest, Code: "ExecutionDoesNotExist", Message: "Execution Does Not Exist: '" + in.ExecutionArn + "'"}
		}
		out := map[string]any{"executionArn": ex.ARN, "stateMachineArn": ex.StateMachineARN, "name": ex.Name, "status": ex.Status,
			"startDate": epoch(ex.Started), "input": ex.Input, "inputDetails": map[string]bool{"included": true}}
		if !ex.Stopped.IsZero() {
			out["stopDate"] = epoch(ex.Stopped)
		}
		return out, nil
	}
	return nil, &apiError{Status: http.StatusBadRequest, Code: "UnknownOperationException", Message: "this local Step Functions has StartExecution, DescribeExecution and DescribeStateMachine only, not " + op}
}
