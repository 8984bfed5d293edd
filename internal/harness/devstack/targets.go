package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/outbox"
)

// LocalAccount is the account of the local stack's AWS targets: an
// effect's target ARN names it, with localaws.Region (the region every
// local function runs in), as
// arn:aws:lambda:us-east-1:000000000000:function:<name>.
const LocalAccount = "000000000000"

// Targets are the local stand-ins of the AWS targets an effect in the
// local configuration may name (outbox's AWS targets), which the
// dispatcher reaches through AWS_ENDPOINT_URL_LAMBDA,
// AWS_ENDPOINT_URL_EVENTBRIDGE and AWS_ENDPOINT_URL_SFN (the SDK's
// service-specific endpoint variables), so its code has no local branch:
//
//   - Lambda: a Lambda Invoke front (localaws.Lambda) in front of the
//     team's effect functions (File.EffectFunctions), each a main of the
//     team's module under functions/<name>, built and run under
//     aws-lambda-rie like the pipeline's functions. Each gets its own
//     directory for whatever it keeps (LOCAL_STATE_DIR).
//   - EventBridge: a local PutEvents (localaws.EventBridge); every bus an
//     effect names is created.
//   - Step Functions: a local StartExecution/DescribeExecution
//     (localaws.StepFunctions); every state machine an effect names is
//     created STANDARD. It runs no workflow: executions stay RUNNING.
//
// SQS targets are queues of the local SQS (goaws), created by the stack
// when an effect names one.
type Targets struct {
	Lambda        *localaws.Lambda
	EventBridge   *localaws.EventBridge
	StepFunctions *localaws.StepFunctions
	// stateDirs maps an effect function to its LOCAL_STATE_DIR.
	stateDirs map[string]string
}

// StateDir is the directory the effect function fn keeps its state in
// (its LOCAL_STATE_DIR).
func (t *Targets) StateDir(fn string) string { return t.stateDirs[fn] }

// Env is the dispatcher's endpoint variables for the local targets.
func (t *Targets) Env() []string {
	return []string{"AWS_ENDPOINT_URL_LAMBDA=" + t.Lambda.URL, "AWS_ENDPOINT_URL_EVENTBRIDGE=" + t.EventBridge.URL,
		"AWS_ENDPOINT_URL_SFN=" + t.StepFunctions.URL}
}

// Close stops the local endpoints (the effect functions are instances of
// the stack, stopped with it).
func (t *Targets) Close() {
	if t == nil {
		return
	}
	t.Lambda.Close()
	t.EventBridge.Close()
	t.StepFunctions.Close()
}

// checkTargets checks the AWS targets of the local effects: each in the
// local region and account, and a Lambda function target one of the
// effect functions.
func checkTargets(cfgs []outbox.EffectConfig, functions []string) error {
	for _, fn := range functions {
		if slices.Contains(Functions, fn) {
			return fmt.Errorf("effect_functions: %q is a function of the pipeline, not an effect's", fn)
		}
		if t, err := outbox.ParseTarget("arn:aws:lambda:"+localaws.Region+":"+LocalAccount+":function:"+fn, ""); err != nil || t.Name != fn {
			return fmt.Errorf("effect_functions: %q is not a Lambda function name (letters, digits, - and _)", fn)
		}
	}
	for _, c := range cfgs {
		if c.Target == "" {
			continue
		}
		t, err := outbox.ParseTarget(c.Target, localaws.Region)
		if err != nil {
			return fmt.Errorf("effect %s: target: %v", c.Kind, err)
		}
		if t.Account != LocalAccount {
			return fmt.Errorf("effect %s: target %s: the local targets are in account %s", c.Kind, c.Target, LocalAccount)
		}
		if t.Kind == outbox.TargetLambda {
			if t.Qualifier != "" && t.Qualifier != "$LATEST" {
				return fmt.Errorf("effect %s: target %s: the local Lambda has no versions or aliases", c.Kind, c.Target)
			}
			if !slices.Contains(functions, t.Name) {
				return fmt.Errorf("effect %s: target %s: no effect function %q (list it in effect_functions, with its main in functions/%s)",
					c.Kind, c.Target, t.Name, t.Name)
			}
		}
	}
	return nil
}

