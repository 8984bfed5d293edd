package source

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/provider"
)

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("source config")

// Source is one configured webhook source.
type Source struct {
	Name             string            `json:"name"`
	Kind             string            `json:"kind"`
	Secrets          []string          `json:"secrets"`
	ToleranceSeconds int               `json:"tolerance_seconds,omitempty"`
	MaxBodyBytes     int               `json:"max_body_bytes,omitempty"`
	Options          map[string]string `json:"options,omitempty"`
	// Delivery is how the provider delivers: "https" (default, signed
	// webhooks), "eventbridge" (an Amazon EventBridge partner event
	// source) or "https+eventbridge"; see delivery.go.
	Delivery string `json:"delivery,omitempty"`
	// EventSource is the partner event source name
	// ("aws.partner/stripe.com/ed_…"), required when Delivery includes
	// eventbridge.
	EventSource string `json:"event_source,omitempty"`
	// Truth, when set, lets the reconciler ask the source for its current
	// facts (see package reconciler).
	Truth *Truth `json:"truth,omitempty"`
	// API is the provider API the processor's resolver for the source's
	// kind fetches objects from: for a stripe source, the Stripe API it
	// reads the object a thin event names from (see package stripeapi);
	// for a team's kind, whatever its resolver fetches
	// (projection.ResolverSource.API).
	API *API `json:"api,omitempty"`

	// Ownership of business state (I8, see docs/architecture.md; and
	// Scope). Domain names the business domain whose subjects this source
	// writes; empty means the source's own name, so no other source's
	// secret can touch them. Sources that name one domain write the same subjects; two of
	// the same kind may do so only if each sets SharedDomain (they can
	// then change each other's state: say so on purpose). Unscoped keeps
	// keys without a scope, for a stage whose ledger already holds such
	// keys (projections and operation ids shared by every unscoped source
	// of a kind).
	Domain       string `json:"domain,omitempty"`
	SharedDomain bool   `json:"shared_domain,omitempty"`
	Unscoped     bool   `json:"unscoped,omitempty"`

	// RetryHorizonHours is how long after a first delivery the provider
	// may still retry it when not answered 2xx (see RetryHorizon).
	RetryHorizonHours int `json:"retry_horizon_hours,omitempty"`
}

// DefaultRetryHorizon is RetryHorizon's default: Stripe retries a
// delivery for up to three days.
const DefaultRetryHorizon = 72 * time.Hour

// MaxRetryHorizonHours bounds retry_horizon_hours (30 days).
const MaxRetryHorizonHours = 720

// RetryHorizon is how long the processor waits for a payload that was
// never stored (the intake died between the event's row and its payload,
// and answered 5xx): the provider's retry of the delivery stores it. Past
// it the event is quarantined (payload_never_arrived). Default
// DefaultRetryHorizon.
func (s Source) RetryHorizon() time.Duration {
	if s.RetryHorizonHours <= 0 {
		return DefaultRetryHorizon
	}
	return time.Duration(s.RetryHorizonHours) * time.Hour
}

// Scope is the owner of the business state this source writes: its
// domain, else its name; "" for an unscoped source. The processor puts it
// in the projection's name ("<scope>/<projection>") and in every
// operation id, so sources with different scopes never write the same
// projection item or intent.
func (s Source) Scope() string {
	switch {
	case s.Unscoped:
		return ""
	case s.Domain != "":
		return s.Domain
	}
	return s.Name
}

// API configures the provider API a processor fetches objects from. Any
// kind may configure one; the processor refuses to start when the kind
// has no resolver to use it.
//
//	{"secret":"arn:…"}                                   api.stripe.com, a restricted key
//	{"secret":"env:KEY","url":"http://127.0.0.1:3003"}   a local fake
type API struct {
	// Secret is a reference to the API key: for Stripe a restricted key
	// with read access to subscriptions, invoices and payment intents.
	Secret string `json:"secret"`
	// URL is another API base (tests, a local fake); https, or http to a
	// loopback address. Empty means the provider's own API.
	URL string `json:"url,omitempty"`
	// TimeoutSeconds bounds each request; default 5, at most 20 (the
	// processor's function timeout is 30 s).
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
}

// Timeout returns the per-request timeout.
func (a API) Timeout() time.Duration {
	if a.TimeoutSeconds <= 0 {
		return 5 * time.Second
	}
	return time.Duration(a.TimeoutSeconds) * time.Second
}

func checkAPI(a *API) error {
	if err := CheckSecretRef(a.Secret); err != nil {
		return fmt.Errorf("api: secret: %w", err)
	}
	if a.URL != "" {
		if err := CheckEndpointURL(a.URL); err != nil {
			return fmt.Errorf("api: url: %w", err)
		}
	}
	if a.TimeoutSeconds < 0 || a.TimeoutSeconds > 20 {
		return errors.New("api: timeout_seconds must be between 0 and 20")
	}
	return nil
}

