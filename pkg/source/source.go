package source

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/pkg/ledger"
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
	byName map[string]Source
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
	set := &Set{byName: map[string]Source{}}
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
		if len(s.Secrets) == 0 && provider.RequiresSecrets(s.Kind) {
			return nil, fmt.Errorf("%w: %s: at least one secret reference is required", ErrConfig, where)
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
		if s.MaxBodyBytes < 0 || s.MaxBodyBytes > ledger.MaxPayloadBytes {
			return nil, fmt.Errorf("%w: %s: max_body_bytes must be between 0 and %d", ErrConfig, where, ledger.MaxPayloadBytes)
		}
		set.byName[s.Name] = s
	}
	return set, nil
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
