// Command reconciler is the scheduled reconciler Lambda (EventBridge
// schedule). It only wires: configuration, clients, handler.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/pkg/config"
	"github.com/effectively-once/webhooks/pkg/intake"
	"github.com/effectively-once/webhooks/pkg/outbox"
	"github.com/effectively-once/webhooks/pkg/projection"
	"github.com/effectively-once/webhooks/pkg/queue"
	"github.com/effectively-once/webhooks/pkg/reconciler"
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
	rt, err := cfg.Start(context.Background(), "reconciler", "reconciler")
	if err != nil {
		return err
	}
	client := sqs.NewFromConfig(rt.AWS)
	r := &reconciler.Reconciler{
		Ledger: rt.Ledger, SQS: client,
		Queues: reconciler.Queues{Events: cfg.EventsQueueURL, EventsDLQ: cfg.EventsDLQURL, Effects: cfg.EffectsQueueURL, EffectsDLQ: cfg.EffectsDLQURL,
			BridgeDLQ: cfg.BridgeDLQURL},
		Sources: cfg.Sources, Registry: projection.Default(projection.StripeOptions{}),
		Truths: reconciler.BuildTruths(cfg.Sources, rt.Secrets),
		Opts:   reconciler.Options{StuckAfter: cfg.StuckAfter, MaxItems: cfg.MaxItems, Budget: cfg.Budget, Log: rt.Log, Metrics: rt.Metrics},
	}
	// The downstream drift check asks the effects' status endpoints which
	// version of a subject they hold. EFFECTS (or EFFECTS_FILE) is the
	// dispatcher's document; without it every subject is skipped.
	if os.Getenv("EFFECTS") != "" || os.Getenv("EFFECTS_FILE") != "" {
		effects, err := outbox.LoadEffects(os.Getenv)
		if err != nil {
			return fmt.Errorf("EFFECTS/EFFECTS_FILE: %w", err)
		}
		r.Effects = outbox.Build(effects, rt.Secrets)
	}
	if cfg.BridgeDLQURL != "" {
		// The bridge's dead letters go through the bridge's own accept path.
		// Only the letters its allowed senders (the bridge's role) wrote.
		r.Bridge = &intake.Handler{Sources: cfg.Sources, Ledger: rt.Ledger, Log: rt.Log,
			Queue: queue.Sender{Client: client, URL: cfg.EventsQueueURL}, DLQSenders: cfg.BridgeDLQSenders}
	}
	// A failed step fails the invocation, so the function's Errors alarm
	// fires; every step is idempotent, so a retried invocation is harmless.
	lambda.Start(func(ctx context.Context, _ events.EventBridgeEvent) (reconciler.Report, error) {
		return r.Run(ctx)
	})
	return nil
}
