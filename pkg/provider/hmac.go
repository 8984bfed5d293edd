package provider

// Hand-written by definition: "hmac" is our own configurable scheme for
// senders that have no scheme of their own here, so no library could
// implement it. The helpers at the end of this file are shared by the
// hand-written HMAC-family verifiers (Shopify, GitHub, Quiltt and this one)
// and by Standard Webhooks' identity extraction.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// HMAC verifies a sender that signs with an HMAC in a header, configured
// by the source's options. Build it with New("hmac", options); its zero
// value verifies nothing (every request is ErrNotSigned).
//
// Options (header names are matched lower-case):
//
//	header              required: the signature's header ("x-signature").
//	algorithm           "sha256" (default) or "sha512".
//	encoding            "hex" (default; either letter case) or "base64"
//	                    (standard alphabet with padding).
//	prefix              optional text that precedes the encoded MAC in the
//	                    header, e.g. "sha256="; when set it must be there.
//	timestamp_header    optional header that carries the signing time. When
//	                    set, the timestamp must be part of signed_payload and
//	                    within the source's tolerance (default 300 s) of the
//	                    injected clock, in the past or the future.
//	timestamp_format    "unix" (seconds, default), "unix_ms" or "rfc3339".
//	signed_payload      what the MAC is computed over: a template in which
//	                    {body} (exactly once) is the raw body, {timestamp}
//	                    and {id} (at most once each, only with their
//	                    header) the headers, each exactly as sent; the rest
//	                    is literal. Default "{body}", or
//	                    "{timestamp}.{body}" with a timestamp_header.
//	id_header, id_path  where the event id is (the ledger's dedup key): a
//	                    header, or a JSON dot path into the body such as
//	                    "event.id" (a number segment indexes an array). Set
//	                    exactly one, naming the sender's stable event id,
//	                    never a per-attempt id. Prefer id_path: the body is
//	                    signed; an id_header only when signed_payload has
//	                    {id} (see Identity.UnsignedID).
//	type_header,        optional; where the event type is (at most one).
//	type_path           Without either, the type is "unknown".
//	delivery_id_header  optional header naming the transport attempt.
//	subject_path        optional JSON dot path to the business subject.
//
// A path's value is used when it is a string or a number (as written, so
// large ids keep every digit). An id over 256 bytes or with control
// characters makes the delivery Unidentified; other fields are cut at 256
// bytes (see Identity).
type HMAC struct {
	header          string
	newHash         func() hash.Hash
	macLen          int
	base64          bool
	prefix          string
	timestampHeader string
	timestampFormat string
	payload         []payloadPart
	idHeader        string
	signsID         bool // signed_payload has {id}: the id header is signed
	idPath          jsonPath
	typeHeader      string
	typePath        jsonPath
	deliveryHeader  string
	subjectPath     jsonPath
}

var _ Verifier = HMAC{}

// payloadPart is one piece of the signed_payload template.
type payloadPart struct {
	literal string
	field   string // "", "body", "timestamp" or "id"
}

var hmacOptions = map[string]bool{
	"header": true, "algorithm": true, "encoding": true, "prefix": true,
	"timestamp_header": true, "timestamp_format": true, "signed_payload": true,
	"id_header": true, "id_path": true, "type_header": true, "type_path": true,
	"delivery_id_header": true, "subject_path": true,
}

