package webhookstest_test

import (
	"encoding/json"
	"fmt"

	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/projection"
	"github.com/effectively-once/webhooks/pkg/webhookstest"
)

// receipts is a team's projection: a Stripe invoice is paid or voided
// (version created×10 + rank, a void after a payment of the same second),
// and a paid invoice's receipt is sent once per invoice.
type receipts struct{}

func (receipts) Name() string { return "invoice" }

func (receipts) Project(ev projection.Event) (projection.Result, error) {
	var e struct {
		Created int64
		Data    struct{ Object struct{ ID, Status string } }
	}
	if err := json.Unmarshal(ev.Payload, &e); err != nil {
		return projection.Result{}, projection.Permanent("malformed", err)
	}
	inv := e.Data.Object
	rank := map[string]int64{"paid": 1, "void": 2}[inv.Status]
	state := map[string]any{"status": inv.Status}
	res := projection.Result{Write: &projection.Write{Name: "invoice", Subject: inv.ID, Version: e.Created*10 + rank,
		Fingerprint: projection.Fingerprint(state), State: state}}
	if inv.Status == "paid" {
		res.Intents = []projection.Intent{{OperationID: projection.OperationID(inv.ID, "send_receipt"), Kind: "send_receipt",
			Subject: inv.ID, Policy: projection.PolicyOnce}}
	}
	return res, nil
}

// invoice is a Stripe invoice event's body.
func invoice(id, typ, status string, created int64) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"event","type":%q,"created":%d,"data":{"object":{"id":"in_1","object":"invoice","status":%q}}}`,
		id, typ, created, status)
}

func Example() {
	reg := projection.NewRegistry()
	reg.Register("stripe", []string{"invoice.paid", "invoice.voided"}, receipts{})
	p := webhookstest.Pipeline{
		Rules:   app.Rules{Registry: reg},
		Sources: `{"sources":[{"name":"billing","kind":"stripe"}]}`,
		Effects: `{"effects":[{"kind":"send_receipt","scopes":["billing"]}]}`,
	}
	// In a test: p.Check(t, events...). Failures returns the same
	// findings instead of failing a test.
	fs, err := p.Failures(
		webhookstest.Event{Body: invoice("evt_1", "invoice.paid", "paid", 1796040000), Subject: "in_1", Version: 17960400001},
		webhookstest.Event{Body: invoice("evt_2", "invoice.voided", "void", 1796040000), Subject: "in_1", Version: 17960400002,
			State: map[string]any{"status": "void"}},
	)
	fmt.Println(len(fs), err)
	// Output: 0 <nil>
}

// receivedVersioned is receipts with a broken ordering rule: the version
// is when the event was received.
type receivedVersioned struct{ receipts }

func (r receivedVersioned) Project(ev projection.Event) (projection.Result, error) {
	res, err := r.receipts.Project(ev)
	if res.Write != nil {
		res.Write.Version = ev.ReceivedAt.Unix()
	}
	return res, err
}

// A regression test asserts the rule a broken variant breaks.
func ExamplePipeline_Failures() {
	reg := projection.NewRegistry()
	reg.Register("stripe", []string{"invoice.paid", "invoice.voided"}, receivedVersioned{})
	p := webhookstest.Pipeline{
		Rules:   app.Rules{Registry: reg},
		Sources: `{"sources":[{"name":"billing","kind":"stripe"}]}`,
		Effects: `{"effects":[{"kind":"send_receipt","scopes":["billing"]}]}`,
	}
	fs, _ := p.Failures(
		webhookstest.Event{Body: invoice("evt_1", "invoice.paid", "paid", 1796040000), Subject: "in_1", Version: 17960400001},
		webhookstest.Event{Body: invoice("evt_2", "invoice.voided", "void", 1796040000), Subject: "in_1", Version: 17960400002},
	)
	broken := map[webhookstest.Rule]bool{}
	for _, f := range fs {
		if !broken[f.Rule] {
			broken[f.Rule] = true
			fmt.Println(f.Rule)
		}
	}
	// Output:
	// state of the highest version
	// every event and intent processed
}

// paidAt is receipts with the receipt and the state carrying when the
// invoice was paid: a second invoice.paid (the invoice paid again after
// an amendment) asks for the one receipt, keyed by the invoice, with
// another payload.
type paidAt struct{ receipts }

func (r paidAt) Project(ev projection.Event) (projection.Result, error) {
	res, err := r.receipts.Project(ev)
	if err != nil || res.Write == nil {
		return res, err
	}
	var e struct{ Created int64 }
	_ = json.Unmarshal(ev.Payload, &e)
	state := map[string]any{"paid_at": e.Created}
	for k, v := range res.Write.State {
		state[k] = v
	}
	res.Write.State, res.Write.Fingerprint = state, projection.Fingerprint(state)
	for i := range res.Intents {
		res.Intents[i].Payload = map[string]any{"paid_at": e.Created}
	}
	return res, nil
}

// Report returns the warnings Check only logs: a test asserts that a
// broken variant warns (or fails) with the rule named.
func ExamplePipeline_Report() {
	reg := projection.NewRegistry()
	reg.Register("stripe", []string{"invoice.paid"}, paidAt{})
	p := webhookstest.Pipeline{
		Rules:   app.Rules{Registry: reg},
		Sources: `{"sources":[{"name":"billing","kind":"stripe"}]}`,
		Effects: `{"effects":[{"kind":"send_receipt","scopes":["billing"]}]}`,
	}
	r, err := p.Report(
		webhookstest.Event{Body: invoice("evt_1", "invoice.paid", "paid", 1796040000), Subject: "in_1", Version: 17960400001},
		webhookstest.Event{Body: invoice("evt_2", "invoice.paid", "paid", 1796040060), Subject: "in_1", Version: 17960400601},
	)
	fmt.Println(len(r.Failures), err)
	for _, w := range r.Warnings {
		fmt.Println(w.Rule)
	}
	// Output:
	// 0 <nil>
	// a once effect carries one payload
}
