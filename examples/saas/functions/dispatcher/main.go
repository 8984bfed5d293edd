// Command dispatcher is the SaaS's outbox dispatcher Lambda (SQS, the
// effects queue): it performs the effects its projections' intents ask
// for. It is one line over package app with the SaaS's rules: every
// function of the SaaS runs the same ones, so the reconciler checks what
// the processor applies.
package main

import (
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/app/dispatcher"

	"example.com/saas/rules"
)

func main() { app.Main(dispatcher.Function, rules.Rules()) }
