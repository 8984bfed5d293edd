package pipeline_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/effectively-once/webhooks/infra/pipeline"
)

const (
	targetRegion  = "eu-west-1"
	targetAccount = "123456789012"
)

// inRegion is a team's stack whose env names its region and account, so
// the construct can check a target's region at synth.
func inRegion(t *testing.T) awscdk.Stack {
	t.Helper()
	app := awscdk.NewApp(nil)
	st := awscdk.NewStack(app, jsii.String("TeamStack"), &awscdk.StackProps{
		Env: &awscdk.Environment{Region: jsii.String(targetRegion), Account: jsii.String(targetAccount)}})
	pipeline.AddChecks(app, false)
	return st
}

// roleID is the logical id of the role that runs fn.
func roleID(t *testing.T, res map[string]map[string]any, fn string) string {
	t.Helper()
	for id, r := range ofType(res, "AWS::IAM::Role") {
		if d, _ := props(r)["Description"].(string); strings.HasPrefix(d, "Runs the webhooks-dev-"+fn+" function") {
			return id
		}
	}
	t.Fatalf("no role for %s", fn)
	return ""
}

// literalStatements lists the statements of role's policies whose
// resource is a literal ARN (not a reference to a resource of the stack):
// in a pipeline with no given secret, exactly the grants on effect targets.
func literalStatements(t *testing.T, res map[string]map[string]any, role string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, pol := range ofType(res, "AWS::IAM::Policy") {
		attached := false
		for _, r := range props(pol)["Roles"].([]any) {
			attached = attached || r.(map[string]any)["Ref"] == role
		}
		if !attached {
			continue
		}
		for _, s := range props(pol)["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			stmt := s.(map[string]any)
			if _, literal := stmt["Resource"].(string); literal {
				out = append(out, stmt)
			}
		}
	}
	return out
}

// statement is one expected grant: these actions (sorted) on this resource.
type statement struct {
	actions  []string
	resource string
}

func actionsOf(stmt map[string]any) []string {
	switch a := stmt["Action"].(type) {
	case string:
		return []string{a}
	case []any:
		var out []string
		for _, x := range a {
			out = append(out, x.(string))
		}
		slices.Sort(out)
		return out
	}
	return nil
}

