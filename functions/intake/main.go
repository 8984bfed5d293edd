// Command intake is the webhook intake Lambda (API Gateway HTTP API,
// POST /webhooks/{source}). It only wires: configuration, clients, handler.
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
	"github.com/effectively-once/webhooks/pkg/intake"
	"github.com/effectively-once/webhooks/pkg/ledger"
	"github.com/effectively-once/webhooks/pkg/queue"
	"github.com/effectively-once/webhooks/pkg/source"
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
	log := cfg.Logger("intake")
	awsCfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		return fmt.Errorf("load AWS config: %w", err)
	}
	l, err := ledger.New(dynamodb.NewFromConfig(awsCfg), ledger.Options{Table: cfg.Table, Retention: cfg.Retention, Actor: "intake"})
	if err != nil {
		return err
	}
	secrets := &source.Secrets{SM: secretsmanager.NewFromConfig(awsCfg)}
	if cfg.EnvSecret {
		secrets.Getenv = os.Getenv
	}
	h := &intake.Handler{
		Sources: cfg.Sources,
		Secrets: secrets,
		Ledger:  l,
		Queue:   queue.Sender{Client: sqs.NewFromConfig(awsCfg), URL: cfg.EventsQueueURL},
		Log:     log,
		Metrics: cfg.Metrics(),
	}
	lambda.Start(h.HandleHTTPAPI)
	return nil
}
