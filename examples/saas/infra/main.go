// Command infra is the example SaaS's own CDK app: its stack holds the
// effectively-once webhook pipeline (package pipeline's construct, with
// the SaaS's Stripe source, its two effects and its function code) and
// the SaaS's billing service, which may read the canonical state.
// cdk-nag's AwsSolutions rules check the whole app.
//
//	cd examples/saas/infra && go run .        # build the functions, synthesize into cdk.out/
//	npx cdk deploy                            # the same through the CDK CLI (cdk.json), then deploy
//
// The SaaS's functions (../functions/<fn>) are built at synth by the
// construct's Build (go build, linux/arm64): a deploy needs Go on PATH and
// no build step of its own, and never deploys a placeholder.
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
	// The CDK CLI names the output folder (CDK_OUTDIR); `go run .` alone
	// writes cdk.out/ here, as the CLI would, instead of a temporary
	// folder.
	props := &awscdk.AppProps{}
	if os.Getenv("CDK_OUTDIR") == "" {
		props.Outdir = jsii.String("cdk.out")
	}
	app := awscdk.NewApp(props)
	stage := "dev"
	if v, ok := app.Node().TryGetContext(jsii.String("stage")).(string); ok && v != "" {
		stage = v
	}
	if _, err := NewSaas(app, "Saas-"+stage, SaasProps{Stage: stage, ModuleDir: ".."}); err != nil {
		fmt.Fprintln(os.Stderr, "saas infra: "+err.Error())
		os.Exit(1)
	}
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
	app.Synth(nil)
}
