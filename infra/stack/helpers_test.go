package stack_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/effectively-once/webhooks/infra/pipeline"
	"github.com/effectively-once/webhooks/infra/stack"
)

// The synthesized variants the tests share. Each synth starts the jsii
// runtime's work over again, so each variant is built once per test binary.
var (
	variants   = map[string]*synthed{}
	variantsMu sync.Mutex
	assetDir   string
)

func TestMain(m *testing.M) {
	// Node 20 (CI's) still runs the jsii runtime; its end-of-life banner on
	// every test binary is noise (infra/README.md asks for Node 22+).
	if os.Getenv("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION") == "" {
		os.Setenv("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
	}
	dir, err := os.MkdirTemp("", "infra-assets-")
	if err != nil {
		panic(err)
	}
	for _, fn := range []string{pipeline.Intake, pipeline.Processor, pipeline.Dispatcher, pipeline.Reconciler} {
		if err := os.MkdirAll(filepath.Join(dir, fn), 0o755); err != nil {
			panic(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fn, "bootstrap"), []byte("fake "+fn), 0o755); err != nil {
			panic(err)
		}
	}
	assetDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	jsii.Close()
	os.Exit(code)
}

// synthed is one synthesized stack with its template as plain JSON.
type synthed struct {
	stack    *stack.Stack
	template assertions.Template
	res      map[string]map[string]any // logical id -> resource
	outputs  map[string]any
}

// fakeAssets resolves every function to a built fake binary, except those
// named in missing, which get the placeholder.
func fakeAssets(missing ...string) stack.AssetResolver {
	return func(fn string) (string, bool, error) {
		for _, m := range missing {
			if m == fn {
				return filepath.Join(assetDir, fn), false, nil
			}
		}
		return filepath.Join(assetDir, fn), true, nil
	}
}

// cdkContext is cdk.json's context: what `cdk synth` sees.
func cdkContext(t testing.TB) map[string]any {
	t.Helper()
	root, err := stack.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "cdk.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Context map[string]any `json:"context"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("cdk.json: %v", err)
	}
	return doc.Context
}

// synth builds (once) the variant name: cdk.json's context with overrides
// applied, cdk-nag attached as the app attaches it.
func synth(t testing.TB, name string, overrides map[string]any, missing ...string) *synthed {
	t.Helper()
	variantsMu.Lock()
	defer variantsMu.Unlock()
	if s, ok := variants[name]; ok {
		return s
	}
	ctx := cdkContext(t)
	for k, v := range overrides {
		ctx[k] = v
	}
	app := awscdk.NewApp(&awscdk.AppProps{Context: &ctx})
	cfg, err := stack.FromContext(func(k string) any { return app.Node().TryGetContext(jsii.String(k)) })
	if err != nil {
		t.Fatalf("context: %v", err)
	}
	cfg.Assets = fakeAssets(missing...)
	st, err := stack.New(app, cfg, nil)
	if err != nil {
		t.Fatalf("stack: %v", err)
	}
	stack.AddChecks(app, false)
	tpl := assertions.Template_FromStack(st.Stack, nil)
	var doc struct {
		Resources map[string]map[string]any `json:"Resources"`
		Outputs   map[string]any            `json:"Outputs"`
	}
	b, _ := json.Marshal(tpl.ToJSON())
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	s := &synthed{stack: st, template: tpl, res: doc.Resources, outputs: doc.Outputs}
	variants[name] = s
	return s
}

// Variants used across the tests.
func defaultStack(t testing.TB) *synthed { return synth(t, "default", nil) }

// fullStack turns every optional feature on: tracing, alarm email, two
// sources (one with an existing secret, Stripe with a source of truth and
// an API key for thin events)
// and an SNS source (no secret), effects with created and given
// secrets, deletion protection off, and a reconciler not built yet.
func fullStack(t testing.TB) *synthed {
	return synth(t, "full", map[string]any{
		"tracing":            "true",
		"alarmEmail":         "oncall@example.com",
		"deletionProtection": false,
		"sources": `[{"name":"stripe","kind":"stripe","truth":{"kind":"stripe"},"api":{"timeoutSeconds":3}},
			{"name":"shop","kind":"shopify","secretArn":"arn:aws:secretsmanager:eu-west-1:123456789012:secret:shop-hmac-AbCdEf"},
			{"name":"ses","kind":"sns","options":{"topic_arns":"arn:aws:sns:eu-west-1:123456789012:ses-events"}}]`,
		"effects": []any{
			map[string]any{"kind": "refund", "url": "https://payments.example/refunds", "statusUrl": "https://payments.example/refunds/status", "secret": true, "timeoutSeconds": 10,
				"scopes": []any{"shop"}},
			map[string]any{"kind": "notify", "url": "https://notify.example/send", "secretArn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:notify-token-AbCdEf",
				"scopes": []any{"*"}},
			map[string]any{"kind": "suppression.add", "url": "https://mail.example/suppress", "scopes": []any{"ses"}},
		},
	}, pipeline.Reconciler)
}

