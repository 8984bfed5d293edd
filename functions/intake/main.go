// Command intake is the webhook intake Lambda (API Gateway HTTP API,
// payload 2.0). It only wires: configuration, clients, handler.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/config"
	"github.com/effectively-once/webhooks/internal/intake"
	"github.com/effectively-once/webhooks/internal/queue"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "intake: "+err.Error())
		os.Exit(1)
	}
}

func run() error {
	cfg, err := config.LoadIntake(os.Getenv)
	if err != nil {
		return err
	}
	rt, err := cfg.Start(context.Background(), "intake", "intake")
	if err != nil {
		return err
	}
	h := &intake.Handler{
		Sources: cfg.Sources, Secrets: rt.Secrets, Ledger: rt.Ledger, Log: rt.Log, Metrics: rt.Metrics,
		Queue: queue.Sender{Client: sqs.NewFromConfig(rt.AWS), URL: cfg.EventsQueueURL},
	}
	lambda.Start(h.HandleHTTPAPI)
	return nil
}
