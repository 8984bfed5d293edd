// Command dispatcher is the test module's dispatcher: one line over package app.
package main

import (
	"github.com/effectively-once/webhooks/pkg/app"

	"example.com/devshop/rules"
)

func main() { app.Main(app.Dispatcher, rules.Rules()) }
