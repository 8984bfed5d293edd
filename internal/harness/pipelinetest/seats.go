package pipelinetest

import (
	"strconv"
	"strings"

	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// SeatsRule is the order projection (builtin.Orders) of a seat-based
// subscription, with one intent per applied revision instead of the
// order's own: "seats.set" (policy latest) carries the revision's seat
// count (payload {"state":{"seats":N}}, what the downstream fake keeps), or with Once "dunning.email" (policy once) names the subject.
// ReuseID keys the intent by (subject, kind) alone, without the revision:
// the rule's bug a reused operation id is.
type SeatsRule struct {
	*builtin.Orders
	ReuseID bool
	Once    bool
}

// NewSeatsRule returns the rule over a fresh order projection.
func NewSeatsRule(reuseID, once bool) SeatsRule {
	return SeatsRule{Orders: builtin.NewOrders(builtin.OrderOptions{}), ReuseID: reuseID, Once: once}
}

// Register registers the rule for the orders source's kind.
func (p SeatsRule) Register(reg *projection.Registry) {
	reg.Register("standard-webhooks", p.EventTypes(), p)
}

// Kind is the rule's intent kind.
func (p SeatsRule) Kind() string {
	if p.Once {
		return "dunning.email"
	}
	return "seats.set"
}

// OperationID is the operation id the rule gives subject's intent at
// version (the scope's, as the pipeline scopes it: "orders").
func (p SeatsRule) OperationID(subject string, version int64) string {
	parts := []string{subject, p.Kind()}
	if !p.ReuseID {
		parts = append(parts, strconv.FormatInt(version, 10))
	}
	return projection.ScopedOperationID("orders", projection.OperationID(parts...))
}

// Project is the order projection's result with the rule's intent.
func (p SeatsRule) Project(ev projection.Event) (projection.Result, error) {
	r, err := p.Orders.Project(ev)
	if err != nil || r.Write == nil {
		return r, err
	}
	parts := []string{r.Write.Subject, p.Kind()}
	if !p.ReuseID {
		parts = append(parts, strconv.FormatInt(r.Write.Version, 10))
	}
	in := projection.Intent{OperationID: projection.OperationID(parts...), Kind: p.Kind(), Subject: r.Write.Subject,
		Policy: projection.PolicyLatest, Payload: map[string]any{"state": map[string]any{"seats": r.Write.State["seats"]}}}
	if p.Once {
		in.Policy, in.Payload = projection.PolicyOnce, map[string]any{"reason": "payment_failed", "seats": r.Write.State["seats"]}
	}
	r.Intents = []projection.Intent{in}
	return r, nil
}

// SeatsEvent is an order.updated event of order at revision holding
// seats.
func SeatsEvent(order string, revision, seats int) []byte {
	b := OrderEvent("order.updated", order, revision, "active", "")
	return []byte(strings.Replace(string(b), `"total_minor":12900`, `"total_minor":12900,"seats":`+strconv.Itoa(seats), 1))
}
