// Package dispatcher is the pipeline's dispatcher function for app.Main:
//
//	func main() { app.Main(dispatcher.Function, rules.Rules()) }
package dispatcher

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/pkg/app"
)

// Function is the dispatcher function. Dispatcher performs the outbox's effects (SQS, the effects queue).
var Function = app.Function{Name: "dispatcher", Build: func(ctx context.Context, _ app.Rules, getenv func(string) string) (func(), error) {
	return dispatcherFn(ctx, getenv)
}}

func dispatcherFn(ctx context.Context, getenv func(string) string) (func(), error) {
	cfg, err := outbox.LoadDispatcherConfig(getenv)
	if err != nil {
		return nil, err
	}
	rt, err := cfg.Start(ctx, "dispatcher", "")
	if err != nil {
		return nil, err
	}
	effects, err := outbox.Build(cfg.Effects, rt.Secrets, rt.AWS)
	if err != nil {
		return nil, err
	}
	c := &outbox.Consumer{
		Dispatcher: &outbox.Dispatcher{Ledger: rt.Ledger, Effects: effects, Owner: rt.Owner,
			Lease: cfg.Lease, MaxAttempts: cfg.MaxAttempts},
		SQS: sqs.NewFromConfig(rt.AWS), QueueURL: cfg.EffectsQueueURL, Log: rt.Log, Metrics: rt.Metrics,
	}
	return func() { lambda.Start(c.HandleSQS) }, nil
}
