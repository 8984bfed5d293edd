// Command processor is the test module's processor: one line over package app.
package main

import (
	"github.com/effectively-once/webhooks/pkg/app"

	"example.com/devshop/rules"
)

func main() { app.Main(app.Processor, rules.Rules()) }
