package builtin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// Reading verified payloads: the small checks every projection needs, each
// failing with a projection.Permanent error (no retry can fix a payload).

// validSubject checks an id the ledger will use as a projection subject
// (the ledger's own rule: non-empty, at most projection.MaxIDLength bytes, no
// control characters), so a bad id is quarantined with a clear code
// instead of failing later inside the commit.
func validSubject(what, v string) error {
	switch {
	case v == "":
		return projection.Permanent("malformed", fmt.Errorf("no %s", what))
	case len(v) > projection.MaxIDLength:
		return projection.Permanent("malformed", fmt.Errorf("%s longer than %d bytes", what, projection.MaxIDLength))
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return projection.Permanent("malformed", fmt.Errorf("%s has control characters", what))
		}
	}
	return nil
}

// decodeObject decodes a JSON object keeping numbers exact (json.Number):
// order ids and amounts above 2^53 must not be rounded through float64.
func decodeObject(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// normalizeJSON turns a value decoded with UseNumber into plain Go values
// the ledger can store and projection.Fingerprint can hash stably: integers become
// int64, other finite numbers float64, and a number too large for either
// keeps its decimal text.
func normalizeJSON(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(x.String(), 10, 64); err == nil {
			return i
		}
		if f, err := strconv.ParseFloat(x.String(), 64); err == nil && !math.IsInf(f, 0) {
			return f
		}
		return x.String()
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = normalizeJSON(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalizeJSON(e)
		}
		return out
	default:
		return v
	}
}

// jsonInt reads a JSON integer. ok is false for anything else (a string,
// a fraction, a number beyond int64, null).
func jsonInt(raw json.RawMessage) (int64, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] == '"' {
		return 0, false
	}
	var n json.Number
	if decodeObject(raw, &n) != nil {
		return 0, false
	}
	i, err := strconv.ParseInt(n.String(), 10, 64)
	return i, err == nil
}

// idText reads an id written as a JSON string or a JSON integer literal
// (Shopify ids are integers above 2^53, and need not fit an int64), as the
// text the sender wrote. Anything else gives "".
func idText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	if len(raw) == 0 {
		return ""
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return ""
		}
	}
	return string(raw)
}

// scalarText reads a JSON string, or a number as written; null or absent
// is "". ok is false for anything else.
func scalarText(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", true
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return strings.TrimSpace(s), true
	}
	var n json.Number
	if decodeObject(raw, &n) == nil {
		return n.String(), true
	}
	return "", false
}

// unixMillis parses an RFC 3339 time to Unix milliseconds; only times after
// the epoch are versions.
func unixMillis(what, s string) (int64, error) {
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
	if err != nil {
		return 0, projection.Permanent("malformed", fmt.Errorf("%s %q is not an RFC 3339 time", what, s))
	}
	ms := t.UnixMilli()
	if ms <= 0 {
		return 0, projection.Permanent("malformed", fmt.Errorf("%s %q is not after 1970", what, s))
	}
	return ms, nil
}

// stringMap copies string metadata into the map shape intents carry. An
// entry with an empty key is dropped: DynamoDB cannot store one, no
// provider sends one, and refusing the whole event for it would lose the
// business fact the event carries.
func stringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if k != "" {
			out[k] = v
		}
	}
	return out
}

// hasEmptyKey reports whether a decoded JSON value holds an object with an
// empty key anywhere, which DynamoDB cannot store.
func hasEmptyKey(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if k == "" || hasEmptyKey(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasEmptyKey(e) {
				return true
			}
		}
	}
	return false
}