// targetsStack has one effect per kind of AWS target, from the context's
// "target" key (and an SQS queue's customer managed key, "kmsKeyArn").
func targetsStack(t testing.TB) *synthed {
	return synth(t, "targets", map[string]any{
		"effects": []any{
			map[string]any{"kind": "ship_order", "target": targetFunction, "scopes": []any{"stripe"}},
			map[string]any{"kind": "notify", "target": targetQueue, "kmsKeyArn": targetKey, "scopes": []any{"stripe"}},
			map[string]any{"kind": "order.paid", "target": targetBus, "scopes": []any{"stripe"}},
			map[string]any{"kind": "fulfil", "target": targetMachine, "scopes": []any{"stripe"}},
		},
	})
}

// The targets of targetsStack.
const (
	targetFunction = "arn:aws:lambda:eu-west-1:123456789012:function:fulfilment"
	targetQueue    = "arn:aws:sqs:eu-west-1:123456789012:notices.fifo"
	targetKey      = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
	targetBus      = "arn:aws:events:eu-west-1:123456789012:event-bus/orders"
	targetMachine  = "arn:aws:states:eu-west-1:123456789012:stateMachine:fulfil"
)

// stackOf returns the stack a table-driven case names: "default", "full",
// "targets" or "warehouse" (the default with the warehouse sink on).
func stackOf(t testing.TB, name string) *synthed {
	switch name {
	case "full":
		return fullStack(t)
	case "targets":
		return targetsStack(t)
	case "warehouse":
		return synth(t, "warehouse-default-prefix", map[string]any{"warehouse": "true"})
	}
	return defaultStack(t)
}

// ofType lists the resources of one type, by logical id.
func (s *synthed) ofType(typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range s.res {
		if r["Type"] == typ {
			out[id] = r
		}
	}
	return out
}

func props(r map[string]any) map[string]any {
	p, _ := r["Properties"].(map[string]any)
	return p
}

// function finds a Lambda by its short name; it returns its logical id and
// properties.
func (s *synthed) function(t testing.TB, short string) (string, map[string]any) {
	t.Helper()
	want := s.stack.Config.Prefix() + short
	for id, r := range s.ofType("AWS::Lambda::Function") {
		if props(r)["FunctionName"] == want {
			return id, props(r)
		}
	}
	t.Fatalf("no function %s", want)
	return "", nil
}

// ref returns the logical id a {"Ref": id} or {"Fn::GetAtt": [id, ...]} names.
func ref(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	if r, ok := m["Ref"].(string); ok {
		return r
	}
	if ga, ok := m["Fn::GetAtt"].([]any); ok && len(ga) > 0 {
		s, _ := ga[0].(string)
		return s
	}
	return ""
}

