// Command dispatcher is the outbox dispatcher Lambda (SQS event source on
// the effects queue, with ReportBatchItemFailures).
// It is one line over package app, with our rules (internal/ours).
package main

import (
	"github.com/effectively-once/webhooks/internal/ours"
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/app/dispatcher"
)

func main() { app.Main(dispatcher.Function, ours.Rules()) }
