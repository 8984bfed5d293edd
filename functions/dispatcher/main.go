// Command dispatcher is the outbox dispatcher Lambda (SQS event source on
// the effects queue, with ReportBatchItemFailures). It only wires:
// configuration, clients, handler.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/config"
	"github.com/effectively-once/webhooks/internal/outbox"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dispatcher: "+err.Error())
		os.Exit(1)
	}
}

func run() error {
	cfg, err := config.LoadDispatcher(os.Getenv)
	if err != nil {
		return err
	}
	rt, err := cfg.Start(context.Background(), "dispatcher", "")
	if err != nil {
		return err
	}
	c := &outbox.Consumer{
		Dispatcher: &outbox.Dispatcher{Ledger: rt.Ledger, Effects: outbox.Build(cfg.Effects, rt.Secrets), Owner: rt.Owner,
			Lease: cfg.Lease, MaxAttempts: cfg.MaxAttempts},
		SQS: sqs.NewFromConfig(rt.AWS), QueueURL: cfg.EffectsQueueURL, Log: rt.Log, Metrics: rt.Metrics,
	}
	lambda.Start(c.HandleSQS)
	return nil
}
