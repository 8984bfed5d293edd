// Command intake is the shop's webhook intake Lambda (API Gateway HTTP
// API, payload 2.0): it verifies each delivery's signature and accepts it
// into the ledger. It is one line over package app with the shop's rules:
// every function of the shop runs the same ones, so the reconciler checks
// what the processor applies.
package main

import (
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/app/intake"

	"example.com/shop/rules"
)

func main() { app.Main(intake.Function, rules.Rules()) }
