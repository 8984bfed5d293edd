package localaws_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
)

// The local Lambda front answers Invoke as Lambda does, for a real
// bootstrap under aws-lambda-rie, through the real SDK client: the
// function's answer, a function error and a function timeout as
// FunctionError Unhandled, an injected throttle with its Retry-After, and
// the refusals of an unknown function and an oversized request.
func TestLocalLambdaInvokeContract(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	bootstrap, rie, err := localaws.BuildFunction(ctx, dir, "github.com/effectively-once/webhooks/internal/harness/localaws/testdata/effectfn")
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	fn, err := localaws.StartFunction(ctx, rie, bootstrap, []string{"EFFECTFN_DIR=" + state}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer fn.Stop()
	front := localaws.NewLambda("eu-west-1", "123456789012")
	defer front.Close()
	arn := front.AddFunction("fulfil", fn)
	c := front.Client()
	invoke := func(name string, payload []byte) (*lambda.InvokeOutput, error) {
		return c.Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String(name), Payload: payload}, func(o *lambda.Options) { o.Retryer = aws.NopRetryer{} })
	}
	script := func(lines ...string) {
		if err := os.WriteFile(filepath.Join(state, "script"), []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	script("apply", "error", "apply-sleep 1500")
	for i, want := range []struct{ fnErr, payload string }{
		{"", `{"replayed":false,"status":"applied"}`},
		{"Unhandled", `"errorType":"errorString"`},
		{"Unhandled", `"errorType":"Sandbox.Timedout"`},
	} {
		out, err := invoke(arn, []byte(`{"operation_id":"op-1"}`))
		if err != nil || out.StatusCode != 200 || aws.ToString(out.FunctionError) != want.fnErr || !strings.Contains(string(out.Payload), want.payload) || aws.ToString(out.ExecutedVersion) != "$LATEST" {
			t.Fatalf("invoke %d: %+v (%s) %v, want FunctionError %q and %s", i, out, out.Payload, err, want.fnErr, want.payload)
		}
	}
	if n := front.Invocations("fulfil"); n != 3 {
		t.Fatalf("%d invocations, want 3", n)
	}

	front.Throttle(7)
	_, err = invoke(arn, []byte(`{}`))
	var tm *types.TooManyRequestsException
	if !errors.As(err, &tm) || aws.ToString(tm.RetryAfterSeconds) != "7" {
		t.Fatalf("throttle: %v", err)
	}
	for name, tc := range map[string]struct {
		fn      string
		payload []byte
		code    string
	}{
		"unknown function": {strings.Replace(arn, "fulfil", "other", 1), []byte(`{}`), "ResourceNotFoundException"},
		"another region":   {strings.Replace(arn, "eu-west-1", "us-east-1", 1), []byte(`{}`), "ResourceNotFoundException"},
		"a version":        {arn + ":3", []byte(`{}`), "ResourceNotFoundException"},
		"over 6 MB":        {arn, []byte(`"` + strings.Repeat("a", localaws.MaxLambdaSyncRequest) + `"`), "RequestEntityTooLargeException"},
		"not JSON":         {arn, []byte(`{`), "InvalidRequestContentException"},
	} {
		if _, err := invoke(tc.fn, tc.payload); errorCode(err) != tc.code {
			t.Errorf("%s: %v, want %s", name, err, tc.code)
		}
	}
	if n := front.Invocations("fulfil"); n != 3 {
		t.Fatalf("%d invocations after refusals, want 3", n)
	}
}
