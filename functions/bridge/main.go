// Command bridge is the EventBridge intake Lambda: the target of the rules
// on the partner event buses of sources whose delivery includes
// eventbridge (Stripe event destinations, Shopify). It only wires:
// configuration, clients, handler (intake.Handler.HandleEventBridge).
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
		fmt.Fprintln(os.Stderr, "bridge: "+err.Error())
		os.Exit(1)
	}
}

func run() error {
	cfg, err := config.LoadBridge(os.Getenv)
	if err != nil {
		return err
	}
	rt, err := cfg.Start(context.Background(), "bridge", "bridge")
	if err != nil {
		return err
	}
	// No Secrets: this path has no signature to verify.
	h := &intake.Handler{
		Sources: cfg.Sources, Ledger: rt.Ledger, Log: rt.Log, Metrics: rt.Metrics,
		Queue: queue.Sender{Client: sqs.NewFromConfig(rt.AWS), URL: cfg.EventsQueueURL},
	}
	lambda.Start(h.HandleEventBridge)
	return nil
}
