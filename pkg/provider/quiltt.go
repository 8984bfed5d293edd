package provider

// Hand-written: Quiltt's scheme is one HMAC over a version, a timestamp and
// the body, and Quiltt publishes no Go library; a dependency for it does
// not exist. Standard Webhooks, by contrast, uses the reference library.

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
)

// MaxQuilttEvents bounds the events one Quiltt delivery may carry; a
// delivery with more is kept whole as Unidentified, for an operator.
const MaxQuilttEvents = 100

// Quiltt verifies Quiltt-Signature, the base64 HMAC-SHA256 of
// "1" + Quiltt-Timestamp + body under the webhook secret ("1" is the
// signature version), with Quiltt-Timestamp in Unix seconds and within the
// tolerance of the injected clock, in the past or the future.
//
// One delivery carries several events ({"eventTypes":[…],"events":[…]}):
// each events[] element with an id is one Identity (EventID = id, Type =
// type, Subject = record.id, the connection; Payload = the element's own
// bytes; no DeliveryID). Elements without an id are skipped; a repeated id
// counts once. A delivery with no identified element, an unusable id or
// more than MaxQuilttEvents elements is Unidentified.
type Quiltt struct{}

var _ Verifier = Quiltt{}

func newQuiltt(opts map[string]string) (Verifier, error) {
	return Quiltt{}, noOptions("quiltt", opts)
}

// Verify checks the MAC under every secret, then the timestamp, then reads
// the events.
func (Quiltt) Verify(_ context.Context, req Request, cfg Config) (Verified, error) {
	header := req.Header("quiltt-signature")
	if header == "" {
		return Verified{}, fmt.Errorf("%w: no quiltt-signature header", ErrNotSigned)
	}
	tsRaw := req.Header("quiltt-timestamp")
	if tsRaw == "" {
		return Verified{}, fmt.Errorf("%w: no quiltt-timestamp header", ErrNotSigned)
	}
	if !hasSecret(cfg.Secrets) {
		return Verified{}, ErrNoSecrets
	}
	// Strictly digits with no leading zero: nothing separates the timestamp
	// from the body in the signed bytes, so moving a digit across that
	// boundary changes the time tenfold (and out of tolerance), and a
	// gateway's comma-joined repeat of the header is refused.
	ts, err := parseUnixSeconds("quiltt-timestamp", tsRaw)
	if err != nil {
		return Verified{}, err
	}
	got, err := base64.StdEncoding.Strict().DecodeString(header)
	if err != nil || len(got) != sha256.Size {
		return Verified{}, fmt.Errorf("%w: quiltt-signature is not one base64 MAC", ErrBadSignature)
	}
	if !macMatches(cfg.Secrets, sha256.New, got, []byte("1"), []byte(tsRaw), req.Body) {
		return Verified{}, ErrBadSignature
	}
	if !withinTolerance(clock(cfg), ts, tolerance(cfg)) {
		return Verified{}, ErrStale
	}
	return quilttEvents(req.Body, ts), nil
}

// quilttEvents reads the identities of a verified Quiltt body.
func quilttEvents(body []byte, at time.Time) Verified {
	// The exact key "events" (json.Unmarshal into a struct would also take
	// "Events" or "EVENTS").
	var top map[string]json.RawMessage
	var elems []json.RawMessage
	if json.Unmarshal(body, &top) != nil || json.Unmarshal(top["events"], &elems) != nil {
		return Verified{Unidentified: "body is not a JSON object with an events array"}
	}
	if len(elems) > MaxQuilttEvents {
		return Verified{Unidentified: fmt.Sprintf("%d events in one delivery, more than %d", len(elems), MaxQuilttEvents)}
	}
	seen := make(map[string]bool, len(elems))
	var out []Identity
	for i, raw := range elems {
		doc, _ := decodeJSON(raw)
		id, ok := jsonPath{"id"}.lookup(doc)
		if !ok || id == "" {
			continue
		}
		if !usableID(id) {
			// Refused rather than skipped: a signed event must not vanish.
			return Verified{Unidentified: fmt.Sprintf("events[%d].id is longer than 256 bytes or has control characters", i)}
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		typ, _ := jsonPath{"type"}.lookup(doc)
		subject, _ := jsonPath{"record", "id"}.lookup(doc)
		profile, _ := jsonPath{"record", "profileId"}.lookup(doc)
		out = append(out, Identity{
			EventID:      id,
			Type:         typeOrUnknown(typ),
			Subject:      bound(subject),
			ProviderTime: at.UTC(),
			Attributes:   boundedAttributes("profile_id", profile),
			Payload:      raw,
		})
	}
	if len(out) == 0 {
		return Verified{Unidentified: "no events[] element with an id"}
	}
	return Verified{Events: out}
}
