package builtin_test

import (
	"fmt"
	"testing"

	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

func orderEvent(eventID, typ string, revision int, status, origin string) projection.Event {
	originField := ""
	if origin != "" {
		originField = `,"origin":` + origin
	}
	body := fmt.Sprintf(`{"type":%q,"timestamp":"2026-11-30T10:00:%02dZ","data":{"id":"O-42","revision":%d,"status":%q,"customer_id":"C-1007","currency":"EUR","total_minor":12990,"updated_at":"2026-11-30T10:00:%02dZ"}%s}`,
		typ, revision, revision, status, revision, originField)
	return projection.Event{Source: "orders", Kind: "standard-webhooks", EventID: eventID, Type: typ, Payload: []byte(body)}
}

func TestOrderFixture(t *testing.T) {
	res, err := builtin.NewOrders(builtin.OrderOptions{}).Project(projection.Event{Kind: "standard-webhooks", Type: "order.updated", Payload: fixture(t, "standardwebhooks/order.updated.json")})
	if err != nil {
		t.Fatal(err)
	}
	w := res.Write
	if w.Name != builtin.OrderProjection || w.Subject != "O-42" || w.Version != 12 || w.Terminal || len(res.Intents) != 0 {
		t.Fatalf("result %+v", res)
	}
	if w.State["status"] != "confirmed" || w.State["total_minor"] != int64(12990) || w.State["customer_id"] != "C-1007" {
		t.Fatalf("state %v", w.State)
	}
	if _, ok := w.State["revision"]; ok {
		t.Fatal("revision is the version, not state")
	}
	if _, ok := w.State["updated_at"]; ok {
		t.Fatal("updated_at is not a business fact")
	}
	if lines, _ := w.State["lines"].([]any); len(lines) != 2 {
		t.Fatalf("lines %v", w.State["lines"])
	}
}

func TestOrderCancellationIntents(t *testing.T) {
	p := builtin.NewOrders(builtin.OrderOptions{})
	res, err := p.Project(orderEvent("evt12", "order.cancelled", 12, "CANCELLED", `{"automation":"A","hop":2}`))
	if err != nil {
		t.Fatal(err)
	}
	if res.Write.State["status"] != "cancelled" || len(res.Intents) != 2 {
		t.Fatalf("result %+v", res)
	}
	want := map[string]string{
		"refund":              projection.OperationID("O-42", "refund_due_to_cancellation", "12"),
		"notify_cancellation": projection.OperationID("O-42", "notify_cancellation", "12"),
	}
	for _, in := range res.Intents {
		if want[in.Kind] == "" || in.OperationID != want[in.Kind] || in.Subject != "O-42" {
			t.Fatalf("intent %+v", in)
		}
		pl := in.Payload
		if pl["order_id"] != "O-42" || pl["revision"] != int64(12) || pl["total_minor"] != int64(12990) || pl["currency"] != "EUR" || pl["customer_id"] != "C-1007" {
			t.Fatalf("payload %+v", pl)
		}
		origin, _ := pl["origin"].(map[string]any)
		if origin["automation"] != "A" || origin["hop"] != int64(3) {
			t.Fatalf("origin %+v", pl["origin"])
		}
		delete(want, in.Kind)
	}
	// The two intents never share a map.
	res.Intents[0].Payload["origin"].(map[string]any)["hop"] = int64(99)
	if res.Intents[1].Payload["origin"].(map[string]any)["hop"] != int64(3) {
		t.Fatal("intents share their origin")
	}
	// No origin: the chain starts here, at hop 1.
	plain, _ := p.Project(orderEvent("evt12b", "order.updated", 12, "canceled", ""))
	if plain.Intents[0].Payload["origin"].(map[string]any)["hop"] != int64(1) {
		t.Fatalf("origin %+v", plain.Intents[0].Payload["origin"])
	}
	// Same business state under another type, origin, timestamp and
	// updated_at: the same fingerprint, so the ledger sees a noop.
	if plain.Write.Fingerprint != res.Write.Fingerprint {
		t.Fatal("envelope fields changed the fingerprint")
	}
}

func TestOrderTypesAndStatus(t *testing.T) {
	p := builtin.NewOrders(builtin.OrderOptions{})
	cases := []struct {
		name, evType, body, status string
	}{
		{"status implied by order.cancelled", "order.cancelled", `{"type":"order.cancelled","data":{"id":"O-1","revision":3}}`, "cancelled"},
		{"status implied by order.created", "order.created", `{"data":{"id":"O-1","revision":0}}`, "created"},
		{"body type when the recorded one is not an order type", "unknown", `{"type":"order.confirmed","data":{"id":"O-1","revision":4}}`, "confirmed"},
		{"data status wins over the type", "order.confirmed", `{"data":{"id":"O-1","revision":4,"status":"Shipped"}}`, "shipped"},
		{"numeric id", "order.updated", `{"data":{"id":77,"revision":4,"status":"created"}}`, "created"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := p.Project(projection.Event{Type: c.evType, Payload: []byte(c.body)})
			if err != nil {
				t.Fatal(err)
			}
			if res.Write.State["status"] != c.status {
				t.Fatalf("state %v", res.Write.State)
			}
		})
	}
}

