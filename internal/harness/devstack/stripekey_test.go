package devstack_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
)

// TestStripeAPIKeyWarningOnlyWhenASourceNeedsIt starts stacks whose
// sources differ only in whether a Stripe source fetches from the API
// (api, for thin events; truth of kind stripe, for the reconciler's check)
// and whether the local secrets hold the key it references. The stack
// warns that the fake Stripe API will refuse requests exactly when a
// source needs the API and its key has no local value, and names that
// source; a team whose sources never call the API hears nothing of a key.
func TestStripeAPIKeyWarningOnlyWhenASourceNeedsIt(t *testing.T) {
	const webhook = `"name":"shop-stripe","kind":"stripe","secrets":["env:LOCAL_SHOP_STRIPE_WEBHOOK_SECRET"]`
	cases := []struct {
		name, source, secrets string
		warn                  bool
	}{
		{"snapshot events only, no key", `{` + webhook + `}`, `{"LOCAL_SHOP_STRIPE_WEBHOOK_SECRET":"whsec_local_FAKE_1"}`, false},
		{"thin events without their key", `{` + webhook + `,"api":{"secret":"env:LOCAL_STRIPE_API_KEY","url":"http://127.0.0.1:3003"}}`,
			`{"LOCAL_SHOP_STRIPE_WEBHOOK_SECRET":"whsec_local_FAKE_1"}`, true},
		{"thin events with their key", `{` + webhook + `,"api":{"secret":"env:LOCAL_STRIPE_API_KEY","url":"http://127.0.0.1:3003"}}`,
			`{"LOCAL_SHOP_STRIPE_WEBHOOK_SECRET":"whsec_local_FAKE_1","LOCAL_STRIPE_API_KEY":"rk_local_FAKE_1"}`, false},
		{"thin events with a key the fake does not accept", `{` + webhook + `,"api":{"secret":"env:LOCAL_SHOP_STRIPE_API_KEY","url":"http://127.0.0.1:3003"}}`,
			`{"LOCAL_SHOP_STRIPE_WEBHOOK_SECRET":"whsec_local_FAKE_1","LOCAL_SHOP_STRIPE_API_KEY":"rk_local_FAKE_2","LOCAL_STRIPE_API_KEY":"rk_local_FAKE_1"}`, true},
		{"a truth check without its key", `{` + webhook + `,"truth":{"kind":"stripe","secret":"env:LOCAL_STRIPE_API_KEY","url":"http://127.0.0.1:3003"}}`,
			`{"LOCAL_SHOP_STRIPE_WEBHOOK_SECRET":"whsec_local_FAKE_1"}`, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := portConfig(t)
			cfg.ConfigFile = filepath.Join(t.TempDir(), "dev.json")
			doc := `{"sources_config":{"sources":[` + c.source + `]},"effects_config":{"effects":[{"kind":"ship_order","url":"http://127.0.0.1:3002/ship","scopes":["shop-stripe"]}]},"secrets":` + c.secrets + `}`
			if err := os.WriteFile(cfg.ConfigFile, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// The build directory is empty: the stack stops at the
			// functions, after the fake Stripe API has started and spoken.
			if s, err := devstack.Start(ctx, cfg, devstack.NewLogs(&out)); err == nil {
				s.Close()
			} else if !strings.Contains(err.Error(), "bootstrap missing") {
				t.Fatalf("start: %v", err)
			}
			var warnings []string
			for _, line := range strings.Split(out.String(), "\n") {
				if strings.HasPrefix(line, "stripe-api") && strings.Contains(line, "refused") {
					warnings = append(warnings, line)
				}
			}
			switch {
			case c.warn && (len(warnings) != 1 || !strings.Contains(warnings[0], "shop-stripe") || !strings.Contains(warnings[0], "_STRIPE_API_KEY")):
				t.Fatalf("want one warning naming shop-stripe and its key, got %q\n%s", warnings, out.String())
			case !c.warn && len(warnings) != 0:
				t.Fatalf("warned although no source needs a missing key: %q", warnings)
			}
		})
	}
}
