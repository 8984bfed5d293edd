package pipeline_test

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
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/jsii-runtime-go"

	"github.com/effectively-once/webhooks/infra/pipeline"
)

func TestMain(m *testing.M) {
	// Node 20 (CI's) still runs the jsii runtime; its end-of-life banner on
	// every test binary is noise.
	if os.Getenv("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION") == "" {
		os.Setenv("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
	}
	code := m.Run()
	jsii.Close()
	os.Exit(code)
}

// stripe is the smallest configuration: one Stripe source, nothing else.
var stripe = []pipeline.Source{{Name: "stripe", Kind: "stripe"}}

// bare is a stack of a team's own app with nothing in it yet, checked by
// cdk-nag as a team's app would check it.
func bare(t *testing.T) (awscdk.App, awscdk.Stack) {
	t.Helper()
	app := awscdk.NewApp(nil)
	st := awscdk.NewStack(app, jsii.String("TeamStack"), nil)
	pipeline.AddChecks(app, false)
	return app, st
}

// resources is the stack's template as plain JSON, by logical id.
func resources(t *testing.T, st awscdk.Stack) map[string]map[string]any {
	t.Helper()
	b, _ := json.Marshal(assertions.Template_FromStack(st, nil).ToJSON())
	var doc struct {
		Resources map[string]map[string]any `json:"Resources"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Resources
}

func ofType(res map[string]map[string]any, typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range res {
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

// nagFindings lists cdk-nag's AwsSolutions errors and warnings on st.
func nagFindings(st awscdk.Stack) []string {
	ann := assertions.Annotations_FromStack(st)
	rule := assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))
	var out []string
	for _, m := range *ann.FindError(jsii.String("*"), rule) {
		out = append(out, "error at "+*m.Id+": "+toString(m.Entry.Data))
	}
	for _, m := range *ann.FindWarning(jsii.String("*"), rule) {
		out = append(out, "warning at "+*m.Id+": "+toString(m.Entry.Data))
	}
	return out
}

func toString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestDefaultsInABareStackAreCdkNagCleanAndBilledOnDemand(t *testing.T) {
	// GIVEN a team's bare stack and a construct with nothing but a source
	_, st := bare(t)
	// WHEN the pipeline is created with every other prop at its zero value
	p, err := pipeline.New(st, "Webhooks", &pipeline.Props{Sources: stripe})
	if err != nil {
		t.Fatal(err)
	}
	res := resources(t, st)
	// THEN cdk-nag's AwsSolutions rules report nothing
	for _, f := range nagFindings(st) {
		t.Errorf("cdk-nag: %s", f)
	}
	// AND the ledger is billed on demand, with no auto scaling
	tables := ofType(res, "AWS::DynamoDB::Table")
	if len(tables) != 1 {
		t.Fatalf("%d tables", len(tables))
	}
	for _, tb := range tables {
		tp := props(tb)
		if tp["BillingMode"] != "PAY_PER_REQUEST" || tp["ProvisionedThroughput"] != nil || tp["TableName"] != "webhooks-dev-ledger" {
			t.Errorf("table %v", tp)
		}
		if tp["DeletionProtectionEnabled"] != true || tb["DeletionPolicy"] != "Retain" {
			t.Errorf("the table is not protected by default: %v %v", tp["DeletionProtectionEnabled"], tb["DeletionPolicy"])
		}
	}
	if n := len(ofType(res, "AWS::ApplicationAutoScaling::ScalableTarget")); n != 0 {
		t.Errorf("%d scalable targets on an on-demand table", n)
	}
	// AND it exposes what it created
	if p.Table == nil || p.Events.Queue == nil || p.Effects.DLQ == nil || p.API == nil || p.URL == nil ||
		p.AlarmTopic == nil || p.Dashboard == nil || p.SourceURL("stripe") == nil || p.SourceURL("nope") != nil {
		t.Fatalf("members missing: %+v", p)
	}
	for _, fn := range []string{pipeline.Intake, pipeline.Processor, pipeline.Dispatcher, pipeline.Reconciler} {
		if f := p.Functions[fn]; f == nil || f.Fn == nil || f.Role == nil {
			t.Errorf("function %s not exposed", fn)
		}
	}
	if p.Props.DueShards != 4 || *p.Props.IntakeReservedConcurrency != 100 || p.Props.MetricsNamespace != "EffectivelyOnce/webhooks-dev" {
		t.Errorf("defaults %+v", p.Props)
	}
}

func TestProvisionedBillingAutoScalesTheTableAndItsIndexBetweenThePropsBounds(t *testing.T) {
	// GIVEN provisioned billing: the table's read and write bounds, the
	// index's write bound of its own (its read bound follows the table's)
	_, st := bare(t)
	_, err := pipeline.New(st, "Webhooks", &pipeline.Props{Sources: stripe, Billing: pipeline.Billing{
		Provisioned: &pipeline.Provisioned{
			Read:                     pipeline.Capacity{Min: 5, Max: 50},
			Write:                    pipeline.Capacity{Min: 10, Max: 200},
			IndexWrite:               pipeline.Capacity{Min: 8, Max: 150},
			TargetUtilizationPercent: 60,
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// WHEN it is synthesized
	res := resources(t, st)
	// THEN the table and its index are provisioned at their minimums
	for _, tb := range ofType(res, "AWS::DynamoDB::Table") {
		tp := props(tb)
		if tp["BillingMode"] == "PAY_PER_REQUEST" || toString(tp["ProvisionedThroughput"]) != `{"ReadCapacityUnits":5,"WriteCapacityUnits":10}` {
			t.Errorf("table billing %v %v", tp["BillingMode"], tp["ProvisionedThroughput"])
		}
		gsis, _ := tp["GlobalSecondaryIndexes"].([]any)
		if len(gsis) != 1 || toString(gsis[0].(map[string]any)["ProvisionedThroughput"]) != `{"ReadCapacityUnits":5,"WriteCapacityUnits":8}` {
			t.Errorf("index %v", gsis)
		}
	}
	// AND one scalable target per dimension holds the props' min and max
	want := map[string][2]float64{
		"dynamodb:table:ReadCapacityUnits":  {5, 50},
		"dynamodb:table:WriteCapacityUnits": {10, 200},
		"dynamodb:index:ReadCapacityUnits":  {5, 50},
		"dynamodb:index:WriteCapacityUnits": {8, 150},
	}
	targets := ofType(res, "AWS::ApplicationAutoScaling::ScalableTarget")
	got := map[string][2]float64{}
	for id, tg := range targets {
		tp := props(tg)
		dim := tp["ScalableDimension"].(string)
		got[dim] = [2]float64{tp["MinCapacity"].(float64), tp["MaxCapacity"].(float64)}
		rid := toString(tp["ResourceId"])
		if strings.HasPrefix(dim, "dynamodb:index:") != strings.Contains(rid, "/index/due") {
			t.Errorf("%s: %s on %s", id, dim, rid)
		}
	}
	if len(targets) != 4 || toString(got) != toString(want) {
		t.Errorf("scalable targets %v, want %v", got, want)
	}
	// AND each tracks the target utilisation
	policies := ofType(res, "AWS::ApplicationAutoScaling::ScalingPolicy")
	for _, pol := range policies {
		cfg := props(pol)["TargetTrackingScalingPolicyConfiguration"].(map[string]any)
		if cfg["TargetValue"] != 60.0 {
			t.Errorf("policy %v", cfg)
		}
	}
	if len(policies) != 4 {
		t.Errorf("%d scaling policies", len(policies))
	}
	// AND cdk-nag stays clean
	for _, f := range nagFindings(st) {
		t.Errorf("cdk-nag: %s", f)
	}
}

func TestGrantReadStateAllowsOnlyReadsOfProjectionItems(t *testing.T) {
	// GIVEN the pipeline and a role of the team's own service
	_, st := bare(t)
	p, err := pipeline.New(st, "Webhooks", &pipeline.Props{Sources: stripe})
	if err != nil {
		t.Fatal(err)
	}
	state := awsiam.NewRole(st, jsii.String("OrdersService"), &awsiam.RoleProps{AssumedBy: awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil)})
	outcomes := awsiam.NewRole(st, jsii.String("OpsService"), &awsiam.RoleProps{AssumedBy: awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil)})
	// WHEN it is granted the state (and the other role the intents)
	p.GrantReadState(state)
	p.GrantReadIntents(outcomes)
	res := resources(t, st)
	tableID := ""
	for id := range ofType(res, "AWS::DynamoDB::Table") {
		tableID = id
	}
	for role, prefix := range map[string]string{"OrdersService": "PJ#*", "OpsService": "OP#*"} {
		// THEN its policy has one statement: GetItem, Query and
		// BatchGetItem on the table, for partition keys under the prefix
		var stmts []map[string]any
		for _, pol := range ofType(res, "AWS::IAM::Policy") {
			for _, r := range props(pol)["Roles"].([]any) {
				if strings.HasPrefix(r.(map[string]any)["Ref"].(string), role) {
					for _, s := range props(pol)["PolicyDocument"].(map[string]any)["Statement"].([]any) {
						stmts = append(stmts, s.(map[string]any))
					}
				}
			}
		}
		if len(stmts) != 1 {
			t.Fatalf("%s: %d statements: %v", role, len(stmts), stmts)
		}
		s := stmts[0]
		var actions []string
		for _, a := range s["Action"].([]any) {
			actions = append(actions, a.(string))
		}
		slices.Sort(actions)
		if s["Effect"] != "Allow" || toString(actions) != `["dynamodb:BatchGetItem","dynamodb:GetItem","dynamodb:Query"]` {
			t.Errorf("%s: %v %v", role, s["Effect"], actions)
		}
		if toString(s["Resource"]) != `{"Fn::GetAtt":["`+tableID+`","Arn"]}` {
			t.Errorf("%s: resource %v (want the table only, not its index)", role, s["Resource"])
		}
		want := `{"ForAllValues:StringLike":{"dynamodb:LeadingKeys":["` + prefix + `"]},"Null":{"dynamodb:LeadingKeys":"false"}}`
		if toString(s["Condition"]) != want {
			t.Errorf("%s: condition %s, want %s", role, toString(s["Condition"]), want)
		}
	}
	// AND cdk-nag finds nothing to say about the grants
	for _, f := range nagFindings(st) {
		t.Errorf("cdk-nag: %s", f)
	}
}

func TestCodeComesFromTheTeamsDirsAndAMissingBootstrapIsAPlaceholderUnlessStrict(t *testing.T) {
	// GIVEN a build folder where every function but the reconciler is built
	dir := t.TempDir()
	dirs := map[string]string{}
	for _, fn := range []string{pipeline.Intake, pipeline.Processor, pipeline.Dispatcher} {
		d := filepath.Join(dir, "team-"+fn)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "bootstrap"), []byte("team "+fn), 0o755); err != nil {
			t.Fatal(err)
		}
		dirs[fn] = d
	}
	// WHEN the pipeline takes its code from those dirs, not strict
	_, st := bare(t)
	p, err := pipeline.New(st, "Webhooks", &pipeline.Props{Sources: stripe, Code: pipeline.Code{Dirs: dirs, BuildDir: filepath.Join(dir, "none")}})
	if err != nil {
		t.Fatal(err)
	}
	// THEN the built ones are deployed from their dirs, the reconciler from
	// the placeholder with a warning, and its schedule stays disabled
	for fn, f := range p.Functions {
		if f.Built != (fn != pipeline.Reconciler) {
			t.Errorf("%s built=%v", fn, f.Built)
		}
	}
	warn := assertions.Annotations_FromStack(st).FindWarning(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String(".*reconciler function's bootstrap does not exist.*")))
	if len(*warn) != 1 {
		t.Errorf("%d not-built warnings", len(*warn))
	}
	for _, r := range ofType(resources(t, st), "AWS::Events::Rule") {
		if props(r)["State"] != "DISABLED" {
			t.Errorf("the schedule of a reconciler without code is %v", props(r)["State"])
		}
	}
}

func TestContradictoryPropsFailNamingTheProp(t *testing.T) {
	empty, built := t.TempDir(), t.TempDir()
	for _, fn := range []string{pipeline.Intake, pipeline.Processor, pipeline.Dispatcher, pipeline.Reconciler} {
		if err := os.MkdirAll(filepath.Join(built, fn), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(built, fn, "bootstrap"), []byte(fn), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	withEffects := func(e ...pipeline.Effect) pipeline.Props { return pipeline.Props{Sources: stripe, Effects: e} }
	prov := func(p pipeline.Provisioned) pipeline.Props {
		return pipeline.Props{Sources: stripe, Billing: pipeline.Billing{Provisioned: &p}}
	}
	for name, c := range map[string]struct {
		props pipeline.Props
		prop  string
		says  string
	}{
		"no sources": {pipeline.Props{}, "Sources", "at least one source"},
		"a signed source with no secret": {pipeline.Props{GivenSecretsOnly: true, Sources: []pipeline.Source{{Name: "shop", Kind: "shopify"}}},
			"Sources[0].SecretArn", "need a secret"},
		"a secret that is not an ARN": {pipeline.Props{Sources: []pipeline.Source{{Name: "shop", Kind: "shopify", SecretArn: "shpss_123"}}},
			"Sources[0].SecretArn", "Secrets Manager secret ARN"},
		"an effect whose scopes name no source": {withEffects(pipeline.Effect{Kind: "ship_order", URL: "https://ship.example/orders", Scopes: []string{"shop"}}),
			"Effects[0] (ship_order)", `scope "shop" is no source's: the sources are stripe`},
		"an effect without scopes": {withEffects(pipeline.Effect{Kind: "ship_order", URL: "https://ship.example/orders"}),
			"Effects[0] (ship_order)", "scopes is required"},
		"an effect token not created": {pipeline.Props{GivenSecretsOnly: true, Sources: []pipeline.Source{{Name: "stripe", Kind: "stripe", SecretArn: "arn:aws:secretsmanager:eu-west-1:123456789012:secret:s-AbCdEf"}},
			Effects: []pipeline.Effect{{Kind: "ship_order", URL: "https://ship.example/orders", Scopes: []string{"*"}, Secret: true}}},
			"Effects[0] (ship_order).SecretArn", "GivenSecretsOnly"},
		"an effect over plain http": {withEffects(pipeline.Effect{Kind: "ship_order", URL: "http://ship.example/orders", Scopes: []string{"stripe"}}),
			"Effects", "plain http is allowed only to a loopback address"},
		"too many due shards":        {pipeline.Props{Sources: stripe, DueShards: 65}, "DueShards", "DUE_SHARDS must be an integer between 1 and 64"},
		"reads narrower than writes": {pipeline.Props{Sources: stripe, DueShards: 16, DueShardsRead: 8}, "DueShardsRead", "DUE_SHARDS_READ must be an integer between 16 and 64"},
		"negative reservation":       {pipeline.Props{Sources: stripe, IntakeReservedConcurrency: new(int(-1))}, "IntakeReservedConcurrency", "outside 0..5000"},
		"provisioned min above max": {prov(pipeline.Provisioned{Read: pipeline.Capacity{Min: 5, Max: 50}, Write: pipeline.Capacity{Min: 100, Max: 10}}),
			"Billing.Provisioned.Write", "min 100 is above max 10"},
		"provisioned without max": {prov(pipeline.Provisioned{Read: pipeline.Capacity{Min: 5}, Write: pipeline.Capacity{Max: 10}}),
			"Billing.Provisioned.Read", "max is required"},
		"index min above max": {prov(pipeline.Provisioned{Read: pipeline.Capacity{Max: 50}, Write: pipeline.Capacity{Max: 10}, IndexWrite: pipeline.Capacity{Min: 20, Max: 10}}),
			"Billing.Provisioned.IndexWrite", "min 20 is above max 10"},
		"utilisation out of range": {prov(pipeline.Provisioned{Read: pipeline.Capacity{Max: 50}, Write: pipeline.Capacity{Max: 10}, TargetUtilizationPercent: 95}),
			"Billing.Provisioned.TargetUtilizationPercent", "outside 10..90"},
		"a code dir without a bootstrap, strict": {pipeline.Props{Sources: stripe, Code: pipeline.Code{Strict: true, BuildDir: built, Dirs: map[string]string{pipeline.Processor: empty}}},
			"Code.Dirs[processor]", "bootstrap does not exist"},
		"a build dir without bootstraps, strict": {pipeline.Props{Sources: stripe, Code: pipeline.Code{Strict: true, BuildDir: empty}},
			"Code.BuildDir", "bootstrap does not exist"},
		"a code dir of no function": {pipeline.Props{Sources: stripe, Code: pipeline.Code{Dirs: map[string]string{"shipper": empty}}},
			"Code.Dirs[shipper]", "no such function"},
		"a stage with capitals":              {pipeline.Props{Sources: stripe, Stage: "Prod"}, "Stage", "must match"},
		"a log retention CloudWatch refuses": {pipeline.Props{Sources: stripe, LogRetentionDays: 10}, "LogRetentionDays", "not a retention"},
	} {
		t.Run(name, func(t *testing.T) {
			// GIVEN a team's stack and props that contradict themselves
			_, st := bare(t)
			// WHEN the pipeline is created
			p, err := pipeline.New(st, "Webhooks", &c.props)
			// THEN it fails, naming the prop, and created nothing
			var pe *pipeline.PropError
			if p != nil || !errors.Is(err, pipeline.ErrProps) || !errors.As(err, &pe) {
				t.Fatalf("New = %v, %v; want a *PropError", p, err)
			}
			if pe.Prop != c.prop || !strings.Contains(err.Error(), c.prop+": ") || !strings.Contains(err.Error(), c.says) {
				t.Errorf("err = %v (prop %q), want prop %q saying %q", err, pe.Prop, c.prop, c.says)
			}
			if n := len(*st.Node().Children()); n != 0 {
				t.Errorf("%d constructs were created before the error", n)
			}
		})
	}
}
