package provider

// Hand-written: GitHub's scheme is one hex HMAC over the body, and no
// maintained Go library does more than that one line for it (go-github's
// ValidatePayload reads an *http.Request and brings the whole API client
// with it). Standard Webhooks, by contrast, uses the reference library.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// GitHub verifies X-Hub-Signature-256: "sha256=" and the hex HMAC-SHA256
// of the raw body under the webhook secret. No timestamp is signed, so no
// tolerance applies; the legacy SHA-1 X-Hub-Signature is ignored.
//
// Identity: EventID and DeliveryID are X-GitHub-Delivery (kept when a
// delivery is redelivered); Type is X-GitHub-Event, with the body's string
// "action" appended after a dot ("push", "issues.opened"); Subject is
// repository.full_name.
type GitHub struct{}

var _ Verifier = GitHub{}

func newGitHub(opts map[string]string) (Verifier, error) {
	return GitHub{}, noOptions("github", opts)
}

// Verify checks the body's MAC under every secret, then reads the identity.
func (GitHub) Verify(_ context.Context, req Request, cfg Config) (Verified, error) {
	header := req.Header("x-hub-signature-256")
	if header == "" {
		return Verified{}, fmt.Errorf("%w: no x-hub-signature-256 header", ErrNotSigned)
	}
	if !hasSecret(cfg.Secrets) {
		return Verified{}, ErrNoSecrets
	}
	// Exactly one hex MAC after the prefix: a gateway's comma-joined repeat
	// of the header is not hex and is refused.
	encoded, ok := strings.CutPrefix(header, "sha256=")
	got, err := hex.DecodeString(encoded)
	if !ok || err != nil || len(got) != sha256.Size {
		return Verified{}, fmt.Errorf("%w: x-hub-signature-256 is not sha256=<hex MAC>", ErrBadSignature)
	}
	if !macMatches(cfg.Secrets, sha256.New, got, req.Body) {
		return Verified{}, ErrBadSignature
	}

	delivery := req.Header("x-github-delivery")
	if delivery == "" {
		return Verified{Unidentified: "no x-github-delivery header"}, nil
	}
	if !usableID(delivery) {
		return Verified{Unidentified: "x-github-delivery is longer than 256 bytes or has control characters"}, nil
	}
	doc, _ := decodeJSON(req.Body)
	typ := req.Header("x-github-event")
	if m, ok := doc.(map[string]any); ok && typ != "" {
		// Only a string action: a number or object is no part of a type.
		if action, ok := m["action"].(string); ok && action != "" {
			typ += "." + action
		}
	}
	subject, _ := jsonPath{"repository", "full_name"}.lookup(doc)
	return Verified{Events: []Identity{{
		EventID:    delivery,
		DeliveryID: delivery,
		Type:       typeOrUnknown(typ),
		Subject:    bound(subject),
		UnsignedID: true, // X-GitHub-Delivery is not signed, nor is any time
	}}}, nil
}
