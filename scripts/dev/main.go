// Command dev runs the local stack in the foreground: `make dev`. It builds
// the function bootstraps for this host, then starts DynamoDB (minidyn) on
// 127.0.0.1:8000, SQS (goaws) on 127.0.0.1:4100, the fake downstream the
// effects call on 127.0.0.1:3002, the fake Stripe API the processor fetches
// thin events' objects from on 127.0.0.1:3003, an in-memory S3 on
// 127.0.0.1:4566 for the warehouse sink (DEV_WAREHOUSE=off turns the sink
// and it off; `make warehouse` queries its records), each function
// (intake, processor, dispatcher) under aws-lambda-rie, the HTTP API on
// 127.0.0.1:3000 and the two SQS event source mappings (events →
// processor, effects → dispatcher).
// Ctrl-C (SIGINT) or SIGTERM stops everything and exits 0 once the stack
// is down; a second Ctrl-C exits at once. `make dev` builds this command and
// runs the binary rather than `go run` it: `go run` exits 1 whenever it was
// interrupted, whatever its program did. Ports and timings: see package
// devstack (DEV_* variables) and docs/local-stack.md.
//
// A team runs its own functions and configuration the same way, from its
// own module (which requires this one): -module (DEV_MODULE) names the
// module whose functions/<fn>/ mains are built, and its dev.json (or
// -config, DEV_CONFIG) holds its sources, effects and visibly fake
// secrets. Run from a team's module directory, the module is that one:
//
//	go get -tool github.com/effectively-once/webhooks/scripts/dev
//	go tool dev
//
// or, in this repository, make dev DEV_MODULE=examples/shop.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dev: "+err.Error())
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := devstack.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	flag.StringVar(&cfg.Module, "module", cfg.Module, "the Go module whose functions/<fn>/ mains to run (DEV_MODULE); default: the working directory's module when it is a team's, else this repository's own")
	flag.StringVar(&cfg.ConfigFile, "config", cfg.ConfigFile, "the sources, effects and fake secrets (DEV_CONFIG); default: the module's dev.json, or scripts/devstack.json for this repository")
	flag.Parse()
	if cfg.Module == "" && devstack.TeamModule(".") {
		cfg.Module = "."
	}
	if os.Getenv("DEV_FAST") == "1" {
		cfg.FastProfile()
	}
	logs := devstack.NewLogs(os.Stdout)
	if os.Getenv("DEV_SKIP_BUILD") != "1" {
		if err := devstack.Build(ctx, cfg, logs); err != nil {
			return interrupted(ctx, logs, err)
		}
	}
	stack, err := devstack.Start(ctx, cfg, logs)
	if err != nil {
		return interrupted(ctx, logs, err)
	}
	logs.Printf("stack", "up; Ctrl-C to stop")
	<-ctx.Done()
	stop() // a second Ctrl-C ends the process at once
	logs.Printf("stack", "stopping (Ctrl-C again to exit at once)")
	stack.Close()
	logs.Printf("stack", "stopped")
	return nil
}

// interrupted turns a failure caused by the interrupt itself (a build or a
// start cut short) into a clean exit; any other error stays one.
func interrupted(ctx context.Context, logs *devstack.Logs, err error) error {
	if ctx.Err() == nil {
		return err
	}
	logs.Printf("stack", "interrupted before the stack was up; nothing left running")
	return nil
}
