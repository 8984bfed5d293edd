// Package bridge is the pipeline's bridge function for app.Main:
//
//	func main() { app.Main(bridge.Function, rules.Rules()) }
package bridge

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/config"
	"github.com/effectively-once/webhooks/internal/intake"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/pkg/app"
)

// Function is the bridge function. Bridge accepts events from EventBridge partner event buses.
var Function = app.Function{Name: "bridge", Build: func(ctx context.Context, _ app.Rules, getenv func(string) string) (func(), error) {
	return bridgeFn(ctx, getenv)
}}

func bridgeFn(ctx context.Context, getenv func(string) string) (func(), error) {
	cfg, err := config.LoadBridge(getenv)
	if err != nil {
		return nil, err
	}
	rt, err := cfg.Start(ctx, "bridge", "bridge")
	if err != nil {
		return nil, err
	}
	// No Secrets: this path has no signature to verify.
	h := &intake.Handler{
		Sources: cfg.Sources, Ledger: rt.Ledger, Log: rt.Log, Metrics: rt.Metrics,
		Queue: queue.Sender{Client: sqs.NewFromConfig(rt.AWS), URL: cfg.EventsQueueURL},
	}
	return func() { lambda.Start(h.HandleEventBridge) }, nil
}
