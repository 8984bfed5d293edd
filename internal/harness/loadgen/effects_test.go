package loadgen

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// TestCheckEffectsCounts drives the effects check against a stub
// downstream: one key applied once, one twice (doubled), one never
// (missing, and no intent in the ledger), and a stale event's key applied
// (unexpected).
func TestCheckEffectsCounts(t *testing.T) {
	ctx := context.Background()
	dyn := localaws.NewDynamo()
	defer dyn.Close()
	db := dyn.Client()
	table := localaws.UniqueName("loadgen")
	if err := ledger.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	l, err := ledger.New(db, ledger.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	m := newModel("t3", 5, 1, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	var evs []*Event
	for range 4 {
		evs = append(evs, m.next())
	}
	applied := ledger.Event{Status: ledger.StatusProcessed, Result: &ledger.Result{Outcome: ledger.OutcomeApplied}}
	stale := ledger.Event{Status: ledger.StatusProcessed, Result: &ledger.Result{Outcome: ledger.OutcomeStale}}
	rows := map[*Event]ledger.Event{evs[0]: applied, evs[1]: applied, evs[2]: applied, evs[3]: stale}
	effective := map[string]int{
		evs[0].Intents[0].OperationID: 1,
		evs[1].Intents[0].OperationID: 2,
		evs[3].Intents[0].OperationID: 1,
		"someone-elses-key":           5,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"effects": []any{map[string]any{"kind": "entitlement.grant", "effective": effective}}})
	}))
	defer srv.Close()
	var res Result
	o := Options{Drain: 300 * time.Millisecond, Settle: time.Millisecond}
	if err := checkEffects(ctx, Target{BaseURL: srv.URL, HTTP: srv.Client()}, l, o, evs, rows, &res); err != nil {
		t.Fatal(err)
	}
	e := res.Effects
	if e.Expected != 3 || e.Applied != 2 || e.Missing != 1 || e.Doubled != 1 || e.Unexpected != 1 || e.MaxPerKey != 2 || e.MissingByStatus["NO_INTENT"] != 1 {
		t.Fatalf("effects %+v", e)
	}
	res.finish()
	if res.OK() || len(res.Violations) != 3 {
		t.Fatalf("violations %v", res.Violations)
	}
}
