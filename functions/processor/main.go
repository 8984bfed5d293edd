// Command processor is the event processor Lambda (SQS event source with
// ReportBatchItemFailures). It only wires: configuration, clients, handler.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/config"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/pkg/builtin"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "processor: "+err.Error())
		os.Exit(1)
	}
}

func run() error {
	cfg, err := config.LoadProcessor(os.Getenv)
	if err != nil {
		return err
	}
	rt, err := cfg.Start(context.Background(), "processor", "")
	if err != nil {
		return err
	}
	p, err := processor.New(rt.Ledger, cfg.Sources, builtin.Default(builtin.StripeOptions{}), processor.Options{
		Owner: rt.Owner, Lease: cfg.Lease, MaxAttempts: cfg.MaxAttempts, RetryCap: cfg.Visibility, Log: rt.Log, Metrics: rt.Metrics,
		Effects:   queue.Sender{Client: sqs.NewFromConfig(rt.AWS), URL: cfg.EffectsQueueURL},
		StripeAPI: processor.StripeClients(cfg.Sources, rt.Secrets.Value),
	})
	if err != nil {
		return err
	}
	lambda.Start(p.HandleSQS)
	return nil
}
