package webhookstest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// The model's decisions, pinned on a paid order and its refund: a
// while_current shipment and a once confirmation asked for by the
// payment, the shipment compensated when the refund removes its reason
// after it was performed.
func TestTheModelDecidesEachIntentAsItsPolicySays(t *testing.T) {
	key := subjectKey{name: "shop/order", subject: "O-1"}
	ship := projection.Intent{OperationID: "ship", Kind: "ship_order", Subject: "O-1", Policy: projection.PolicyWhileCurrent,
		Condition: map[string]string{"status": "paid"}, Compensation: "cancel_shipment"}
	confirm := projection.Intent{OperationID: "confirm", Kind: "send_confirmation", Subject: "O-1"}
	paid := &fact{id: "evt_paid", key: key, version: 1, write: projection.Write{Fingerprint: "p", State: map[string]any{"status": "paid"}},
		intents: []projection.Intent{ship, confirm}}
	refunded := &fact{id: "evt_refund", key: key, version: 2, write: projection.Write{Fingerprint: "r", State: map[string]any{"status": "refunded"}}}

	type want struct{ perform, must bool }
	cases := []struct {
		name   string
		steps  []step
		eager  bool
		final  string
		expect map[string]want
	}{
		{"paid then refunded, dispatched at the end", []step{{f: paid}, {f: refunded}}, false, "r",
			map[string]want{"ship": {false, false}, "confirm": {true, true}}},
		{"paid then refunded, dispatched as they come", []step{{f: paid}, {f: refunded}}, true, "r",
			map[string]want{"ship": {true, true}, "confirm": {true, true}, "ship-c": {true, true}}},
		{"refunded then paid (stale)", []step{{f: refunded}, {f: paid}}, true, "r", map[string]want{}},
		{"paid, its copy, paid again", []step{{f: paid, copy: true}, {f: paid}, {f: paid}}, true, "p",
			map[string]want{"ship": {true, true}, "confirm": {true, true}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := simulate(c.steps, c.eager)
			if got := x.final[key].fp; got != c.final {
				t.Errorf("final state %q, want %q", got, c.final)
			}
			if len(x.ops) != len(c.expect) {
				t.Errorf("%d operations, want %d", len(x.ops), len(c.expect))
			}
			for id, w := range c.expect {
				o, ok := x.ops[id]
				if !ok {
					t.Errorf("no operation %s", id)
					continue
				}
				if o.perform != w.perform || o.must != w.must {
					t.Errorf("%s: perform %v must %v, want %v %v", id, o.perform, o.must, w.perform, w.must)
				}
			}
		})
	}
}

func TestPermutationsAndPlans(t *testing.T) {
	if got := len(permutations(3, 6)); got != 6 {
		t.Fatalf("%d permutations of 3, want 6", got)
	}
	if permutations(4, 12) != nil {
		t.Fatal("24 permutations of 4 listed under a bound of 12")
	}
	all := plan(3, 24, 7)
	if len(all) != 12 || !all[0].eager || all[1].eager || all[0].order[0] != 0 || all[0].order[2] != 2 {
		t.Fatalf("plan of 3 events: %+v", all)
	}
	some := plan(5, 10, 7)
	if len(some) != 10 || some[0].order[0] != 0 || some[0].order[4] != 4 {
		t.Fatalf("plan of 5 events under 10 orders: %+v", some)
	}
	again := plan(5, 10, 7)
	for i := range some {
		if some[i].at != again[i].at || some[i].resend != again[i].resend || some[i].order[1] != again[i].order[1] {
			t.Fatalf("run %d differs with the same seed", i)
		}
	}
}

