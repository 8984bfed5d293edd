package pipeline_test

import (
	"log"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/effectively-once/webhooks/infra/pipeline"
)

// A team's CDK app, in the infra/ folder of its Go module: each function
// is built from the module's functions/<fn> when the stack is synthesized
// (`cdk synth`, `cdk deploy`), so the deploy needs no build step and
// cannot ship a placeholder.
func ExampleGoBuild() {
	app := awscdk.NewApp(nil)
	stack := awscdk.NewStack(app, jsii.String("Shop-prod"), nil)
	_, err := pipeline.New(stack, "Webhooks", &pipeline.Props{
		Name: "shop", Stage: "prod",
		Sources: []pipeline.Source{{Name: "shop-stripe", Kind: "stripe"}},
		Build: &pipeline.GoBuild{
			ModuleDir: "..", // the folder of the team's go.mod
			// Only where a main is not functions/<fn>:
			Packages: map[string]string{pipeline.Processor: "./cmd/processor"},
		},
	})
	if err != nil {
		log.Fatal(err) // e.g. no `go` on PATH, or a function that does not compile
	}
	app.Synth(nil)
}
