package stack_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/effectively-once/webhooks/infra/pipeline"
	"github.com/effectively-once/webhooks/infra/stack"
	"github.com/effectively-once/webhooks/internal/config"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/queue"
)

func TestCdkJSONContextIsTheDocumentedDevDefault(t *testing.T) {
	// GIVEN cdk.json's context, as `cdk synth` reads it
	ctx := cdkContext(t)
	// WHEN the stack reads its configuration from it
	cfg, err := stack.FromContext(func(k string) any { return ctx[k] })
	// THEN it is the dev stage with one Stripe source, no effects, and the
	// ledger protected against deletion
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Stage != "dev" || len(cfg.Sources) != 1 || cfg.Sources[0].Name != "stripe" || cfg.Sources[0].Kind != "stripe" {
		t.Fatalf("stage %q sources %+v", cfg.Stage, cfg.Sources)
	}
	if len(cfg.Effects) != 0 || !cfg.DeletionProtection || cfg.Tracing || cfg.AlarmEmail != "" {
		t.Fatalf("defaults: %+v", cfg)
	}
}

func TestHttpAPIRoutesSignedPostsToIntakeWithThrottlingAndAccessLogs(t *testing.T) {
	// GIVEN the default stack
	s := defaultStack(t)
	intakeID, _ := s.function(t, pipeline.Intake)

	// THEN exactly one route exists: POST /webhooks/{source}, a Lambda proxy
	// integration (payload 2.0) to intake
	routes := s.ofType("AWS::ApiGatewayV2::Route")
	if len(routes) != 1 {
		t.Fatalf("routes: %v", keys(routes))
	}
	for _, r := range routes {
		if props(r)["RouteKey"] != "POST /webhooks/{source}" {
			t.Fatalf("route key %v", props(r)["RouteKey"])
		}
	}
	integ := s.ofType("AWS::ApiGatewayV2::Integration")
	for _, i := range integ {
		p := props(i)
		if p["IntegrationType"] != "AWS_PROXY" || p["PayloadFormatVersion"] != "2.0" || ref(p["IntegrationUri"]) != intakeID {
			t.Fatalf("integration %v", p)
		}
	}
	// AND the stage throttles with cdk.json's limits and logs every request
	// as JSON to a log group with retention
	stages := s.ofType("AWS::ApiGatewayV2::Stage")
	if len(stages) != 1 {
		t.Fatalf("stages: %d", len(stages))
	}
	for _, st := range stages {
		p := props(st)
		rs := p["DefaultRouteSettings"].(map[string]any)
		if rs["ThrottlingRateLimit"] != 50.0 || rs["ThrottlingBurstLimit"] != 100.0 || p["StageName"] != "$default" || p["AutoDeploy"] != true {
			t.Fatalf("stage %v", p)
		}
		als := p["AccessLogSettings"].(map[string]any)
		var format map[string]string
		if err := json.Unmarshal([]byte(als["Format"].(string)), &format); err != nil || format["requestId"] != "$context.requestId" || format["status"] != "$context.status" {
			t.Fatalf("access log format %v (%v)", als["Format"], err)
		}
		lg := s.res[ref(als["DestinationArn"])]
		if lg["Type"] != "AWS::Logs::LogGroup" || props(lg)["RetentionInDays"] != 30.0 {
			t.Fatalf("access log group %v", lg)
		}
	}
	// AND API Gateway may invoke intake for that route only
	perm := false
	for _, p := range s.ofType("AWS::Lambda::Permission") {
		pp := props(p)
		if ref(pp["FunctionName"]) == intakeID && pp["Principal"] == "apigateway.amazonaws.com" {
			perm = strings.Contains(render(pp["SourceArn"], func(string) string { return "x" }), "/*/*/webhooks/{source}")
		}
	}
	if !perm {
		t.Fatal("no route-scoped invoke permission for intake")
	}
}

