package provider

// Hand-written: Shopify's scheme is one HMAC over the body. Shopify ships
// no Go library, and the community API clients that include a check bring
// a whole API client with them; a dependency would cost more than the few
// lines it saves. Standard Webhooks, by contrast, uses the reference
// library.

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
)

// Shopify verifies X-Shopify-Hmac-Sha256, the base64 HMAC-SHA256 of the raw
// body under the app's client secret.
//
// Shopify signs no timestamp, so no tolerance applies. X-Shopify-Triggered-At
// is deliberately not checked: it is unsigned (an attacker replaying a
// captured body can set it to anything), and Shopify retries a failed
// delivery for hours, so refusing old values would lose genuine retries
// without stopping a replay. Replays are absorbed by the ledger (the event
// id) and the projection's version guard (updated_at).
//
// Identity: EventID is X-Shopify-Event-Id (the same for every delivery of
// one event), falling back to X-Shopify-Webhook-Id; DeliveryID is
// X-Shopify-Webhook-Id; Type is X-Shopify-Topic; Subject is the body's
// admin_graphql_api_id, else its id (numbers as written); VersionHint is
// updated_at. The ids, topic, shop domain, triggered-at and API version are
// kept as attributes. None of these headers is signed: only the body is.
type Shopify struct{}

var _ Verifier = Shopify{}

func newShopify(opts map[string]string) (Verifier, error) {
	return Shopify{}, noOptions("shopify", opts)
}

// Verify checks the body's MAC under every secret, then reads the identity.
func (Shopify) Verify(_ context.Context, req Request, cfg Config) (Verified, error) {
	header := req.Header("x-shopify-hmac-sha256")
	if header == "" {
		return Verified{}, fmt.Errorf("%w: no x-shopify-hmac-sha256 header", ErrNotSigned)
	}
	if !hasSecret(cfg.Secrets) {
		return Verified{}, ErrNoSecrets
	}
	// Strict base64 of exactly one MAC: a gateway's comma-joined repeat of
	// the header is not base64 and is refused.
	got, err := base64.StdEncoding.Strict().DecodeString(header)
	if err != nil || len(got) != sha256.Size {
		return Verified{}, fmt.Errorf("%w: x-shopify-hmac-sha256 is not one base64 MAC", ErrBadSignature)
	}
	if !macMatches(cfg.Secrets, sha256.New, got, req.Body) {
		return Verified{}, ErrBadSignature
	}

	v := shopifyIdentity(req.Header, req.Body)
	for i := range v.Events {
		// Over HTTPS the ids are headers the HMAC does not cover, and no
		// time is signed. (Through EventBridge, AWS delivers the envelope.)
		v.Events[i].UnsignedID = true
	}
	return v, nil
}

// shopifyIdentity reads the identity of one Shopify webhook from its header
// values (by lower-case name) and its body. Both delivery paths use it: the
// HTTPS path with the request's headers, the EventBridge path with the
// envelope's metadata (see ShopifyEventBridgeIdentity).
func shopifyIdentity(header func(name string) string, body []byte) Verified {
	webhookID := header("x-shopify-webhook-id")
	eventID := header("x-shopify-event-id")
	id := Identity{
		EventID:    eventID,
		DeliveryID: bound(webhookID),
		Type:       typeOrUnknown(header("x-shopify-topic")),
		Attributes: boundedAttributes(
			"webhook_id", webhookID,
			"event_id", eventID,
			"topic", header("x-shopify-topic"),
			"shop_domain", header("x-shopify-shop-domain"),
			"triggered_at", header("x-shopify-triggered-at"),
			"api_version", header("x-shopify-api-version"),
		),
	}
	if id.EventID == "" {
		id.EventID = webhookID
	}
	if id.EventID == "" {
		return Verified{Unidentified: "no x-shopify-event-id or x-shopify-webhook-id header"}
	}
	if !usableID(id.EventID) {
		return Verified{Unidentified: "shopify event id is longer than 256 bytes or has control characters"}
	}
	// The subject and version are hints: a body that is not a JSON object
	// keeps its id.
	doc, _ := decodeJSON(body)
	subject, ok := jsonPath{"admin_graphql_api_id"}.lookup(doc)
	if !ok || subject == "" {
		subject, _ = jsonPath{"id"}.lookup(doc)
	}
	id.Subject = bound(subject)
	version, _ := jsonPath{"updated_at"}.lookup(doc)
	id.VersionHint = bound(version)
	return Verified{Events: []Identity{id}}
}
