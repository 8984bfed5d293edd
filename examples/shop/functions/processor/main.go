// Command processor is the shop's event processor Lambda (SQS, the events
// queue): it applies the shop's projections. It is one line over package
// app with the shop's rules: every function of the shop runs the same
// ones, so the reconciler checks what the processor applies.
package main

import (
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/app/processor"

	"example.com/shop/rules"
)

func main() { app.Main(processor.Function, rules.Rules()) }
