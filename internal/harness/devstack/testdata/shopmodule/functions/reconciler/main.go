// Command reconciler is the test module's reconciler: one line over package app.
package main

import (
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/app/reconciler"

	"example.com/devshop/rules"
)

func main() { app.Main(reconciler.Function, rules.Rules()) }
