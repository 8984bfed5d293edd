package pipelinetest

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/effectively-once/webhooks/internal/intake"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// SecretOrders signs the "orders" source (Standard Webhooks:
// "whsec_" + base64 of a visibly fake key).
var SecretOrders = "whsec_" + base64.StdEncoding.EncodeToString([]byte("test_FAKE_orders_signing_key_0001"))

// OrdersSources configures the generic orders source (builtin.Orders) as
// scripts/devstack.json does.
const OrdersSources = `{"sources":[{"name":"orders","kind":"standard-webhooks","secrets":["env:ORDERS_SECRET"],` +
	`"options":{"subject_path":"data.id","version_path":"data.revision"}}]}`

// NewOrders builds a pipeline with the orders source (o.SourcesDoc, when
// set, must include it), the default projections (o.Registry wins when
// set) and the effects stage.
func NewOrders(t testing.TB, o Options, oo OutboxOptions) *Harness {
	t.Helper()
	if o.SourcesDoc == "" {
		o.SourcesDoc = OrdersSources
	}
	secrets := map[string]string{"ORDERS_SECRET": SecretOrders}
	for k, v := range o.Secrets {
		secrets[k] = v
	}
	o.Secrets = secrets
	if o.Registry == nil {
		o.Registry = builtin.Default(builtin.StripeOptions{})
	}
	h := New(t, o)
	h.EnableOutbox(oo)
	return h
}

// DeliverOrder posts body to /webhooks/orders as webhook-id msgID, signed
// now by the Standard Webhooks reference library.
func (h *Harness) DeliverOrder(msgID string, body []byte) intake.Response {
	h.T.Helper()
	return h.DeliverStandardWebhook("orders", SecretOrders, msgID, body)
}

// DeliverStandardWebhook posts body to /webhooks/<src> as webhook-id
// msgID, signed now with secret by the Standard Webhooks reference
// library.
func (h *Harness) DeliverStandardWebhook(src, secret, msgID string, body []byte) intake.Response {
	h.T.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		h.T.Fatal(err)
	}
	now := h.Clock.Now()
	sig, err := wh.Sign(msgID, now, body)
	if err != nil {
		h.T.Fatal(err)
	}
	return h.DeliverTo(src, body, map[string]string{
		"webhook-id": msgID, "webhook-timestamp": strconv.FormatInt(now.Unix(), 10), "webhook-signature": sig,
		"content-type": "application/json",
	})
}

// OrderEvent renders an orders event (builtin.Orders). status "" leaves
// the status to the type (order.cancelled implies cancelled); origin ""
// sends none, otherwise it is a JSON object such as
// {"automation":"A","hop":1}.
func OrderEvent(typ, order string, revision int, status, origin string) []byte {
	data := fmt.Sprintf(`{"id":%q,"revision":%d,"customer_id":"cus_test_42","currency":"eur","total_minor":12900`, order, revision)
	if status != "" {
		data += fmt.Sprintf(`,"status":%q`, status)
	}
	data += "}"
	body := fmt.Sprintf(`{"type":%q,"timestamp":"2026-11-30T12:00:%02dZ","data":%s`, typ, revision%60, data)
	if origin != "" {
		body += `,"origin":` + origin
	}
	return []byte(body + "}")
}

// OrderOps returns the operation ids a cancellation of order at revision
// creates through the "orders" source: the refund's and the
// notification's, in that source's scope.
func OrderOps(order string, revision int) (refund, notify string) {
	rev := strconv.Itoa(revision)
	return projection.ScopedOperationID("orders", projection.OperationID(order, "refund_due_to_cancellation", rev)),
		projection.ScopedOperationID("orders", projection.OperationID(order, "notify_cancellation", rev))
}
