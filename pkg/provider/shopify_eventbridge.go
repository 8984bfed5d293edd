package provider

// The EventBridge envelope: event sources per app (Partner Dashboard),
// associated with an event bus in the AWS console, as Shopify's "Amazon
// EventBridge webhook delivery" guide
// (shopify.dev/docs/apps/webhooks/configuration/eventbridge) and the
// eventBridgeWebhookSubscriptionCreate mutation describe them (source ARNs
// arn:aws:events:<region>::event-source/aws.partner/shopify.com/<app
// id>/<name>). The guide prints no event; the detail (detail-type
// "shopifyWebhook", detail.payload, detail.metadata with the delivery's
// headers, X-Shopify-Event-Id and X-Shopify-Triggered-At included) is read
// as open-source consumers of real deliveries read and test it.

import (
	"bytes"
	"encoding/json"
	"strings"
)

// ShopifyEventBridgeIdentity reads the identity of a Shopify webhook that
// arrived through an Amazon EventBridge partner event source, from the
// event's detail. It is exactly the identity Shopify.Verify reads from the
// HTTPS delivery of the same webhook (one function, shopifyIdentity, reads
// both), so a fact delivered both ways is one ledger row: EventID is
// X-Shopify-Event-Id, else X-Shopify-Webhook-Id; DeliveryID is
// X-Shopify-Webhook-Id; Type is X-Shopify-Topic; Subject and VersionHint
// come from the payload; the same attributes are kept. Identity.Payload is
// the webhook body (detail.payload), what the processor reads and what the
// ledger stores; the envelope around it is not stored.
//
// Shopify puts one event per webhook on the partner bus
// "aws.partner/shopify.com/<app id>/<event source name>", with detail-type
// "shopifyWebhook" and a detail of two members:
//
//	{"payload":  {…the JSON body an HTTPS delivery would carry…},
//	 "metadata": {"X-Shopify-Topic": "orders/updated",
//	              "X-Shopify-Webhook-Id": "…",
//	              "X-Shopify-Event-Id": "…", …}}
//
// metadata holds the HTTPS delivery's headers by their HTTP names, matched
// here case-insensitively. Should Shopify change the shape, an event
// without metadata ids is quarantined under a content hash (nothing is
// lost) and this function is where to look.
//
// No signature is checked: X-Shopify-Hmac-SHA256 is the MAC of the bytes
// Shopify would have POSTed, and EventBridge re-serializes the payload, so
// it cannot be checked reliably. Trust comes from where the event is read:
// only Shopify can put events on an aws.partner/shopify.com/ partner event
// source, and the stack's rule matches that one source name exactly.
//
// A detail that is not a JSON object, or has no payload, is Unidentified
// (intake keeps it quarantined under a content hash). A string payload
// (an XML subscription might send one) is taken as the body text.
func ShopifyEventBridgeIdentity(detail []byte) Verified {
	var env struct {
		Payload  json.RawMessage            `json:"payload"`
		Metadata map[string]json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(detail, &env); err != nil {
		return Verified{Unidentified: "eventbridge detail is not a JSON object with payload and metadata"}
	}
	body := bytes.TrimSpace(env.Payload)
	if len(body) == 0 || string(body) == "null" {
		return Verified{Unidentified: "eventbridge detail has no payload"}
	}
	if body[0] == '"' {
		var text string
		if json.Unmarshal(body, &text) != nil {
			return Verified{Unidentified: "eventbridge detail.payload is not valid JSON"}
		}
		body = []byte(text)
	}
	meta := make(map[string]string, len(env.Metadata))
	for k, raw := range env.Metadata {
		var v string
		if json.Unmarshal(raw, &v) != nil {
			v = string(bytes.TrimSpace(raw)) // a number or literal, as written
		}
		name := strings.ToLower(k)
		if prev, dup := meta[name]; dup && prev != v {
			return Verified{Unidentified: "eventbridge detail.metadata names " + bound(name) + " twice with different values"}
		}
		meta[name] = v
	}
	v := shopifyIdentity(func(name string) string { return meta[name] }, body)
	for i := range v.Events {
		v.Events[i].Payload = body
	}
	return v
}