func TestFunctionsRunArm64Al2023WithJSONLogsRetentionAndTheirTimeouts(t *testing.T) {
	// GIVEN the default stack
	s := defaultStack(t)
	want := map[string]struct{ mem, timeout float64 }{
		pipeline.Intake:     {512, pipeline.IntakeTimeout.Seconds()},
		pipeline.Processor:  {256, queue.ProcessorTimeout.Seconds()},
		pipeline.Dispatcher: {256, queue.DispatcherTimeout.Seconds()},
		pipeline.Reconciler: {256, 120},
	}
	// THEN there are exactly the four functions
	if n := len(s.ofType("AWS::Lambda::Function")); n != 4 {
		t.Fatalf("%d functions", n)
	}
	for name, w := range want {
		_, p := s.function(t, name)
		// AND each is provided.al2023 on arm64 running build/<fn>/bootstrap
		if p["Runtime"] != "provided.al2023" || !reflect.DeepEqual(p["Architectures"], []any{"arm64"}) || p["Handler"] != "bootstrap" {
			t.Errorf("%s: runtime %v arch %v handler %v", name, p["Runtime"], p["Architectures"], p["Handler"])
		}
		if p["MemorySize"] != w.mem || p["Timeout"] != w.timeout {
			t.Errorf("%s: memory %v timeout %v, want %v %v", name, p["MemorySize"], p["Timeout"], w.mem, w.timeout)
		}
		// AND logs JSON into its own log group with the context's retention
		lc := p["LoggingConfig"].(map[string]any)
		lg := s.res[ref(lc["LogGroup"])]
		if lc["LogFormat"] != "JSON" || lc["ApplicationLogLevel"] != "INFO" || props(lg)["RetentionInDays"] != 30.0 ||
			props(lg)["LogGroupName"] != "/aws/lambda/webhooks-dev-"+name {
			t.Errorf("%s: logging %v, log group %v", name, lc, props(lg))
		}
		// AND tracing is off unless the context asks for it
		if tc, ok := p["TracingConfig"]; ok && tc.(map[string]any)["Mode"] == "Active" {
			t.Errorf("%s: tracing on by default", name)
		}
		if _, p := fullStack(t).function(t, name); p["TracingConfig"].(map[string]any)["Mode"] != "Active" {
			t.Errorf("%s: tracing=true did not activate X-Ray", name)
		}
	}
	// AND the reconciler's runs are never retried by Lambda
	reID, _ := s.function(t, pipeline.Reconciler)
	found := false
	for _, c := range s.ofType("AWS::Lambda::EventInvokeConfig") {
		if p := props(c); ref(p["FunctionName"]) == reID && p["MaximumRetryAttempts"] == 0.0 {
			found = true
		}
	}
	if !found {
		t.Error("reconciler: async retries not set to 0")
	}
}

func TestEveryFunctionStartsWithTheEnvironmentTheStackRenders(t *testing.T) {
	for _, variant := range []string{"default", "full"} {
		t.Run(variant, func(t *testing.T) {
			// GIVEN a synthesized stack, with deployed values filled in
			s := stackOf(t, variant)
			ev, ef := queue.Events(s.stack.Config.Prefix()), queue.Effects(s.stack.Config.Prefix())
			for _, name := range []string{pipeline.Intake, pipeline.Processor, pipeline.Dispatcher, pipeline.Reconciler} {
				env := s.env(t, name)
				// THEN every function has the common variables
				if env["METRICS_NAMESPACE"] != "EffectivelyOnce/dev" || env["LOG_LEVEL"] != "info" || env["RETENTION_DAYS"] != "30" ||
					env["TABLE_NAME"] != "webhooks-dev-ledger" || env["DUE_SHARDS"] != "4" || env["DUE_SHARDS_READ"] != "4" {
					t.Errorf("%s: common env %v", name, env)
				}
			}
			getenv := func(env map[string]string) func(string) string { return func(k string) string { return env[k] } }

			// AND the runtime's own loaders accept each function's environment
			in, err := config.LoadIntake(getenv(s.env(t, pipeline.Intake)))
			if err != nil || !strings.HasSuffix(in.EventsQueueURL, "/"+ev.Name) {
				t.Fatalf("intake: %+v %v", in, err)
			}
			for _, src := range s.stack.Config.Sources {
				got, ok := in.Sources.Lookup(src.Name)
				if src.Kind == "sns" {
					// SNS is verified by AWS's certificate: no secret at all
					if !ok || len(got.Secrets) != 0 || got.Options["topic_arns"] == "" {
						t.Fatalf("intake source %s: %+v", src.Name, got)
					}
					continue
				}
				if !ok || got.Kind != src.Kind || len(got.Secrets) != 1 || !strings.HasPrefix(got.Secrets[0], "arn:aws:secretsmanager:") {
					t.Fatalf("intake source %s: %+v", src.Name, got)
				}
				if src.SecretArn != "" && got.Secrets[0] != src.SecretArn {
					t.Fatalf("source %s reads %s, not the given secret", src.Name, got.Secrets[0])
				}
			}
			pr, err := config.LoadProcessor(getenv(s.env(t, pipeline.Processor)))
			if err != nil {
				t.Fatalf("processor: %v", err)
			}
			// The attempt budget is the queue's maxReceiveCount, the lease
			// outlives the function, the retry cap is the visibility timeout.
			if pr.MaxAttempts != ev.MaxReceiveCount || pr.Lease <= queue.ProcessorTimeout || pr.Visibility != ev.VisibilityTimeout ||
				!strings.HasSuffix(pr.EffectsQueueURL, "/"+ef.Name) {
				t.Fatalf("processor config %+v", pr)
			}
			denv := s.env(t, pipeline.Dispatcher)
			// The reconciler's drift check reads the dispatcher's EFFECTS,
			// and only when there are effects (an empty document is refused).
			if renv := s.env(t, pipeline.Reconciler); renv["EFFECTS"] != denv["EFFECTS"] && len(s.stack.Config.Effects) > 0 ||
				renv["EFFECTS"] != "" && len(s.stack.Config.Effects) == 0 {
				t.Fatalf("reconciler EFFECTS %q, dispatcher's %q", renv["EFFECTS"], denv["EFFECTS"])
			}
			if len(s.stack.Config.Effects) == 0 {
				// No effects: the document is empty and the dispatcher would refuse
				// to start, which is why its mapping is disabled (tested below).
				if _, err := outbox.ParseEffects([]byte(denv["EFFECTS"])); err == nil {
					t.Fatal("an empty EFFECTS was accepted")
				}
			} else {
				d, err := outbox.LoadDispatcherConfig(getenv(denv))
				if err != nil {
					t.Fatalf("dispatcher: %v", err)
				}
				if d.MaxAttempts >= ef.MaxReceiveCount || d.Lease <= queue.DispatcherTimeout || len(d.Effects) != len(s.stack.Config.Effects) {
					t.Fatalf("dispatcher config %+v", d)
				}
				for _, e := range d.Effects {
					switch e.Kind {
					case "refund":
						if !strings.HasPrefix(e.Secret, "arn:aws:secretsmanager:") || e.StatusURL == "" {
							t.Fatalf("refund effect %+v", e)
						}
					case "notify":
						if e.Secret != "arn:aws:secretsmanager:eu-west-1:123456789012:secret:notify-token-AbCdEf" {
							t.Fatalf("notify effect %+v", e)
						}
					case "suppression.add":
						if e.Secret != "" {
							t.Fatalf("an effect without a secret got one: %+v", e)
						}
					}
				}
			}
			renv := s.env(t, pipeline.Reconciler)
			rc, err := config.LoadReconciler(getenv(renv))
			if err != nil {
				t.Fatalf("reconciler: %v", err)
			}
			for got, want := range map[string]string{
				rc.EventsQueueURL: ev.Name, rc.EventsDLQURL: ev.DLQName(), rc.EffectsQueueURL: ef.Name, rc.EffectsDLQURL: ef.DLQName(),
			} {
				if !strings.HasSuffix(got, "/"+want) {
					t.Errorf("reconciler queue %q, want .../%s", got, want)
				}
			}
			if rc.StuckAfter.Seconds() != 300 || rc.MaxItems != 500 || rc.Budget.Seconds() != 90 {
				t.Errorf("reconciler settings %+v", rc)
			}
			if src, _ := rc.Sources.Lookup("stripe"); variant == "full" && (src.Truth == nil || src.Truth.Kind != "stripe" ||
				!strings.HasPrefix(src.Truth.Secret, "arn:aws:secretsmanager:")) {
				t.Errorf("stripe source of truth %+v", src.Truth)
			}
			if budget, _ := strconv.Atoi(renv["RECONCILE_BUDGET_SECONDS"]); float64(budget) >= pipeline.ReconcilerTimeout.Seconds() {
				t.Errorf("budget %d s does not fit the %v timeout", budget, pipeline.ReconcilerTimeout)
			}
		})
	}
}

