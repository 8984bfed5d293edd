package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/internal/config"
)

func TestCheckSettingsRefusesWhatTheFunctionsRefuseNamingTheVariable(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		bad  string // "" when every value is accepted
		says string
	}{
		{map[string]string{"LOG_LEVEL": "info", "RETENTION_DAYS": "30", "DUE_SHARDS": "8", "DUE_SHARDS_READ": "16",
			"METRICS_NAMESPACE": "EffectivelyOnce/webhooks-dev", "WAREHOUSE_PREFIX": "changes", "WAREHOUSE_MAX_STATE_BYTES": "524288",
			"WAREHOUSE_PROJECTIONS": "order,stripe_subscription", "OUTBOX_EVENT_SOURCE": "effectively-once.webhooks-prod",
			"WAREHOUSE_RETENTION_DAYS": "365"}, "", ""},
		{map[string]string{"WAREHOUSE_RETENTION_DAYS": "36501"}, "WAREHOUSE_RETENTION_DAYS", "from 0 to 36500"},
		{map[string]string{"WAREHOUSE_MAX_STATE_BYTES": "524289"}, "WAREHOUSE_MAX_STATE_BYTES", "between 1 and 524288"},
		{map[string]string{"WAREHOUSE_MAX_STATE_BYTES": "1048576"}, "WAREHOUSE_MAX_STATE_BYTES", "between 1 and 524288"},
		{map[string]string{"LOG_LEVEL": "verbose"}, "LOG_LEVEL", "debug, info, warn or error"},
		{map[string]string{"RETENTION_DAYS": "3"}, "RETENTION_DAYS", "between 4 and 3650"},
		{map[string]string{"DUE_SHARDS": "8", "DUE_SHARDS_READ": "4"}, "DUE_SHARDS_READ", "between 8 and 64"},
		{map[string]string{"WAREHOUSE_PROJECTIONS": "orders/order"}, "WAREHOUSE_PROJECTIONS", "not a projection name"},
		{map[string]string{"OUTBOX_EVENT_SOURCE": "aws.orders"}, "OUTBOX_EVENT_SOURCE", "reserves"},
		{map[string]string{"OUTBOX_EVENT_SOURCE": strings.Repeat("a", 257)}, "OUTBOX_EVENT_SOURCE", "1 to 256"},
		{map[string]string{"OUTBOX_EVENT_SOURCE": "orders events"}, "OUTBOX_EVENT_SOURCE", "only letters"},
		{map[string]string{"TABLE_NAME": "ledger"}, "TABLE_NAME", "not a settings variable"},
	} {
		err := config.CheckSettings(c.env)
		var ve *config.VarError
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%v: %v", c.env, err)
		case c.bad == "":
		case !errors.As(err, &ve) || ve.Var != c.bad || !strings.Contains(err.Error(), c.says) || !errors.Is(err, config.ErrConfig):
			t.Errorf("%v: %v, want %s refused saying %q", c.env, err, c.bad, c.says)
		}
	}
}

func TestTheEventSourceDefaultsAndIsChecked(t *testing.T) {
	if s, err := config.EventSource(func(string) string { return "" }); err != nil || s != config.DefaultEventSource {
		t.Errorf("default: %q %v", s, err)
	}
	if s, err := config.EventSource(func(string) string { return "effectively-once.webhooks-prod" }); err != nil || s != "effectively-once.webhooks-prod" {
		t.Errorf("set: %q %v", s, err)
	}
	if _, err := config.EventSource(func(string) string { return "AWS.events" }); !errors.Is(err, config.ErrEventSource) {
		t.Errorf("aws. prefix: %v", err)
	}
}