// render turns an intrinsic into a string, with each referenced resource
// replaced by what fill returns for it.
func render(v any, fill func(logicalID string) string) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return fmt.Sprint(x)
	case map[string]any:
		if j, ok := x["Fn::Join"].([]any); ok && len(j) == 2 {
			sep, _ := j[0].(string)
			var parts []string
			for _, p := range j[1].([]any) {
				parts = append(parts, render(p, fill))
			}
			return strings.Join(parts, sep)
		}
		if id := ref(x); id != "" {
			return fill(id)
		}
		if r, ok := x["Ref"].(string); ok {
			return "<" + r + ">"
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// fakeValue stands in for a deployed resource's value: secrets become ARNs
// (what the runtime's config checks), queues URLs, everything else a name.
func (s *synthed) fakeValue(id string) string {
	switch s.res[id]["Type"] {
	case "AWS::SecretsManager::Secret":
		return "arn:aws:secretsmanager:eu-west-1:123456789012:secret:" + id + "-AbCdEf"
	case "AWS::SQS::Queue":
		return "https://sqs.eu-west-1.amazonaws.com/123456789012/" + fmt.Sprint(props(s.res[id])["QueueName"])
	case "AWS::DynamoDB::Table":
		return fmt.Sprint(props(s.res[id])["TableName"])
	}
	return id
}

// env renders a function's environment as the function would read it.
func (s *synthed) env(t testing.TB, short string) map[string]string {
	t.Helper()
	_, p := s.function(t, short)
	vars, _ := p["Environment"].(map[string]any)["Variables"].(map[string]any)
	out := map[string]string{}
	for k, v := range vars {
		out[k] = render(v, s.fakeValue)
	}
	return out
}

// roleActions lists, per IAM action, the resources a role's policies grant
// it on (rendered), and whether any statement is not a plain Allow.
func (s *synthed) roleActions(t testing.TB, roleID string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, pol := range s.ofType("AWS::IAM::Policy") {
		attached := false
		for _, r := range props(pol)["Roles"].([]any) {
			if ref(r) == roleID {
				attached = true
			}
		}
		if !attached {
			continue
		}
		doc := props(pol)["PolicyDocument"].(map[string]any)
		for _, st := range doc["Statement"].([]any) {
			stmt := st.(map[string]any)
			if stmt["Effect"] != "Allow" {
				t.Fatalf("role %s: statement %v is not an Allow", roleID, stmt)
			}
			var actions, resources []any
			switch a := stmt["Action"].(type) {
			case string:
				actions = []any{a}
			case []any:
				actions = a
			}
			switch r := stmt["Resource"].(type) {
			case []any:
				resources = r
			default:
				resources = []any{r}
			}
			for _, a := range actions {
				for _, r := range resources {
					out[a.(string)] = append(out[a.(string)], render(r, func(id string) string { return "{" + id + "}" }))
				}
			}
		}
	}
	for a := range out {
		sort.Strings(out[a])
	}
	return out
}

// ddbWrites are the DynamoDB actions that write items (TransactWriteItems
// is authorized as PutItem/UpdateItem per item, so it never appears).
var ddbWrites = []string{"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"}

// ledgerWrites lists, per DynamoDB write action a role holds, the partition
// key patterns (dynamodb:LeadingKeys) it may write, sorted. A write granted
// without that condition, or without the Null condition that makes the key
// required, fails the test: it would allow every key.
func (s *synthed) ledgerWrites(t testing.TB, roleID string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, pol := range s.ofType("AWS::IAM::Policy") {
		attached := false
		for _, r := range props(pol)["Roles"].([]any) {
			attached = attached || ref(r) == roleID
		}
		if !attached {
			continue
		}
		for _, st := range props(pol)["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			stmt := st.(map[string]any)
			var actions []string
			switch a := stmt["Action"].(type) {
			case string:
				actions = []string{a}
			case []any:
				for _, x := range a {
					actions = append(actions, x.(string))
				}
			}
			writes := slices.ContainsFunc(actions, func(a string) bool { return slices.Contains(ddbWrites, a) || a == "dynamodb:*" })
			if !writes {
				continue
			}
			cond, _ := stmt["Condition"].(map[string]any)
			like, _ := cond["ForAllValues:StringLike"].(map[string]any)
			null, _ := cond["Null"].(map[string]any)
			var patterns []string
			switch p := like["dynamodb:LeadingKeys"].(type) {
			case string:
				patterns = []string{p}
			case []any:
				for _, x := range p {
					patterns = append(patterns, x.(string))
				}
			}
			if len(patterns) == 0 || null["dynamodb:LeadingKeys"] != "false" || len(cond) != 2 {
				t.Errorf("role %s: %v granted without a required dynamodb:LeadingKeys condition: %v", roleID, actions, stmt["Condition"])
				continue
			}
			for _, a := range actions {
				// a statement may also hold a read with the same keys
				if slices.Contains(ddbWrites, a) || a == "dynamodb:*" {
					out[a] = append(out[a], patterns...)
				}
			}
		}
	}
	for a := range out {
		out[a] = sorted(out[a])
	}
	return out
}

// iamLike is IAM's StringLike: * matches any run of characters, ? one.
func iamLike(pattern, value string) bool {
	re := "^" + strings.NewReplacer(`\*`, ".*", `\?`, ".").Replace(regexp.QuoteMeta(pattern)) + "$"
	return regexp.MustCompile(re).MatchString(value)
}

// mayWrite says whether writes (from ledgerWrites) let action write an
// item whose partition key is pk.
func mayWrite(writes map[string][]string, action, pk string) bool {
	return slices.ContainsFunc(writes[action], func(p string) bool { return iamLike(p, pk) })
}

// roleOf returns the logical id of a function's role.
func (s *synthed) roleOf(t testing.TB, short string) string {
	t.Helper()
	_, p := s.function(t, short)
	return ref(p["Role"])
}

// noPanic turns a failed assertions.* call (a jsii panic) into a test
// failure that names what was checked.
func noPanic(t testing.TB, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s: %v", what, r)
		}
	}()
	f()
}

func keys[M ~map[string]V, V any](m M) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
