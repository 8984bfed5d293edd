// Command intake is the test module's intake: one line over package app.
package main

import (
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/app/intake"

	"example.com/devshop/rules"
)

func main() { app.Main(intake.Function, rules.Rules()) }
