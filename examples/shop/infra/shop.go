package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/effectively-once/webhooks/infra/pipeline"
)

// The shop's Stripe account signs its webhooks with a secret the shop
// keeps in its own Secrets Manager secret; these ARNs are visibly fake
// (account 000000000000): put your own.
const (
	stripeSigningSecretArn = "arn:aws:secretsmanager:eu-west-1:000000000000:secret:shop/stripe/webhook-signing-FAKE00"
	stripeAPIKeyArn        = "arn:aws:secretsmanager:eu-west-1:000000000000:secret:shop/stripe/restricted-key-FAKE00"
	shippingTokenArn       = "arn:aws:secretsmanager:eu-west-1:000000000000:secret:shop/shipping/token-FAKE00"
)

// Shop is the shop's stack: the webhook pipeline and the shop's own orders
// service role, which reads the canonical order state from the ledger.
type Shop struct {
	awscdk.Stack
	Pipeline *pipeline.Pipeline
	// OrdersService is the role of the shop's own orders API (its code is
	// not part of this example); it may read projections and nothing else.
	OrdersService awsiam.Role
}

// ShopProps are what changes between the shop's stages.
type ShopProps struct {
	Stage string
	// ModuleDir is the shop's Go module (examples/shop, ".." from this
	// app): the construct builds the shop's functions/<fn> from it at
	// synth, linux/arm64, with the shop's rules.
	ModuleDir string
	// Placeholder synthesizes placeholders instead of building: for tests
	// of the template only, never for a deploy.
	Placeholder bool
}

// NewShop builds the shop's stack.
func NewShop(scope constructs.Construct, id string, p ShopProps) (*Shop, error) {
	st := awscdk.NewStack(scope, jsii.String(id), nil)
	web, err := pipeline.New(st, "Webhooks", &pipeline.Props{
		Name:  "shop",
		Stage: p.Stage,
		Sources: []pipeline.Source{{
			Name: "shop-stripe", Kind: "stripe", SecretArn: stripeSigningSecretArn,
			// Thin events: the processor fetches the object they name.
			API:   &pipeline.API{SecretArn: stripeAPIKeyArn},
			Truth: &pipeline.Truth{Kind: "stripe", SecretArn: stripeAPIKeyArn},
		}},
		Effects: []pipeline.Effect{
			{Kind: "ship_order", URL: "https://shipping.shop.example/v1/shipments", StatusURL: "https://shipping.shop.example/v1/shipments/status",
				Scopes: []string{"shop-stripe"}, SecretArn: shippingTokenArn},
			{Kind: "cancel_shipment", URL: "https://shipping.shop.example/v1/cancellations",
				Scopes: []string{"shop-stripe"}, SecretArn: shippingTokenArn},
			{Kind: "send_confirmation", URL: "https://mail.shop.example/v1/confirmations", Scopes: []string{"shop-stripe"}},
			{Kind: "entitlement.grant", URL: "https://members.shop.example/v1/grants", Scopes: []string{"shop-stripe"}},
			{Kind: "entitlement.revoke", URL: "https://members.shop.example/v1/revocations", Scopes: []string{"shop-stripe"}},
		},
		// The shop's secrets live in its own secrets; the construct creates none.
		GivenSecretsOnly: true,
		// Each function is functions/<fn> of the shop's module, built
		// when the stack is synthesized; a missing Go, or a main that
		// does not compile, fails the synth: no placeholder is deployed.
		Build:            &pipeline.GoBuild{ModuleDir: p.ModuleDir, Placeholder: p.Placeholder},
		AlarmEmail:       "shop-oncall@shop.example",
		Tracing:          true,
		RetentionDays:    14,
		LogRetentionDays: 90,
		DueShards:        8,
	})
	if err != nil {
		return nil, err
	}
	orders := awsiam.NewRole(st, jsii.String("OrdersService"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String("The shop's orders API: reads each order's canonical state"),
	})
	web.GrantReadState(orders)

	out := func(id string, v *string) { awscdk.NewCfnOutput(st, jsii.String(id), &awscdk.CfnOutputProps{Value: v}) }
	out("StripeWebhookUrl", web.SourceURL("shop-stripe"))
	out("LedgerTable", web.Table.TableName())
	return &Shop{Stack: st, Pipeline: web, OrdersService: orders}, nil
}
