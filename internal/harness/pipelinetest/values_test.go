package pipelinetest_test

// Values DynamoDB refuses to store and numbers it stores exactly, over the
// intake's Lambda JSON path with the Standard Webhooks orders source,
// whose projection copies the order's data fields into its state and its
// intents' payloads.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// cancelledOrder renders a signed-ready order.cancelled event whose data
// holds extra, raw JSON fields.
func cancelledOrder(order, extra string) []byte {
	return fmt.Appendf(nil, `{"type":"order.cancelled","timestamp":"2026-11-30T12:00:01Z","data":{"id":%q,"revision":1,"customer_id":"cus_test_42","currency":"eur",%s}}`, order, extra)
}

// A verified order whose values DynamoDB cannot store (the emulator
// stores them; DynamoDB cancels the transaction with a ValidationError) is
// QUARANTINED value_unstorable at its first attempt, naming the field and
// the rule; nothing is written for it but its event row, and nothing goes
// to the dead-letter queue.
func TestUnstorableOrderValuesAreQuarantined(t *testing.T) {
	deep := strings.Repeat(`{"a":`, 33) + `"x"` + strings.Repeat(`}`, 33)
	tests := []struct {
		name  string
		extra string
		path  string
		rule  string
	}{
		{"number overflow", `"total":1e200`, "state.total", "overflows DynamoDB's range"},
		{"number underflow", `"total":1e-200`, "state.total", "underflows DynamoDB's range"},
		{"item over 400 KB", `"note":"` + strings.Repeat("x", 450<<10) + `"`, "state.note", "over DynamoDB's 400 KB item limit"},
		{"more than 32 nesting levels", `"meta":` + deep, "state.meta" + strings.Repeat(".a", 31), "nested 33 levels deep, over DynamoDB's 32"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := pt.NewOrders(t, pt.Options{}, pt.OutboxOptions{})
			order, msgID := fmt.Sprintf("O-V%d", i), fmt.Sprintf("msg_values_%d", i)
			deliver(t, h, msgID, cancelledOrder(order, tc.extra), 202)
			h.Drain(drainTimeout, idle, h.NewWorker("w"))

			ev := h.EventOf("orders", msgID)
			if ev.Status != ledger.StatusQuarantined || ev.ErrorCode != ledger.CodeUnstorable {
				t.Fatalf("event %s (%s: %s), want QUARANTINED %s; audit %v", ev.Status, ev.ErrorCode, ev.ErrorMessage, ledger.CodeUnstorable, pt.Actions(ev))
			}
			item := "projection " + projection.ScopedName("orders", builtin.OrderProjection) + "/" + order
			if !strings.Contains(ev.ErrorMessage, item+" attribute "+tc.path+": ") || !strings.Contains(ev.ErrorMessage, tc.rule) {
				t.Fatalf("quarantine reason %q; want it to name %s, %s and %q", ev.ErrorMessage, item, tc.path, tc.rule)
			}
			if ev.TotalAttempts != 1 || !slices.Equal(pt.Actions(ev), []string{"accept", "claim", "quarantine"}) {
				t.Fatalf("%d attempts, audit %v; want one attempt, then the quarantine", ev.TotalAttempts, pt.Actions(ev))
			}
			_, err := h.Ledger.GetProjection(context.Background(), projection.ScopedName("orders", builtin.OrderProjection), order)
			if !errors.Is(err, ledger.ErrNotFound) || h.Projections() != 0 || len(h.Intents()) != 0 {
				t.Fatalf("state written for an unstorable order: projection %v, %d projections, %d intents", err, h.Projections(), len(h.Intents()))
			}
			if dead := h.Receive(h.Queues.DLQ); len(dead) != 0 {
				t.Fatalf("%d messages on the dead-letter queue", len(dead))
			}
		})
	}
}

// An order's numbers above 2^53 come back as sent from every read of the
// ledger: the projection's state, and the intents' payloads.
func TestOrderNumbersAbove2p53StayExact(t *testing.T) {
	h := pt.NewOrders(t, pt.Options{}, pt.OutboxOptions{})
	deliver(t, h, "msg_exact", cancelledOrder("O-X", `"total_minor":1152921511791461867,"lines":[{"qty":1152921511791461867}]`), 202)
	h.Drain(drainTimeout, idle, h.NewWorker("w"))
	if ev := h.EventOf("orders", "msg_exact"); ev.Status != ledger.StatusProcessed {
		t.Fatalf("event %s %s %s", ev.Status, ev.ErrorCode, ev.ErrorMessage)
	}
	p, err := h.Ledger.GetProjection(context.Background(), projection.ScopedName("orders", builtin.OrderProjection), "O-X")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"total_minor": p.State["total_minor"], "lines": p.State["lines"]})
	if want := `{"lines":[{"qty":1152921511791461867}],"total_minor":1152921511791461867}`; string(b) != want {
		t.Fatalf("projection state %s, want %s", b, want)
	}
	intents := h.Intents()
	if len(intents) != 2 {
		t.Fatalf("%d intents, want the refund and the notice", len(intents))
	}
	for _, in := range intents {
		if b, _ := json.Marshal(in.Payload["total_minor"]); string(b) != "1152921511791461867" {
			t.Fatalf("intent %s payload total_minor %s", in.Kind, b)
		}
	}
}