func TestLedgerTableMirrorsTheSchemaTheCodeCreates(t *testing.T) {
	// GIVEN the table the ledger creates for itself in tests and the local stack
	schema := ledger.TableSchema("webhooks-dev-ledger")
	// WHEN the default stack is synthesized
	s := defaultStack(t)
	tables := s.ofType("AWS::DynamoDB::Table")
	if len(tables) != 1 {
		t.Fatalf("%d tables", len(tables))
	}
	var table map[string]any
	for _, tb := range tables {
		table = tb
	}
	p := props(table)
	// THEN keys, attribute types, the due index and its INCLUDE projection match
	asJSON := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	var keysWant []map[string]string
	for _, k := range schema.KeySchema {
		keysWant = append(keysWant, map[string]string{"AttributeName": *k.AttributeName, "KeyType": string(k.KeyType)})
	}
	if asJSON(p["KeySchema"]) != asJSON(keysWant) {
		t.Errorf("key schema %v, want %v", p["KeySchema"], keysWant)
	}
	attrs := map[string]string{}
	for _, a := range p["AttributeDefinitions"].([]any) {
		m := a.(map[string]any)
		attrs[m["AttributeName"].(string)] = m["AttributeType"].(string)
	}
	for _, a := range schema.AttributeDefinitions {
		if attrs[*a.AttributeName] != string(a.AttributeType) {
			t.Errorf("attribute %s: %q, want %q", *a.AttributeName, attrs[*a.AttributeName], a.AttributeType)
		}
	}
	if len(attrs) != len(schema.AttributeDefinitions) {
		t.Errorf("attributes %v", attrs)
	}
	gsis := p["GlobalSecondaryIndexes"].([]any)
	if len(gsis) != 1 {
		t.Fatalf("GSIs %v", gsis)
	}
	g, want := gsis[0].(map[string]any), schema.GlobalSecondaryIndexes[0]
	proj := g["Projection"].(map[string]any)
	var gk []map[string]string
	for _, k := range want.KeySchema {
		gk = append(gk, map[string]string{"AttributeName": *k.AttributeName, "KeyType": string(k.KeyType)})
	}
	var nonKey []string
	for _, a := range proj["NonKeyAttributes"].([]any) {
		nonKey = append(nonKey, a.(string))
	}
	if g["IndexName"] != ledger.DueIndex || asJSON(g["KeySchema"]) != asJSON(gk) || proj["ProjectionType"] != "INCLUDE" ||
		!slices.Equal(nonKey, want.Projection.NonKeyAttributes) {
		t.Errorf("GSI %v", g)
	}
	// AND it is on demand, recoverable, protected, encrypted, with TTL
	if p["TableName"] != "webhooks-dev-ledger" || p["BillingMode"] != "PAY_PER_REQUEST" || p["DeletionProtectionEnabled"] != true ||
		p["PointInTimeRecoverySpecification"].(map[string]any)["PointInTimeRecoveryEnabled"] != true ||
		p["SSESpecification"].(map[string]any)["SSEEnabled"] != true ||
		asJSON(p["TimeToLiveSpecification"]) != `{"AttributeName":"`+ledger.TTLAttribute+`","Enabled":true}` {
		t.Errorf("table %v", p)
	}
	if table["DeletionPolicy"] != "Retain" || table["UpdateReplacePolicy"] != "Retain" {
		t.Errorf("deletion policy %v", table["DeletionPolicy"])
	}
	// AND a stage that turns protection off can be torn down with its table
	for _, tb := range fullStack(t).ofType("AWS::DynamoDB::Table") {
		if props(tb)["DeletionProtectionEnabled"] != false || tb["DeletionPolicy"] != "Delete" {
			t.Errorf("deletionProtection=false: %v %v", props(tb)["DeletionProtectionEnabled"], tb["DeletionPolicy"])
		}
	}
}

