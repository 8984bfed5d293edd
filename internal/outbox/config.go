package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"time"

	"github.com/effectively-once/webhooks/internal/source"
)

// ErrConfig wraps every effect configuration error.
var ErrConfig = errors.New("effects config")

// EffectConfig configures one built-in HTTP effect. The document is
//
//	{"effects":[{"kind":"refund","url":"https://payments.example/refunds",
//	  "status_url":"https://payments.example/refunds/status",
//	  "secret":"arn:aws:secretsmanager:…","timeout_seconds":10,
//	  "idempotency_window_hours":24,"scopes":["orders"]}]}
//
// The secret is a reference (Secrets Manager ARN, "sm:<name>", or "env:<VAR>"
// on a local stack), never the token itself.
//
// Scopes is required: the scopes whose facts may trigger the effect (a
// source's scope is its domain, else its name). Every source of a kind
// emits the same intent kinds, so a second source of the operator's kind
// (a vendor's Standard Webhooks sender, a Stripe test-mode account) would
// otherwise reach this endpoint with the operator's token. ["*"] opts in to
// every scope, and is the only way to let through intents that have no
// scope (an unscoped source's, or ones written before ownership existed).
// An intent whose scope is not allowed is never sent: it is QUARANTINED
// with code scope_not_allowed.
type EffectConfig struct {
	Kind                   string   `json:"kind"`
	URL                    string   `json:"url"`
	StatusURL              string   `json:"status_url,omitempty"`
	Secret                 string   `json:"secret,omitempty"`
	TimeoutSeconds         int      `json:"timeout_seconds,omitempty"`          // default 10; at most 20, under the dispatcher's timeout
	IdempotencyWindowHours int      `json:"idempotency_window_hours,omitempty"` // how long the downstream remembers a key; default 24
	Scopes                 []string `json:"scopes"`
}

// AllScopes, alone in an effect's scopes, lets every scope use it.
const AllScopes = "*"

// scopeRE is the rule of a scope: a source's name or domain (package
// source's names).
var scopeRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// CheckScopes validates an effect's scopes: at least one; either "*"
// alone or scope names, each once.
func CheckScopes(scopes []string) error {
	if len(scopes) == 0 {
		return errors.New(`scopes is required: list the scopes whose facts may trigger this effect (a source's domain, else its name), or ["*"] for every scope`)
	}
	seen := map[string]bool{}
	for _, sc := range scopes {
		switch {
		case sc == AllScopes && len(scopes) > 1:
			return errors.New(`scopes: "*" allows every scope and must be alone`)
		case sc == AllScopes:
		case !scopeRE.MatchString(sc):
			return fmt.Errorf("scopes: %q is not a scope (a source's name or domain, matching %s)", sc, scopeRE)
		case seen[sc]:
			return fmt.Errorf("scopes: %q appears twice", sc)
		}
		seen[sc] = true
	}
	return nil
}

// Timeout is the per-call HTTP timeout.
func (c EffectConfig) Timeout() time.Duration {
	if c.TimeoutSeconds == 0 {
		return 10 * time.Second
	}
	return time.Duration(c.TimeoutSeconds) * time.Second
}

// Window is the downstream's idempotency window.
func (c EffectConfig) Window() time.Duration {
	if c.IdempotencyWindowHours == 0 {
		return 24 * time.Hour
	}
	return time.Duration(c.IdempotencyWindowHours) * time.Hour
}

// MaxEffectTimeout keeps an effect's call inside the dispatcher Lambda's
// timeout with room for the ledger writes around it.
const MaxEffectTimeout = 20 * time.Second

var kindRE = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)

// ParseEffects reads and validates an effects document.
func ParseEffects(doc []byte) ([]EffectConfig, error) {
	var d struct {
		Effects []EffectConfig `json:"effects"`
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if len(d.Effects) == 0 {
		return nil, fmt.Errorf("%w: no effects configured", ErrConfig)
	}
	seen := map[string]bool{}
	for i, c := range d.Effects {
		where := fmt.Sprintf("effect %d (%q)", i, c.Kind)
		if !kindRE.MatchString(c.Kind) {
			return nil, fmt.Errorf("%w: %s: kind must match %s", ErrConfig, where, kindRE)
		}
		if seen[c.Kind] {
			return nil, fmt.Errorf("%w: %s: kind configured twice", ErrConfig, where)
		}
		seen[c.Kind] = true
		if err := source.CheckEndpointURL(c.URL); err != nil {
			return nil, fmt.Errorf("%w: %s: url: %v", ErrConfig, where, err)
		}
		if c.StatusURL != "" {
			if err := source.CheckEndpointURL(c.StatusURL); err != nil {
				return nil, fmt.Errorf("%w: %s: status_url: %v", ErrConfig, where, err)
			}
		}
		if c.Secret != "" {
			if err := source.CheckSecretRef(c.Secret); err != nil {
				return nil, fmt.Errorf("%w: %s: secret: %v", ErrConfig, where, err)
			}
		}
		if c.TimeoutSeconds < 0 || c.Timeout() > MaxEffectTimeout {
			return nil, fmt.Errorf("%w: %s: timeout_seconds must be between 1 and %d", ErrConfig, where, int(MaxEffectTimeout.Seconds()))
		}
		if c.IdempotencyWindowHours < 0 || c.IdempotencyWindowHours > 24*365 {
			return nil, fmt.Errorf("%w: %s: idempotency_window_hours must be between 1 and 8760", ErrConfig, where)
		}
		if err := CheckScopes(c.Scopes); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrConfig, where, err)
		}
	}
	return d.Effects, nil
}

// LoadEffects reads EFFECTS (JSON) or the file named by EFFECTS_FILE.
func LoadEffects(getenv func(string) string) ([]EffectConfig, error) {
	if doc := getenv("EFFECTS"); doc != "" {
		return ParseEffects([]byte(doc))
	}
	if path := getenv("EFFECTS_FILE"); path != "" {
		doc, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%w: read EFFECTS_FILE: %v", ErrConfig, err)
		}
		return ParseEffects(doc)
	}
	return nil, fmt.Errorf("%w: set EFFECTS (JSON) or EFFECTS_FILE", ErrConfig)
}

// Build turns configurations into effects. Bearer tokens are read through
// secrets (cached, so a rotation is picked up within its TTL).
func Build(cfgs []EffectConfig, secrets *source.Secrets) map[string]Effect {
	out := make(map[string]Effect, len(cfgs))
	for _, c := range cfgs {
		e := &HTTPEffect{Name: c.Kind, URL: c.URL, StatusURL: c.StatusURL, Window: c.Window(),
			Scopes: c.Scopes, Client: &http.Client{Timeout: c.Timeout()}}
		if ref := c.Secret; ref != "" {
			e.Token = func(ctx context.Context) (string, error) { return secrets.Value(ctx, ref) }
		}
		out[c.Kind] = e
	}
	return out
}
