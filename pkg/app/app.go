package app

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/config"
	"github.com/effectively-once/webhooks/internal/intake"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/reconciler"
	"github.com/effectively-once/webhooks/pkg/projection"
	"github.com/effectively-once/webhooks/pkg/provider"
)

// Function names one of the pipeline's Lambda functions.
type Function string

// The functions. Each is its own binary (its own bootstrap), so each
// links and initialises only what it runs.
const (
	// Intake verifies webhook deliveries (API Gateway HTTP API) and
	// accepts them into the ledger.
	Intake Function = "intake"
	// Bridge accepts events from EventBridge partner event buses.
	Bridge Function = "bridge"
	// Processor applies the projections (SQS, the events queue).
	Processor Function = "processor"
	// Dispatcher performs the outbox's effects (SQS, the effects queue).
	Dispatcher Function = "dispatcher"
	// Reconciler re-drives stuck work and compares local state with the
	// providers' and downstreams' truth (EventBridge schedule).
	Reconciler Function = "reconciler"
)

// Rules is what a team gives the pipeline. Give every function the same
// Rules (build them in one function of your own package), so the
// reconciler's drift check runs the rules the processor runs.
type Rules struct {
	// Registry maps (provider kind, event type) to the projections that
	// apply it. The processor and the reconciler need it; the other
	// functions ignore it. builtin.Default() is ours; build your own with
	// projection.NewRegistry, and add ours with builtin.Register.
	Registry *projection.Registry
	// Providers adds verifiers for provider kinds the pipeline does not
	// know, by kind name (a source's "kind" in SOURCES). A built-in kind
	// cannot be replaced.
	Providers map[string]provider.Constructor
	// Resolvers build, by provider kind, the resolver of each source of
	// that kind: what turns an event that only names its object (a
	// Stripe thin event) into the event the projections read, by
	// fetching the object's current state (see projection.Resolver). The
	// processor builds one per source at cold start, from the source's
	// "api" settings in SOURCES (its URL, its key's secret reference,
	// read through the processor's secret store). builtin.Resolvers() is
	// ours (Stripe thin events, kind "stripe"): without it a Stripe
	// source's thin events are projected as delivered, which no
	// projection reads (ignored). A source that configures an api its
	// kind has no resolver for stops the processor from starting.
	Resolvers map[string]projection.ResolverFactory
}

// ErrRules is returned for Rules a function cannot run with.
var ErrRules = errors.New("app: rules")

// Main runs fn with rules and never returns: it is the whole of a
// function's main. A configuration error is printed to stderr, naming the
// variable, and the process exits 1 (Lambda reports an init error).
func Main(fn Function, rules Rules) {
	if err := Run(fn, rules); err != nil {
		fmt.Fprintln(os.Stderr, string(fn)+": "+err.Error())
		os.Exit(1)
	}
}

// Run reads fn's configuration from the environment, builds its clients
// once and starts the Lambda runtime loop (which does not return). It
// returns an error only when the function cannot start.
func Run(fn Function, rules Rules) error {
	start, err := build(context.Background(), fn, rules, os.Getenv)
	if err != nil {
		return err
	}
	start()
	return nil
}

// build validates the rules, loads fn's configuration and returns what
// starts it. It is Run without the runtime loop, for tests.
func build(ctx context.Context, fn Function, rules Rules, getenv func(string) string) (func(), error) {
	for kind, c := range rules.Providers {
		if err := provider.Register(kind, c); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrRules, err)
		}
	}
	switch fn {
	case Intake:
		return intakeFn(ctx, getenv)
	case Bridge:
		return bridgeFn(ctx, getenv)
	case Processor:
		if rules.Registry == nil {
			return nil, fmt.Errorf("%w: the processor needs a Registry", ErrRules)
		}
		for kind, f := range rules.Resolvers {
			if f == nil {
				return nil, fmt.Errorf("%w: the resolver of kind %q is nil", ErrRules, kind)
			}
		}
		return processorFn(ctx, getenv, rules)
	case Dispatcher:
		return dispatcherFn(ctx, getenv)
	case Reconciler:
		if rules.Registry == nil {
			return nil, fmt.Errorf("%w: the reconciler needs a Registry (the processor's)", ErrRules)
		}
		return reconcilerFn(ctx, getenv, rules.Registry)
	}
	return nil, fmt.Errorf("%w: unknown function %q", ErrRules, fn)
}

