package chaos

import (
	"context"
	"sort"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	"github.com/effectively-once/webhooks/internal/harness/chaos/naive"
	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/reconciler"
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

// DispatchEverything is ours with a dispatcher blind to the truth: it
// performs every intent once, whatever happened to its subject since
// (naive.TruthBlind hides the projection and takes no subject cursor).
// The processor and the rest are ours, Stripe included.
var DispatchEverything = Design{
	Name:         "dispatch-everything",
	NewProcessor: Ours.NewProcessor,
	Outbox:       true,
	Effects:      Ours.Effects,
	DispatcherLedger: func(l outbox.Ledger) outbox.Ledger {
		return naive.TruthBlind{Ledger: l}
	},
}

// WarehouseOverwrite is ours with the naive "last write wins" warehouse
// writer (naive.Overwrite): one object per subject, overwritten by every
// record, so the order of the writes, not the version, decides the
// current row.
var WarehouseOverwrite = func() Design {
	d := warehouseDesign("warehouse-overwrite", func(e *outbox.WarehouseEffect) outbox.Effect { return naive.Overwrite{WarehouseEffect: e} })
	d.WarehouseHead = func(h reconciler.S3Header) reconciler.S3Header { return naive.OverwriteHead{S3Header: h} }
	return d
}()

// WarehouseUnobserved is ours with a warehouse writer that counts a
// record written without the store's answer (naive.Unobserved).
var WarehouseUnobserved = warehouseDesign("warehouse-unobserved", func(e *outbox.WarehouseEffect) outbox.Effect { return naive.Unobserved{WarehouseEffect: e} })

// warehouseDesign is ours with another warehouse writer; every schedule
// runs with the sink on.
func warehouseDesign(name string, writer func(*outbox.WarehouseEffect) outbox.Effect) Design {
	d := Ours
	d.Name, d.WarehouseWriter = name, writer
	return d
}

// ReuseDropDesign is ours with a processor whose commit drops an intent
// whose operation id another intent holds, silently (naive.ReuseDrop),
// every schedule run under the rule that reuses an operation id across
// revisions (Schedule.ReuseIDs). I10 catches it: the downstream stays
// at the first revision's state and no operator is told.
var ReuseDropDesign = func() Design {
	d := Ours
	d.Name, d.ReuseIDs = "reuse-drop", true
	d.ProcessorLedger = func(l processor.Ledger) processor.Ledger { return naive.ReuseDrop{Ledger: l} }
	return d
}()

// Designs returns every design by name: "ours" and the naive ones.
func Designs() map[string]Design {
	ds := map[string]Design{Ours.Name: Ours, DispatchEverything.Name: DispatchEverything, ReuseDropDesign.Name: ReuseDropDesign,
		WarehouseOverwrite.Name: WarehouseOverwrite, WarehouseUnobserved.Name: WarehouseUnobserved}
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
