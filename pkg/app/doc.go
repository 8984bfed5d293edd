// Package app is the composition root of the pipeline's Lambda functions:
// a team's function main is one line over it, and every function of a
// deployment gets the same Rules.
//
//	// functions/processor/main.go of a team's own module
//	package main
//
//	import (
//		"github.com/effectively-once/webhooks/pkg/app"
//		"github.com/effectively-once/webhooks/pkg/app/processor"
//		"example.com/shop/rules"
//	)
//
//	func main() { app.Main(processor.Function, rules.Rules()) }
//
// Each function's package (app/intake, app/bridge, app/processor,
// app/dispatcher, app/reconciler) is imported only by that function's
// main, so a binary links only what its function runs.
//
// Configuration (table, queues, sources, effects, leases) comes from the
// environment the CDK construct sets; clients are built once at cold start
// and injected; a missing or wrong variable stops the function at start
// with a message naming it. Rules carry what only the team knows: its
// projections (with any of ours, package builtin), verifiers for
// provider kinds we do not ship, and the resolvers that fetch the object
// an event only names (ours: builtin.Resolvers, Stripe thin events).
package app
