package builtin_test

import (
	"os"
	"testing"

	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

func FuzzOrderProject(f *testing.F) {
	b, err := os.ReadFile("../../events/standardwebhooks/order.updated.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add("order.updated", b)
	f.Add("order.cancelled", orderEvent("e", "order.cancelled", 12, "cancelled", `{"automation":"A","hop":2,"path":["A","B"]}`).Payload)
	f.Add("unknown", []byte(`{"type":"order.created","data":{"id":"O-1","revision":0,"x":1e400,"y":[1.5,null,{"z":true}]},"origin":null}`))
	p := builtin.NewOrders(builtin.OrderOptions{})
	f.Fuzz(func(t *testing.T, typ string, payload []byte) {
		fuzzProject(t, p, projection.Event{Type: typ, Payload: payload}, 0)
	})
}
