// Command dispatcher is the outbox dispatcher Lambda (SQS event source on
// the effects queue, with ReportBatchItemFailures). It only wires:
// configuration, clients, handler.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/pkg/config"
	"github.com/effectively-once/webhooks/pkg/ledger"
	"github.com/effectively-once/webhooks/pkg/outbox"
	"github.com/effectively-once/webhooks/pkg/source"
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
	log := cfg.Logger("dispatcher")
	awsCfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		return fmt.Errorf("load AWS config: %w", err)
	}
	owner := os.Getenv("AWS_LAMBDA_LOG_STREAM_NAME")
	if owner == "" {
		owner = "dispatcher"
	}
	owner += "/" + ledger.RandomTokens()[:8]
	l, err := ledger.New(dynamodb.NewFromConfig(awsCfg), ledger.Options{Table: cfg.Table, Retention: cfg.Retention, Actor: owner})
	if err != nil {
		return err
	}
	secrets := &source.Secrets{SM: secretsmanager.NewFromConfig(awsCfg)}
	if cfg.EnvSecret {
		secrets.Getenv = os.Getenv
	}
	c := &outbox.Consumer{
		Dispatcher: &outbox.Dispatcher{Ledger: l, Effects: outbox.Build(cfg.Effects, secrets), Owner: owner,
			Lease: cfg.Lease, MaxAttempts: cfg.MaxAttempts},
		SQS: sqs.NewFromConfig(awsCfg), QueueURL: cfg.EffectsQueueURL, Log: log, Metrics: cfg.Metrics(),
	}
	lambda.Start(c.HandleSQS)
	return nil
}
