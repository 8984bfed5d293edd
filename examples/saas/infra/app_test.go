package main

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

func TestMain(m *testing.M) {
	if os.Getenv("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION") == "" {
		os.Setenv("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
	}
	code := m.Run()
	jsii.Close()
	os.Exit(code)
}

// synth builds the SaaS's app as main does, with placeholders instead of
// the functions' builds: the template only.
func synth(t *testing.T) (*Saas, map[string]map[string]any) {
	t.Helper()
	app := awscdk.NewApp(nil)
	saas, err := NewSaas(app, "Saas-dev", SaasProps{Stage: "dev", ModuleDir: "..", Placeholder: true})
	if err != nil {
		t.Fatal(err)
	}
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
	return saas, templateResources(t, saas.Stack)
}

// templateResources is a stack's template as plain JSON, by logical id.
func templateResources(t *testing.T, st awscdk.Stack) map[string]map[string]any {
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

func TestTheSaasAppSynthesizesCdkNagCleanWithTheBillingServiceReadingState(t *testing.T) {
	// GIVEN the SaaS's app: the pipeline with its Stripe source and two
	// effects, and its billing service role
	// WHEN it is synthesized
	saas, res := synth(t)

	// THEN cdk-nag's AwsSolutions rules report no error and no warning
	ann := assertions.Annotations_FromStack(saas.Stack)
	rule := assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))
	for _, m := range *ann.FindError(jsii.String("*"), rule) {
		t.Errorf("cdk-nag error at %s: %v", *m.Id, m.Entry.Data)
	}
	for _, m := range *ann.FindWarning(jsii.String("*"), rule) {
		t.Errorf("cdk-nag warning at %s: %v", *m.Id, m.Entry.Data)
	}

	// AND the billing service may read projection items of the ledger, and
	// nothing else
	ref := func(v any) string {
		m, _ := v.(map[string]any)
		if r, ok := m["Ref"].(string); ok {
			return r
		}
		ga, _ := m["Fn::GetAtt"].([]any)
		if len(ga) > 0 {
			return ga[0].(string)
		}
		return ""
	}
	roleID, tableID := "", ""
	for id, r := range res {
		switch {
		case r["Type"] == "AWS::IAM::Role" && strings.HasPrefix(id, "BillingService"):
			roleID = id
		case r["Type"] == "AWS::DynamoDB::Table":
			tableID = id
		}
	}
	var stmts []map[string]any
	for _, r := range res {
		if r["Type"] != "AWS::IAM::Policy" {
			continue
		}
		p := r["Properties"].(map[string]any)
		if !slices.ContainsFunc(p["Roles"].([]any), func(x any) bool { return ref(x) == roleID }) {
			continue
		}
		for _, s := range p["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			stmts = append(stmts, s.(map[string]any))
		}
	}
	if roleID == "" || tableID == "" || len(stmts) != 1 {
		t.Fatalf("role %q table %q statements %v", roleID, tableID, stmts)
	}
	s, _ := json.Marshal(stmts[0])
	for _, want := range []string{`"dynamodb:GetItem"`, `"dynamodb:Query"`, `"dynamodb:BatchGetItem"`,
		`"Resource":{"Fn::GetAtt":["` + tableID + `","Arn"]}`, `"dynamodb:LeadingKeys":["PJ#*"]`} {
		if !strings.Contains(string(s), want) {
			t.Errorf("the billing service's grant %s lacks %s", s, want)
		}
	}
	if n := len(stmts[0]["Action"].([]any)); n != 3 {
		t.Errorf("the billing service holds %d actions", n)
	}

	// AND the SaaS's names, secrets and effects are its own
	counts := map[string]int{}
	for _, r := range res {
		counts[r["Type"].(string)]++
	}
	if counts["AWS::SecretsManager::Secret"] != 0 || counts["AWS::Lambda::Function"] != 4 {
		t.Errorf("resources %v (GivenSecretsOnly creates no secret; no EventBridge source, no bridge)", counts)
	}
	if got := saas.Pipeline.Props.Prefix(); got != "saas-dev-" {
		t.Errorf("prefix %q", got)
	}
	kinds := []string{}
	for _, e := range saas.Pipeline.Props.Effects {
		kinds = append(kinds, e.Kind)
		if len(e.Scopes) != 1 || e.Scopes[0] != "saas-stripe" {
			t.Errorf("effect %s serves %v", e.Kind, e.Scopes)
		}
	}
	if !slices.Equal(kinds, []string{"set_seat_limit", "send_dunning_email"}) {
		t.Errorf("effects %v", kinds)
	}
}
