package chaos

import (
	"context"
	"sort"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	"github.com/effectively-once/webhooks/internal/harness/chaos/naive"
	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/outbox"
)

// Naive returns the design of a naive processing core (package naive):
// its processors replace ours; there is no outbox, the effect is
// performed inside the processor. The naive cores implement only the
// orders business write, so a schedule's Stripe events are left out.
func Naive(k naive.Kind) Design {
	return Design{
		Name: string(k),
		NewProcessor: func(h *pt.Harness, name string, gate *pt.Gate) (*awstrace.Recorder, any) {
			rec := &awstrace.Recorder{}
			db := h.DynamoClient(rec.APIOption, gate.APIOption)
			p := naive.New(k, db, h.NewLedgerWith(db, name), h.Table, name, h.Clock.Now)
			return rec, p.HandleSQS
		},
		OrdersOnly: true,
		Effects: func(h *pt.Harness) map[string]int {
			m, err := naive.Effects(context.Background(), h.DB, h.Table)
			if err != nil {
				h.T.Fatalf("naive effects: %v", err)
			}
			return m
		},
	}
}

// DispatchEverything is ours with the dispatcher as it was before issue
// 12: it performs every intent once, blind to what happened to its
// subject since (naive.TruthBlind hides the projection and takes no
// subject cursor). The processor and the rest are ours, Stripe included.
var DispatchEverything = Design{
	Name:         "dispatch-everything",
	NewProcessor: Ours.NewProcessor,
	Outbox:       true,
	Effects:      Ours.Effects,
	DispatcherLedger: func(l outbox.Ledger) outbox.Ledger {
		return naive.TruthBlind{Ledger: l}
	},
}

// Designs returns every design by name: "ours" and the naive ones.
func Designs() map[string]Design {
	ds := map[string]Design{Ours.Name: Ours, DispatchEverything.Name: DispatchEverything}
	for _, k := range naive.Kinds {
		ds[string(k)] = Naive(k)
	}
	return ds
}

// DesignNames lists the designs, ours first.
func DesignNames() []string {
	var names []string
	for n := range Designs() {
		if n != Ours.Name {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return append([]string{Ours.Name}, names...)
}
