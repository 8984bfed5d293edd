// Command reconciler is the SaaS's scheduled reconciler Lambda
// (EventBridge schedule): it re-drives stuck work and compares the SaaS's
// state with its providers' and downstreams'. It is one line over package
// app with the SaaS's rules: every function of the SaaS runs the same
// ones, so the reconciler checks what the processor applies.
package main

import (
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/app/reconciler"

	"example.com/saas/rules"
)

func main() { app.Main(reconciler.Function, rules.Rules()) }
