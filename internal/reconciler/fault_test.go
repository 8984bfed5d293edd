package reconciler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/reconciler"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// panicky is a team's projection with a bug: it panics on every event.
type panicky struct{}

func (panicky) Name() string { return "order" }
func (panicky) Project(projection.Event) (projection.Result, error) {
	panic("the team's bug: an index out of range")
}

type facts []reconciler.Fact

func (f facts) Facts(context.Context, time.Time, int) ([]reconciler.Fact, error) { return f, nil }

// The drift check runs the processor's rules on the source's truth. A
// team's projection that panics there fails that comparison with a
// message naming the projection, like the processor quarantines its
// event; it does not crash the reconciler's run (which would stop every
// other step of every run until the rules are fixed).
func TestAPanickingProjectionFailsOnlyItsComparison(t *testing.T) {
	f := newFixture(t)
	f.Reg = projection.NewRegistry()
	f.Reg.Register("stripe", []string{"customer.subscription.updated"}, panicky{})
	truth := facts{{EventID: "evt_truth", EventType: "customer.subscription.updated", Payload: []byte(`{"id":"evt_truth"}`)}}
	rep, err := f.reconciler(map[string]reconciler.SourceOfTruth{"stripe": truth}).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), projection.CodePanic) || !strings.Contains(err.Error(), `"stripe/order"`) {
		t.Fatalf("run error %v: want the panic, naming the projection", err)
	}
	if rep.FactsChecked != 1 || rep.DriftFound != 0 {
		t.Fatalf("report %+v: the fact was checked, and no drift claimed from a broken projection", rep)
	}
}