// startTargets starts the local targets, creates what the effects name
// (buses, state machines, queues) and runs the effect functions behind the
// Lambda front. ports are the instances' ports when AutoPorts picked them.
func (s *Stack) startTargets(ctx context.Context, cfgs []outbox.EffectConfig, dynURL, sqsURL string, port *int, auto *[]int) error {
	t := &Targets{Lambda: localaws.NewLambda(localaws.Region, LocalAccount),
		EventBridge:   localaws.NewEventBridge(localaws.Region, LocalAccount),
		StepFunctions: localaws.NewStepFunctions(localaws.Region, LocalAccount), stateDirs: map[string]string{}}
	s.Targets = t
	for _, c := range cfgs {
		if c.Target == "" {
			continue
		}
		tg, _ := outbox.ParseTarget(c.Target, localaws.Region) // checked by LoadFile
		switch tg.Kind {
		case outbox.TargetEventBridge:
			t.EventBridge.CreateBus(tg.Name)
			s.logs.Printf("targets", "%s: PutEvents on bus %s (local EventBridge %s; GET /_dev/targets shows what it was put)", c.Kind, tg.Name, t.EventBridge.URL)
		case outbox.TargetStepFunctions:
			t.StepFunctions.CreateStateMachine(tg.Name, "STANDARD")
			s.logs.Printf("targets", "%s: StartExecution of STANDARD state machine %s (local Step Functions %s, runs no workflow)", c.Kind, tg.Name, t.StepFunctions.URL)
		case outbox.TargetSQS:
			if _, err := s.SQS.CreateQueue(ctx, sqsCreate(tg)); err != nil {
				return fmt.Errorf("create queue %s for effect %s: %w", tg.Name, c.Kind, err)
			}
			s.logs.Printf("targets", "%s: SendMessage to queue %s (local SQS)", c.Kind, tg.Name)
		case outbox.TargetLambda:
			s.logs.Printf("targets", "%s: Invoke of function %s (local Lambda front %s)", c.Kind, tg.Name, t.Lambda.URL)
		}
	}
	for _, fn := range s.file.EffectFunctions {
		dir := filepath.Join(s.cfg.BuildDir, fn, "state")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		t.stateDirs[fn] = dir
		in := &instance{name: fn + "-1", fn: fn, port: *port, apiPort: *port - s.cfg.RIEPort + s.cfg.RIEAPIPort}
		*port++
		if s.cfg.AutoPorts {
			in.port, in.apiPort, *auto = (*auto)[0], (*auto)[1], (*auto)[2:]
		}
		if err := s.startInstance(ctx, in, dynURL, sqsURL); err != nil {
			return err
		}
		s.all = append(s.all, in)
		if err := WaitPort(ctx, in.addr(), nil, 15*time.Second); err != nil {
			return fmt.Errorf("%s did not start: %w", in.name, err)
		}
		arn := t.Lambda.AddFunction(fn, &localaws.Function{Addr: in.addr()})
		s.logs.Printf("targets", "effect function %s: %s (state in %s)", fn, arn, dir)
	}
	return nil
}

// effectFunctionEnv is an effect function's environment: what Lambda
// gives every function, and its state directory. It gets none of the
// pipeline's configuration or secrets: it is the team's own service.
func (s *Stack) effectFunctionEnv(fn string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"AWS_REGION=" + localaws.Region, "AWS_DEFAULT_REGION=" + localaws.Region,
		"AWS_LAMBDA_FUNCTION_NAME=" + fn,
		"AWS_LAMBDA_FUNCTION_TIMEOUT=" + strconv.Itoa(int(effectFunctionTimeout.Seconds())),
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256",
		"LOCAL_STATE_DIR=" + s.Targets.StateDir(fn),
	}
}

// effectFunctionTimeout is an effect function's timeout on the local
// stack: above every effect's call timeout (at most 20 s), so the
// dispatcher gives up first, as it would on a function deployed with a
// longer timeout than its callers wait.
const effectFunctionTimeout = 30 * time.Second

// isEffectFunction reports whether fn is one of the team's effect
// functions rather than the pipeline's.
func (s *Stack) isEffectFunction(fn string) bool {
	return slices.Contains(s.file.EffectFunctions, fn) && !slices.Contains(Functions, fn)
}

// sqsCreate is the CreateQueue of an SQS target's queue.
func sqsCreate(t outbox.Target) *sqs.CreateQueueInput {
	in := &sqs.CreateQueueInput{QueueName: aws.String(t.Name)}
	if t.FIFO() {
		in.Attributes = map[string]string{"FifoQueue": "true"}
	}
	return in
}

// TargetsState is the answer of GET /_dev/targets: what reached each local
// target.
type TargetsState struct {
	// Invocations per effect function (each one reached its runtime).
	Invocations map[string]int `json:"invocations"`
	// Events put per bus, with their detail-type and operation id.
	Events map[string][]string `json:"events"`
	// Executions per state machine, by name, with their status.
	Executions map[string][]string `json:"executions"`
}

// State reports what reached the local targets.
func (t *Targets) State(cfgs []outbox.EffectConfig, functions []string) TargetsState {
	st := TargetsState{Invocations: map[string]int{}, Events: map[string][]string{}, Executions: map[string][]string{}}
	for _, fn := range functions {
		st.Invocations[fn] = t.Lambda.Invocations(fn)
	}
	for _, c := range cfgs {
		tg, err := outbox.ParseTarget(c.Target, "")
		if c.Target == "" || err != nil {
			continue
		}
		switch tg.Kind {
		case outbox.TargetEventBridge:
			evs := []string{}
			for _, ev := range t.EventBridge.Events(tg.Name) {
				evs = append(evs, ev.DetailType+" "+operationOf(ev.Detail))
			}
			st.Events[tg.Name] = evs
		case outbox.TargetStepFunctions:
			exs := []string{}
			for _, ex := range t.StepFunctions.Executions(tg.Name) {
				exs = append(exs, ex.Name+" "+ex.Status)
			}
			st.Executions[tg.Name] = exs
		}
	}
	return st
}

// operationOf reads a TargetCall's operation id.
func operationOf(detail string) string {
	var c outbox.TargetCall
	if err := json.Unmarshal([]byte(detail), &c); err != nil {
		return strings.TrimSpace(detail)
	}
	return c.OperationID
}