func TestEachTargetGrantsTheDispatcherExactlyItsActionsOnItsARN(t *testing.T) {
	const (
		fn      = "arn:aws:lambda:eu-west-1:123456789012:function:fulfilment"
		fnAlias = "arn:aws:lambda:eu-west-1:123456789012:function:fulfilment:live"
		queue   = "arn:aws:sqs:eu-west-1:123456789012:shipments"
		fifo    = "arn:aws:sqs:eu-west-1:123456789012:shipments.fifo"
		key     = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
		bus     = "arn:aws:events:eu-west-1:123456789012:event-bus/orders"
		machine = "arn:aws:states:eu-west-1:123456789012:stateMachine:ship-order"
	)
	for name, c := range map[string]struct {
		effect pipeline.Effect
		want   []statement
	}{
		"lambda": {pipeline.Effect{Target: fn},
			[]statement{{[]string{"lambda:InvokeFunction"}, fn}}},
		"lambda alias": {pipeline.Effect{Target: fnAlias},
			[]statement{{[]string{"lambda:InvokeFunction"}, fnAlias}}},
		"sqs standard": {pipeline.Effect{Target: queue},
			[]statement{{[]string{"sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:SendMessage"}, queue}}},
		"sqs fifo with a customer managed key": {pipeline.Effect{Target: fifo, KMSKeyArn: key},
			[]statement{{[]string{"sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:SendMessage"}, fifo},
				{[]string{"kms:Decrypt", "kms:GenerateDataKey"}, key}}},
		"eventbridge": {pipeline.Effect{Target: bus},
			[]statement{{[]string{"events:PutEvents"}, bus}}},
		"step functions": {pipeline.Effect{Target: machine},
			[]statement{{[]string{"states:DescribeStateMachine", "states:StartExecution"}, machine},
				{[]string{"states:DescribeExecution"}, "arn:aws:states:eu-west-1:123456789012:execution:ship-order:*"}}},
	} {
		t.Run(name, func(t *testing.T) {
			// GIVEN a team's stack in eu-west-1 and an effect on the target
			st := inRegion(t)
			e := c.effect
			e.Kind, e.Scopes = "ship_order", []string{"stripe"}
			// WHEN the pipeline is created
			if _, err := pipeline.New(st, "Webhooks", &pipeline.Props{Sources: stripe, Effects: []pipeline.Effect{e}}); err != nil {
				t.Fatal(err)
			}
			res := resources(t, st)
			di := roleID(t, res, pipeline.Dispatcher)
			// THEN the dispatcher's policy holds each grant as one statement
			tpl := assertions.Template_FromStack(st, nil)
			for _, w := range c.want {
				var action any = w.actions[0]
				if len(w.actions) > 1 {
					action = w.actions
				}
				tpl.HasResourceProperties(jsii.String("AWS::IAM::Policy"), map[string]any{
					"Roles": assertions.Match_ArrayWith(&[]any{map[string]any{"Ref": di}}),
					"PolicyDocument": map[string]any{"Statement": assertions.Match_ArrayWith(&[]any{
						assertions.Match_ObjectEquals(&map[string]any{"Action": action, "Effect": "Allow", "Resource": w.resource})})},
				})
			}
			// AND nothing else names the target or any other ARN outside
			// the stack: exactly those actions on exactly those resources
			var got []statement
			for _, s := range literalStatements(t, res, di) {
				if s["Effect"] != "Allow" || s["Condition"] != nil {
					t.Errorf("statement %v", s)
				}
				got = append(got, statement{actionsOf(s), s["Resource"].(string)})
			}
			key := func(s statement) string { return s.resource + " " + strings.Join(s.actions, ",") }
			slices.SortFunc(got, func(a, b statement) int { return strings.Compare(key(a), key(b)) })
			want := slices.Clone(c.want)
			slices.SortFunc(want, func(a, b statement) int { return strings.Compare(key(a), key(b)) })
			if !slices.EqualFunc(got, want, func(a, b statement) bool { return key(a) == key(b) }) {
				t.Errorf("dispatcher's grants outside the stack %v, want %v", got, want)
			}
			// AND no other function gets any of it (the reconciler reads
			// the same EFFECTS but never calls a target)
			for _, fn := range []string{pipeline.Intake, pipeline.Processor, pipeline.Reconciler} {
				if s := literalStatements(t, res, roleID(t, res, fn)); len(s) != 0 {
					t.Errorf("%s holds %v", fn, s)
				}
			}
			// AND the dispatcher gets the target in EFFECTS, and cdk-nag
			// is clean (the execution name's wildcard is suppressed with
			// its reason)
			for _, f := range nagFindings(st) {
				t.Errorf("cdk-nag: %s", f)
			}
			for _, r := range ofType(res, "AWS::Lambda::Function") {
				if props(r)["FunctionName"] == "webhooks-dev-dispatcher" {
					env := props(r)["Environment"].(map[string]any)["Variables"].(map[string]any)
					if doc, _ := env["EFFECTS"].(string); !strings.Contains(doc, `"target":"`+e.Target+`"`) || strings.Contains(doc, "kms") {
						t.Errorf("EFFECTS %v", env["EFFECTS"])
					}
				}
			}
		})
	}
}

