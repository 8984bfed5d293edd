// Command bridge is the EventBridge intake Lambda: the target of the rules
// on the partner event buses of sources whose delivery includes
// eventbridge (Stripe event destinations, Shopify).
// It is one line over package app, with our rules (internal/ours).
package main

import (
	"github.com/effectively-once/webhooks/internal/ours"
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/app/bridge"
)

func main() { app.Main(bridge.Function, ours.Rules()) }
