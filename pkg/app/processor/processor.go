// Package processor is the pipeline's processor function for app.Main:
//
//	func main() { app.Main(processor.Function, rules.Rules()) }
package processor

import (
	"context"
	"fmt"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/config"
	inprocessor "github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/pkg/app"
)

// Function is the processor function. Processor applies the projections (SQS, the events queue).
var Function = app.Function{Name: "processor", Build: func(ctx context.Context, rules app.Rules, getenv func(string) string) (func(), error) {
	if rules.Registry == nil {
		return nil, fmt.Errorf("%w: the processor needs a Registry", app.ErrRules)
	}
	for kind, f := range rules.Resolvers {
		if f == nil {
			return nil, fmt.Errorf("%w: the resolver of kind %q is nil", app.ErrRules, kind)
		}
	}
	return processorFn(ctx, getenv, rules)
}}

func processorFn(ctx context.Context, getenv func(string) string, rules app.Rules) (func(), error) {
	cfg, err := config.LoadProcessor(getenv)
	if err != nil {
		return nil, err
	}
	rt, err := cfg.Start(ctx, "processor", "")
	if err != nil {
		return nil, err
	}
	resolvers, err := inprocessor.BuildResolvers(cfg.Sources, rules.Registry, rules.Resolvers, rt.Secrets.Value)
	if err != nil {
		return nil, fmt.Errorf("SOURCES: %w", err)
	}
	p, err := inprocessor.New(rt.Ledger, cfg.Sources, rules.Registry, inprocessor.Options{
		Owner: rt.Owner, Lease: cfg.Lease, MaxAttempts: cfg.MaxAttempts, RetryCap: cfg.Visibility, Log: rt.Log, Metrics: rt.Metrics,
		Effects:   queue.Sender{Client: sqs.NewFromConfig(rt.AWS), URL: cfg.EffectsQueueURL},
		Resolvers: resolvers, Warehouse: cfg.Warehouse, ProjectionTimeout: cfg.ProjectionTimeout,
	})
	if err != nil {
		return nil, err
	}
	return func() { lambda.Start(handler(p, func() { endInstance(rt.Log) })) }, nil
}