func newHMAC(opts map[string]string) (Verifier, error) {
	for k := range opts {
		if !hmacOptions[k] && !sharedOptions[k] {
			return nil, fmt.Errorf("%w: hmac takes no option %q", ErrOptions, k)
		}
	}
	optErr := func(name, format string, args ...any) error {
		return fmt.Errorf("%w: hmac option %q: %s", ErrOptions, name, fmt.Sprintf(format, args...))
	}
	var v HMAC
	var err error
	if v.header, err = headerOption(opts, "header", true); err != nil {
		return nil, err
	}
	switch alg := opts["algorithm"]; alg {
	case "", "sha256":
		v.newHash, v.macLen = sha256.New, sha256.Size
	case "sha512":
		v.newHash, v.macLen = sha512.New, sha512.Size
	default:
		return nil, optErr("algorithm", "%q is not sha256 or sha512", alg)
	}
	switch enc := opts["encoding"]; enc {
	case "", "hex":
	case "base64":
		v.base64 = true
	default:
		return nil, optErr("encoding", "%q is not hex or base64", enc)
	}
	v.prefix = opts["prefix"]
	if len(v.prefix) > 64 {
		return nil, optErr("prefix", "longer than 64 bytes")
	}
	if v.timestampHeader, err = headerOption(opts, "timestamp_header", false); err != nil {
		return nil, err
	}
	switch f := opts["timestamp_format"]; f {
	case "", "unix", "unix_ms", "rfc3339":
		v.timestampFormat = f
		if f == "" {
			v.timestampFormat = "unix"
		}
		if f != "" && v.timestampHeader == "" {
			return nil, optErr("timestamp_format", "set without a timestamp_header")
		}
	default:
		return nil, optErr("timestamp_format", "%q is not unix, unix_ms or rfc3339", f)
	}
	tmpl, set := opts["signed_payload"]
	if !set {
		tmpl = "{body}"
		if v.timestampHeader != "" {
			tmpl = "{timestamp}.{body}"
		}
	}
	if v.payload, err = parsePayloadTemplate(tmpl); err != nil {
		return nil, optErr("signed_payload", "%v", err)
	}
	signsTimestamp := false
	for _, p := range v.payload {
		signsTimestamp = signsTimestamp || p.field == "timestamp"
		v.signsID = v.signsID || p.field == "id"
	}
	if signsTimestamp && v.timestampHeader == "" {
		return nil, optErr("signed_payload", "uses {timestamp} but no timestamp_header is set")
	}
	if !signsTimestamp && v.timestampHeader != "" {
		// An unsigned timestamp proves nothing: anyone could refresh it on a
		// captured delivery, so the tolerance would only look like replay
		// protection.
		return nil, optErr("signed_payload", "does not sign {timestamp}, so timestamp_header %q would not be authenticated", v.timestampHeader)
	}
	if v.idHeader, err = headerOption(opts, "id_header", false); err != nil {
		return nil, err
	}
	if v.idPath, err = pathOption(opts, "id_path"); err != nil {
		return nil, err
	}
	if (v.idHeader == "") == (v.idPath == nil) {
		return nil, fmt.Errorf("%w: hmac options %q and %q: set exactly one (where the event id is)", ErrOptions, "id_header", "id_path")
	}
	if v.signsID && v.idHeader == "" {
		// An id read from the body is signed with the body already; {id}
		// names a header's value.
		return nil, optErr("signed_payload", "uses {id} but no id_header is set")
	}
	if v.typeHeader, err = headerOption(opts, "type_header", false); err != nil {
		return nil, err
	}
	if v.typePath, err = pathOption(opts, "type_path"); err != nil {
		return nil, err
	}
	if v.typeHeader != "" && v.typePath != nil {
		return nil, fmt.Errorf("%w: hmac options %q and %q: set at most one", ErrOptions, "type_header", "type_path")
	}
	if v.deliveryHeader, err = headerOption(opts, "delivery_id_header", false); err != nil {
		return nil, err
	}
	if v.subjectPath, err = pathOption(opts, "subject_path"); err != nil {
		return nil, err
	}
	return v, nil
}

var placeholderRE = regexp.MustCompile(`\{[A-Za-z_]+\}`)

func parsePayloadTemplate(tmpl string) ([]payloadPart, error) {
	if len(tmpl) > 256 {
		return nil, errors.New("longer than 256 bytes")
	}
	var parts []payloadPart
	seen := map[string]bool{}
	rest := tmpl
	for {
		loc := placeholderRE.FindStringIndex(rest)
		if loc == nil {
			break
		}
		name := rest[loc[0]+1 : loc[1]-1]
		if name != "body" && name != "timestamp" && name != "id" {
			return nil, fmt.Errorf("unknown placeholder {%s} (only {timestamp}, {id} and {body})", name)
		}
		if seen[name] {
			return nil, fmt.Errorf("{%s} appears more than once", name)
		}
		seen[name] = true
		if loc[0] > 0 {
			parts = append(parts, payloadPart{literal: rest[:loc[0]]})
		}
		parts = append(parts, payloadPart{field: name})
		rest = rest[loc[1]:]
	}
	if rest != "" {
		parts = append(parts, payloadPart{literal: rest})
	}
	if !seen["body"] {
		return nil, errors.New("lacks {body}")
	}
	return parts, nil
}

