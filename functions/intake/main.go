// Command intake is the webhook intake Lambda (API Gateway HTTP API,
// payload 2.0).
// It is one line over package app, with our rules (internal/ours).
package main

import (
	"github.com/effectively-once/webhooks/internal/ours"
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/app/intake"
)

func main() { app.Main(intake.Function, ours.Rules()) }