// Truth configures a source of truth.
//
//	{"kind":"stripe","secret":"arn:…"}                     the Stripe API (events not yet delivered)
//	{"kind":"http","url":"https://orders.example/changes"} a generic endpoint (see package reconciler)
type Truth struct {
	Kind string `json:"kind"`
	// URL is the endpoint (http), or another API base for Stripe (tests,
	// stripe-mock); https, or http to a loopback address.
	URL string `json:"url,omitempty"`
	// Secret is a reference to the API key (stripe: a restricted key that
	// can read events) or the bearer token (http).
	Secret string `json:"secret,omitempty"`
	// LookbackMinutes is how far back each run asks; default 4320 (3 days,
	// Stripe's retry window) for stripe and 60 for http.
	LookbackMinutes int `json:"lookback_minutes,omitempty"`
}

// Lookback returns the window each reconciler run examines.
func (t Truth) Lookback() time.Duration {
	switch {
	case t.LookbackMinutes > 0:
		return time.Duration(t.LookbackMinutes) * time.Minute
	case t.Kind == "stripe":
		return 72 * time.Hour
	}
	return time.Hour
}

func checkTruth(t *Truth) error {
	switch t.Kind {
	case "stripe":
		if t.Secret == "" {
			return errors.New("truth: a stripe source of truth needs secret (an API key reference)")
		}
	case "http":
		if t.URL == "" {
			return errors.New("truth: an http source of truth needs url")
		}
	default:
		return fmt.Errorf("truth: kind %q is not stripe or http", t.Kind)
	}
	if t.URL != "" {
		if err := CheckEndpointURL(t.URL); err != nil {
			return fmt.Errorf("truth: url: %w", err)
		}
	}
	if t.Secret != "" {
		if err := CheckSecretRef(t.Secret); err != nil {
			return fmt.Errorf("truth: secret: %w", err)
		}
	}
	if t.LookbackMinutes < 0 || t.LookbackMinutes > 30*24*60 {
		return errors.New("truth: lookback_minutes must be between 0 and 43200 (30 days)")
	}
	return nil
}

// CheckEndpointURL wants an absolute https URL without credentials, or
// plain http to a loopback address (a local stack's fake).
func CheckEndpointURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%q is not an absolute URL", raw)
	}
	if u.User != nil {
		return errors.New("credentials in the URL; use a secret reference")
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if ip := net.ParseIP(u.Hostname()); (ip != nil && ip.IsLoopback()) || u.Hostname() == "localhost" {
			return nil
		}
		return errors.New("plain http is allowed only to a loopback address")
	}
	return fmt.Errorf("scheme %q: want https", u.Scheme)
}

// Connect returns which connected accounts' events the source accepts
// (its option connect_accounts, validated by Parse; see
// provider.ConnectPolicy): none unless it says so, and none for a kind
// other than stripe.
func (s Source) Connect() provider.ConnectPolicy {
	if s.Kind != "stripe" {
		return provider.ConnectPolicy{}
	}
	p, _ := provider.ParseConnectPolicy(s.Options)
	return p
}

// Tolerance returns the configured signed-timestamp tolerance; 0 means
// the provider scheme's own default.
func (s Source) Tolerance() time.Duration {
	return time.Duration(s.ToleranceSeconds) * time.Second
}

// BodyLimit returns the body cap in bytes.
func (s Source) BodyLimit() int {
	if s.MaxBodyBytes <= 0 {
		return ledger.MaxPayloadBytes
	}
	return s.MaxBodyBytes
}

