package builtin_test

import (
	"testing"

	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// FuzzStripeSubscriptionProject: any verified payload either projects to a
// versioned write with one intent or fails with a permanent error; never a
// panic, never a retryable error (a retry could not fix the payload).
func FuzzStripeSubscriptionProject(f *testing.F) {
	f.Add("customer.subscription.updated", []byte(`{"id":"evt_1","created":1000,"data":{"object":{"id":"sub_1","object":"subscription","customer":"cus_1","status":"active","metadata":{"account_id":"a"},"items":{"data":[{"price":{"id":"p"}}]}}}}`))
	f.Add("customer.subscription.deleted", []byte(`{"created":5,"data":{"object":{"id":"sub_x","object":"subscription","customer":{"id":"cus_2"},"status":"canceled","metadata":{"account_id":"b"}}}}`))
	f.Add("customer.subscription.created", []byte(`{"data":{"object":"x"}}`))
	p := builtin.NewStripeSubscriptions(builtin.StripeOptions{})
	f.Fuzz(func(t *testing.T, typ string, payload []byte) {
		res, err := p.Project(projection.Event{Type: typ, Payload: payload})
		if err != nil {
			if _, perm := projection.AsPermanent(err); !perm {
				t.Fatalf("retryable error for a payload: %v", err)
			}
			return
		}
		if res.Write == nil || res.Write.Subject == "" || res.Write.Version <= 0 || len(res.Intents) != 1 || res.Intents[0].OperationID == "" {
			t.Fatalf("incomplete result %+v", res)
		}
	})
}
