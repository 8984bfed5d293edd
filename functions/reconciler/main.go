// Command reconciler is the scheduled reconciler Lambda (EventBridge
// schedule). It only wires: configuration, clients, handler.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/pkg/config"
	"github.com/effectively-once/webhooks/pkg/ledger"
	"github.com/effectively-once/webhooks/pkg/projection"
	"github.com/effectively-once/webhooks/pkg/reconciler"
	"github.com/effectively-once/webhooks/pkg/source"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "reconciler: "+err.Error())
		os.Exit(1)
	}
}

func run() error {
	cfg, err := config.LoadReconciler(os.Getenv)
	if err != nil {
		return err
	}
	log := cfg.Logger("reconciler")
	awsCfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		return fmt.Errorf("load AWS config: %w", err)
	}
	l, err := ledger.New(dynamodb.NewFromConfig(awsCfg), ledger.Options{Table: cfg.Table, Retention: cfg.Retention, Actor: "reconciler"})
	if err != nil {
		return err
	}
	secrets := &source.Secrets{SM: secretsmanager.NewFromConfig(awsCfg)}
	if cfg.EnvSecret {
		secrets.Getenv = os.Getenv
	}
	r := &reconciler.Reconciler{
		Ledger: l, SQS: sqs.NewFromConfig(awsCfg),
		Queues:  reconciler.Queues{Events: cfg.EventsQueueURL, EventsDLQ: cfg.EventsDLQURL, Effects: cfg.EffectsQueueURL, EffectsDLQ: cfg.EffectsDLQURL},
		Sources: cfg.Sources, Registry: projection.Default(projection.StripeOptions{}),
		Truths: reconciler.BuildTruths(cfg.Sources, secrets),
		Opts:   reconciler.Options{StuckAfter: cfg.StuckAfter, MaxItems: cfg.MaxItems, Budget: cfg.Budget, Log: log, Metrics: cfg.Metrics()},
	}
	// A failed step fails the invocation, so the function's Errors alarm
	// fires; every step is idempotent, so a retried invocation is harmless.
	lambda.Start(func(ctx context.Context, _ events.EventBridgeEvent) (reconciler.Report, error) {
		return r.Run(ctx)
	})
	return nil
}