func TestOrderPermanentErrors(t *testing.T) {
	p := builtin.NewOrders(builtin.OrderOptions{})
	cases := map[string]struct {
		typ, body, code string
	}{
		"not JSON":            {"order.updated", `{`, "malformed"},
		"no data":             {"order.updated", `{"type":"order.updated"}`, "malformed"},
		"data not an object":  {"order.updated", `{"data":[1]}`, "malformed"},
		"no id":               {"order.updated", `{"data":{"revision":1,"status":"created"}}`, "malformed"},
		"no revision":         {"order.updated", `{"data":{"id":"O-1","status":"created"}}`, "malformed"},
		"revision a string":   {"order.updated", `{"data":{"id":"O-1","revision":"12","status":"created"}}`, "malformed"},
		"revision a fraction": {"order.updated", `{"data":{"id":"O-1","revision":1.5,"status":"created"}}`, "malformed"},
		"revision negative":   {"order.updated", `{"data":{"id":"O-1","revision":-1,"status":"created"}}`, "malformed"},
		"revision too large":  {"order.updated", `{"data":{"id":"O-1","revision":99999999999999999999,"status":"created"}}`, "malformed"},
		"updated, no status":  {"order.updated", `{"data":{"id":"O-1","revision":1}}`, "malformed"},
		"origin not object":   {"order.updated", `{"data":{"id":"O-1","revision":1,"status":"created"},"origin":"automation-A"}`, "malformed"},
		"origin hop a string": {"order.updated", `{"data":{"id":"O-1","revision":1,"status":"created"},"origin":{"hop":"2"}}`, "malformed"},
		"origin hop negative": {"order.updated", `{"data":{"id":"O-1","revision":1,"status":"created"},"origin":{"hop":-1}}`, "malformed"},
		"unsupported type":    {"order.shipped", `{"type":"order.shipped","data":{"id":"O-1","revision":1,"status":"shipped"}}`, "unsupported_type"},
		"hop budget":          {"order.updated", `{"data":{"id":"O-1","revision":1,"status":"confirmed"},"origin":{"automation":"B","hop":5}}`, "hop_budget"},
		// Found by FuzzOrderProject: DynamoDB cannot store an empty map key.
		"empty field name":           {"", `{"tYpe":"order.cancelled","dAtA":{"id":"0","revision":0,"":[]}}`, "malformed"},
		"empty nested field name":    {"order.updated", `{"data":{"id":"O-1","revision":1,"status":"created","lines":[{"":1}]}}`, "malformed"},
		"empty field name in origin": {"order.updated", `{"data":{"id":"O-1","revision":1,"status":"created"},"origin":{"":"x"}}`, "malformed"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := p.Project(projection.Event{Type: c.typ, Payload: []byte(c.body)})
			if code, perm := projection.AsPermanent(err); !perm || code != c.code {
				t.Fatalf("err %v: permanent=%v code=%q, want %q", err, perm, code, c.code)
			}
		})
	}
}

