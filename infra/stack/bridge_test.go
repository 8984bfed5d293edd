package stack_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/effectively-once/webhooks/infra/pipeline"
	"github.com/effectively-once/webhooks/infra/stack"
	"github.com/effectively-once/webhooks/internal/config"
	"github.com/effectively-once/webhooks/internal/queue"
)

const (
	bridgeStripeSource = "aws.partner/stripe.com/ed_test_FAKE_infra_0001"
	bridgeShopSource   = "aws.partner/shopify.com/1234567/test-FAKE-infra"
)

// bridgeStack: Stripe over both paths, Shopify ("shop") over EventBridge
// only, and an https-only GitHub source.
func bridgeStack(t testing.TB) *synthed {
	t.Helper()
	dir := filepath.Join(assetDir, pipeline.Bridge)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bootstrap"), []byte("fake bridge"), 0o755); err != nil {
		t.Fatal(err)
	}
	return synth(t, "bridge", map[string]any{
		"sources": `[{"name":"stripe","kind":"stripe","delivery":"https+eventbridge","eventSource":"` + bridgeStripeSource + `"},
			{"name":"shop","kind":"shopify","delivery":"eventbridge","eventSource":"` + bridgeShopSource + `"},
			{"name":"gh","kind":"github"}]`,
	})
}

// bridgeWarehouseStack is bridgeStack with the warehouse on.
func bridgeWarehouseStack(t testing.TB) *synthed {
	t.Helper()
	bridgeStack(t) // writes the bridge's bootstrap asset
	return synth(t, "bridgewarehouse", map[string]any{
		"warehouse": "true",
		"sources": `[{"name":"stripe","kind":"stripe","delivery":"https+eventbridge","eventSource":"` + bridgeStripeSource + `"},
			{"name":"shop","kind":"shopify","delivery":"eventbridge","eventSource":"` + bridgeShopSource + `"},
			{"name":"gh","kind":"github"}]`,
	})
}

func (s *synthed) queueID(t testing.TB, name string) string {
	t.Helper()
	for id, q := range s.ofType("AWS::SQS::Queue") {
		if props(q)["QueueName"] == name {
			return id
		}
	}
	t.Fatalf("no queue %s", name)
	return ""
}

func TestBridgeExistsOnlyWhenASourceDeliversThroughEventBridge(t *testing.T) {
	for _, variant := range []string{"default", "full"} {
		// GIVEN stacks whose sources all deliver by HTTPS
		s := stackOf(t, variant)
		// THEN there is no bridge, no bridge DLQ, no rule on a partner bus
		for _, f := range s.ofType("AWS::Lambda::Function") {
			if strings.HasSuffix(props(f)["FunctionName"].(string), "-bridge") {
				t.Errorf("%s: a bridge function without an eventbridge source", variant)
			}
		}
		for _, q := range s.ofType("AWS::SQS::Queue") {
			if strings.HasSuffix(props(q)["QueueName"].(string), "bridge-dlq") {
				t.Errorf("%s: a bridge DLQ without an eventbridge source", variant)
			}
		}
		if s.stack.Bridge != nil {
			t.Errorf("%s: Stack.Bridge set", variant)
		}
	}
	// GIVEN a stack with eventbridge sources
	s := bridgeStack(t)
	// THEN the bridge is a fifth function, arm64 al2023 with JSON logs like the others
	if n := len(s.ofType("AWS::Lambda::Function")); n != 5 {
		t.Fatalf("%d functions", n)
	}
	_, p := s.function(t, pipeline.Bridge)
	if p["Runtime"] != "provided.al2023" || p["MemorySize"] != 256.0 || p["Timeout"] != pipeline.BridgeTimeout.Seconds() ||
		p["LoggingConfig"].(map[string]any)["LogFormat"] != "JSON" {
		t.Errorf("bridge function %v", p)
	}
	// AND only sources that deliver by HTTPS have a webhook URL and a signing secret
	for id, want := range map[string]bool{"SourceUrlStripe": true, "SourceUrlGh": true, "SourceUrlShop": false, "SourceSecretArnShop": false, "BridgeDlqUrl": true} {
		if _, ok := s.outputs[id]; ok != want {
			t.Errorf("output %s present = %v, want %v", id, ok, want)
		}
	}
	for _, sec := range s.ofType("AWS::SecretsManager::Secret") {
		if strings.HasSuffix(props(sec)["Name"].(string), "/source/shop") {
			t.Error("a signing secret for an eventbridge-only source")
		}
	}
}

