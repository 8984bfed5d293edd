package webhookstest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/source"
	"github.com/effectively-once/webhooks/pkg/provider"
)

// config is a Pipeline's documents as the kit runs them: the sources with
// the kit's secrets, and the effects, validated as the functions validate
// them at cold start.
type config struct {
	sourcesDoc string            // the SOURCES document the harness runs
	secrets    map[string]string // env: reference name -> value
	sources    *source.Set
	secretOf   map[string]string // source name -> its signing secret
	effects    []outbox.EffectConfig
}

// Signing secrets of the kit's sources, per kind. They are visibly fake
// and exist only in tests.
var (
	stripeSecret   = "whsec_test_FAKE_webhookstest_0000000000000"
	standardSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("test_FAKE_webhookstest_key_00001"))
)

// secretFor is the kit's signing secret for a source kind, or an error
// for a kind the kit cannot sign.
func secretFor(kind string) (string, error) {
	switch kind {
	case "stripe":
		return stripeSecret, nil
	case "standard-webhooks":
		return standardSecret, nil
	}
	return "", fmt.Errorf("the kit signs stripe and standard-webhooks deliveries, not %s", kind)
}

// parseConfig reads the Pipeline's documents. Providers of the team's
// rules are registered first, so a source of such a kind parses (and is
// refused only if an event of it must be signed).
func parseConfig(p Pipeline) (config, error) {
	for kind, c := range p.Rules.Providers {
		if err := provider.Register(kind, c); err != nil {
			return config{}, fmt.Errorf("the provider kinds of the rules: %w", err)
		}
	}
	c := config{secrets: map[string]string{}, secretOf: map[string]string{}}
	if strings.TrimSpace(p.Sources) == "" {
		return c, errors.New("the SOURCES document (Pipeline.Sources) is required")
	}
	var doc struct {
		Sources []map[string]any `json:"sources"`
	}
	if err := decodeStrict(p.Sources, &doc); err != nil {
		return c, fmt.Errorf("the SOURCES document: %w", err)
	}
	for i, s := range doc.Sources {
		name, _ := s["name"].(string)
		kind, _ := s["kind"].(string)
		// Every source is an HTTPS source the kit signs: its own secret
		// references and EventBridge or API settings play no part.
		ref := fmt.Sprintf("WEBHOOKSTEST_SECRET_%d", i)
		s["secrets"] = []string{"env:" + ref}
		for _, k := range []string{"delivery", "event_source", "api", "truth"} {
			delete(s, k)
		}
		if secret, err := secretFor(kind); err == nil {
			c.secrets[ref] = secret
			c.secretOf[name] = secret
		} else {
			// Parse needs a value; events of this source are refused.
			c.secrets[ref] = "unsigned"
		}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return c, fmt.Errorf("the SOURCES document: %w", err)
	}
	c.sourcesDoc = string(b)
	if c.sources, err = source.Parse(b); err != nil {
		return c, fmt.Errorf("the SOURCES document: %w", err)
	}
	if strings.TrimSpace(p.Effects) == "" {
		// No effect: every intent is quarantined (no_effect), which the
		// checks report by kind.
		return c, nil
	}
	var eff struct {
		Effects []map[string]any `json:"effects"`
	}
	if err := decodeStrict(p.Effects, &eff); err != nil {
		return c, fmt.Errorf("the EFFECTS document: %w", err)
	}
	for _, e := range eff.Effects {
		// The fake downstream takes every call, an AWS target's too; a
		// placeholder passes the document's URL check.
		e["url"] = "https://downstream.invalid/effect"
		for _, k := range []string{"target", "status_url", "secret"} {
			delete(e, k)
		}
	}
	if b, err = json.Marshal(eff); err != nil {
		return c, fmt.Errorf("the EFFECTS document: %w", err)
	}
	if c.effects, err = outbox.ParseEffects(b); err != nil {
		return c, fmt.Errorf("the EFFECTS document: %w", err)
	}
	return c, nil
}

// decodeStrict decodes one JSON document whose top level is v's shape.
func decodeStrict(doc string, v any) error {
	dec := json.NewDecoder(bytes.NewReader([]byte(doc)))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON document")
	}
	return nil
}

// effect is the effect configured for kind, if any.
func (c config) effect(kind string) (outbox.EffectConfig, bool) {
	for _, e := range c.effects {
		if e.Kind == kind {
			return e, true
		}
	}
	return outbox.EffectConfig{}, false
}

// serves reports whether effect e may be used by scope, as the
// dispatcher decides it.
func serves(e outbox.EffectConfig, scope string) bool {
	return (&outbox.HTTPEffect{Scopes: e.Scopes}).AllowsScope(scope)
}