func TestOrderHopBudget(t *testing.T) {
	cases := []struct {
		budget, hop int64
		ok          bool
	}{
		{0, 4, true}, {0, 5, false}, // the default budget is 5
		{2, 1, true}, {2, 2, false},
		{-1, 4, true}, // negative means the default
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("budget %d hop %d", c.budget, c.hop), func(t *testing.T) {
			p := builtin.NewOrders(builtin.OrderOptions{HopBudget: c.budget})
			res, err := p.Project(orderEvent("e", "order.cancelled", 12, "cancelled", fmt.Sprintf(`{"automation":"A","hop":%d}`, c.hop)))
			if !c.ok {
				if code, _ := projection.AsPermanent(err); code != "hop_budget" {
					t.Fatalf("err %v, want hop_budget", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Intents[0].Payload["origin"].(map[string]any)["hop"] != c.hop+1 {
				t.Fatalf("origin %+v", res.Intents[0].Payload["origin"])
			}
		})
	}
}

// The order timeline: r10 CONFIRMED, its exact redelivery, r12 CANCELLED
// before r11, the late r11, and a replay of r12 under a new event id. Each
// step's outcome, and one refund and one notice keyed by revision 12.
func TestOrderTimeline(t *testing.T) {
	p := builtin.NewOrders(builtin.OrderOptions{})
	steps := []struct {
		label string
		ev    projection.Event
		want  simOutcome
	}{
		{"evt10", orderEvent("evt10", "order.confirmed", 10, "confirmed", ""), simApplied},
		{"evt10-again", orderEvent("evt10", "order.confirmed", 10, "confirmed", ""), simNoop},
		{"evt12", orderEvent("evt12", "order.cancelled", 12, "cancelled", ""), simApplied},
		{"evt11", orderEvent("evt11", "order.updated", 11, "confirmed", ""), simStale},
		{"evt12-replay", orderEvent("evt12-replay", "order.updated", 12, "cancelled", `{"automation":"B","hop":1}`), simNoop},
	}
	sim := newSim()
	for _, s := range steps {
		res, err := p.Project(s.ev)
		if err != nil {
			t.Fatal(err)
		}
		if got := sim.commit(s.label, res); got != s.want {
			t.Fatalf("%s: %s, want %s", s.label, got, s.want)
		}
	}
	if row := sim.row("order", "O-42"); row.Version != 12 || row.State["status"] != "cancelled" {
		t.Fatalf("O-42 %+v", row)
	}
	want := []string{projection.OperationID("O-42", "notify_cancellation", "12"), projection.OperationID("O-42", "refund_due_to_cancellation", "12")}
	got := sim.opIDs()
	if len(got) != 2 || !(got[0] == want[0] && got[1] == want[1] || got[0] == want[1] && got[1] == want[0]) {
		t.Fatalf("intents %v", got)
	}
	// Same revision, contradictory state: quarantined, not settled by arrival.
	res, _ := p.Project(orderEvent("evt12-bad", "order.updated", 12, "confirmed", ""))
	if got := sim.commit("evt12-bad", res); got != simConflict {
		t.Fatalf("contradictory r12: %s", got)
	}
}

func TestOrderEveryOrder(t *testing.T) {
	events := []labelled{
		{"r10", orderEvent("evt10", "order.confirmed", 10, "confirmed", "")},
		{"r11", orderEvent("evt11", "order.updated", 11, "confirmed", "")},
		{"r12", orderEvent("evt12", "order.cancelled", 12, "cancelled", "")},
		{"r12-echo", orderEvent("evt12-echo", "order.updated", 12, "cancelled", `{"automation":"B","hop":1}`)},
		{"r13-echo", orderEvent("evt13", "order.updated", 13, "cancelled", `{"automation":"A","hop":2}`)},
	}
	// r13 re-states r12's business state (an automation mirroring it
	// back): a newer revision with the same fingerprint (the body's
	// updated_at differs and must not count). After r12 it is an advance
	// with no intents; arriving before r12 it carries the cancellation
	// itself (keyed by 13) and r12 is stale. Either way: one refund, one
	// notice.
	for _, r := range runPermutations(t, builtin.NewOrders(builtin.OrderOptions{}), "O-42", events, false) {
		if r.final.State["status"] != "cancelled" || r.final.Version != 13 {
			t.Fatalf("order %v: %+v", r.order, r.final)
		}
		if k := intentKinds(r.sim); len(k) != 2 || k["refund"] != 1 || k["notify_cancellation"] != 1 {
			t.Fatalf("order %v: intents %v", r.order, k)
		}
	}
}