func TestEachEventBridgeSourceHasOneRuleOnItsPartnerBusMatchingExactlyItsEventSourceInThisAccount(t *testing.T) {
	// GIVEN the bridge stack
	s := bridgeStack(t)
	bridgeID, _ := s.function(t, pipeline.Bridge)
	dlqID := s.queueID(t, "webhooks-dev-bridge-dlq")
	rules := map[string]string{} // bus name -> rule id
	for id, r := range s.ofType("AWS::Events::Rule") {
		p := props(r)
		bus, _ := p["EventBusName"].(string)
		if bus == "" {
			continue // the reconciler's schedule, on the default bus
		}
		rules[bus] = id
		// THEN the pattern is the partner event source in this account and
		// nothing else
		pattern, _ := json.Marshal(p["EventPattern"])
		if string(pattern) != `{"account":[{"Ref":"AWS::AccountId"}],"source":["`+bus+`"]}` || p["State"] != "ENABLED" {
			t.Errorf("rule on %s: pattern %s, state %v", bus, pattern, p["State"])
		}
		// AND its one target is the bridge, with EventBridge's retries and
		// then the bridge DLQ
		targets := p["Targets"].([]any)
		if len(targets) != 1 {
			t.Fatalf("rule on %s has %d targets", bus, len(targets))
		}
		tg := targets[0].(map[string]any)
		rp, _ := tg["RetryPolicy"].(map[string]any)
		dl, _ := tg["DeadLetterConfig"].(map[string]any)
		if ref(tg["Arn"]) != bridgeID || rp["MaximumRetryAttempts"] != float64(pipeline.BridgeTargetRetries) ||
			rp["MaximumEventAgeInSeconds"] != pipeline.BridgeTargetMaxAge.Seconds() || ref(dl["Arn"]) != dlqID {
			t.Errorf("rule on %s: target %v", bus, tg)
		}
	}
	// AND there is exactly one such rule per eventbridge source, on the bus
	// named after its partner event source
	if len(rules) != 2 || rules[bridgeStripeSource] == "" || rules[bridgeShopSource] == "" {
		t.Fatalf("partner-bus rules %v", rules)
	}
	// AND EventBridge may invoke the bridge from those two rules only
	var from []string
	for _, perm := range s.ofType("AWS::Lambda::Permission") {
		p := props(perm)
		if ref(p["FunctionName"]) == bridgeID {
			if p["Principal"] != "events.amazonaws.com" || p["Action"] != "lambda:InvokeFunction" {
				t.Errorf("bridge permission %v", p)
			}
			from = append(from, ref(p["SourceArn"]))
		}
	}
	if !slices.Equal(sorted(from), sorted([]string{rules[bridgeStripeSource], rules[bridgeShopSource]})) {
		t.Errorf("bridge invocable from %v", from)
	}
}

