package outbox_test

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/config"
	"github.com/effectively-once/webhooks/internal/outbox"
)

const (
	effectsURL = "https://sqs.eu-west-1.amazonaws.com/123456789012/effects"
	effectsDoc = `{"effects":[{"kind":"refund","url":"https://payments.example/refunds","secret":"sm:refund-token","scopes":["orders"]}]}`
)

func TestLoadDispatcher(t *testing.T) {
	env := func(changes map[string]string) func(string) string {
		e := map[string]string{"TABLE_NAME": "ledger", "EFFECTS_QUEUE_URL": effectsURL, "EFFECTS": effectsDoc}
		maps.Copy(e, changes)
		return func(k string) string { return e[k] }
	}
	d, err := outbox.LoadDispatcherConfig(env(nil))
	if err != nil {
		t.Fatalf("LoadDispatcher: %v", err)
	}
	if d.MaxAttempts != 8 || d.Lease != time.Minute || len(d.Effects) != 1 || d.Effects[0].Kind != "refund" ||
		d.Effects[0].Window() != 24*time.Hour || d.Effects[0].Timeout() != 10*time.Second || d.Sources != nil {
		t.Fatalf("defaults: %+v", d)
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		wantVar string
	}{
		{"no effects", map[string]string{"EFFECTS": ""}, "EFFECTS"},
		{"effects not json", map[string]string{"EFFECTS": "refund=https://x"}, "EFFECTS"},
		{"unknown field", map[string]string{"EFFECTS": `{"effects":[{"kind":"refund","url":"https://x.example","token":"t","scopes":["orders"]}]}`}, "EFFECTS"},
		{"plain http off loopback", map[string]string{"EFFECTS": `{"effects":[{"kind":"refund","url":"http://payments.example","scopes":["orders"]}]}`}, "loopback"},
		{"secret value instead of a reference", map[string]string{"EFFECTS": `{"effects":[{"kind":"refund","url":"https://x.example","secret":"sk_live_abc","scopes":["orders"]}]}`}, "secret"},
		{"timeout too long", map[string]string{"EFFECTS": `{"effects":[{"kind":"refund","url":"https://x.example","timeout_seconds":60,"scopes":["orders"]}]}`}, "timeout_seconds"},
		{"no scopes", map[string]string{"EFFECTS": `{"effects":[{"kind":"refund","url":"https://x.example"}]}`}, `scopes is required`},
		{"kind twice", map[string]string{"EFFECTS": `{"effects":[{"kind":"refund","url":"https://x.example","scopes":["orders"]},{"kind":"refund","url":"https://y.example","scopes":["orders"]}]}`}, "twice"},
		{"env secret without ALLOW_ENV_SECRETS", map[string]string{"EFFECTS": `{"effects":[{"kind":"refund","url":"https://x.example","secret":"env:TOKEN","scopes":["orders"]}]}`}, "ALLOW_ENV_SECRETS"},
		{"no effects queue", map[string]string{"EFFECTS_QUEUE_URL": ""}, "EFFECTS_QUEUE_URL"},
		{"attempts zero", map[string]string{"DISPATCH_MAX_ATTEMPTS": "0"}, "DISPATCH_MAX_ATTEMPTS"},
		{"lease not a number", map[string]string{"DISPATCH_LEASE_SECONDS": "1m"}, "DISPATCH_LEASE_SECONDS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := outbox.LoadDispatcherConfig(env(tc.env))
			if !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), tc.wantVar) {
				t.Fatalf("err %v, want a configuration error naming %s", err, tc.wantVar)
			}
		})
	}
	local, err := outbox.LoadDispatcherConfig(env(map[string]string{"ALLOW_ENV_SECRETS": "true",
		"EFFECTS": `{"effects":[{"kind":"notify","url":"http://127.0.0.1:9000/notify","secret":"env:TOKEN","idempotency_window_hours":1,"scopes":["orders"]}]}`}))
	if err != nil || local.Effects[0].Window() != time.Hour {
		t.Fatalf("local stack effects: %+v %v", local.Effects, err)
	}
}

// With the warehouse on, the dispatcher has work even when no other effect
// exists: the construct's empty effects list is accepted then, and only then.
func TestADispatcherWithTheWarehouseAloneStarts(t *testing.T) {
	env := func(e map[string]string) func(string) string {
		base := map[string]string{"TABLE_NAME": "ledger", "EFFECTS_QUEUE_URL": effectsURL}
		maps.Copy(base, e)
		return func(k string) string { return base[k] }
	}
	for _, doc := range []string{"", `{"effects":[]}`} {
		d, err := outbox.LoadDispatcherConfig(env(map[string]string{"EFFECTS": doc, "WAREHOUSE_BUCKET": "acme-warehouse", "WAREHOUSE_PREFIX": "changes"}))
		if err != nil {
			t.Fatalf("EFFECTS=%q with the warehouse: %v", doc, err)
		}
		if len(d.Effects) != 1 || d.Effects[0].Kind != outbox.WarehouseKind || d.Effects[0].Target != "arn:aws:s3:::acme-warehouse/changes" {
			t.Errorf("EFFECTS=%q: effects %+v, want the warehouse's alone", doc, d.Effects)
		}
		if _, err := outbox.LoadDispatcherConfig(env(map[string]string{"EFFECTS": doc})); !errors.Is(err, config.ErrConfig) {
			t.Errorf("EFFECTS=%q without the warehouse: %v, want a config error", doc, err)
		}
	}
	if _, err := outbox.LoadDispatcherConfig(env(map[string]string{"EFFECTS": `{"effects":[], "x":1}`, "WAREHOUSE_BUCKET": "acme-warehouse"})); !errors.Is(err, config.ErrConfig) {
		t.Errorf("a malformed document beside the warehouse: %v, want a config error", err)
	}
}
