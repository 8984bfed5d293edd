package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// nested wraps v in n single-key maps: nested(0, v) is v.
func nested(n int, v any) any {
	for range n {
		v = map[string]any{"a": v}
	}
	return v
}

// claimedEvent accepts and claims one event.
func claimedEvent(t *testing.T, f fixture, id string) ledger.Claim {
	t.Helper()
	ctx := context.Background()
	if _, err := f.L.Accept(ctx, delivery(id, `{"id":"`+id+`"}`)); err != nil {
		t.Fatal(err)
	}
	c, err := f.L.Claim(ctx, "stripe", id, ledger.ClaimOptions{Owner: "proc", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// What DynamoDB refuses to store (the emulators store all of it, DynamoDB
// cancels the transaction with a ValidationError reason) is refused by
// Commit before the transaction: a permanent ErrInvalid naming the item,
// the attribute and the rule, and nothing is written. The values at the
// limits are stored.
func TestCommitRefusesWhatDynamoDBCannotStore(t *testing.T) {
	ctx := context.Background()
	deep := func(levels int) map[string]any {
		// "state" is level 1 and "meta" level 2: the innermost string is
		// at level 2 + the wraps.
		return map[string]any{"status": "active", "meta": nested(levels-2, "x")}
	}
	tests := []struct {
		name    string
		state   map[string]any
		payload map[string]any
		intents int    // extra intents, beyond the one that carries payload
		item    string // "" : stored
		path    string
		rule    string
	}{
		{name: "number overflow", state: map[string]any{"total": 1e200}, item: "projection sub/sub_1", path: "state.total", rule: "overflows"},
		{name: "number underflow", state: map[string]any{"total": 1e-200}, item: "projection sub/sub_1", path: "state.total", rule: "underflows"},
		{name: "negative overflow", state: map[string]any{"total": -1e126}, item: "projection sub/sub_1", path: "state.total", rule: "overflows"},
		{name: "39 significant digits", state: map[string]any{"n": attributevalue.Number(strings.Repeat("1", 39))}, item: "projection sub/sub_1", path: "state.n", rule: "39 significant digits"},
		{name: "item over 400 KB", state: map[string]any{"note": strings.Repeat("x", 450<<10)}, item: "projection sub/sub_1", path: "state.note", rule: "400 KB"},
		{name: "33 nesting levels", state: deep(33), item: "projection sub/sub_1", path: "state.meta" + strings.Repeat(".a", 31), rule: "33 levels"},
		{name: "an intent's payload", state: map[string]any{"status": "active"}, payload: map[string]any{"amount": 1e130}, item: "intent op-v", path: "payload.amount", rule: "overflows"},
		{name: "101 writes in one transaction", state: map[string]any{"status": "active"}, intents: 98, item: "the transaction", rule: "101 writes"},

		{name: "38 significant digits", state: map[string]any{"n": attributevalue.Number(strings.Repeat("9", 38))}},
		{name: "the largest magnitude", state: map[string]any{"n": attributevalue.Number("9.9999999999999999999999999999999999999E+125"), "m": attributevalue.Number("-9.9999999999999999999999999999999999999E+125")}},
		{name: "the smallest magnitude", state: map[string]any{"n": attributevalue.Number("1E-130"), "m": -1e-130, "z": 0.0}},
		{name: "trailing zeros are not significant", state: map[string]any{"n": attributevalue.Number("1" + strings.Repeat("0", 60)), "m": 1e100}},
		{name: "32 nesting levels", state: deep(32)},
		{name: "an item under 400 KB", state: map[string]any{"note": strings.Repeat("x", 390<<10)}},
		{name: "98 intents", state: map[string]any{"status": "active"}, intents: 97},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			id := fmt.Sprintf("evt_v%d", i)
			c := claimedEvent(t, f, id)
			w := &ledger.ProjectionWrite{Name: "sub", Subject: "sub_1", Version: 1, Fingerprint: "f1", State: tc.state}
			ins := []ledger.Intent{{OperationID: "op-v", Kind: "entitlement.grant", Subject: "sub_1", Payload: tc.payload}}
			for j := range tc.intents {
				ins = append(ins, ledger.Intent{OperationID: fmt.Sprintf("op-%d", j), Kind: "entitlement.grant", Subject: "sub_1"})
			}
			_, err := f.L.Commit(ctx, c, w, ins)
			if tc.item == "" {
				skipWithoutTransactions(t, err)
				if err != nil {
					t.Fatalf("commit refused a value DynamoDB stores: %v", err)
				}
				p, err := f.L.GetProjection(ctx, "sub", "sub_1")
				if err != nil || p.Version != 1 {
					t.Fatalf("projection %+v %v", p, err)
				}
				return
			}
			var ue *ledger.UnstorableError
			if !errors.Is(err, ledger.ErrInvalid) || !errors.As(err, &ue) || ledger.IsRetryable(err) {
				t.Fatalf("commit: %v; want a permanent UnstorableError", err)
			}
			if ue.Item != tc.item || ue.Path != tc.path || !strings.Contains(ue.Rule, tc.rule) {
				t.Fatalf("refusal names %q %q %q; want %q %q and a rule with %q", ue.Item, ue.Path, ue.Rule, tc.item, tc.path, tc.rule)
			}
			// Nothing was written: the event is still the claim's, and
			// neither the projection nor an intent exists.
			if _, err := f.L.GetProjection(ctx, "sub", "sub_1"); !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("projection written: %v", err)
			}
			if _, err := f.L.GetIntentState(ctx, "op-v"); !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("intent written: %v", err)
			}
			if ev, err := f.L.Get(ctx, "stripe", id); err != nil || ev.Status != ledger.StatusProcessing || ev.LeaseToken != c.Token {
				t.Fatalf("event %s %v", ev.Status, err)
			}
			// The claim can still record the outcome.
			if err := f.L.Quarantine(ctx, c, ledger.CodeUnstorable, err.Error()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// An older revision is stale whatever it carries: its values were never
// going to be written, so a value DynamoDB cannot store does not make it
// a quarantine.
func TestUnstorableOlderRevisionIsStale(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	c := claimedEvent(t, f, "evt_new")
	w := &ledger.ProjectionWrite{Name: "sub", Subject: "sub_1", Version: 5, Fingerprint: "f5", State: map[string]any{"total": 1}}
	if _, err := f.L.Commit(ctx, c, w, nil); err != nil {
		skipWithoutTransactions(t, err)
		t.Fatal(err)
	}
	c = claimedEvent(t, f, "evt_old")
	old := &ledger.ProjectionWrite{Name: "sub", Subject: "sub_1", Version: 3, Fingerprint: "f3", State: map[string]any{"total": 1e200}}
	done, err := f.L.Commit(ctx, c, old, nil)
	if err != nil || done.Result.Outcome != ledger.OutcomeStale {
		t.Fatalf("older unstorable revision: %+v %v; want stale", done.Result, err)
	}
	if p, err := f.L.GetProjection(ctx, "sub", "sub_1"); err != nil || p.Version != 5 {
		t.Fatalf("projection %+v %v", p, err)
	}
}
