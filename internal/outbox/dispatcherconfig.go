package outbox

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/internal/config"
	"github.com/effectively-once/webhooks/internal/warehouse"
)

// DispatcherConfig is the dispatcher function's configuration. It reads no
// sources: it performs effects, it does not verify webhooks.
type DispatcherConfig struct {
	config.Common
	Effects []EffectConfig
	// Warehouse is the warehouse sink (WAREHOUSE_BUCKET, …; nil: off); when
	// on, its effect is among Effects.
	Warehouse       *warehouse.Config
	EffectsQueueURL string
	MaxAttempts     int
	Lease           time.Duration
	// EventSource is the source of the events EventBridge targets put
	// (OUTBOX_EVENT_SOURCE; default config.DefaultEventSource).
	EventSource string
}

// LoadDispatcherConfig reads the dispatcher function's variables: TABLE_NAME,
// EFFECTS or EFFECTS_FILE, EFFECTS_QUEUE_URL, DISPATCH_MAX_ATTEMPTS
// (default 8), DISPATCH_LEASE_SECONDS (default 60; above the function
// timeout), OUTBOX_EVENT_SOURCE (config.EventSource), the warehouse
// sink's (warehouse.Load), plus the common
// RETENTION_DAYS, LOG_LEVEL, ALLOW_ENV_SECRETS. With the warehouse on, an
// empty effects document (or none) is accepted: the dispatcher then
// writes the warehouse's records alone.
func LoadDispatcherConfig(getenv func(string) string) (DispatcherConfig, error) {
	c, err := config.LoadBase(getenv)
	if err != nil {
		return DispatcherConfig{}, err
	}
	d := DispatcherConfig{Common: c, EffectsQueueURL: getenv("EFFECTS_QUEUE_URL")}
	if d.Warehouse, err = warehouse.Load(getenv); err != nil {
		return DispatcherConfig{}, fmt.Errorf("%w: %w", config.ErrConfig, err)
	}
	if d.Warehouse == nil || !noEffects(getenv) {
		if d.Effects, err = LoadEffects(getenv); err != nil {
			return DispatcherConfig{}, fmt.Errorf("%w: EFFECTS/EFFECTS_FILE: %w", config.ErrConfig, err)
		}
	}
	if d.EventSource, err = config.EventSource(getenv); err != nil {
		return DispatcherConfig{}, err
	}
	for i := range d.Effects {
		d.Effects[i].EventSource = d.EventSource
	}
	if d.Warehouse != nil {
		for _, e := range d.Effects {
			if e.Kind == WarehouseKind {
				return DispatcherConfig{}, fmt.Errorf("%w: EFFECTS configures %s and WAREHOUSE_BUCKET is set: the sink is configured once, by WAREHOUSE_BUCKET", config.ErrConfig, WarehouseKind)
			}
		}
		d.Effects = append(d.Effects, WarehouseEffectConfig(*d.Warehouse))
	}
	for _, e := range d.Effects {
		if e.Secret != "" {
			if err := c.CheckRef("effect "+e.Kind, e.Secret); err != nil {
				return DispatcherConfig{}, err
			}
		}
	}
	if d.EffectsQueueURL == "" {
		return DispatcherConfig{}, fmt.Errorf("%w: EFFECTS_QUEUE_URL is required", config.ErrConfig)
	}
	if d.MaxAttempts, err = config.IntVar(getenv, "DISPATCH_MAX_ATTEMPTS", DefaultMaxAttempts, 1, 100); err != nil {
		return DispatcherConfig{}, err
	}
	secs, err := config.IntVar(getenv, "DISPATCH_LEASE_SECONDS", 60, 1, 43200)
	if err != nil {
		return DispatcherConfig{}, err
	}
	d.Lease = time.Duration(secs) * time.Second
	return d, nil
}

// noEffects reports whether the effects document is absent or an empty
// list ({"effects":[]}, what the construct renders when none exist).
func noEffects(getenv func(string) string) bool {
	doc := strings.TrimSpace(getenv("EFFECTS"))
	if doc == "" {
		return getenv("EFFECTS_FILE") == ""
	}
	var d struct {
		Effects []json.RawMessage `json:"effects"`
	}
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.DisallowUnknownFields()
	return dec.Decode(&d) == nil && len(d.Effects) == 0
}