func TestQueuesFollowTheSharedSpecsWithRedrivableEncryptedDLQs(t *testing.T) {
	// GIVEN the default stack
	s := defaultStack(t)
	byName := map[string]string{}
	for id, q := range s.ofType("AWS::SQS::Queue") {
		byName[props(q)["QueueName"].(string)] = id
	}
	if len(byName) != 4 {
		t.Fatalf("queues %v", keys(byName))
	}
	for _, c := range []struct {
		spec     queue.Spec
		consumer string
	}{{queue.Events("webhooks-dev-"), pipeline.Processor}, {queue.Effects("webhooks-dev-"), pipeline.Dispatcher}} {
		qid, dlqID := byName[c.spec.Name], byName[c.spec.DLQName()]
		if qid == "" || dlqID == "" {
			t.Fatalf("%s: queue or DLQ missing in %v", c.spec.Name, keys(byName))
		}
		q, dlq := props(s.res[qid]), props(s.res[dlqID])
		_, fn := s.function(t, c.consumer)
		// THEN visibility is the spec's, at least 6x the consumer's timeout
		if q["VisibilityTimeout"] != c.spec.VisibilityTimeout.Seconds() || q["VisibilityTimeout"].(float64) < 6*fn["Timeout"].(float64) {
			t.Errorf("%s: visibility %v vs consumer timeout %v", c.spec.Name, q["VisibilityTimeout"], fn["Timeout"])
		}
		// AND messages go to the DLQ after the spec's maxReceiveCount
		rp := q["RedrivePolicy"].(map[string]any)
		if rp["maxReceiveCount"] != float64(c.spec.MaxReceiveCount) || ref(rp["deadLetterTargetArn"]) != dlqID {
			t.Errorf("%s: redrive policy %v", c.spec.Name, rp)
		}
		// AND the DLQ keeps letters 14 days and allows redrive back to this queue only
		rap := dlq["RedriveAllowPolicy"].(map[string]any)
		srcs := rap["sourceQueueArns"].([]any)
		if dlq["MessageRetentionPeriod"] != c.spec.DLQRetention.Seconds() || rap["redrivePermission"] != "byQueue" || len(srcs) != 1 ||
			!strings.HasSuffix(render(srcs[0], func(string) string { return "x" }), ":"+c.spec.Name) {
			t.Errorf("%s DLQ: %v", c.spec.Name, dlq)
		}
		// AND both are encrypted with SQS-managed keys
		for _, p := range []map[string]any{q, dlq} {
			if p["SqsManagedSseEnabled"] != true {
				t.Errorf("%s: not encrypted: %v", p["QueueName"], p)
			}
		}
	}
	// AND every queue denies requests without TLS
	denied := map[string]bool{}
	for _, pol := range s.ofType("AWS::SQS::QueuePolicy") {
		p := props(pol)
		for _, st := range p["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			stmt := st.(map[string]any)
			cond, _ := json.Marshal(stmt["Condition"])
			if stmt["Effect"] == "Deny" && string(cond) == `{"Bool":{"aws:SecureTransport":"false"}}` {
				for _, q := range p["Queues"].([]any) {
					denied[ref(q)] = true
				}
			}
		}
	}
	for name, id := range byName {
		if !denied[id] {
			t.Errorf("%s: SSL not enforced", name)
		}
	}
}

