// Command infra is the example SaaS's own CDK app: its stack holds the
// effectively-once webhook pipeline (package pipeline's construct, with
// the SaaS's Stripe source, its two effects and its function code) and
// the SaaS's billing service, which may read the canonical state.
// cdk-nag's AwsSolutions rules check the whole app.
//
//	cd examples/saas/infra && go run .                  # synthesize into cdk.out/
//	../../../infra/node_modules/.bin/cdk synth          # the same through the CDK CLI (cdk.json)
//	../../../infra/node_modules/.bin/cdk deploy -c strict=true
package main

import (
	"fmt"
	"os"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

func main() {
	defer jsii.Close()
	app := awscdk.NewApp(nil)
	stage := "dev"
	if v, ok := app.Node().TryGetContext(jsii.String("stage")).(string); ok && v != "" {
		stage = v
	}
	// Deploys build first (examples/saas/build/<fn>/bootstrap) and pass
	// -c strict=true, so no placeholder is ever deployed.
	strict := app.Node().TryGetContext(jsii.String("strict")) == "true"
	if _, err := NewSaas(app, "Saas-"+stage, SaasProps{Stage: stage, BuildDir: "../build", Strict: strict}); err != nil {
		fmt.Fprintln(os.Stderr, "saas infra: "+err.Error())
		os.Exit(1)
	}
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
	app.Synth(nil)
}
