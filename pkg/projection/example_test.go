package projection_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// paidOrders is a team's projection: a payment makes its order paid, at
// the provider's version, and asks for the order to be shipped while it
// is still paid.
type paidOrders struct{}

func (paidOrders) Name() string { return "order" }

func (paidOrders) Project(ev projection.Event) (projection.Result, error) {
	var e struct {
		Created int64 `json:"created"`
		Order   string
	}
	if err := json.Unmarshal(ev.Payload, &e); err != nil {
		return projection.Result{}, projection.Permanent("malformed", err)
	}
	if e.Order == "" {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("no order"))
	}
	state := map[string]any{"status": "paid"}
	return projection.Result{
		Write: &projection.Write{
			Name: "order", Subject: e.Order, Version: e.Created,
			Fingerprint: projection.Fingerprint(state), State: state,
		},
		Intents: []projection.Intent{{
			// The same parts on every delivery, retry and replay: one
			// shipment per order, whatever arrives twice.
			OperationID: projection.OperationID(e.Order, "ship"),
			Kind:        "ship_order", Subject: e.Order,
			Policy:    projection.PolicyWhileCurrent,
			Condition: map[string]string{"status": "paid"},
		}},
	}, nil
}

// A team registers its projection for the provider kind and event types
// it reads; the pipeline looks it up for each verified event.
func Example() {
	reg := projection.NewRegistry()
	reg.Register("stripe", []string{"payment_intent.succeeded"}, paidOrders{})

	p, _ := reg.Lookup("stripe", "payment_intent.succeeded")
	res, err := p.Project(projection.Event{
		Source: "shop-stripe", Kind: "stripe", EventID: "evt_1", Type: "payment_intent.succeeded",
		Payload: []byte(`{"created": 1767225600, "order": "O-42"}`), ReceivedAt: time.Unix(1767225601, 0),
	})
	fmt.Println(err, res.Write.Subject, res.Write.Version, res.Write.State["status"])
	fmt.Println(res.Intents[0].Kind, res.Intents[0].Policy, res.Intents[0].OperationID == projection.OperationID("O-42", "ship"))
	// Output:
	// <nil> O-42 1767225600 paid
	// ship_order while_current true
}

// OperationID is a stable hash of the parts that name one business
// intent: the downstream's idempotency key. Its output for given parts is
// part of the compatibility promise (this example pins it): an upgrade that
// changed it would perform every in-flight effect again under a new key.
func ExampleOperationID() {
	first := projection.OperationID("O-42", "refund_due_to_cancellation", "12")
	again := projection.OperationID("O-42", "refund_due_to_cancellation", "12")
	fmt.Println(first)
	fmt.Println(first == again)
	// Output:
	// 28786b721640be60c433441e6fece813
	// true
}

// Fingerprint hashes a state canonically: the same business state gives
// the same fingerprint whatever the order of its keys. It is stored with
// every projection item, so its output is pinned here too.
func ExampleFingerprint() {
	a := projection.Fingerprint(map[string]any{"status": "paid", "total": 1250})
	b := projection.Fingerprint(map[string]any{"total": 1250, "status": "paid"})
	fmt.Println(a, a == b)
	// Output:
	// 1d25f3be50714228faff3ab6a7a08571 true
}

// Names lists what a registry projects, once per projection however many
// event types it serves: what WAREHOUSE_PROJECTIONS is checked against.
func ExampleRegistry_Names() {
	reg := projection.NewRegistry()
	reg.Register("shop", []string{"order.paid", "order.refunded"}, paidOrders{})
	fmt.Println(reg.Names())
	// Output: [order]
}