// The checker, fed runs the product must never produce: each breaks the
// rule it is filed under.
func TestTheCheckerNamesTheRuleEachImpossibleRunBreaks(t *testing.T) {
	key := subjectKey{name: "shop/order", subject: "O-1"}
	ship := projection.Intent{OperationID: "ship", Kind: "ship_order", Subject: "O-1", Policy: projection.PolicyWhileCurrent,
		Condition: map[string]string{"status": "paid"}}
	confirm := projection.Intent{OperationID: "confirm", Kind: "send_confirmation", Subject: "O-1"}
	sync1 := projection.Intent{OperationID: "sync1", Kind: "member.sync", Subject: "O-1", Policy: projection.PolicyLatest}
	sync2 := projection.Intent{OperationID: "sync2", Kind: "member.sync", Subject: "O-1", Policy: projection.PolicyLatest}
	paid := &fact{id: "evt_paid", againID: "evt_paid-resent", key: key, version: 1,
		write:   projection.Write{Name: "shop/order", Subject: "O-1", Version: 1, Fingerprint: "p", State: map[string]any{"status": "paid"}},
		intents: []projection.Intent{ship, confirm, sync1}}
	refunded := &fact{id: "evt_refund", againID: "evt_refund-resent", key: key, version: 2,
		write:   projection.Write{Name: "shop/order", Subject: "O-1", Version: 2, Fingerprint: "r", State: map[string]any{"status": "refunded"}},
		intents: []projection.Intent{sync2}}
	k := &kit{facts: []*fact{paid, refunded}}
	// Paid, then refunded, each re-sent after itself, effects dispatched
	// after each event: three dispatches (the copy of paid comes last).
	s := schedule{order: []int{0, 1}, resend: 0, at: 2, eager: true}
	call := func(op, kind string) pt.Arrival {
		return pt.Arrival{Method: "POST", Key: op, Kind: kind, Subject: "O-1", Scope: "shop", Applied: true}
	}
	clean := func() observed {
		return observed{
			events: map[string]ledger.Event{
				"evt_paid": {Status: ledger.StatusProcessed}, "evt_refund": {Status: ledger.StatusProcessed}, "evt_paid-resent": {Status: ledger.StatusProcessed},
			},
			projections: map[subjectKey]ledger.Projection{key: {Name: "shop/order", Subject: "O-1", Version: 2, Fingerprint: "r", State: map[string]any{"status": "refunded"}}},
			intents:     map[string]ledger.IntentState{},
			// Dispatch 1 (after paid): ship, confirm, sync1; dispatch 2
			// (after the refund): sync2.
			arrivals:  []pt.Arrival{call("ship", "ship_order"), call("confirm", "send_confirmation"), call("sync1", "member.sync"), call("sync2", "member.sync")},
			phaseEnd:  []int{3, 4, 4},
			effective: map[string]int{"ship": 1, "confirm": 1, "sync1": 1, "sync2": 1},
		}
	}
	if fs := k.check(s, clean()); len(fs) > 0 {
		t.Fatalf("a clean run fails: %v", fs)
	}
	cases := []struct {
		name string
		edit func(*observed)
		rule Rule
		says string
	}{
		{"a once effect never performed", func(o *observed) {
			o.arrivals = []pt.Arrival{call("ship", "ship_order"), call("sync1", "member.sync"), call("sync2", "member.sync")}
			o.phaseEnd = []int{2, 3, 3}
			delete(o.effective, "confirm")
		}, ImpliedEffects, "send_confirmation of O-1 (operation confirm, once, asked for by evt_paid) was due exactly once and was never performed"},
		{"an effect performed twice", func(o *observed) { o.effective["confirm"] = 2 }, OneCallPerOperation, "operation confirm (send_confirmation of O-1) was performed 2 times"},
		{"a shipment after the refund", func(o *observed) {
			o.arrivals = []pt.Arrival{call("confirm", "send_confirmation"), call("sync1", "member.sync"), call("ship", "ship_order"), call("sync2", "member.sync")}
			o.phaseEnd = []int{2, 4, 4}
		}, WhileCurrent, `ship_order of O-1 (operation ship, while_current, asked for by evt_paid) was performed while the subject was {"status":"refunded"}`},
		{"an older sync after a newer one", func(o *observed) {
			o.arrivals = []pt.Arrival{call("ship", "ship_order"), call("confirm", "send_confirmation"), call("sync2", "member.sync"), call("sync1", "member.sync")}
			o.phaseEnd = []int{2, 4, 4}
		}, LatestInOrder, "the downstream applied member.sync of O-1 version 1 (operation sync1) after version 2 (operation sync2)"},
		{"an effect nothing implies", func(o *observed) {
			o.arrivals = append(o.arrivals, pt.Arrival{Method: "POST", Key: "other", Kind: "gift", Subject: "O-1", Scope: "shop", Applied: true})
			o.phaseEnd = []int{3, 5, 5}
			o.effective["other"] = 1
		}, ImpliedEffects, "the downstream performed gift of O-1 (operation other), which no event implies"},
		{"the state of a lower version", func(o *observed) {
			o.projections[key] = ledger.Projection{Version: 1, Fingerprint: "p", State: map[string]any{"status": "paid"}}
		}, HighestVersion, `subject O-1 (shop/order) ends at version 1 with {"status":"paid"}, want version 2 with {"status":"refunded"}: what evt_refund`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := clean()
			c.edit(&o)
			fs := k.check(s, o)
			for _, f := range fs {
				if f.Rule == c.rule && strings.Contains(f.Detail, c.says) && strings.Contains(f.Detail, "run: order evt_paid, evt_refund, evt_paid-resent") {
					return
				}
			}
			t.Fatalf("no %q failure says %q:\n%v", c.rule, c.says, fs)
		})
	}
}

