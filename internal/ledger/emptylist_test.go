package ledger_test

import (
	"context"
	"testing"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// A projection state holding an empty list and an empty map (a subscription
// without items: "price_ids": []) commits and reads back exactly, as on
// DynamoDB, which stores both as written: on the first commit, on a second
// that replaces it, and on a terminal one after them, and so does an
// intent's payload holding one.
func TestEmptyListsInProjectionStateReadBackExactly(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	for i, step := range []struct {
		id       string
		state    map[string]any
		terminal bool
		want     string
	}{
		{"evt_empty_1", map[string]any{"price_ids": []any{}, "meta": map[string]any{}, "n": 1}, false, `{"meta":{},"n":1,"price_ids":[]}`},
		{"evt_empty_2", map[string]any{"price_ids": []any{}, "items": []any{[]any{}, map[string]any{}}, "n": 2}, false, `{"items":[[],{}],"n":2,"price_ids":[]}`},
		{"evt_empty_3", map[string]any{"price_ids": []any{}, "n": 3}, true, `{"n":3,"price_ids":[]}`},
	} {
		c := claimedEvent(t, f, step.id)
		version := int64(i + 1)
		w := &ledger.ProjectionWrite{Name: "billing/subscription", Subject: "sub_1", Version: version, Fingerprint: step.id, State: step.state, Terminal: step.terminal}
		in := ledger.Intent{OperationID: "op-" + step.id, Kind: "entitlement.grant", Subject: "sub_1", Payload: map[string]any{"price_ids": []any{}}}
		res, err := f.L.Commit(ctx, c, w, []ledger.Intent{in})
		if err != nil {
			skipWithoutTransactions(t, err)
			t.Fatalf("%s: %v", step.id, err)
		}
		if res.Result.Outcome != ledger.OutcomeApplied || res.Conflict {
			t.Fatalf("%s: %+v, want applied", step.id, res)
		}
		p, err := f.L.GetProjection(ctx, "billing/subscription", "sub_1")
		if err != nil {
			t.Fatal(err)
		}
		requireJSON(t, step.id+": GetProjection state", p.State, step.want)
		if p.Version != version || p.Terminal != step.terminal {
			t.Fatalf("%s: projection version %d terminal %v, want %d %v", step.id, p.Version, p.Terminal, version, step.terminal)
		}
		snap, err := ledger.TakeSnapshot(ctx, f.DB, f.Table)
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Projections) != 1 || len(snap.Intents) != i+1 {
			t.Fatalf("%s: snapshot holds %d projections, %d intents", step.id, len(snap.Projections), len(snap.Intents))
		}
		requireJSON(t, step.id+": snapshot projection state", snap.Projections[0].State, step.want)
		for _, it := range snap.Intents {
			requireJSON(t, step.id+": snapshot intent payload", it.Payload, `{"price_ids":[]}`)
		}
	}
}
