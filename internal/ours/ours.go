// Package ours holds the rules our own deployment runs: every built-in
// projection, and the built-in resolvers (Stripe thin events). Every one of our function mains takes its Rules from here,
// as a team's mains take theirs from one package of its own, so the
// processor and the reconciler can never run different rules.
package ours

import (
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/builtin"
)

// Rules are our deployment's rules.
func Rules() app.Rules {
	return app.Rules{Registry: builtin.Default(builtin.StripeOptions{}), Resolvers: builtin.Resolvers()}
}
