package projection_test

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// good is a result every rule accepts: a write and one intent of each
// policy.
func good() projection.Result {
	state := map[string]any{"status": "cancelled", "total": 42, "lines": []any{map[string]any{"qty": json.Number("2")}}, "at": time.Unix(0, 0).UTC(), "raw": []byte("x"), "none": nil}
	return projection.Result{
		Write: &projection.Write{Name: "order", Subject: "O-1", Version: 3, Fingerprint: projection.Fingerprint(state), State: state},
		Intents: []projection.Intent{
			{OperationID: "op-once", Kind: "suppression.add", Subject: "O-1", Payload: map[string]any{"why": "bounce"}},
			{OperationID: "op-latest", Kind: "entitlement.grant", Subject: "O-1", Policy: projection.PolicyLatest},
			{OperationID: "op-while", Kind: "refund", Subject: "O-1", Policy: projection.PolicyWhileCurrent,
				Condition: map[string]string{"status": "cancelled"}, Compensation: "refund.reverse"},
		},
	}
}

func TestValidate(t *testing.T) {
	deep := map[string]any{}
	m := deep
	for range 32 {
		next := map[string]any{}
		m["a"] = next
		m = next
	}
	cyclic := map[string]any{}
	cyclic["self"] = cyclic

	tests := []struct {
		name   string
		change func(r *projection.Result)
		code   string // "" : valid
		msg    string
	}{
		{"a complete result", func(*projection.Result) {}, "", ""},
		{"no write, no intents (ignored)", func(r *projection.Result) { *r = projection.Result{} }, "", ""},
		{"the policy once spelled out", func(r *projection.Result) { r.Intents[0].Policy = projection.PolicyOnce }, "", ""},
		{"a subject of MaxIDLength bytes", func(r *projection.Result) { r.Write.Subject = strings.Repeat("s", projection.MaxIDLength) }, "", ""},

		// The write.
		{"intents without a write", func(r *projection.Result) { r.Write = nil }, projection.CodeInvalidResult, "3 intents without a Write"},
		{"a write without a name", func(r *projection.Result) { r.Write.Name = "" }, projection.CodeInvalidResult, "the Write's name is empty"},
		{"a name with a scope separator", func(r *projection.Result) { r.Write.Name = "billing/order" }, projection.CodeInvalidResult, `the Write's name "billing/order" contains "/"`},
		{"a name with a key separator", func(r *projection.Result) { r.Write.Name = "order#2" }, projection.CodeInvalidResult, `contains "#"`},
		{"an empty subject", func(r *projection.Result) { r.Write.Subject = "" }, projection.CodeInvalidResult, "the Write's subject is empty"},
		{"a subject over MaxIDLength", func(r *projection.Result) { r.Write.Subject = strings.Repeat("s", projection.MaxIDLength+1) }, projection.CodeInvalidResult, "the Write's subject is 257 bytes, over 256"},
		{"a subject that is not UTF-8", func(r *projection.Result) { r.Write.Subject = "O-\xff" }, projection.CodeInvalidResult, "the Write's subject is not valid UTF-8"},
		{"a subject with a control character", func(r *projection.Result) { r.Write.Subject = "O-1\n" }, projection.CodeInvalidResult, "the Write's subject contains a control character (U+000A)"},
		{"no fingerprint", func(r *projection.Result) { r.Write.Fingerprint = "" }, projection.CodeInvalidResult, "the Write has no fingerprint"},

		// The intents.
		{"no operation id", func(r *projection.Result) { r.Intents[0].OperationID = "" }, projection.CodeInvalidResult, "intent 0 has no operation id"},
		{"an operation id over MaxIDLength", func(r *projection.Result) { r.Intents[1].OperationID = strings.Repeat("o", 300) }, projection.CodeInvalidResult, "intent 1's operation id is 300 bytes, over 256"},
		{"a duplicate operation id", func(r *projection.Result) { r.Intents[2].OperationID = "op-once" }, projection.CodeInvalidResult, `intent 2 repeats intent 0's operation id "op-once"`},
		{"an operation id that is a compensation's", func(r *projection.Result) { r.Intents[0].OperationID = projection.CompensationID("op-while") },
			projection.CodeInvalidResult, `intent 0's operation id "op-while-c" is the compensation id of intent 2`},
		{"no kind", func(r *projection.Result) { r.Intents[1].Kind = "" }, projection.CodeInvalidResult, "intent 1 has no kind"},
		{"a kind over MaxKindLength", func(r *projection.Result) { r.Intents[1].Kind = strings.Repeat("k", projection.MaxKindLength+1) }, projection.CodeInvalidResult, "intent 1's kind is 129 bytes, over 128"},
		{"no subject", func(r *projection.Result) { r.Intents[0].Subject = "" }, projection.CodeInvalidResult, "intent 0 has no subject"},
		{"the warehouse's record kind", func(r *projection.Result) { r.Intents[0].Kind = "warehouse.record" }, projection.CodeInvalidResult, `intent 0's kind "warehouse.record" is reserved`},
		{"a kind of the reserved family", func(r *projection.Result) { r.Intents[1].Kind = "warehouse" }, projection.CodeInvalidResult, `intent 1's kind "warehouse" is reserved`},
		{"a family that only starts like the reserved one", func(r *projection.Result) { r.Intents[1].Kind = "warehouses.restock" }, "", ""},
		{"a reserved Compensation kind", func(r *projection.Result) { r.Intents[2].Compensation = "warehouse.record" }, projection.CodeInvalidResult, `intent 2's Compensation "warehouse.record" is reserved`},
		{"an operation id of the reserved shape", func(r *projection.Result) { r.Intents[0].OperationID = "warehouse.0f3a9c" }, projection.CodeInvalidResult, `intent 0's operation id "warehouse.0f3a9c" is reserved`},
		{"a policy we do not know", func(r *projection.Result) { r.Intents[0].Policy = "at_most_once" }, projection.CodeInvalidResult, `intent 0 has policy "at_most_once"; the policies are "once", "while_current" and "latest"`},
		{"a Condition on a once intent", func(r *projection.Result) { r.Intents[0].Condition = map[string]string{"status": "cancelled"} },
			projection.CodeInvalidResult, "intent 0 (policy once) has a Condition; only a while_current intent is checked against one"},
		{"a Condition on a latest intent", func(r *projection.Result) { r.Intents[1].Condition = map[string]string{"status": "cancelled"} },
			projection.CodeInvalidResult, "intent 1 (policy latest) has a Condition"},
		{"a Compensation on a once intent", func(r *projection.Result) { r.Intents[0].Compensation = "undo" },
			projection.CodeInvalidResult, "intent 0 (policy once) has a Compensation; only a while_current intent is compensated"},
		{"a while_current intent without a Condition", func(r *projection.Result) { r.Intents[2].Condition = nil },
			projection.CodeInvalidResult, "intent 2 is while_current without a Condition"},
		{"a Condition with an empty field name", func(r *projection.Result) { r.Intents[2].Condition = map[string]string{"": "x"} },
			projection.CodeInvalidResult, "intent 2's Condition has an empty field name"},
		{"a Condition that does not hold in its own state", func(r *projection.Result) { r.Intents[2].Condition = map[string]string{"status": "refunded"} },
			projection.CodeInvalidResult, "intent 2's Condition does not hold in the state it is written with: status=cancelled, the intent needs status=refunded"},
		{"a Condition on a number, compared as text", func(r *projection.Result) { r.Intents[2].Condition = map[string]string{"total": "42"} }, "", ""},
		{"a Compensation kind over MaxKindLength", func(r *projection.Result) { r.Intents[2].Compensation = strings.Repeat("c", 200) },
			projection.CodeInvalidResult, "intent 2's Compensation is 200 bytes, over 128"},

		// Values that are not data.
		{"a channel in the state", func(r *projection.Result) { r.Write.State["ch"] = make(chan int) }, projection.CodeInvalidResult, "state.ch is a chan int, which is not data"},
		{"a func in a payload", func(r *projection.Result) { r.Intents[0].Payload["f"] = func() {} }, projection.CodeInvalidResult, "intents[0].payload.f is a func(), which is not data"},
		{"a complex number", func(r *projection.Result) { r.Write.State["z"] = complex(1, 2) }, projection.CodeInvalidResult, "state.z is a complex128"},
		{"a map with non-string keys", func(r *projection.Result) { r.Write.State["by_id"] = map[int]string{1: "a"} },
			projection.CodeInvalidResult, "state.by_id is a map keyed by int; keys must be strings"},
		{"a map with an empty key", func(r *projection.Result) { r.Write.State["m"] = map[string]any{"": 1} }, projection.CodeInvalidResult, "state.m has an empty key"},
		{"a struct", func(r *projection.Result) { r.Write.State["s"] = struct{ A int }{1} }, projection.CodeInvalidResult, "state.s is a struct { A int }"},
		{"a pointer to a string is followed", func(r *projection.Result) { s := "x"; r.Write.State["p"] = &s }, "", ""},

		// Data DynamoDB does not store.
		{"a NaN", func(r *projection.Result) { r.Write.State["total"] = math.NaN() }, projection.CodeUnstorable, "state.total: NaN is not a number DynamoDB stores"},
		{"an infinity in a payload", func(r *projection.Result) { r.Intents[0].Payload["x"] = math.Inf(-1) }, projection.CodeUnstorable, "intents[0].payload.x: -Inf"},
		{"a number over DynamoDB's range", func(r *projection.Result) { r.Write.State["total"] = 1e200 }, projection.CodeUnstorable, "state.total: 1e+200 overflows DynamoDB's range"},
		{"a number under DynamoDB's range", func(r *projection.Result) { r.Write.State["total"] = json.Number("1e-131") }, projection.CodeUnstorable, "underflows DynamoDB's range"},
		{"a number with 39 digits", func(r *projection.Result) { r.Write.State["total"] = json.Number(strings.Repeat("9", 39)) }, projection.CodeUnstorable, "39 significant digits"},
		{"a json.Number that is not a number", func(r *projection.Result) { r.Write.State["total"] = json.Number("12abc") }, projection.CodeUnstorable, `state.total: "12abc" is not a number`},
		{"nesting over 32 levels", func(r *projection.Result) { r.Write.State["meta"] = deep }, projection.CodeUnstorable, "nested 33 levels deep, over DynamoDB's 32"},
		{"a cycle", func(r *projection.Result) { r.Write.State["loop"] = cyclic }, projection.CodeUnstorable, "state.loop" + strings.Repeat(".self", 31) + ": nested 33 levels deep"},
		{"an item over 400 KB", func(r *projection.Result) { r.Write.State["note"] = strings.Repeat("x", 400<<10) }, projection.CodeUnstorable, "state: the item would be about"},
		{"a payload over 400 KB", func(r *projection.Result) {
			r.Intents[1].Payload = map[string]any{"blob": []byte(strings.Repeat("x", 401<<10))}
		},
			projection.CodeUnstorable, "intents[1].payload: the item would be about"},
		{"more intents than one transaction holds", func(r *projection.Result) {
			for i := range projection.MaxIntents - 2 {
				r.Intents = append(r.Intents, projection.Intent{OperationID: projection.OperationID("extra", string(rune('a'+i))), Kind: "k", Subject: "O-1"})
			}
		}, projection.CodeUnstorable, "34 intents; a result holds at most 33"},

		// The contract first: a result with both is invalid.
		{"invalid and unstorable", func(r *projection.Result) { r.Write.State["total"] = math.NaN(); r.Intents[1].OperationID = "" },
			projection.CodeInvalidResult, "intent 1 has no operation id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := good()
			tc.change(&r)
			err := projection.Validate("shop/order", r)
			if tc.code == "" {
				if err != nil {
					t.Fatalf("Validate: %v; want nil", err)
				}
				return
			}
			var pe *projection.PermanentError
			if !errors.As(err, &pe) {
				t.Fatalf("Validate: %v; want a *PermanentError", err)
			}
			if code, _ := projection.AsPermanent(err); code != tc.code {
				t.Fatalf("code %q (%v); want %q", code, err, tc.code)
			}
			if want := `projection "shop/order": `; !strings.HasPrefix(pe.Err.Error(), want) || !strings.Contains(pe.Err.Error(), tc.msg) {
				t.Fatalf("message %q; want it to start %q and hold %q", pe.Err.Error(), want, tc.msg)
			}
		})
	}
}