func TestAWrongTargetFailsSynthNamingTheEffectAndTheKey(t *testing.T) {
	elsewhere := "arn:aws:states:us-east-1:123456789012:stateMachine:ship-order"
	for name, c := range map[string]struct {
		effect    pipeline.Effect
		agnostic  bool // the stack's region is a token
		prop, say string
	}{
		"another service": {pipeline.Effect{Target: "arn:aws:sns:eu-west-1:123456789012:orders"}, false,
			"Effects", `effect 0 ("ship_order"): target: "arn:aws:sns:eu-west-1:123456789012:orders" is an ARN of service "sns"`},
		"another region": {pipeline.Effect{Target: elsewhere}, false,
			"Effects", `effect 0 ("ship_order"): target: "` + elsewhere + `" is in region us-east-1, the dispatcher runs in eu-west-1`},
		"a qualified state machine": {pipeline.Effect{Target: "arn:aws:states:eu-west-1:123456789012:stateMachine:ship-order:live"}, false,
			"Effects", `effect 0 ("ship_order"): target: `},
		"url and target": {pipeline.Effect{URL: "https://ship.example/orders", Target: "arn:aws:lambda:eu-west-1:123456789012:function:f"}, false,
			"Effects", `effect 0 ("ship_order"): url and target`},
		"a target with a status url": {pipeline.Effect{Target: "arn:aws:lambda:eu-west-1:123456789012:function:f", StatusURL: "https://ship.example/status"}, false,
			"Effects", `effect 0 ("ship_order"): status_url`},
		"a target with a token": {pipeline.Effect{Target: "arn:aws:lambda:eu-west-1:123456789012:function:f", Secret: true}, false,
			"Effects[0] (ship_order).SecretArn", "called with the dispatcher's role"},
		"a key without an sqs target": {pipeline.Effect{Target: "arn:aws:lambda:eu-west-1:123456789012:function:f",
			KMSKeyArn: "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"}, false,
			"Effects[0] (ship_order).KMSKeyArn", "no SQS target"},
		"a key alias": {pipeline.Effect{Target: "arn:aws:sqs:eu-west-1:123456789012:q", KMSKeyArn: "arn:aws:kms:eu-west-1:123456789012:alias/q"}, false,
			"Effects[0] (ship_order).KMSKeyArn", "must be a KMS key ARN"},
		"another service, region unknown": {pipeline.Effect{Target: "arn:aws:sns:eu-west-1:123456789012:orders"}, true,
			"Effects", `effect 0 ("ship_order"): target: `},
	} {
		t.Run(name, func(t *testing.T) {
			// GIVEN a team's stack (in eu-west-1, or environment-agnostic)
			st := inRegion(t)
			if c.agnostic {
				_, st = bare(t)
			}
			e := c.effect
			e.Kind, e.Scopes = "ship_order", []string{"stripe"}
			// WHEN the pipeline is created with the wrong target
			p, err := pipeline.New(st, "Webhooks", &pipeline.Props{Sources: stripe, Effects: []pipeline.Effect{e}})
			// THEN synth fails naming the effect and the key, and nothing
			// was created
			var pe *pipeline.PropError
			if p != nil || !errors.As(err, &pe) || !errors.Is(err, pipeline.ErrProps) {
				t.Fatalf("New = %v, %v; want a *PropError", p, err)
			}
			if pe.Prop != c.prop || !strings.Contains(err.Error(), c.say) {
				t.Errorf("err = %v (prop %q), want prop %q saying %q", err, pe.Prop, c.prop, c.say)
			}
			if n := len(*st.Node().Children()); n != 0 {
				t.Errorf("%d constructs were created before the error", n)
			}
		})
	}
	// An environment-agnostic stack cannot know its region at synth: the
	// same ARN in another region is left to the dispatcher's own check at
	// its start (AWS_REGION), which refuses it before any call.
	_, st := bare(t)
	e := pipeline.Effect{Kind: "ship_order", Target: elsewhere, Scopes: []string{"stripe"}}
	if _, err := pipeline.New(st, "Webhooks", &pipeline.Props{Sources: stripe, Effects: []pipeline.Effect{e}}); err != nil {
		t.Fatalf("environment-agnostic stack: %v", err)
	}
}
