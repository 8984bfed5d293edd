package provider

// Not hand-written: the signature check is the Standard Webhooks reference
// library (github.com/standard-webhooks/standard-webhooks/libraries/go).
// What is ours: mapping the svix-* headers onto webhook-*, refusing a
// request whose two header families disagree, and checking the timestamp
// tolerance in both directions against the injected clock (the library's
// own check reads the wall clock).

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// StandardWebhooks verifies the Standard Webhooks scheme (standardwebhooks.com),
// which Svix and the senders built on it use: webhook-id, webhook-timestamp
// (Unix seconds) and webhook-signature ("v1,<base64>" entries separated by
// spaces, any of which may match), or the same three as svix-*. The MAC is
// HMAC-SHA256 of "id.timestamp.body" under the base64-decoded secret
// ("whsec_<base64>", or the base64 alone).
//
// Identity: EventID and DeliveryID are the webhook-id (the spec keeps it
// across retries of one message), ProviderTime the webhook-timestamp. Type,
// Subject and VersionHint come from the JSON body at the type_path (default
// "type"), subject_path (default "data.id") and version_path (default none)
// options, JSON dot paths as for the generic HMAC scheme. The zero value
// uses the defaults.
type StandardWebhooks struct {
	typePath    jsonPath // nil: "type"
	subjectPath jsonPath // nil: "data.id"
	versionPath jsonPath // nil: none
}

var _ Verifier = StandardWebhooks{}

var (
	swDefaultTypePath    = jsonPath{"type"}
	swDefaultSubjectPath = jsonPath{"data", "id"}
)

func newStandardWebhooks(opts map[string]string) (Verifier, error) {
	for k := range opts {
		switch k {
		case "type_path", "subject_path", "version_path":
		default:
			if !sharedOptions[k] {
				return nil, fmt.Errorf("%w: standard-webhooks takes no option %q", ErrOptions, k)
			}
		}
	}
	var v StandardWebhooks
	var err error
	if v.typePath, err = pathOption(opts, "type_path"); err != nil {
		return nil, err
	}
	if v.subjectPath, err = pathOption(opts, "subject_path"); err != nil {
		return nil, err
	}
	if v.versionPath, err = pathOption(opts, "version_path"); err != nil {
		return nil, err
	}
	return v, nil
}

// swHeaders are the three signed headers, each with its svix-* twin.
var swHeaders = [...]struct{ name, svix string }{
	{standardwebhooks.HeaderWebhookID, "svix-id"},
	{standardwebhooks.HeaderWebhookTimestamp, "svix-timestamp"},
	{standardwebhooks.HeaderWebhookSignature, "svix-signature"},
}

// Verify checks the signature with the reference library on the raw body,
// then the timestamp against cfg.Now, then reads the identity.
func (v StandardWebhooks) Verify(_ context.Context, req Request, cfg Config) (Verified, error) {
	var vals [len(swHeaders)]string
	for i, h := range swHeaders {
		a, b := req.Header(h.name), req.Header(h.svix)
		if a != "" && b != "" && a != b {
			// Two families that disagree: refuse rather than pick one, so a
			// captured id, timestamp or signature cannot be mixed with a
			// fresh one the other family carries.
			return Verified{}, fmt.Errorf("%w: %s and %s differ", ErrBadSignature, h.name, h.svix)
		}
		if a == "" {
			a = b
		}
		if a == "" {
			return Verified{}, fmt.Errorf("%w: no %s (or %s) header", ErrNotSigned, h.name, h.svix)
		}
		vals[i] = a
	}
	msgID, tsRaw, sigs := vals[0], vals[1], vals[2]
	// Any secret that is not base64 (after the whsec_ prefix) or decodes to
	// nothing cannot have signed anything; without one usable key the source
	// is misconfigured.
	var hooks []*standardwebhooks.Webhook
	for _, s := range cfg.Secrets {
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil || strings.TrimPrefix(s, "whsec_") == "" {
			continue
		}
		hooks = append(hooks, wh)
	}
	if len(hooks) == 0 {
		return Verified{}, ErrNoSecrets
	}
	// Parsed strictly here; the library re-reads the same value, and signs
	// its decimal form, which a strict parse makes equal to the text sent.
	ts, err := parseUnixSeconds(standardwebhooks.HeaderWebhookTimestamp, tsRaw)
	if err != nil {
		return Verified{}, err
	}
	h := http.Header{}
	h.Set(standardwebhooks.HeaderWebhookID, msgID)
	h.Set(standardwebhooks.HeaderWebhookTimestamp, tsRaw)
	h.Set(standardwebhooks.HeaderWebhookSignature, sigs)
	ok := false
	for _, wh := range hooks {
		if wh.VerifyIgnoringTimestamp(req.Body, h) == nil {
			ok = true
		}
	}
	if !ok {
		return Verified{}, ErrBadSignature
	}
	if !withinTolerance(clock(cfg), ts, tolerance(cfg)) {
		return Verified{}, ErrStale
	}
	if !usableID(msgID) {
		return Verified{Unidentified: "webhook-id is longer than 256 bytes or has control characters"}, nil
	}
	return Verified{Events: []Identity{v.identify(req.Body, msgID, ts)}}, nil
}

func (v StandardWebhooks) identify(body []byte, msgID string, ts time.Time) Identity {
	id := Identity{EventID: msgID, DeliveryID: msgID, ProviderTime: ts.UTC()}
	// A body that is not JSON keeps its signed id; only the hints are lost.
	doc, _ := decodeJSON(body)
	typePath, subjectPath := v.typePath, v.subjectPath
	if typePath == nil {
		typePath = swDefaultTypePath
	}
	if subjectPath == nil {
		subjectPath = swDefaultSubjectPath
	}
	t, _ := typePath.lookup(doc)
	id.Type = typeOrUnknown(t)
	s, _ := subjectPath.lookup(doc)
	id.Subject = bound(s)
	if v.versionPath != nil {
		s, _ := v.versionPath.lookup(doc)
		id.VersionHint = bound(s)
	}
	return id
}
