// Command dispatcher is the test module's dispatcher: one line over package app.
package main

import (
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/app/dispatcher"

	"example.com/devshop/rules"
)

func main() { app.Main(dispatcher.Function, rules.Rules()) }
