package localaws_test

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
)

// The local Step Functions answers StartExecution as the API reference
// says for a STANDARD workflow: the same name and input as a running
// execution is the original start again; a closed execution's name, or
// another input, is ExecutionAlreadyExists; names and inputs are checked.
func TestLocalStepFunctionsStartExecutionContract(t *testing.T) {
	ctx := context.Background()
	sf := localaws.NewStepFunctions("eu-west-1", "123456789012")
	defer sf.Close()
	sm := sf.CreateStateMachine("fulfil", "STANDARD")
	c := sf.Client()
	start := func(name, input string) (*sfn.StartExecutionOutput, error) {
		return c.StartExecution(ctx, &sfn.StartExecutionInput{StateMachineArn: aws.String(sm), Name: aws.String(name), Input: aws.String(input)})
	}

	first, err := start("op-1", `{"a":1}`)
	if err != nil {
		t.Fatal(err)
	}
	again, err := start("op-1", `{"a":1}`)
	if err != nil || aws.ToString(again.ExecutionArn) != aws.ToString(first.ExecutionArn) || !again.StartDate.Equal(*first.StartDate) {
		t.Fatalf("same name and input while running: %+v %v, want the original answer %+v", again, err, first)
	}
	if _, err := start("op-1", `{"a":2}`); errorCode(err) != "ExecutionAlreadyExists" {
		t.Fatalf("another input: %v", err)
	}
	if err := sf.Finish(aws.ToString(first.ExecutionArn), "FAILED"); err != nil {
		t.Fatal(err)
	}
	if _, err := start("op-1", `{"a":1}`); errorCode(err) != "ExecutionAlreadyExists" {
		t.Fatalf("same name and input once closed: %v", err)
	}
	if n := len(sf.Executions("fulfil")); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
	d, err := c.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: first.ExecutionArn})
	if err != nil || d.Status != types.ExecutionStatusFailed || aws.ToString(d.Input) != `{"a":1}` || aws.ToString(d.Name) != "op-1" || d.StopDate == nil {
		t.Fatalf("describe: %+v %v", d, err)
	}
	missing := strings.Replace(aws.ToString(first.ExecutionArn), "op-1", "op-2", 1)
	if _, err := c.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: aws.String(missing)}); errorCode(err) != "ExecutionDoesNotExist" {
		t.Fatalf("describe a missing execution: %v", err)
	}

	for name, tc := range map[string]struct{ name, input, arn, code string }{
		"name with a colon":  {"a:b", `{}`, sm, "InvalidName"},
		"name with a space":  {"a b", `{}`, sm, "InvalidName"},
		"name of 81":         {strings.Repeat("n", 81), `{}`, sm, "InvalidName"},
		"input not JSON":     {"op-3", `{`, sm, "InvalidExecutionInput"},
		"input over 256 KiB": {"op-4", `"` + strings.Repeat("a", 262144) + `"`, sm, "ValidationException"},
		"no such machine":    {"op-5", `{}`, strings.Replace(sm, "fulfil", "other", 1), "StateMachineDoesNotExist"},
		"a version ARN":      {"op-6", `{}`, sm + ":1", "InvalidArn"},
		"another region's":   {"op-7", `{}`, strings.Replace(sm, "eu-west-1", "us-east-1", 1), "InvalidArn"},
	} {
		_, err := c.StartExecution(ctx, &sfn.StartExecutionInput{StateMachineArn: aws.String(tc.arn), Name: aws.String(tc.name), Input: aws.String(tc.input)})
		if errorCode(err) != tc.code {
			t.Errorf("%s: %v, want %s", name, err, tc.code)
		}
	}

	// EXPRESS: every start is a new execution, and DescribeExecution does
	// not see them; DescribeStateMachine says which type a machine is.
	ex := sf.CreateStateMachine("fast", "EXPRESS")
	for range 2 {
		if _, err := c.StartExecution(ctx, &sfn.StartExecutionInput{StateMachineArn: aws.String(ex), Name: aws.String("op-1"), Input: aws.String(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(sf.Executions("fast")); n != 2 {
		t.Fatalf("EXPRESS: %d executions, want 2 (not idempotent)", n)
	}
	if m, err := c.DescribeStateMachine(ctx, &sfn.DescribeStateMachineInput{StateMachineArn: aws.String(ex)}); err != nil || m.Type != types.StateMachineTypeExpress {
		t.Fatalf("describe state machine: %+v %v", m, err)
	}
}