func intakeFn(ctx context.Context, getenv func(string) string) (func(), error) {
	cfg, err := config.LoadIntake(getenv)
	if err != nil {
		return nil, err
	}
	rt, err := cfg.Start(ctx, "intake", "intake")
	if err != nil {
		return nil, err
	}
	h := &intake.Handler{
		Sources: cfg.Sources, Secrets: rt.Secrets, Ledger: rt.Ledger, Log: rt.Log, Metrics: rt.Metrics,
		Queue: queue.Sender{Client: sqs.NewFromConfig(rt.AWS), URL: cfg.EventsQueueURL},
	}
	return func() { lambda.Start(h.HandleHTTPAPI) }, nil
}

func bridgeFn(ctx context.Context, getenv func(string) string) (func(), error) {
	cfg, err := config.LoadBridge(getenv)
	if err != nil {
		return nil, err
	}
	rt, err := cfg.Start(ctx, "bridge", "bridge")
	if err != nil {
		return nil, err
	}
	// No Secrets: this path has no signature to verify.
	h := &intake.Handler{
		Sources: cfg.Sources, Ledger: rt.Ledger, Log: rt.Log, Metrics: rt.Metrics,
		Queue: queue.Sender{Client: sqs.NewFromConfig(rt.AWS), URL: cfg.EventsQueueURL},
	}
	return func() { lambda.Start(h.HandleEventBridge) }, nil
}

func processorFn(ctx context.Context, getenv func(string) string, rules Rules) (func(), error) {
	cfg, err := config.LoadProcessor(getenv)
	if err != nil {
		return nil, err
	}
	rt, err := cfg.Start(ctx, "processor", "")
	if err != nil {
		return nil, err
	}
	resolvers, err := processor.BuildResolvers(cfg.Sources, rules.Registry, rules.Resolvers, rt.Secrets.Value)
	if err != nil {
		return nil, fmt.Errorf("SOURCES: %w", err)
	}
	opts := processor.Options{
		Owner: rt.Owner, Lease: cfg.Lease, MaxAttempts: cfg.MaxAttempts, RetryCap: cfg.Visibility, Log: rt.Log, Metrics: rt.Metrics,
		Effects:   queue.Sender{Client: sqs.NewFromConfig(rt.AWS), URL: cfg.EffectsQueueURL},
		Resolvers: resolvers,
	}
	if cfg.Warehouse != nil {
		opts.Warehouse = &processor.Warehouse{MaxState: cfg.Warehouse.MaxState}
	}
	p, err := processor.New(rt.Ledger, cfg.Sources, rules.Registry, opts)
	if err != nil {
		return nil, err
	}
	return func() { lambda.Start(p.HandleSQS) }, nil
}

func dispatcherFn(ctx context.Context, getenv func(string) string) (func(), error) {
	cfg, err := config.LoadDispatcher(getenv)
	if err != nil {
		return nil, err
	}
	rt, err := cfg.Start(ctx, "dispatcher", "")
	if err != nil {
		return nil, err
	}
	effects, err := outbox.Build(cfg.Effects, rt.Secrets, rt.AWS)
	if err != nil {
		return nil, err
	}
	c := &outbox.Consumer{
		Dispatcher: &outbox.Dispatcher{Ledger: rt.Ledger, Effects: effects, Owner: rt.Owner,
			Lease: cfg.Lease, MaxAttempts: cfg.MaxAttempts},
		SQS: sqs.NewFromConfig(rt.AWS), QueueURL: cfg.EffectsQueueURL, Log: rt.Log, Metrics: rt.Metrics,
	}
	return func() { lambda.Start(c.HandleSQS) }, nil
}

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
	r := &reconciler.Reconciler{
		Ledger: rt.Ledger, SQS: client,
		Queues: reconciler.Queues{Events: cfg.EventsQueueURL, EventsDLQ: cfg.EventsDLQURL, Effects: cfg.EffectsQueueURL, EffectsDLQ: cfg.EffectsDLQURL,
			BridgeDLQ: cfg.BridgeDLQURL},
		Sources: cfg.Sources, Registry: reg,
		Truths: reconciler.BuildTruths(cfg.Sources, rt.Secrets),
		Opts:   reconciler.Options{StuckAfter: cfg.StuckAfter, MaxItems: cfg.MaxItems, Budget: cfg.Budget, Log: rt.Log, Metrics: rt.Metrics},
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
		r.Warehouse = &reconciler.WarehouseCheck{Ledger: rt.Ledger, S3: s3.NewFromConfig(rt.AWS), Bucket: wc.Bucket, Prefix: wc.Prefix, MaxState: wc.MaxState}
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
		lambda.Start(func(ctx context.Context, _ events.EventBridgeEvent) (reconciler.Report, error) {
			return r.Run(ctx)
		})
	}, nil
}