// Verify checks the MAC over the configured signed payload of the raw body,
// then the timestamp (when one is configured), then reads the identity.
func (v HMAC) Verify(_ context.Context, req Request, cfg Config) (Verified, error) {
	if v.header == "" {
		return Verified{}, fmt.Errorf("%w: hmac verifier has no header configured (build it with New)", ErrNotSigned)
	}
	header := req.Header(v.header)
	if header == "" {
		return Verified{}, fmt.Errorf("%w: no %s header", ErrNotSigned, v.header)
	}
	var tsRaw string
	if v.timestampHeader != "" {
		if tsRaw = req.Header(v.timestampHeader); tsRaw == "" {
			return Verified{}, fmt.Errorf("%w: no %s header", ErrNotSigned, v.timestampHeader)
		}
	}
	var idRaw string
	if v.signsID {
		if idRaw = req.Header(v.idHeader); idRaw == "" {
			return Verified{}, fmt.Errorf("%w: no %s header", ErrNotSigned, v.idHeader)
		}
	}
	if !hasSecret(cfg.Secrets) {
		return Verified{}, ErrNoSecrets
	}
	var ts time.Time
	if v.timestampHeader != "" {
		var err error
		if ts, err = v.parseTimestamp(tsRaw); err != nil {
			return Verified{}, err
		}
	}
	encoded, ok := strings.CutPrefix(header, v.prefix)
	if !ok {
		return Verified{}, fmt.Errorf("%w: %s lacks the prefix", ErrBadSignature, v.header)
	}
	var got []byte
	var err error
	if v.base64 {
		got, err = base64.StdEncoding.Strict().DecodeString(encoded)
	} else {
		got, err = hex.DecodeString(encoded)
	}
	if err != nil || len(got) != v.macLen {
		return Verified{}, fmt.Errorf("%w: %s is not one encoded MAC", ErrBadSignature, v.header)
	}
	parts := make([][]byte, len(v.payload))
	for i, p := range v.payload {
		switch p.field {
		case "body":
			parts[i] = req.Body
		case "timestamp":
			parts[i] = []byte(tsRaw)
		case "id":
			parts[i] = []byte(idRaw)
		default:
			parts[i] = []byte(p.literal)
		}
	}
	if !macMatches(cfg.Secrets, v.newHash, got, parts...) {
		return Verified{}, ErrBadSignature
	}
	if v.timestampHeader != "" && !withinTolerance(clock(cfg), ts, tolerance(cfg)) {
		return Verified{}, ErrStale
	}
	return v.identify(req), nil
}

func (v HMAC) parseTimestamp(raw string) (time.Time, error) {
	switch v.timestampFormat {
	case "unix_ms":
		n, err := parseDecimal(raw, 16)
		if err != nil {
			return time.Time{}, fmt.Errorf("%w: %s: %v", ErrBadSignature, v.timestampHeader, err)
		}
		return time.UnixMilli(n), nil
	case "rfc3339":
		// One value only: a gateway joins repeated headers with commas,
		// which time.Parse refuses.
		t, err := time.Parse(time.RFC3339, raw)
		if err != nil || len(raw) > 64 {
			return time.Time{}, fmt.Errorf("%w: %s is not one RFC 3339 time", ErrBadSignature, v.timestampHeader)
		}
		return t, nil
	default:
		return parseUnixSeconds(v.timestampHeader, raw)
	}
}

func (v HMAC) identify(req Request) Verified {
	// The body is parsed only if a path needs it, and at most once.
	var doc any
	done := false
	parsed := func() any {
		if !done {
			doc, _ = decodeJSON(req.Body)
			done = true
		}
		return doc
	}
	var id Identity
	var ok bool
	if v.idHeader != "" {
		id.EventID = req.Header(v.idHeader)
		ok = id.EventID != ""
	} else {
		id.EventID, ok = v.idPath.lookup(parsed())
	}
	if !ok {
		return Verified{Unidentified: "no event id"}
	}
	if !usableID(id.EventID) {
		return Verified{Unidentified: "event id is longer than 256 bytes or has control characters"}
	}
	switch {
	case v.typeHeader != "":
		id.Type = req.Header(v.typeHeader)
	case v.typePath != nil:
		id.Type, _ = v.typePath.lookup(parsed())
	}
	id.Type = typeOrUnknown(id.Type)
	if v.deliveryHeader != "" {
		id.DeliveryID = bound(req.Header(v.deliveryHeader))
	}
	if v.subjectPath != nil {
		s, _ := v.subjectPath.lookup(parsed())
		id.Subject = bound(s)
	}
	// An id from the body is signed with it; an id from a header only when
	// the signed payload has {id}. A signed timestamp does not sign the id:
	// within the tolerance a captured delivery can be re-sent under any id.
	id.UnsignedID = v.idHeader != "" && !v.signsID
	return Verified{Events: []Identity{id}}
}

// Helpers shared by the HMAC-family verifiers.

// maxIdentityLen bounds ids, types, subjects and version hints read from a
// delivery (the ledger's id limit).
const maxIdentityLen = 256

// hasSecret reports whether any secret is usable: an empty key would let
// anyone compute a valid MAC.
func hasSecret(secrets []string) bool {
	for _, s := range secrets {
		if s != "" {
			return true
		}
	}
	return false
}

