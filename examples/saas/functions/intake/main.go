// Command intake is the SaaS's webhook intake Lambda (API Gateway HTTP
// API, payload 2.0): it verifies each delivery's signature and accepts it
// into the ledger. It is one line over package app with the SaaS's rules:
// every function of the SaaS runs the same ones, so the reconciler checks
// what the processor applies.
package main

import (
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/app/intake"

	"example.com/saas/rules"
)

func main() { app.Main(intake.Function, rules.Rules()) }
