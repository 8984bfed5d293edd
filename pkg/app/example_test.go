package app_test

import (
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/app/processor"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// rules is what a team writes once, in a package of its own, and gives to
// every one of its functions.
func rules() app.Rules {
	reg := projection.NewRegistry()
	subs := builtin.NewStripeSubscriptions(builtin.StripeOptions{})
	reg.Register("stripe", subs.EventTypes(), subs)
	return app.Rules{Registry: reg, Resolvers: builtin.Resolvers()}
}

// A function's main is one line. Main reads the function's configuration
// from the environment the CDK construct sets and never returns.
func ExampleMain() {
	app.Main(processor.Function, rules())
}
