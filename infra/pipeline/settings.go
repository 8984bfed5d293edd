package pipeline

import (
	"errors"
	"strings"

	"github.com/aws/jsii-runtime-go"

	"github.com/effectively-once/webhooks/internal/config"
)

// setting is one prop the construct renders into the functions'
// environment: the prop's name, the variable, and the value.
type setting struct {
	prop, env, value string
}

// commonSettings are the settings every function reads.
func (p Props) commonSettings() []setting {
	return []setting{
		{"LogLevel", "LOG_LEVEL", p.LogLevel},
		{"RetentionDays", "RETENTION_DAYS", itoa(p.RetentionDays)},
		{"DueShards", "DUE_SHARDS", itoa(p.DueShards)},
		{"DueShardsRead", "DUE_SHARDS_READ", itoa(p.DueShardsRead)},
		{"MetricsNamespace", "METRICS_NAMESPACE", p.MetricsNamespace},
	}
}

// warehouseSettings are the warehouse sink's, read by the processor, the
// dispatcher and the reconciler when the warehouse is on.
// WAREHOUSE_MAX_STATE_BYTES is set only when given (0: the runtime's
// default), and WAREHOUSE_PROJECTIONS only when not every projection is
// recorded.
func (p Props) warehouseSettings() []setting {
	w := p.Warehouse
	if w == nil {
		return nil
	}
	out := []setting{{"Warehouse.Prefix", "WAREHOUSE_PREFIX", w.Prefix}}
	if w.MaxStateBytes != 0 {
		out = append(out, setting{"Warehouse.MaxStateBytes", "WAREHOUSE_MAX_STATE_BYTES", itoa(w.MaxStateBytes)})
	}
	if len(w.Projections) > 0 {
		out = append(out, setting{"Warehouse.Projections", "WAREHOUSE_PROJECTIONS", strings.Join(w.Projections, ",")})
	}
	return out
}

// reconcilerSettings are the reconciler's own: the records' retention,
// when the warehouse is on and expires them (its drift check then also
// checks every subject older than it).
func (p Props) reconcilerSettings() []setting {
	if p.Warehouse == nil || p.Warehouse.RetentionDays == 0 {
		return nil
	}
	return []setting{{"Warehouse.RetentionDays", "WAREHOUSE_RETENTION_DAYS", itoa(p.Warehouse.RetentionDays)}}
}

// dispatcherSettings are the dispatcher's own.
func (p Props) dispatcherSettings() []setting {
	return []setting{{"OutboxEventSource", "OUTBOX_EVENT_SOURCE", p.OutboxEventSource}}
}

// settings are every setting the construct renders, whichever function
// reads it.
func (p Props) settings() []setting {
	out := append(p.commonSettings(), p.warehouseSettings()...)
	out = append(out, p.reconcilerSettings()...)
	return append(out, p.dispatcherSettings()...)
}

// validateSettings checks every setting with the code the functions read
// it with at cold start (config.CheckSettings), so a value a function
// refuses fails the synth, naming the prop, instead of the deployed
// function's start: one rule, not a copy of it here.
func (p Props) validateSettings() error {
	env := map[string]string{}
	byVar := map[string]setting{}
	for _, s := range p.settings() {
		env[s.env] = s.value
		byVar[s.env] = s
	}
	err := config.CheckSettings(env)
	var ve *config.VarError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ve):
		s := byVar[ve.Var]
		return propErr(s.prop, "%q is refused by the functions at start: %v", s.value, ve.Err)
	default:
		return propErr("Props", "%v", err)
	}
}

// environment renders settings as a function's variables.
func environment(settings []setting) map[string]*string {
	out := make(map[string]*string, len(settings))
	for _, s := range settings {
		out[s.env] = jsii.String(s.value)
	}
	return out
}
