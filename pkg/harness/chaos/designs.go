package chaos

import (
	"context"
	"sort"

	"github.com/effectively-once/webhooks/pkg/harness/awstrace"
	"github.com/effectively-once/webhooks/pkg/harness/chaos/naive"
	pt "github.com/effectively-once/webhooks/pkg/harness/pipelinetest"
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

// Designs returns every design by name: "ours" and the naive ones.
func Designs() map[string]Design {
	ds := map[string]Design{Ours.Name: Ours}
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
