// Command webhookctl is the operator's tool: list and inspect events and
// intents, replay, hold and release events, resolve uncertain effects, and
// print the dashboard and the dead-letter queues. It only wires; the
// commands live in internal/operator, and README.md beside this file documents
// them.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/effectively-once/webhooks/internal/operator"
)

func main() {
	// Ctrl-C stops a bulk replay between two events; run it again to resume.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := operator.Run(ctx, os.Args[1:], operator.Env{
		Getenv: os.Getenv, Hostname: os.Hostname, Stdout: os.Stdout, Stderr: os.Stderr, Connect: operator.Connect,
	})
	stop()
	os.Exit(code)
}