func TestEventSourceMappingsReportPartialFailuresWithBoundedConcurrency(t *testing.T) {
	for _, c := range []struct {
		variant       string
		effectsActive bool
	}{{"default", false}, {"full", true}} {
		t.Run(c.variant, func(t *testing.T) {
			// GIVEN a stack with (full) or without (default) effects
			s := stackOf(t, c.variant)
			maps := s.ofType("AWS::Lambda::EventSourceMapping")
			if len(maps) != 2 {
				t.Fatalf("%d mappings", len(maps))
			}
			prID, _ := s.function(t, pipeline.Processor)
			diID, _ := s.function(t, pipeline.Dispatcher)
			for _, m := range maps {
				p := props(m)
				queueName := props(s.res[ref(p["EventSourceArn"])])["QueueName"]
				// THEN each reports batch item failures, with a batch size,
				// window and maximum concurrency
				if !reflect.DeepEqual(p["FunctionResponseTypes"], []any{"ReportBatchItemFailures"}) || p["BatchSize"] != 10.0 {
					t.Errorf("mapping %v", p)
				}
				if _, ok := p["MaximumBatchingWindowInSeconds"]; !ok {
					t.Errorf("mapping without a batching window: %v", p)
				}
				conc := p["ScalingConfig"].(map[string]any)["MaximumConcurrency"]
				switch ref(p["FunctionName"]) {
				case prID:
					// AND the processor consumes the events queue, always on
					if queueName != "webhooks-dev-events" || p["Enabled"] != true || conc != 10.0 {
						t.Errorf("processor mapping %v", p)
					}
				case diID:
					// AND the dispatcher consumes the effects queue, on only
					// when effects are configured
					if queueName != "webhooks-dev-effects" || p["Enabled"] != c.effectsActive || conc != 5.0 {
						t.Errorf("dispatcher mapping %v", p)
					}
				default:
					t.Errorf("mapping for an unexpected function: %v", p)
				}
			}
		})
	}
}

func TestReconcilerRunsEveryFiveMinutesOnceItsCodeExists(t *testing.T) {
	for _, c := range []struct {
		variant string
		state   string
	}{{"default", "ENABLED"}, {"full", "DISABLED"}} {
		t.Run(c.variant, func(t *testing.T) {
			// GIVEN a stack whose reconciler is built (default) or not yet (full)
			s := stackOf(t, c.variant)
			reID, _ := s.function(t, pipeline.Reconciler)
			rules := s.ofType("AWS::Events::Rule")
			if len(rules) != 1 {
				t.Fatalf("%d rules", len(rules))
			}
			// THEN one rule runs it every 5 minutes, switched off while its
			// code is a placeholder
			for _, r := range rules {
				p := props(r)
				targets := p["Targets"].([]any)
				if p["ScheduleExpression"] != "rate(5 minutes)" || p["State"] != c.state || len(targets) != 1 ||
					ref(targets[0].(map[string]any)["Arn"]) != reID {
					t.Errorf("rule %v", p)
				}
			}
			noPanic(t, "events may invoke the reconciler", func() {
				s.template.HasResourceProperties(jsii.String("AWS::Lambda::Permission"), &map[string]any{
					"Principal":    "events.amazonaws.com",
					"FunctionName": map[string]any{"Fn::GetAtt": []any{reID, "Arn"}},
				})
			})
		})
	}
}

func TestSecretsAreCreatedPerSourceUnlessGivenAndReadOnlyWhereUsed(t *testing.T) {
	// GIVEN the full stack: source stripe (created, with a Stripe source of
	// truth), shop (given ARN), ses (SNS, needs none);
	// effects refund (created), notify (given), suppression.add (none)
	s := fullStack(t)
	names := map[string]bool{}
	for _, sec := range s.ofType("AWS::SecretsManager::Secret") {
		names[props(sec)["Name"].(string)] = true
	}
	// THEN only the secrets without an ARN are created, named by stage
	if !reflect.DeepEqual(keys(names), []string{"webhooks/dev/api/stripe", "webhooks/dev/effect/refund", "webhooks/dev/source/stripe", "webhooks/dev/truth/stripe"}) {
		t.Fatalf("secrets %v", keys(names))
	}
	// AND GetSecretValue is granted on exactly the secrets each function reads
	created := func(prefix string) string {
		for id, sec := range s.ofType("AWS::SecretsManager::Secret") {
			if props(sec)["Name"] == prefix {
				return "{" + id + "}"
			}
		}
		return "?"
	}
	sources := []string{"arn:aws:secretsmanager:eu-west-1:123456789012:secret:shop-hmac-AbCdEf", created("webhooks/dev/source/stripe")}
	effects := []string{"arn:aws:secretsmanager:eu-west-1:123456789012:secret:notify-token-AbCdEf", created("webhooks/dev/effect/refund")}
	slices.Sort(sources)
	slices.Sort(effects)
	for fn, want := range map[string][]string{
		// The reconciler reads the truth's secret and, for its drift
		// check, the effects' tokens (status endpoints only).
		pipeline.Intake: sources, pipeline.Reconciler: sortedCopy(append([]string{created("webhooks/dev/truth/stripe")}, effects...)), pipeline.Dispatcher: effects,
		pipeline.Processor: {created("webhooks/dev/api/stripe")},
	} {
		got := s.roleActions(t, s.roleOf(t, fn))["secretsmanager:GetSecretValue"]
		if !slices.Equal(got, want) {
			t.Errorf("%s reads secrets %v, want %v", fn, got, want)
		}
	}
}

