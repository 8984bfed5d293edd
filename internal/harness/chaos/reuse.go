package chaos

import (
	"sort"
	"strconv"
	"strings"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// SyncKind is the intent kind of the rule that reuses an operation id
// (Schedule.ReuseIDs): a state sync of an order's status, policy latest.
const SyncKind = "order.sync"

// ReuseOp is the operation id that rule gives every revision of subject:
// keyed by subject and kind, without the revision, in the "orders"
// source's scope. One id for every revision: the rule's bug.
func ReuseOp(subject string) string {
	return projection.ScopedOperationID("orders", projection.OperationID(subject, SyncKind))
}

// syncOrders is the order projection with the state sync added to each
// applied revision's intents, keyed without the revision.
type syncOrders struct{ *builtin.Orders }

func (p syncOrders) Project(ev projection.Event) (projection.Result, error) {
	r, err := p.Orders.Project(ev)
	if err != nil || r.Write == nil {
		return r, err
	}
	r.Intents = append(r.Intents, projection.Intent{OperationID: projection.OperationID(r.Write.Subject, SyncKind), Kind: SyncKind,
		Subject: r.Write.Subject, Policy: projection.PolicyLatest, Payload: map[string]any{"status": r.Write.State["status"]}})
	return r, nil
}

// reuseRegistry is the chaos's registry (builtin.Default) with the
// orders under syncOrders.
func reuseRegistry() *projection.Registry {
	r := projection.NewRegistry()
	sub := builtin.NewStripeSubscriptions(builtin.StripeOptions{})
	r.Register("stripe", sub.EventTypes(), sub)
	orders := syncOrders{builtin.NewOrders(builtin.OrderOptions{})}
	r.Register("standard-webhooks", orders.EventTypes(), orders)
	return r
}

// reuseTold reports whether event ev was quarantined for reusing its
// subject's sync operation id: an attention item that names the id.
func reuseTold(ev ledger.Event, subject string) bool {
	return ev.Status == ledger.StatusQuarantined && ev.ErrorCode == projection.CodeOperationIDReused && strings.Contains(ev.ErrorMessage, ReuseOp(subject))
}

// checkReuse is I10 for a schedule run under the reusing rule, derived
// from the rule and the schedule: each order's truth is its highest
// accepted revision, and its state sync must reach the downstream with
// that revision's status, or an operator must be told (an event of the
// subject QUARANTINED operation_id_reused naming the id). An event
// quarantined so is told for; one quarantined so outside such a schedule,
// or naming another id, is a violation. It returns the ids of the told
// events: the rest of the model leaves them out (they wrote nothing).
func checkReuse(s Schedule, ids []string, byID map[string]Event, o observed, settled bool, add func(string, string, ...any)) map[string]bool {
	told := map[string]bool{}
	top := map[string]int{}
	states := map[string]map[int][]string{} // subject → revision → statuses sent there
	var subjects []string
	for _, id := range ids {
		e := byID[id]
		ev, ok := o.events[id]
		if ok && ev.Status == ledger.StatusQuarantined && ev.ErrorCode == projection.CodeOperationIDReused {
			if !s.ReuseIDs || e.Stripe() || !reuseTold(ev, e.Subject) {
				add(I10, "event %s was quarantined %s though its rules reuse no operation id of %s: %s", id, ev.ErrorCode, e.Subject, ev.ErrorMessage)
				continue
			}
			told[id] = true
		}
		if !s.ReuseIDs || e.Stripe() {
			continue
		}
		if states[e.Subject] == nil {
			states[e.Subject] = map[int][]string{}
			subjects = append(subjects, e.Subject)
		}
		states[e.Subject][e.Revision] = append(states[e.Subject][e.Revision], e.Status)
		top[e.Subject] = max(top[e.Subject], e.Revision)
	}
	if !settled {
		return told
	}
	sort.Strings(subjects)
	for _, subj := range subjects {
		op := ReuseOp(subj)
		last := ""
		for _, a := range appliedArrivals(o) {
			if a.Key == op {
				last = a.Version
			}
		}
		want := states[subj][top[subj]]
		var got []string
		if v, err := strconv.Atoi(last); err == nil {
			got = states[subj][v]
		}
		converged := false
		for _, w := range want {
			for _, g := range got {
				converged = converged || g == w
			}
		}
		if converged {
			continue
		}
		named := false
		for id := range told {
			named = named || byID[id].Subject == subj
		}
		if !named {
			add(I10, "%s: the truth is r%d %v, but the downstream's last %s (%s) is r%s %v and no operator was told (no event QUARANTINED %s naming it)",
				subj, top[subj], want, SyncKind, short(op), orDash(last), got, projection.CodeOperationIDReused)
		}
	}
	return told
}

// isReuseOp reports whether op is the sync operation id of one of the
// schedule's subjects.
func isReuseOp(op string, byID map[string]Event) bool {
	for _, e := range byID {
		if ReuseOp(e.Subject) == op {
			return true
		}
	}
	return false
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
