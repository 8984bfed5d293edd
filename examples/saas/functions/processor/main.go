// Command processor is the SaaS's event processor Lambda (SQS, the events
// queue): it applies the SaaS's projections. It is one line over package
// app with the SaaS's rules: every function of the SaaS runs the same
// ones, so the reconciler checks what the processor applies.
package main

import (
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/app/processor"

	"example.com/saas/rules"
)

func main() { app.Main(processor.Function, rules.Rules()) }