// WarehouseFollows fails a subject without a record, and one whose
// current row is an older version or another state than the canonical
// one; a late older record below the current one is fine.
func TestCheckWarehouseNamesTheSubjectBehind(t *testing.T) {
	key := subjectKey{name: "orders/order", subject: "O-42"}
	final := map[subjectKey]state{key: {version: 3, values: map[string]any{"status": "confirmed"}, fp: projection.Fingerprint(map[string]any{"status": "confirmed"})}}
	rec := func(v int, status string) warehouse.Record {
		return warehouse.Record{Scope: "orders", Projection: "order", Subject: "O-42", Version: json.Number(strconv.Itoa(v)), State: map[string]any{"status": status}}
	}
	for name, c := range map[string]struct {
		records []warehouse.Record
		want    string
	}{
		"in step, older rows after":  {[]warehouse.Record{rec(3, "confirmed"), rec(1, "created")}, ""},
		"no record":                  {nil, "has no record in the warehouse, want version 3"},
		"an older current row":       {[]warehouse.Record{rec(1, "created"), rec(2, "cancelled")}, "current row is version 2"},
		"the right version, a state": {[]warehouse.Record{rec(3, "cancelled")}, `current row is version 3 with {"status":"cancelled"}`},
	} {
		var got []string
		checkWarehouse([]subjectKey{key}, final, c.records, func(r Rule, f string, a ...any) {
			got = append(got, string(r)+": "+fmt.Sprintf(f, a...))
		})
		switch {
		case c.want == "" && len(got) > 0:
			t.Errorf("%s: %v, want none", name, got)
		case c.want != "" && (len(got) != 1 || !strings.Contains(got[0], c.want) || !strings.HasPrefix(got[0], string(WarehouseFollows))):
			t.Errorf("%s: %v, want one %q", name, got, c.want)
		}
	}
}

// The model's prediction for an operation id the ledger already holds:
// a latest intent of another revision is refused (the event quarantined,
// nothing of it written), a once intent of another revision is
// deduplicated (the event applies, the intent is not written again), and
// a while_current intent whose reason still holds is the same action.
func TestTheModelRefusesAReusedOperationIDAndDeduplicatesAOnceIntent(t *testing.T) {
	key := subjectKey{name: "billing/seats", subject: "sub_1"}
	rev := func(v int64, seats int, policy projection.Policy, status string) *fact {
		st := map[string]any{"seats": seats, "status": status}
		in := projection.Intent{OperationID: "op", Kind: "k", Subject: "acct_1", Policy: policy, Payload: map[string]any{"seats": seats}}
		if policy == projection.PolicyWhileCurrent {
			in.Condition = map[string]string{"status": "active"}
			in.Payload = nil
		}
		return &fact{id: fmt.Sprintf("evt_%d", v), key: key, version: v,
			write: projection.Write{Fingerprint: projection.Fingerprint(st), State: st}, intents: []projection.Intent{in}}
	}
	cases := []struct {
		name        string
		policy      projection.Policy
		second      string
		quarantined bool
	}{
		{"latest", projection.PolicyLatest, "active", true},
		{"once", projection.PolicyOnce, "active", false},
		{"while_current, its reason still holding", projection.PolicyWhileCurrent, "active", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			first, second := rev(1, 5, c.policy, "active"), rev(2, 8, c.policy, c.second)
			x := simulate([]step{{f: first}, {f: second}}, true)
			_, refused := x.quarantined[1]
			if refused != c.quarantined {
				t.Fatalf("second revision quarantined %v, want %v", refused, c.quarantined)
			}
			want := int64(2)
			if c.quarantined {
				want = 1
			}
			if got := x.final[key].version; got != want {
				t.Errorf("final version %d, want %d", got, want)
			}
			if len(x.ops) != 1 || x.ops["op"].by != first {
				t.Errorf("operations %v, want only the first revision's", x.ops)
			}
		})
	}
}
