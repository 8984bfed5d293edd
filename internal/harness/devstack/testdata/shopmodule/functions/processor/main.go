// Command processor is the test module's processor: one line over package app.
package main

import (
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/app/processor"

	"example.com/devshop/rules"
)

func main() { app.Main(processor.Function, rules.Rules()) }
