// Command processor is the event processor Lambda (SQS event source with
// ReportBatchItemFailures). It only wires: configuration, clients, handler.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/pkg/config"
	"github.com/effectively-once/webhooks/pkg/ledger"
	"github.com/effectively-once/webhooks/pkg/processor"
	"github.com/effectively-once/webhooks/pkg/projection"
	"github.com/effectively-once/webhooks/pkg/queue"
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
	log := cfg.Logger("processor")
	awsCfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		return fmt.Errorf("load AWS config: %w", err)
	}
	owner := os.Getenv("AWS_LAMBDA_LOG_STREAM_NAME")
	if owner == "" {
		owner = "processor"
	}
	owner += "/" + ledger.RandomTokens()[:8]
	l, err := ledger.New(dynamodb.NewFromConfig(awsCfg), ledger.Options{Table: cfg.Table, Retention: cfg.Retention, Actor: owner})
	if err != nil {
		return err
	}
	p, err := processor.New(l, cfg.Sources, projection.Default(projection.StripeOptions{}), processor.Options{
		Owner: owner, Lease: cfg.Lease, MaxAttempts: cfg.MaxAttempts, RetryCap: cfg.Visibility, Log: log, Metrics: cfg.Metrics(),
		Effects: queue.Sender{Client: sqs.NewFromConfig(awsCfg), URL: cfg.EffectsQueueURL},
	})
	if err != nil {
		return err
	}
	lambda.Start(p.HandleSQS)
	return nil
}