// allowed is every IAM action each function may hold: what its code calls
// (and, for the queue consumers, what their event source mapping needs).
var allowed = map[string][]string{
	pipeline.Intake: {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "logs:CreateLogStream", "logs:PutLogEvents",
		"secretsmanager:GetSecretValue", "sqs:SendMessage"},
	pipeline.Processor: {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "logs:CreateLogStream", "logs:PutLogEvents",
		"secretsmanager:GetSecretValue", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ReceiveMessage", "sqs:SendMessage"},
	pipeline.Dispatcher: {"dynamodb:GetItem", "dynamodb:UpdateItem", "logs:CreateLogStream", "logs:PutLogEvents",
		"secretsmanager:GetSecretValue", "sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ReceiveMessage"},
	pipeline.Reconciler: {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", "dynamodb:UpdateItem", "logs:CreateLogStream", "logs:PutLogEvents",
		"secretsmanager:GetSecretValue", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ReceiveMessage", "sqs:SendMessage"},
}

// xray is what active tracing adds (AWS allows no narrower resource).
var xray = []string{"xray:PutTelemetryRecords", "xray:PutTraceSegments"}

func TestEachFunctionHoldsOnlyTheIAMActionsOnItsAllowlist(t *testing.T) {
	for _, variant := range []string{"default", "full"} {
		t.Run(variant, func(t *testing.T) {
			// GIVEN a synthesized stack
			s := stackOf(t, variant)
			for _, fn := range []string{pipeline.Intake, pipeline.Processor, pipeline.Dispatcher, pipeline.Reconciler} {
				roleID := s.roleOf(t, fn)
				role := props(s.res[roleID])
				// THEN the role has no managed or inline policies of its own
				if role["ManagedPolicyArns"] != nil || role["Policies"] != nil {
					t.Errorf("%s: role has managed/inline policies: %v", fn, role)
				}
				acts := s.roleActions(t, roleID)
				allow := allowed[fn]
				if variant == "full" {
					allow = append(slices.Clone(allow), xray...)
				}
				// AND every action is on the allowlist, none is a wildcard,
				// and only X-Ray is granted on "*"
				for a, resources := range acts {
					if !slices.Contains(allow, a) || strings.Contains(a, "*") {
						t.Errorf("%s holds %s, not on its allowlist", fn, a)
					}
					for _, r := range resources {
						if r == "*" && !slices.Contains(xray, a) {
							t.Errorf("%s: %s on every resource", fn, a)
						}
					}
				}
				// AND the allowlist is not wider than needed (the default
				// stack, with no effects, no source of truth and no API key, reads no
				// effect, truth or API secrets)
				want := slices.Clone(allow)
				if variant == "default" && (fn == pipeline.Dispatcher || fn == pipeline.Reconciler || fn == pipeline.Processor) {
					want = slices.DeleteFunc(want, func(a string) bool { return a == "secretsmanager:GetSecretValue" })
				}
				if got := keys(acts); !slices.Equal(got, sorted(want)) {
					t.Errorf("%s actions %v, want %v", fn, got, sorted(want))
				}
			}
			// AND DynamoDB is granted on the ledger table only, Query on the
			// due index only (every sweep reads it), never on other indexes
			re := s.roleActions(t, s.roleOf(t, pipeline.Reconciler))
			var tableID string
			for id := range s.ofType("AWS::DynamoDB::Table") {
				tableID = id
			}
			if want := []string{"{" + tableID + "}/index/" + ledger.DueIndex}; !slices.Equal(re["dynamodb:Query"], want) {
				t.Errorf("reconciler Query on %v, want %v", re["dynamodb:Query"], want)
			}
			for _, fn := range []string{pipeline.Intake, pipeline.Processor, pipeline.Dispatcher, pipeline.Reconciler} {
				for a, rs := range s.roleActions(t, s.roleOf(t, fn)) {
					if strings.HasPrefix(a, "dynamodb:") && a != "dynamodb:Query" && !slices.Equal(rs, []string{"{" + tableID + "}"}) {
						t.Errorf("%s: %s on %v", fn, a, rs)
					}
				}
			}
			// AND the reconciler receives and deletes only on the two DLQs
			// (it sweeps them), never on the queues the consumers own
			byName := map[string]string{}
			for id, q := range s.ofType("AWS::SQS::Queue") {
				byName[props(q)["QueueName"].(string)] = id
			}
			dlqs := sorted([]string{"{" + byName[queue.Events("webhooks-dev-").DLQName()] + "}", "{" + byName[queue.Effects("webhooks-dev-").DLQName()] + "}"})
			for _, a := range []string{"sqs:ReceiveMessage", "sqs:DeleteMessage"} {
				if !slices.Equal(re[a], dlqs) {
					t.Errorf("reconciler %s on %v, want the DLQs %v", a, re[a], dlqs)
				}
			}
		})
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

func TestCdkNagAwsSolutionsReportsNoUnsuppressedFinding(t *testing.T) {
	for _, variant := range []string{"default", "full", "targets"} {
		t.Run(variant, func(t *testing.T) {
			// GIVEN a stack checked by cdk-nag as the app checks it
			s := stackOf(t, variant)
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
		})
	}
}

func TestAlarmsCoverDeadLettersAgeErrorsThrottlesDriftAndStuckLeases(t *testing.T) {
	// GIVEN the default stack
	s := defaultStack(t)
	topics := s.ofType("AWS::SNS::Topic")
	if len(topics) != 1 {
		t.Fatalf("%d topics", len(topics))
	}
	var topicID string
	for id := range topics {
		topicID = id
	}
	type alarm struct{ metric, ns, dim string }
	got := map[string]alarm{}
	for _, a := range s.ofType("AWS::CloudWatch::Alarm") {
		p := props(a)
		// THEN every alarm notifies the topic (and again when it clears)
		for _, list := range []string{"AlarmActions", "OKActions"} {
			acts, _ := p[list].([]any)
			if len(acts) != 1 || ref(acts[0]) != topicID {
				t.Errorf("%s: %s %v", p["AlarmName"], list, acts)
			}
		}
		dim := ""
		if ds, ok := p["Dimensions"].([]any); ok && len(ds) > 0 {
			dim = render(ds[0].(map[string]any)["Value"], func(id string) string {
				if n, ok := props(s.res[id])["QueueName"]; ok {
					return n.(string)
				}
				return props(s.res[id])["FunctionName"].(string)
			})
		}
		got[p["AlarmName"].(string)] = alarm{p["MetricName"].(string), p["Namespace"].(string), dim}
	}
	want := map[string]alarm{
		"webhooks-dev-EventsDlqNotEmpty":   {"ApproximateNumberOfMessagesVisible", "AWS/SQS", "webhooks-dev-events-dlq"},
		"webhooks-dev-EffectsDlqNotEmpty":  {"ApproximateNumberOfMessagesVisible", "AWS/SQS", "webhooks-dev-effects-dlq"},
		"webhooks-dev-EventsOldestMessage": {"ApproximateAgeOfOldestMessage", "AWS/SQS", "webhooks-dev-events"},
		"webhooks-dev-DriftFound":          {"DriftFound", "EffectivelyOnce/dev", ""},
		"webhooks-dev-StuckLeases":         {"StuckLeases", "EffectivelyOnce/dev", ""},
		"webhooks-dev-OperationIDsReused":  {"OperationIDsReused", "EffectivelyOnce/dev", ""},
	}
	for _, fn := range []string{pipeline.Intake, pipeline.Processor, pipeline.Dispatcher, pipeline.Reconciler} {
		P := strings.ToUpper(fn[:1]) + fn[1:]
		want["webhooks-dev-"+P+"Errors"] = alarm{"Errors", "AWS/Lambda", "webhooks-dev-" + fn}
		want["webhooks-dev-"+P+"Throttles"] = alarm{"Throttles", "AWS/Lambda", "webhooks-dev-" + fn}
	}
	// AND the alarms an operator relies on exist on the right metric and resource
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("alarm %s = %+v, want %+v", name, g, w)
		}
	}
	// AND the topic has an email subscription only when the context names one
	if n := len(s.ofType("AWS::SNS::Subscription")); n != 0 {
		t.Errorf("default stack subscribes %d", n)
	}
	subs := fullStack(t).ofType("AWS::SNS::Subscription")
	for _, sub := range subs {
		if props(sub)["Protocol"] != "email" || props(sub)["Endpoint"] != "oncall@example.com" {
			t.Errorf("subscription %v", props(sub))
		}
	}
	if len(subs) != 1 {
		t.Errorf("full stack subscribes %d", len(subs))
	}
}

func TestDashboardLeadsWithBusinessMetricsAndShowsEveryEmittedMetric(t *testing.T) {
	// GIVEN the default stack's dashboard
	s := defaultStack(t)
	var body string
	for _, d := range s.ofType("AWS::CloudWatch::Dashboard") {
		if props(d)["DashboardName"] != "webhooks-dev-overview" {
			t.Fatalf("dashboard %v", props(d)["DashboardName"])
		}
		body = render(props(d)["DashboardBody"], func(id string) string { return id })
	}
	var dash struct {
		Widgets []struct {
			Y          float64        `json:"y"`
			X          float64        `json:"x"`
			Properties map[string]any `json:"properties"`
		} `json:"widgets"`
	}
	if err := json.Unmarshal([]byte(body), &dash); err != nil {
		t.Fatalf("body: %v\n%s", err, body)
	}
	// WHEN its widgets are read top to bottom
	firstRow := map[string]float64{}
	for _, w := range dash.Widgets {
		metrics, _ := w.Properties["metrics"].([]any)
		for _, m := range metrics {
			row := m.([]any)
			ns, name := row[0].(string), row[1].(string)
			// THEN the functions' own metrics carry no dimensions
			if ns == "EffectivelyOnce/dev" {
				if len(row) > 3 || (len(row) == 3 && !isOptions(row[2])) {
					t.Errorf("%s has dimensions: %v", name, row)
				}
			}
			if y, ok := firstRow[name]; !ok || w.Y < y {
				firstRow[name] = w.Y
			}
		}
	}
	// AND every metric the functions emit is on it
	for _, list := range [][]string{pipeline.IntakeMetrics, pipeline.ProcessorMetrics, pipeline.DispatcherMetrics, pipeline.ReconcilerMetrics} {
		for _, m := range list {
			if _, ok := firstRow[m]; !ok {
				t.Errorf("metric %s not on the dashboard", m)
			}
		}
	}
	// AND it leads with whether the downstream follows the truth: above
	// every other metric
	for _, lead := range []string{"CompensationsDue", "DownstreamDrift"} {
		for name, y := range firstRow {
			if name != "CompensationsDue" && name != "DownstreamDrift" && firstRow[lead] >= y {
				t.Errorf("%s (y=%v) is not above %s (y=%v)", lead, firstRow[lead], name, y)
			}
		}
	}
	// AND the business questions sit above every run metric
	business := []string{"UnfinishedEvents", "OldestUnfinishedAgeSeconds", "IntentsPending", "IntentsUncertain", "Duplicates", "Stale", "Quarantined", "ApproximateAgeOfOldestMessage"}
	run := []string{"Errors", "Throttles", "Duration", "IntakeLatencyMs", "ProcessLatencyMs", "Processed"}
	for _, b := range business {
		for _, r := range run {
			if firstRow[b] >= firstRow[r] {
				t.Errorf("%s (y=%v) is not above %s (y=%v)", b, firstRow[b], r, firstRow[r])
			}
		}
	}
}

func isOptions(v any) bool { _, ok := v.(map[string]any); return ok }

func TestOutputsNameTheURLsTableQueuesAndDashboard(t *testing.T) {
	// GIVEN the full stack (two sources)
	s := fullStack(t)
	// THEN the outputs an operator needs are there
	if _, ok := s.outputs["SourceSecretArnSes"]; ok {
		t.Error("an SNS source has no secret to output")
	}
	for _, id := range []string{"WebhookBaseUrl", "SourceUrlStripe", "SourceUrlShop", "SourceUrlSes", "SourceSecretArnStripe", "SourceSecretArnShop", "TruthSecretArnStripe",
		"TableName", "EventsQueueUrl", "EventsDlqUrl", "EffectsQueueUrl", "EffectsDlqUrl", "DashboardUrl", "AlarmTopicArn"} {
		if _, ok := s.outputs[id]; !ok {
			t.Errorf("output %s missing (have %v)", id, keys(s.outputs))
		}
	}
	val := func(id string) string {
		return render(s.outputs[id].(map[string]any)["Value"], func(id string) string { return "{" + id + "}" })
	}
	var apiID string
	for id := range s.ofType("AWS::ApiGatewayV2::Api") {
		apiID = id
	}
	// AND each source's URL is the API's endpoint + /webhooks/<name>
	if got := val("SourceUrlShop"); !strings.HasPrefix(got, "{"+apiID+"}/webhooks/") || !strings.HasSuffix(got, "/webhooks/shop") {
		t.Errorf("shop URL %s", got)
	}
	if got := val("DashboardUrl"); !strings.HasSuffix(got, "#dashboards:name=webhooks-dev-overview") {
		t.Errorf("dashboard URL %s", got)
	}
	if got := val("SourceSecretArnShop"); got != "arn:aws:secretsmanager:eu-west-1:123456789012:secret:shop-hmac-AbCdEf" {
		t.Errorf("shop secret %s", got)
	}
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
