package provider

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"sync"
	"time"
)

// Errors. Each of the first three means 401 and nothing stored (I4; see
// docs/architecture.md).
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

// Identity names one provider fact inside a delivery (see docs/providers.md).
//
// EventID is a key: a verifier makes a delivery Unidentified when it is
// empty, too long or holds a control character. The other text fields are
// only cut to length here; many come from headers no signature covers, and
// the ledger stores them with their control and bidirectional characters
// escaped (ledger.Printable), whichever verifier or path produced them.
type Identity struct {
	EventID      string
	DeliveryID   string
	Type         string
	Subject      string    // provider subject hint, e.g. the object id
	ProviderTime time.Time // the provider's own event time, when it sends one
	VersionHint  string    // the source's revision of the subject, when the delivery says (e.g. Shopify updated_at)
	// Attributes are other facts worth keeping with the event (e.g. Shopify's
	// webhook id, topic and shop domain). Bounded: at most MaxAttributes
	// entries of MaxAttributeLen bytes each are stored.
	Attributes map[string]string
	// Payload is this event's own bytes when a delivery carries several;
	// nil means the whole delivery body.
	Payload []byte
	// ConnectAccounts are the accounts other than the source's own that
	// the event belongs to: for Stripe, the connected account of a Connect
	// event (its account, and each account of its context). Empty for the
	// source's own events. The intake accepts an event that names any
	// only when the source's ConnectPolicy accepts each.
	ConnectAccounts []string
	// UnsignedID: the signature does not cover the event id, so a captured
	// delivery can be re-sent under a made-up id (the next one, say, before
	// the sender uses it). Set for GitHub's X-GitHub-Delivery, Shopify's
	// X-Shopify-Event-Id over HTTPS, and an hmac source's id_header unless
	// its signed_payload has {id}. A signed timestamp does not change it:
	// the timestamp bounds how long a captured delivery verifies, not the
	// id it is sent under. The id is signed, and this is false, when it is
	// inside the signed body (Stripe, Quiltt, an hmac id_path, SNS's
	// MessageId) or in the signed string beside the body (Standard
	// Webhooks' webhook-id, an hmac {id}).
	//
	// The intake treats a known body under a new unsigned id as a suspected
	// replay: kept quarantined, with no business work, and displaced by the
	// genuine event when that arrives under the same id with bytes of its
	// own (see ledger.Accept).
	UnsignedID bool
}

// Bounds on Identity.Attributes.
const (
	MaxAttributes   = 16
	MaxAttributeLen = 256
)

// Verified is the result of a successful verification.
type Verified struct {
	Events []Identity
	// Unidentified is set, with a reason, when the signature is valid but
	// the body carries no usable identity.
	Unidentified string
	// Confirm, when set, must run after the delivery is recorded in the
	// ledger (SNS SubscriptionConfirmation: GET the host-checked SubscribeURL).
	// If it fails, intake answers 5xx so the sender retries.
	Confirm func(ctx context.Context) error
}

// Config is what a verifier needs from its source for one request.
type Config struct {
	Secrets   []string      // every active secret; any may match (may be empty for SNS, which uses certificates)
	Tolerance time.Duration // signed-timestamp tolerance; 0 means the scheme's default
	Now       func() time.Time
}

// Verifier verifies one provider scheme.
type Verifier interface {
	Verify(ctx context.Context, req Request, cfg Config) (Verified, error)
}

// DefaultTolerance is the signed-timestamp tolerance when a source sets none.
const DefaultTolerance = 300 * time.Second

// ErrOptions: a source's options do not fit its provider kind.
var ErrOptions = errors.New("provider: invalid source options")

// Constructor builds a kind's verifier from a source's options, validating
// them once, at cold start (and at synth, where the stack checks SOURCES).
type Constructor func(opts map[string]string) (Verifier, error)

// ErrKindTaken: Register was asked for a kind that already has a verifier.
var ErrKindTaken = errors.New("provider: kind already registered")

var kindRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// Register adds a provider kind a team verifies itself (a sender we do not
// ship a scheme for). The kind is then valid in SOURCES like a built-in
// one. A built-in kind cannot be replaced, and a kind registered twice
// with another constructor is refused; registering the same constructor
// again (a second cold start in one process, a test) is a no-op only if it
// is the same function value, so call Register from one place (app.Rules).
// Register is safe for concurrent use.
func Register(kind string, c Constructor) error {
	if !kindRE.MatchString(kind) {
		return fmt.Errorf("%w %q: a kind matches %s", ErrOptions, kind, kindRE)
	}
	if c == nil {
		return fmt.Errorf("%w %q: nil constructor", ErrOptions, kind)
	}
	registry.Lock()
	defer registry.Unlock()
	if _, builtin := builtinKinds[kind]; builtin {
		return fmt.Errorf("%w: %q is built in", ErrKindTaken, kind)
	}
	if old, ok := constructors[kind]; ok && reflect.ValueOf(old).Pointer() != reflect.ValueOf(c).Pointer() {
		return fmt.Errorf("%w: %q", ErrKindTaken, kind)
	}
	constructors[kind] = c
	return nil
}

var registry sync.RWMutex

// builtinKinds are the kinds this package ships; Register cannot replace them.
var builtinKinds = func() map[string]bool {
	m := map[string]bool{}
	for k := range constructors {
		m[k] = true
	}
	return m
}()

// constructors builds a verifier from a source's options. Each kind
// validates its options here, once, at cold start.
var constructors = map[string]Constructor{
	"stripe":            newStripe,
	"standard-webhooks": newStandardWebhooks,
	"shopify":           newShopify,
	"github":            newGitHub,
	"quiltt":            newQuiltt,
	"hmac":              newHMAC,
	"sns":               newSNS,
}

// New returns the verifier for a provider kind, configured by the source's
// options. Errors wrap ErrUnknownKind or ErrOptions and say what is wrong.
func New(kind string, opts map[string]string) (Verifier, error) {
	registry.RLock()
	c, ok := constructors[kind]
	registry.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %v)", ErrUnknownKind, kind, Kinds())
	}
	return c(opts)
}

// For returns the verifier of a provider kind with no options.
func For(kind string) (Verifier, error) { return New(kind, nil) }

// Kinds lists the provider kinds this build verifies.
func Kinds() []string {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]string, 0, len(constructors))
	for k := range constructors {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// RequiresSecrets reports whether sources of this kind need secrets (SNS
// verifies certificates instead).
func RequiresSecrets(kind string) bool { return kind != "sns" }

// noOptions refuses options for a scheme that has none worth setting
// (except those every source may carry for its projections).
func noOptions(kind string, opts map[string]string) error {
	for k := range opts {
		if !sharedOptions[k] {
			return fmt.Errorf("%w: %s takes no option %q", ErrOptions, kind, k)
		}
	}
	return nil
}

// sharedOptions are source options read outside the verifier.
var sharedOptions = map[string]bool{"account_metadata_key": true}

func withinTolerance(now, signed time.Time, tol time.Duration) bool {
	d := now.Sub(signed)
	if d < 0 {
		d = -d
	}
	return d <= tol
}
