package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/effectively-once/webhooks/infra/pipeline"
)

// The SaaS's Stripe account signs its webhooks with a secret the SaaS
// keeps in its own Secrets Manager secret, and its seat and email services
// take a bearer token; these ARNs are visibly fake (account 000000000000):
// put your own.
const (
	stripeSigningSecretArn = "arn:aws:secretsmanager:eu-west-1:000000000000:secret:saas/stripe/webhook-signing-FAKE00"
	servicesTokenArn       = "arn:aws:secretsmanager:eu-west-1:000000000000:secret:saas/services/token-FAKE00"
)

// Saas is the SaaS's stack: the webhook pipeline and the SaaS's own
// billing service role, which reads each subscription's seats and dunning
// from the ledger (and combines them with rules.Access).
type Saas struct {
	awscdk.Stack
	Pipeline *pipeline.Pipeline
	// BillingService is the role of the SaaS's own billing API (its code
	// is not part of this example); it may read projections and nothing
	// else.
	BillingService awsiam.Role
}

// SaasProps are what changes between the SaaS's stages.
type SaasProps struct {
	Stage string
	// ModuleDir is the SaaS's Go module (examples/saas, ".." from this
	// app): the construct builds the SaaS's functions/<fn> from it at
	// synth, linux/arm64, with the SaaS's rules.
	ModuleDir string
	// Placeholder synthesizes placeholders instead of building: for tests
	// of the template only, never for a deploy.
	Placeholder bool
}

// NewSaas builds the SaaS's stack.
func NewSaas(scope constructs.Construct, id string, p SaasProps) (*Saas, error) {
	st := awscdk.NewStack(scope, jsii.String(id), nil)
	web, err := pipeline.New(st, "Webhooks", &pipeline.Props{
		Name:  "saas",
		Stage: p.Stage,
		// Snapshot events: the object is in the event, nothing is fetched.
		Sources: []pipeline.Source{{Name: "saas-stripe", Kind: "stripe", SecretArn: stripeSigningSecretArn}},
		Effects: []pipeline.Effect{
			{Kind: "set_seat_limit", URL: "https://seats.saas.example/v1/limits",
				Scopes: []string{"saas-stripe"}, SecretArn: servicesTokenArn},
			{Kind: "send_dunning_email", URL: "https://mail.saas.example/v1/dunning",
				Scopes: []string{"saas-stripe"}, SecretArn: servicesTokenArn},
		},
		// The SaaS's secrets live in its own secrets; the construct creates none.
		GivenSecretsOnly: true,
		// Each function is functions/<fn> of the SaaS's module, built
		// when the stack is synthesized; a missing Go, or a main that
		// does not compile, fails the synth: no placeholder is deployed.
		Build:            &pipeline.GoBuild{ModuleDir: p.ModuleDir, Placeholder: p.Placeholder},
		AlarmEmail:       "billing-oncall@saas.example",
		RetentionDays:    14,
		LogRetentionDays: 90,
	})
	if err != nil {
		return nil, err
	}
	billing := awsiam.NewRole(st, jsii.String("BillingService"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String("The SaaS's billing API: reads each subscription's seats and dunning"),
	})
	web.GrantReadState(billing)

	out := func(id string, v *string) { awscdk.NewCfnOutput(st, jsii.String(id), &awscdk.CfnOutputProps{Value: v}) }
	out("StripeWebhookUrl", web.SourceURL("saas-stripe"))
	out("LedgerTable", web.Table.TableName())
	return &Saas{Stack: st, Pipeline: web, BillingService: billing}, nil
}
