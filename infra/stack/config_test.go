package stack_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"

	"github.com/effectively-once/webhooks/infra/pipeline"
	"github.com/effectively-once/webhooks/infra/stack"
)

// Properties that carry a physical name, per resource type.
var nameProps = map[string]string{
	"AWS::DynamoDB::Table": "TableName", "AWS::SQS::Queue": "QueueName", "AWS::Lambda::Function": "FunctionName",
	"AWS::Logs::LogGroup": "LogGroupName", "AWS::Events::Rule": "Name", "AWS::CloudWatch::Alarm": "AlarmName",
	"AWS::CloudWatch::Dashboard": "DashboardName", "AWS::SNS::Topic": "TopicName", "AWS::SecretsManager::Secret": "Name",
	"AWS::ApiGatewayV2::Api": "Name",
}

func physicalNames(t *testing.T, st awscdk.Stack) map[string]string {
	t.Helper()
	b, _ := json.Marshal(assertions.Template_FromStack(st, nil).ToJSON())
	var doc struct {
		Resources map[string]map[string]any `json:"Resources"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for id, r := range doc.Resources {
		prop, ok := nameProps[r["Type"].(string)]
		if !ok {
			continue
		}
		name, ok := props(r)[prop].(string)
		if !ok {
			t.Errorf("%s (%s) has no literal %s", id, r["Type"], prop)
			continue
		}
		out[name] = id
	}
	return out
}

func TestTwoStagesLiveInOneAccountWithoutNameClashes(t *testing.T) {
	// GIVEN one app with the dev and prod stages
	app := awscdk.NewApp(nil)
	var stacks []*stack.Stack
	for _, stage := range []string{"dev", "prod"} {
		ctx := cdkContext(t)
		ctx["stage"] = stage
		cfg, err := stack.FromContext(func(k string) any { return ctx[k] })
		if err != nil {
			t.Fatal(err)
		}
		cfg.Assets = fakeAssets()
		st, err := stack.New(app, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		stacks = append(stacks, st)
	}
	// WHEN both are synthesized
	dev, prod := physicalNames(t, stacks[0].Stack), physicalNames(t, stacks[1].Stack)
	// THEN stack names differ and no physical name is shared; each carries its stage
	if *stacks[0].StackName() != "Webhooks-dev" || *stacks[1].StackName() != "Webhooks-prod" {
		t.Fatalf("stack names %s %s", *stacks[0].StackName(), *stacks[1].StackName())
	}
	if len(dev) < 20 {
		t.Fatalf("only %d named resources: %v", len(dev), dev)
	}
	for name := range dev {
		if _, clash := prod[name]; clash {
			t.Errorf("both stages use the name %q", name)
		}
		if !strings.Contains(name, "dev") {
			t.Errorf("dev name %q does not carry the stage", name)
		}
	}
	for name := range prod {
		if !strings.Contains(name, "prod") {
			t.Errorf("prod name %q does not carry the stage", name)
		}
	}
}

func TestWrongContextFailsSynthWithTheKeyNamed(t *testing.T) {
	for name, c := range map[string]struct {
		override map[string]any
		want     string
	}{
		"stage with capitals":     {map[string]any{"stage": "Prod"}, "stage"},
		"no sources":              {map[string]any{"sources": []any{}}, "sources"},
		"duplicate source":        {map[string]any{"sources": `[{"name":"a","kind":"stripe"},{"name":"a","kind":"github"}]`}, "appears twice"},
		"unknown field":           {map[string]any{"sources": `[{"name":"a","kind":"stripe","secret":"whsec_x"}]`}, "sources"},
		"secret value as ARN":     {map[string]any{"sources": `[{"name":"a","kind":"stripe","secretArn":"whsec_123"}]`}, "secretArn"},
		"unknown provider kind":   {map[string]any{"sources": `[{"name":"a","kind":"paypal"}]`}, "kind"},
		"plain http effect":       {map[string]any{"effects": `[{"kind":"refund","url":"http://pay.example/r","scopes":["stripe"]}]`}, "effects"},
		"effect timeout too long": {map[string]any{"effects": `[{"kind":"refund","url":"https://pay.example/r","timeoutSeconds":60,"scopes":["stripe"]}]`}, "timeout"},
		"effect without scopes":   {map[string]any{"effects": `[{"kind":"refund","url":"https://pay.example/r"}]`}, `effects[0] (refund): scopes is required`},
		"effect scopes not alone": {map[string]any{"effects": `[{"kind":"refund","url":"https://pay.example/r","scopes":["*","stripe"]}]`}, `"*" allows every scope and must be alone`},
		"effect scope no source":  {map[string]any{"effects": `[{"kind":"refund","url":"https://pay.example/r","scopes":["strpe"]}]`}, `scope "strpe" is no source's: the sources are stripe`},
		"effect target of no target service": {map[string]any{"effects": `[{"kind":"refund","target":"arn:aws:sns:eu-west-1:123456789012:refunds","scopes":["stripe"]}]`},
			`effect 0 ("refund"): target: "arn:aws:sns:eu-west-1:123456789012:refunds" is an ARN of service "sns"`},
		"effect key without an sqs target": {map[string]any{"effects": `[{"kind":"refund","target":"arn:aws:lambda:eu-west-1:123456789012:function:r","kmsKeyArn":"arn:aws:kms:eu-west-1:123456789012:key/k-1","scopes":["stripe"]}]`},
			`effects[0] (refund).kmsKeyArn`},
		"log retention":            {map[string]any{"logRetentionDays": 10}, "logRetentionDays"},
		"sources over 4 KB":        {map[string]any{"sources": manySources(30)}, "Lambda environment"},
		"retention below minimum":  {map[string]any{"retentionDays": "2"}, "retentionDays"},
		"tracing not a bool":       {map[string]any{"tracing": "yes"}, "tracing"},
		"alarm email":              {map[string]any{"alarmEmail": "oncall"}, "alarmEmail"},
		"negative reservation":     {map[string]any{"intakeReservedConcurrency": -1.0}, "intakeReservedConcurrency"},
		"reservation not a count":  {map[string]any{"intakeReservedConcurrency": "all"}, "intakeReservedConcurrency"},
		"too many due shards":      {map[string]any{"dueShards": 65.0}, "dueShards"},
		"read narrower than write": {map[string]any{"dueShards": "16", "dueShardsRead": "8"}, `dueShardsRead: "8" is refused by the functions at start`},
		"provisioned min above max": {map[string]any{"billing": `{"provisioned":{"read":{"min":5,"max":1},"write":{"max":5}}}`},
			"billing.provisioned.read: min 5 is above max 1"},
	} {
		t.Run(name, func(t *testing.T) {
			// GIVEN cdk.json's context with one wrong value
			ctx := cdkContext(t)
			for k, v := range c.override {
				ctx[k] = v
			}
			// WHEN the configuration is read and the stack built
			cfg, err := stack.FromContext(func(k string) any { return ctx[k] })
			if err == nil {
				cfg.Assets = fakeAssets()
				_, err = stack.New(awscdk.NewApp(nil), cfg, nil)
			}
			// THEN it fails before anything is synthesized, naming the problem
			if !errors.Is(err, stack.ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrConfig mentioning %q", err, c.want)
			}
		})
	}
}

