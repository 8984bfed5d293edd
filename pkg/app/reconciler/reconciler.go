// Package reconciler is the pipeline's reconciler function for app.Main:
//
//	func main() { app.Main(reconciler.Function, rules.Rules()) }
package reconciler

import (
	"context"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/config"
	"github.com/effectively-once/webhooks/internal/intake"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/queue"
	inreconciler "github.com/effectively-once/webhooks/internal/reconciler"
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Function is the reconciler function. Reconciler re-drives stuck work and compares local state with the providers' and downstreams' truth (EventBridge schedule).
var Function = app.Function{Name: "reconciler", Build: func(ctx context.Context, rules app.Rules, getenv func(string) string) (func(), error) {
	if rules.Registry == nil {
		return nil, fmt.Errorf("%w: the reconciler needs a Registry (the processor's)", app.ErrRules)
	}
	return reconcilerFn(ctx, getenv, rules.Registry)
}}

func reconcilerFn(ctx context.Context, getenv func(string) string, reg *projection.Registry) (func(), error) {
	cfg, err := config.LoadReconciler(getenv)
	if err != nil {
		return nil, err
	}
	rt, err := cfg.Start(ctx, "reconciler", "reconciler")
	if err != nil {
		return nil, err
	}
	client := sqs.NewFromConfig(rt.AWS)
	r := &inreconciler.Reconciler{
		Ledger: rt.Ledger, SQS: client,
		Queues: inreconciler.Queues{Events: cfg.EventsQueueURL, EventsDLQ: cfg.EventsDLQURL, Effects: cfg.EffectsQueueURL, EffectsDLQ: cfg.EffectsDLQURL,
			BridgeDLQ: cfg.BridgeDLQURL},
		Sources: cfg.Sources, Registry: reg,
		Truths: inreconciler.BuildTruths(cfg.Sources, rt.Secrets),
		Opts:   inreconciler.Options{StuckAfter: cfg.StuckAfter, MaxItems: cfg.MaxItems, Budget: cfg.Budget, Log: rt.Log, Metrics: rt.Metrics},
	}
	// The downstream drift check asks the effects' status endpoints which
	// version of a subject they hold. EFFECTS (or EFFECTS_FILE) is the
	// dispatcher's document; without it every subject is skipped.
	if getenv("EFFECTS") != "" || getenv("EFFECTS_FILE") != "" {
		effects, err := outbox.LoadEffects(getenv)
		if err != nil {
			return nil, fmt.Errorf("EFFECTS/EFFECTS_FILE: %w", err)
		}
		if r.Effects, err = outbox.Build(effects, rt.Secrets, rt.AWS); err != nil {
			return nil, fmt.Errorf("EFFECTS/EFFECTS_FILE: %w", err)
		}
	}
	if wc := cfg.Warehouse; wc != nil {
		r.Warehouse = &inreconciler.WarehouseCheck{Ledger: rt.Ledger, S3: s3.NewFromConfig(rt.AWS, outbox.S3PathStyle), Bucket: wc.Bucket, Prefix: wc.Prefix, MaxState: wc.MaxState, Projections: wc.Projections,
			Retention: cfg.WarehouseRetention, ReadLimit: cfg.WarehouseCheckReads, Checks: cfg.WarehouseCheckSubjects}
	}
	if cfg.BridgeDLQURL != "" {
		// The bridge's dead letters go through the bridge's own accept path.
		// Only the letters its allowed senders (the bridge's role) wrote.
		r.Bridge = &intake.Handler{Sources: cfg.Sources, Ledger: rt.Ledger, Log: rt.Log,
			Queue: queue.Sender{Client: client, URL: cfg.EventsQueueURL}, DLQSenders: cfg.BridgeDLQSenders}
	}
	// A failed step fails the invocation, so the function's Errors alarm
	// fires; every step is idempotent, so a retried invocation is harmless.
	return func() {
		lambda.Start(func(ctx context.Context, _ events.EventBridgeEvent) (inreconciler.Report, error) {
			return r.Run(ctx)
		})
	}, nil
}
