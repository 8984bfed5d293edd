// Command reconciler is the shop's scheduled reconciler Lambda
// (EventBridge schedule): it re-drives stuck work and compares the shop's
// state with its providers' and downstreams'. It is one line over package
// app with the shop's rules: every function of the shop runs the same
// ones, so the reconciler checks what the processor applies.
package main

import (
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/app/reconciler"

	"example.com/shop/rules"
)

func main() { app.Main(reconciler.Function, rules.Rules()) }
