// Command processor is the event processor Lambda (SQS event source with
// ReportBatchItemFailures).
// It is one line over package app, with our rules (internal/ours).
package main

import (
	"github.com/effectively-once/webhooks/internal/ours"
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/app/processor"
)

func main() { app.Main(processor.Function, ours.Rules()) }
