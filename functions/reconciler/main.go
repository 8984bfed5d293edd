// Command reconciler is the scheduled reconciler Lambda (EventBridge
// schedule).
// It is one line over package app, with our rules (internal/ours).
package main

import (
	"github.com/effectively-once/webhooks/internal/ours"
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/app/reconciler"
)

func main() { app.Main(reconciler.Function, ours.Rules()) }
