package builtin_test

import (
	"testing"

	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Seeds are compact on purpose: the fuzzer minimizes every new input, and
// minimizing the multi-kilobyte fixtures (covered by TestSESFixtures) would
// take a short run's whole budget.
func FuzzSESMessageProject(f *testing.F) {
	mail := map[string]any{"messageId": "m1"}
	f.Add("ses.bounce", sesEvent(f, "ses.bounce", "s", map[string]any{"notificationType": "Bounce", "mail": mail, "bounce": hardBounce("a@x.io", "B@x.io")}).Payload)
	f.Add("ses.complaint", sesEvent(f, "ses.complaint", "s", map[string]any{"eventType": "Complaint", "mail": mail, "complaint": complaint("a@x.io")}).Payload)
	f.Add("ses.delivery", sesEvent(f, "ses.delivery", "s", map[string]any{"notificationType": "Delivery", "mail": mail}).Payload)
	f.Add("ses.bounce", []byte(`{"notificationType":"Bounce","mail":{"messageId":"m"},"bounce":{"bounceType":"Transient","bouncedRecipients":[{"emailAddress":"a@b"}]}}`))
	f.Add("ses.send", []byte(`{"eventType":"Send","mail":{"messageId":"m"}}`))
	f.Add("", []byte(`{"Type":"Notification","Message":"{\"eventType\":\"Reject\",\"mail\":{\"messageId\":\"m\"}}"}`))
	p := builtin.NewSESMessages()
	f.Fuzz(func(t *testing.T, typ string, payload []byte) {
		fuzzProject(t, p, projection.Event{Type: typ, Payload: payload}, 1)
	})
}
