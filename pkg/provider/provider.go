package provider

import (
	"context"
	"errors"
	"time"
)

// Errors. Each of the first three means 401 and nothing stored (I4).
var (
	ErrNotSigned    = errors.New("provider: request is not signed")
	ErrBadSignature = errors.New("provider: no valid signature")
	ErrStale        = errors.New("provider: signed timestamp outside tolerance")
	ErrNoSecrets    = errors.New("provider: no active secret configured")
	ErrUnknownKind  = errors.New("provider: unknown provider kind")
)

// Request is a delivery as received: lower-cased header names and the raw
// body bytes exactly as sent.
type Request struct {
	Headers map[string]string
	Body    []byte
}

// Header returns a header by lower-case name.
func (r Request) Header(name string) string { return r.Headers[name] }

// Identity names one provider fact inside a delivery (DESIGN.md §3).
type Identity struct {
	EventID      string
	DeliveryID   string
	Type         string
	Subject      string    // provider subject hint, e.g. the object id
	ProviderTime time.Time // the provider's own event time, when it sends one
	// Payload is this event's own bytes when a delivery carries several;
	// nil means the whole delivery body.
	Payload []byte
}

// Verified is the result of a successful verification.
type Verified struct {
	Events []Identity
	// Unidentified is set, with a reason, when the signature is valid but
	// the body carries no usable identity.
	Unidentified string
}

// Config is what a verifier needs from its source.
type Config struct {
	Secrets   []string      // every active secret; any may match
	Tolerance time.Duration // signed-timestamp tolerance; 0 means the scheme default
	Now       func() time.Time
}

// Verifier verifies one provider scheme.
type Verifier interface {
	Verify(ctx context.Context, req Request, cfg Config) (Verified, error)
}

// DefaultTolerance is the signed-timestamp tolerance when a source sets none.
const DefaultTolerance = 300 * time.Second

// For returns the verifier of a provider kind.
func For(kind string) (Verifier, error) {
	switch kind {
	case "stripe":
		return Stripe{}, nil
	}
	return nil, ErrUnknownKind
}

// Kinds lists the provider kinds this build verifies.
func Kinds() []string { return []string{"stripe"} }

func withinTolerance(now, signed time.Time, tol time.Duration) bool {
	d := now.Sub(signed)
	if d < 0 {
		d = -d
	}
	return d <= tol
}
