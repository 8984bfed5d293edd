// Package rules is the example shop's business: its projections, and the
// Rules every one of its functions runs.
package rules

import (
	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Rules are the shop's rules.
func Rules() app.Rules {
	return app.Rules{Registry: projection.NewRegistry()}
}
