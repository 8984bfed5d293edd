// Command infra is the CDK app: `cdk synth` and `cdk deploy` (from the
// repository root, through cdk.json) run it. It reads the stage's
// configuration from CDK context, builds one stack and checks it with
// cdk-nag's AwsSolutions rules.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/effectively-once/webhooks/infra/stack"
)

func main() {
	defer jsii.Close()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "infra: "+err.Error())
		os.Exit(1)
	}
}

func run() error {
	root, err := stack.RepoRoot(".")
	if err != nil {
		return err
	}
	// cdk.json runs the app from infra/, but the CLI names the output folder
	// relative to the root, where it reads it back.
	props := &awscdk.AppProps{}
	if out := os.Getenv("CDK_OUTDIR"); out != "" && !filepath.IsAbs(out) {
		props.Outdir = jsii.String(filepath.Join(root, out))
	}
	app := awscdk.NewApp(props)
	get := func(key string) any { return app.Node().TryGetContext(jsii.String(key)) }
	cfg, err := stack.FromContext(get)
	if err != nil {
		return err
	}
	strict := false
	if v, ok := get("strictAssets").(string); ok && v == "true" {
		strict = true
	} else if b, ok := get("strictAssets").(bool); ok {
		strict = b
	}
	cfg.Assets = stack.AssetsFromBuild(root, strict)
	// Environment-agnostic: `cdk deploy` targets the account and region of
	// the caller's credentials, and synth needs none.
	if _, err := stack.New(app, cfg, nil); err != nil {
		return err
	}
	stack.AddChecks(app, true)
	app.Synth(nil)
	return nil
}