func TestBridgeFailuresEndInAnEncryptedAlarmedDLQOnlyItsRulesAndItsFunctionCanSendTo(t *testing.T) {
	// GIVEN the bridge stack
	s := bridgeStack(t)
	bridgeID, fn := s.function(t, pipeline.Bridge)
	dlqID := s.queueID(t, "webhooks-dev-bridge-dlq")
	// THEN Lambda retries a failed invocation twice, for at most 6 hours...
	found := false
	for _, c := range s.ofType("AWS::Lambda::EventInvokeConfig") {
		if p := props(c); ref(p["FunctionName"]) == bridgeID {
			found = p["MaximumRetryAttempts"] == float64(pipeline.BridgeAsyncRetries) && p["MaximumEventAgeInSeconds"] == pipeline.BridgeAsyncMaxAge.Seconds()
		}
	}
	if !found {
		t.Error("bridge: no async invoke config with 2 retries and a 6 h event age")
	}
	// ... then puts the event in the bridge DLQ
	if dlc, _ := fn["DeadLetterConfig"].(map[string]any); ref(dlc["TargetArn"]) != dlqID {
		t.Errorf("bridge dead-letter config %v", fn["DeadLetterConfig"])
	}
	// AND the DLQ keeps letters 14 days, encrypted
	dlq := props(s.res[dlqID])
	if dlq["MessageRetentionPeriod"] != pipeline.BridgeDLQRetention.Seconds() || dlq["SqsManagedSseEnabled"] != true {
		t.Errorf("bridge DLQ %v", dlq)
	}
	// AND its policy denies plain HTTP and allows only EventBridge, on behalf
	// of the two bridge rules, to send (the function sends with its role)
	rules := map[string]bool{}
	for id, r := range s.ofType("AWS::Events::Rule") {
		if props(r)["EventBusName"] != nil {
			rules[id] = true
		}
	}
	deny, allowed := false, map[string]bool{}
	for _, pol := range s.ofType("AWS::SQS::QueuePolicy") {
		p := props(pol)
		if len(p["Queues"].([]any)) != 1 || ref(p["Queues"].([]any)[0]) != dlqID {
			continue
		}
		for _, st := range p["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			stmt := st.(map[string]any)
			cond, _ := json.Marshal(stmt["Condition"])
			switch {
			case stmt["Effect"] == "Deny" && string(cond) == `{"Bool":{"aws:SecureTransport":"false"}}`:
				deny = true
			case stmt["Effect"] == "Allow":
				principal, _ := json.Marshal(stmt["Principal"])
				arn := stmt["Condition"].(map[string]any)["ArnEquals"].(map[string]any)["aws:SourceArn"]
				if string(principal) != `{"Service":"events.amazonaws.com"}` || stmt["Action"] != "sqs:SendMessage" || !rules[ref(arn)] {
					t.Errorf("bridge DLQ allows %v", stmt)
				}
				allowed[ref(arn)] = true
			}
		}
	}
	if !deny || len(allowed) != len(rules) {
		t.Errorf("bridge DLQ policy: TLS enforced %v, rules allowed %v of %v", deny, allowed, rules)
	}
	// AND an alarm fires when the DLQ holds anything, and on the function's errors and throttles
	alarms := map[string]string{}
	for _, a := range s.ofType("AWS::CloudWatch::Alarm") {
		p := props(a)
		dims, _ := p["Dimensions"].([]any)
		if len(dims) > 0 {
			alarms[p["AlarmName"].(string)] = ref(dims[0].(map[string]any)["Value"])
		}
	}
	if alarms["webhooks-dev-BridgeDlqNotEmpty"] != dlqID || alarms["webhooks-dev-BridgeErrors"] != bridgeID || alarms["webhooks-dev-BridgeThrottles"] != bridgeID {
		t.Errorf("bridge alarms %v", alarms)
	}
}

// bridgeAllowed is every IAM action the bridge may hold: its Accept
// (UpdateItem, PutItem of payload chunks, GetItem of a row whose refusal
// returned none) on the table, SendMessage to the
// events queue, and to its DLQ (Lambda sends a failed asynchronous event
// there with the function's role), and its own logs.
var bridgeAllowed = []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "logs:CreateLogStream", "logs:PutLogEvents", "sqs:SendMessage"}

