package app

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/effectively-once/webhooks/pkg/projection"
	"github.com/effectively-once/webhooks/pkg/provider"
)

// Function is one of the pipeline's Lambda functions, given to Main. Each
// is its own binary (its own bootstrap) and lives in its own package
// (app/intake, app/bridge, app/processor, app/dispatcher, app/reconciler),
// so a main that imports one links and initialises only what that
// function runs: the intake's binary carries neither the dispatcher's AWS
// targets nor the reconciler's sources of truth.
type Function struct {
	// Name is the function's name, as in functions/<name>.
	Name string
	// Build loads the function's configuration and clients, and returns
	// what starts its runtime loop. The function packages set it.
	Build func(ctx context.Context, rules Rules, getenv func(string) string) (func(), error)
}

// String is the function's name.
func (f Function) String() string { return f.Name }

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
		fmt.Fprintln(os.Stderr, fn.String()+": "+err.Error())
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
	if fn.Build == nil {
		return nil, fmt.Errorf("%w: a Function is one of intake.Function, bridge.Function, processor.Function, dispatcher.Function, reconciler.Function (packages under app/)", ErrRules)
	}
	return fn.Build(ctx, rules, getenv)
}
