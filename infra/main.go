// Command infra is the CDK app: `cdk synth` and `cdk deploy` (from the
// repository root, through cdk.json) run it. It reads the stage's
// configuration from CDK context, builds one stack, whose functions it
// compiles from functions/<fn> (pipeline.GoBuild), and checks it with
// cdk-nag's AwsSolutions rules.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/effectively-once/webhooks/infra/pipeline"
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
	// The functions are built from functions/<fn> at synth (go build,
	// linux/arm64), so a deploy needs no build step and cannot ship a
	// placeholder. -c prebuilt=true takes build/<fn>/bootstrap instead
	// (`make build`), with placeholders for missing ones unless
	// -c strictAssets=true.
	if contextBool(get("prebuilt")) {
		cfg.Assets = stack.AssetsFromBuild(root, contextBool(get("strictAssets")))
	} else {
		cfg.Build = &pipeline.GoBuild{ModuleDir: root}
	}
	// Environment-agnostic: `cdk deploy` targets the account and region of
	// the caller's credentials, and synth needs none.
	if _, err := stack.New(app, cfg, nil); err != nil {
		return err
	}
	stack.AddChecks(app, true)
	app.Synth(nil)
	return nil
}

// contextBool reads a context flag given as true or "true".
func contextBool(v any) bool {
	b, ok := v.(bool)
	return v == "true" || ok && b
}