func TestBridgeHoldsOnlyItsAllowlistAndTheReconcilerSweepsItsDLQ(t *testing.T) {
	// GIVEN the bridge stack
	s := bridgeStack(t)
	var tableID string
	for id := range s.ofType("AWS::DynamoDB::Table") {
		tableID = id
	}
	events := "{" + s.queueID(t, queue.Events("webhooks-dev-").Name) + "}"
	dlq := "{" + s.queueID(t, "webhooks-dev-bridge-dlq") + "}"
	roleID := s.roleOf(t, pipeline.Bridge)
	// THEN the bridge's role has no managed or inline policy, and exactly
	// its allowlist, each on exactly its resources
	if role := props(s.res[roleID]); role["ManagedPolicyArns"] != nil || role["Policies"] != nil {
		t.Errorf("bridge role %v", role)
	}
	acts := s.roleActions(t, roleID)
	if !slices.Equal(keys(acts), bridgeAllowed) {
		t.Errorf("bridge actions %v, want %v", keys(acts), bridgeAllowed)
	}
	for a, want := range map[string][]string{
		"dynamodb:GetItem": {"{" + tableID + "}"}, "dynamodb:PutItem": {"{" + tableID + "}"}, "dynamodb:UpdateItem": {"{" + tableID + "}"},
		"sqs:SendMessage": sorted([]string{events, dlq}),
	} {
		if !slices.Equal(acts[a], want) {
			t.Errorf("bridge %s on %v, want %v", a, acts[a], want)
		}
	}
	// AND intake reads the signing secrets of the HTTPS sources only
	if got := s.roleActions(t, s.roleOf(t, pipeline.Intake))["secretsmanager:GetSecretValue"]; len(got) != 2 {
		t.Errorf("intake reads secrets %v, want stripe's and gh's", got)
	}
	// AND the reconciler receives and deletes on the three DLQs, the bridge's included
	re := s.roleActions(t, s.roleOf(t, pipeline.Reconciler))
	three := sorted([]string{"{" + s.queueID(t, queue.Events("webhooks-dev-").DLQName()) + "}", "{" + s.queueID(t, queue.Effects("webhooks-dev-").DLQName()) + "}", dlq})
	for _, a := range []string{"sqs:ReceiveMessage", "sqs:DeleteMessage"} {
		if !slices.Equal(re[a], three) {
			t.Errorf("reconciler %s on %v, want %v", a, re[a], three)
		}
	}
	// AND each function starts with the environment the stack renders: the
	// bridge loads its sources and routes both partner event sources, the
	// reconciler knows the bridge DLQ, intake still starts
	getenv := func(env map[string]string) func(string) string { return func(k string) string { return env[k] } }
	b, err := config.LoadBridge(getenv(s.env(t, pipeline.Bridge)))
	if err != nil {
		t.Fatalf("bridge: %v", err)
	}
	for name, es := range map[string]string{"stripe": bridgeStripeSource, "shop": bridgeShopSource} {
		if src, ok := b.Sources.ByEventSource(es); !ok || src.Name != name {
			t.Errorf("bridge routes %s to %+v", es, src)
		}
	}
	rc, err := config.LoadReconciler(getenv(s.env(t, pipeline.Reconciler)))
	if err != nil || !strings.HasSuffix(rc.BridgeDLQURL, "/webhooks-dev-bridge-dlq") || rc.BridgeDLQSenders.String() != roleID {
		t.Errorf("reconciler: %q %v %v", rc.BridgeDLQURL, rc.BridgeDLQSenders, err)
	}
	if _, err := config.LoadIntake(getenv(s.env(t, pipeline.Intake))); err != nil {
		t.Errorf("intake: %v", err)
	}
	// AND without an eventbridge source the reconciler has no bridge DLQ
	if v, ok := defaultStack(t).env(t, pipeline.Reconciler)["BRIDGE_DLQ_URL"]; ok {
		t.Errorf("default reconciler has BRIDGE_DLQ_URL %q", v)
	}
}

// The bridge DLQ's letters are redelivered as partner events, which carry
// no signature; any principal of the account whose own IAM policy allowed
// sqs:SendMessage on it could write one. Its policy now denies
// SendMessage to every principal but the bridge function's role (Lambda
// writes a failed asynchronous event with it) and EventBridge acting for
// the bridge rules (aws:SourceArn), and keeps refusing plain HTTP.
func TestTheBridgeDLQDeniesSendMessageToAllButTheBridgeRoleAndItsRules(t *testing.T) {
	// GIVEN the bridge stack
	s := bridgeStack(t)
	dlqID := s.queueID(t, "webhooks-dev-bridge-dlq")
	roleID := s.roleOf(t, pipeline.Bridge)
	var rules []any
	for _, name := range []string{"stripe", "shop"} {
		for id, r := range s.ofType("AWS::Events::Rule") {
			if props(r)["Name"] == "webhooks-dev-bridge-"+name {
				rules = append(rules, map[string]any{"Fn::GetAtt": []any{id, "Arn"}})
			}
		}
	}
	if len(rules) != 2 {
		t.Fatalf("bridge rules %v", rules)
	}
	// THEN the DLQ's policy holds that Deny, for any principal, unless the
	// request is the bridge's role or carries a bridge rule's ARN
	noPanic(t, "the bridge DLQ denies every other sender", func() {
		s.template.HasResourceProperties(jsii.String("AWS::SQS::QueuePolicy"), &map[string]any{
			"Queues": []any{map[string]any{"Ref": dlqID}},
			"PolicyDocument": assertions.Match_ObjectLike(&map[string]any{
				"Statement": assertions.Match_ArrayWith(&[]any{map[string]any{
					"Sid":       "OnlyTheBridgeFailurePathsSend",
					"Effect":    "Deny",
					"Principal": map[string]any{"AWS": "*"},
					"Action":    "sqs:SendMessage",
					"Resource":  map[string]any{"Fn::GetAtt": []any{dlqID, "Arn"}},
					"Condition": map[string]any{"ArnNotEquals": map[string]any{
						"aws:PrincipalArn": map[string]any{"Fn::GetAtt": []any{roleID, "Arn"}},
						"aws:SourceArn":    rules,
					}},
				}}),
			}),
		})
	})
	// AND it still refuses plain HTTP
	noPanic(t, "the bridge DLQ refuses plain HTTP", func() {
		s.template.HasResourceProperties(jsii.String("AWS::SQS::QueuePolicy"), &map[string]any{
			"Queues": []any{map[string]any{"Ref": dlqID}},
			"PolicyDocument": assertions.Match_ObjectLike(&map[string]any{
				"Statement": assertions.Match_ArrayWith(&[]any{assertions.Match_ObjectLike(&map[string]any{
					"Effect": "Deny", "Action": "sqs:*", "Condition": map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}},
				})}),
			}),
		})
	})
	// AND the reconciler redelivers only what that role wrote: SQS names
	// a role session's sender "<role's unique id>:<session>"
	_, re := s.function(t, pipeline.Reconciler)
	senders := re["Environment"].(map[string]any)["Variables"].(map[string]any)["BRIDGE_DLQ_SENDERS"]
	if b, _ := json.Marshal(senders); string(b) != `{"Fn::GetAtt":["`+roleID+`","RoleId"]}` {
		t.Errorf("reconciler BRIDGE_DLQ_SENDERS %s", b)
	}
}