// Set is a validated configuration.
type Set struct {
	byName        map[string]Source
	byEventSource map[string]Source
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Parse validates a configuration document.
func Parse(doc []byte) (*Set, error) {
	var raw struct {
		Sources []Source `json:"sources"`
	}
	dec := json.NewDecoder(strings.NewReader(string(doc)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: not valid JSON of the documented shape: %v", ErrConfig, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the JSON document", ErrConfig)
	}
	if len(raw.Sources) == 0 {
		return nil, fmt.Errorf("%w: no sources configured", ErrConfig)
	}
	set := &Set{byName: map[string]Source{}, byEventSource: map[string]Source{}}
	for i, s := range raw.Sources {
		where := fmt.Sprintf("sources[%d] (%q)", i, s.Name)
		if !nameRE.MatchString(s.Name) {
			return nil, fmt.Errorf("%w: %s: name must match %s", ErrConfig, where, nameRE)
		}
		if _, dup := set.byName[s.Name]; dup {
			return nil, fmt.Errorf("%w: %s: duplicate name", ErrConfig, where)
		}
		if !slices.Contains(provider.Kinds(), s.Kind) {
			return nil, fmt.Errorf("%w: %s: kind %q is not one of %v", ErrConfig, where, s.Kind, provider.Kinds())
		}
		if err := checkDelivery(s); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrConfig, where, err)
		}
		if other, dup := set.byEventSource[s.EventSource]; dup && s.EventBridge() {
			return nil, fmt.Errorf("%w: %s: event_source %q is already source %q's", ErrConfig, where, s.EventSource, other.Name)
		}
		if len(s.Secrets) == 0 && provider.RequiresSecrets(s.Kind) && s.HTTPS() {
			return nil, fmt.Errorf("%w: %s: at least one secret reference is required (delivery %q includes https)", ErrConfig, where, s.delivery())
		}
		if _, err := provider.New(s.Kind, s.Options); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrConfig, where, err)
		}
		for j, ref := range s.Secrets {
			if err := CheckSecretRef(ref); err != nil {
				return nil, fmt.Errorf("%w: %s: secrets[%d]: %v", ErrConfig, where, j, err)
			}
		}
		if s.ToleranceSeconds < 0 || s.ToleranceSeconds > 3600 {
			return nil, fmt.Errorf("%w: %s: tolerance_seconds must be between 0 and 3600", ErrConfig, where)
		}
		if s.RetryHorizonHours < 0 || s.RetryHorizonHours > MaxRetryHorizonHours {
			return nil, fmt.Errorf("%w: %s: retry_horizon_hours must be between 0 (the default, %d) and %d", ErrConfig, where, int(DefaultRetryHorizon.Hours()), MaxRetryHorizonHours)
		}
		if s.MaxBodyBytes < 0 || s.MaxBodyBytes > ledger.MaxPayloadBytes {
			return nil, fmt.Errorf("%w: %s: max_body_bytes must be between 0 and %d", ErrConfig, where, ledger.MaxPayloadBytes)
		}
		if s.Truth != nil {
			if err := checkTruth(s.Truth); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrConfig, where, err)
			}
		}
		if s.API != nil {
			if err := checkAPI(s.API); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrConfig, where, err)
			}
		}
		if s.Domain != "" && !nameRE.MatchString(s.Domain) {
			return nil, fmt.Errorf("%w: %s: domain must match %s", ErrConfig, where, nameRE)
		}
		if s.Unscoped && s.Domain != "" {
			return nil, fmt.Errorf("%w: %s: a source is either unscoped (the keys before ownership existed) or in a domain, not both", ErrConfig, where)
		}
		set.byName[s.Name] = s
		if s.EventBridge() {
			set.byEventSource[s.EventSource] = s
		}
	}
	if err := checkOwnership(raw.Sources); err != nil {
		return nil, err
	}
	return set, nil
}

// checkOwnership refuses two sources of one kind writing the same
// subjects (one domain, or both unscoped) unless each says so with
// shared_domain: otherwise the lower-value secret of the two could change
// the other's state. A domain used by a single source, or by sources of
// different kinds, needs nothing.
func checkOwnership(sources []Source) error {
	type key struct{ kind, scope string }
	by := map[key][]Source{}
	for _, s := range sources {
		k := key{s.Kind, s.Scope()}
		by[k] = append(by[k], s)
	}
	keys := make([]key, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int { return strings.Compare(a.kind+"/"+a.scope, b.kind+"/"+b.scope) })
	for _, k := range keys {
		group := by[k]
		if len(group) < 2 {
			continue
		}
		var names, unmarked []string
		for _, s := range group {
			names = append(names, s.Name)
			if !s.SharedDomain {
				unmarked = append(unmarked, s.Name)
			}
		}
		if len(unmarked) == 0 {
			continue
		}
		where := fmt.Sprintf("domain %q", k.scope)
		if k.scope == "" {
			where = "the unscoped keys"
		}
		return fmt.Errorf("%w: sources %s (all kind %s) write the same subjects (%s): each one's secret can change the others' business state; "+
			"if that is intended set \"shared_domain\": true on each (missing on %s), otherwise give them different domains or none",
			ErrConfig, strings.Join(names, ", "), k.kind, where, strings.Join(unmarked, ", "))
	}
	return nil
}

// Load reads the configuration from SOURCES or the file named by SOURCES_FILE.
func Load(getenv func(string) string) (*Set, error) {
	if doc := getenv("SOURCES"); doc != "" {
		return Parse([]byte(doc))
	}
	if path := getenv("SOURCES_FILE"); path != "" {
		doc, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%w: read SOURCES_FILE: %v", ErrConfig, err)
		}
		return Parse(doc)
	}
	return nil, fmt.Errorf("%w: set SOURCES (JSON) or SOURCES_FILE", ErrConfig)
}

// Lookup finds a source by name.
func (s *Set) Lookup(name string) (Source, bool) {
	src, ok := s.byName[name]
	return src, ok
}

// Names lists the configured sources.
func (s *Set) Names() []string {
	out := make([]string, 0, len(s.byName))
	for n := range s.byName {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// CheckSecretRef accepts a secret reference (a Secrets Manager ARN,
// "sm:<name>" or "env:<VAR>") and refuses anything else, so a secret value
// pasted into configuration is caught at cold start.
func CheckSecretRef(ref string) error {
	switch {
	case strings.HasPrefix(ref, "arn:aws:secretsmanager:"), strings.HasPrefix(ref, "arn:aws-cn:secretsmanager:"), strings.HasPrefix(ref, "arn:aws-us-gov:secretsmanager:"):
		return nil
	case strings.HasPrefix(ref, "sm:") && len(ref) > 3:
		return nil
	case strings.HasPrefix(ref, "env:") && len(ref) > 4:
		return nil
	}
	return errors.New(`secret reference must be a Secrets Manager ARN, "sm:<name>" or "env:<VAR>" (never the secret itself)`)
}