func manySources(n int) []any {
	var out []any
	for i := range n {
		out = append(out, map[string]any{"name": fmt.Sprintf("github-org-%02d", i), "kind": "github"})
	}
	return out
}

func TestAssetsComeFromMakeBuildAndNeverDeployAPlaceholderByAccident(t *testing.T) {
	// GIVEN a tree where intake is built, processor has source but no
	// build, and the reconciler has neither
	root := t.TempDir()
	for _, d := range []string{"build/intake", "functions/intake", "functions/processor"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "build/intake/bootstrap"), []byte("bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	placeholder, err := pipeline.PlaceholderDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		fn      string
		strict  bool
		dir     string
		built   bool
		wantErr bool
	}{
		{"intake", true, filepath.Join(root, "build", "intake"), true, false},
		{"processor", false, placeholder, false, false},
		{"processor", true, "", false, true},
		{"reconciler", true, placeholder, false, false},
	} {
		// WHEN the build resolver looks for the function's code
		dir, built, err := stack.AssetsFromBuild(root, c.strict)(c.fn)
		// THEN a built binary is used, a missing one is a placeholder for
		// synth but an error for deploy unless the function has no source yet
		if dir != c.dir || built != c.built || (err != nil) != c.wantErr {
			t.Errorf("%s strict=%v: %q %v %v", c.fn, c.strict, dir, built, err)
		}
	}
	// AND the construct's placeholder folder exists for cdk synth
	if _, err := os.Stat(filepath.Join(placeholder, "README.md")); err != nil {
		t.Fatal(err)
	}
}

// The due index's shard count reaches every function: each one writes or
// reads the due index and must agree on its shards.
func TestDueShardsReachEveryFunction(t *testing.T) {
	ctx := cdkContext(t)
	ctx["dueShards"], ctx["dueShardsRead"] = "16", "32"
	cfg, err := stack.FromContext(func(k string) any { return ctx[k] })
	if err != nil || cfg.DueShards != 16 || cfg.DueShardsRead != 32 {
		t.Fatalf("config %d/%d, %v", cfg.DueShards, cfg.DueShardsRead, err)
	}
}