// An operator may allow more senders (for example the SenderId SQS names
// for EventBridge's own deliveries, once seen on a refused letter): they
// follow the bridge's role; a value that names no IAM unique id fails synth.
func TestBridgeDLQSendersFromContextFollowTheBridgeRole(t *testing.T) {
	dir := filepath.Join(assetDir, pipeline.Bridge)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bootstrap"), []byte("fake bridge"), 0o755); err != nil {
		t.Fatal(err)
	}
	// GIVEN the bridge stack with two more allowed senders
	s := synth(t, "bridge-senders", map[string]any{
		"sources":                 `[{"name":"stripe","kind":"stripe","delivery":"eventbridge","eventSource":"` + bridgeStripeSource + `"}]`,
		stack.KeyBridgeDLQSenders: "AIDAEXAMPLEEVENTBRIDGE, AROAEXAMPLEOPERATOR:someone",
	})
	roleID := s.roleOf(t, pipeline.Bridge)
	// THEN the reconciler allows the role and them
	if got := s.env(t, pipeline.Reconciler)["BRIDGE_DLQ_SENDERS"]; got != roleID+",AIDAEXAMPLEEVENTBRIDGE,AROAEXAMPLEOPERATOR:someone" {
		t.Errorf("BRIDGE_DLQ_SENDERS %q", got)
	}
	// AND a sender that is no unique id fails synth, naming the key
	for _, bad := range []string{"arn:aws:iam::123456789012:role/x", "*", " , "} {
		_, err := stack.FromContext(func(k string) any {
			switch k {
			case stack.KeySources:
				return `[{"name":"stripe","kind":"stripe"}]`
			case stack.KeyBridgeDLQSenders:
				return bad
			}
			return nil
		})
		if !errors.Is(err, stack.ErrConfig) || !strings.Contains(err.Error(), stack.KeyBridgeDLQSenders) {
			t.Errorf("%q: err %v", bad, err)
		}
	}
}

func TestBridgeStackIsCdkNagClean(t *testing.T) {
	// GIVEN the bridge stack checked by cdk-nag as the app checks it
	s := bridgeStack(t)
	ann := assertions.Annotations_FromStack(s.stack.Stack)
	// THEN no AwsSolutions rule reports an error or a warning
	for _, kind := range []string{"error", "warning"} {
		find := ann.FindError
		if kind == "warning" {
			find = ann.FindWarning
		}
		for _, m := range *find(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))) {
			t.Errorf("%s at %s: %v", kind, *m.Id, m.Entry.Data)
		}
	}
}

func TestEventBridgeContextIsValidatedAtSynth(t *testing.T) {
	// GIVEN an eventbridge source whose event source is another provider's
	cfg, err := stack.FromContext(func(k string) any {
		if k == stack.KeySources {
			return `[{"name":"stripe","kind":"stripe","delivery":"eventbridge","eventSource":"` + bridgeShopSource + `"}]`
		}
		return nil
	})
	// WHEN the configuration is read and the stack built
	if err == nil {
		cfg.Assets = fakeAssets()
		_, err = stack.New(awscdk.NewApp(nil), cfg, nil)
	}
	// THEN synth fails, naming the source and the problem
	if err == nil || !strings.Contains(err.Error(), "not a stripe partner event source") {
		t.Fatalf("err %v", err)
	}
}