// macMatches reports whether got is the HMAC of the concatenated parts
// under any non-empty secret, comparing in constant time.
func macMatches(secrets []string, newHash func() hash.Hash, got []byte, parts ...[]byte) bool {
	match := false
	for _, s := range secrets {
		if s == "" {
			continue
		}
		m := hmac.New(newHash, []byte(s))
		for _, p := range parts {
			m.Write(p)
		}
		// No early exit, so the time taken does not say which secret matched.
		if hmac.Equal(m.Sum(nil), got) {
			match = true
		}
	}
	return match
}

func tolerance(cfg Config) time.Duration {
	if cfg.Tolerance > 0 {
		return cfg.Tolerance
	}
	return DefaultTolerance
}

func clock(cfg Config) time.Time {
	if cfg.Now != nil {
		return cfg.Now()
	}
	return time.Now()
}

// parseDecimal parses a positive decimal of at most maxDigits digits with
// no sign, spaces or leading zero. It is strict so that the value checked
// against the tolerance is exactly the text that was signed, and so that a
// gateway's comma-joined repeat of the header ("t1,t2") is refused rather
// than half-read.
func parseDecimal(s string, maxDigits int) (int64, error) {
	if s == "" || len(s) > maxDigits || s[0] == '0' {
		return 0, errors.New("not a positive decimal number")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("not a positive decimal number")
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// parseUnixSeconds reads a signed Unix-seconds timestamp header.
func parseUnixSeconds(name, raw string) (time.Time, error) {
	n, err := parseDecimal(raw, 12)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %s: %v", ErrBadSignature, name, err)
	}
	return time.Unix(n, 0), nil
}

// usableID: an event id the ledger can key on (at most 256 bytes, no
// control characters). Longer ids are refused, never cut: two ids sharing
// a prefix would collapse into one event.
func usableID(s string) bool {
	if s == "" || len(s) > maxIdentityLen || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// bound cuts s to maxIdentityLen bytes on a rune boundary.
func bound(s string) string {
	if len(s) <= maxIdentityLen {
		return s
	}
	n := maxIdentityLen
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func typeOrUnknown(t string) string {
	if t == "" {
		return "unknown"
	}
	return bound(t)
}

// boundedAttributes drops empty values and cuts the rest to MaxAttributeLen.
func boundedAttributes(kv ...string) map[string]string {
	out := map[string]string{}
	for i := 0; i+1 < len(kv) && len(out) < MaxAttributes; i += 2 {
		v := kv[i+1]
		if v == "" {
			continue
		}
		if len(v) > MaxAttributeLen {
			n := MaxAttributeLen
			for n > 0 && !utf8.RuneStart(v[n]) {
				n--
			}
			v = v[:n]
		}
		out[kv[i]] = v
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

var headerNameRE = regexp.MustCompile(`^[a-z0-9!#$%&'*+.^_|~-]{1,128}$`)

// headerOption reads a header-name option, lower-cased as headers arrive.
func headerOption(opts map[string]string, name string, required bool) (string, error) {
	v, set := opts[name]
	if !set && !required {
		return "", nil
	}
	v = strings.ToLower(v)
	if !headerNameRE.MatchString(v) {
		if v == "" && required {
			return "", fmt.Errorf("%w: option %q is required (a header name)", ErrOptions, name)
		}
		return "", fmt.Errorf("%w: option %q: %q is not a header name", ErrOptions, name, v)
	}
	return v, nil
}

// jsonPath is a dot path into a JSON document: object keys, and decimal
// segments that index arrays ("events.0.id").
type jsonPath []string

func parseJSONPath(p string) (jsonPath, error) {
	if p == "" || len(p) > 256 {
		return nil, errors.New("must be a dot path of 1 to 256 bytes")
	}
	segs := strings.Split(p, ".")
	if len(segs) > 16 {
		return nil, errors.New("more than 16 segments")
	}
	for _, s := range segs {
		if s == "" {
			return nil, fmt.Errorf("%q has an empty segment", p)
		}
	}
	return segs, nil
}

// pathOption reads an optional JSON dot path option (nil when unset).
func pathOption(opts map[string]string, name string) (jsonPath, error) {
	v, set := opts[name]
	if !set {
		return nil, nil
	}
	p, err := parseJSONPath(v)
	if err != nil {
		return nil, fmt.Errorf("%w: option %q: %v", ErrOptions, name, err)
	}
	return p, nil
}

// lookup returns the string or number at the path, numbers as written.
func (p jsonPath) lookup(doc any) (string, bool) {
	cur := doc
	for _, seg := range p {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[seg]
			if !ok {
				return "", false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(c) {
				return "", false
			}
			cur = c[i]
		default:
			return "", false
		}
	}
	switch v := cur.(type) {
	case string:
		return v, true
	case json.Number:
		return v.String(), true
	}
	return "", false
}

// decodeJSON decodes one JSON value, keeping numbers as written.
func decodeJSON(body []byte) (any, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false // trailing data
	}
	return doc, true
}
