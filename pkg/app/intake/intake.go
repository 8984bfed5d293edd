// Package intake is the pipeline's intake function for app.Main:
//
//	func main() { app.Main(intake.Function, rules.Rules()) }
package intake

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/effectively-once/webhooks/internal/config"
	inintake "github.com/effectively-once/webhooks/internal/intake"
	"github.com/effectively-once/webhooks/pkg/app"
)

// Function is the intake function. Intake verifies webhook deliveries (API Gateway HTTP API) and accepts them into the ledger.
var Function = app.Function{Name: "intake", Build: func(ctx context.Context, _ app.Rules, getenv func(string) string) (func(), error) {
	return intakeFn(ctx, getenv)
}}

func intakeFn(ctx context.Context, getenv func(string) string) (func(), error) {
	cfg, err := config.LoadIntake(getenv)
	if err != nil {
		return nil, err
	}
	rt, err := cfg.Start(ctx, "intake", "intake")
	if err != nil {
		return nil, err
	}
	h := inintake.New(cfg, rt)
	return func() { lambda.Start(h.HandleHTTPAPI) }, nil
}
