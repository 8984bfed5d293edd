package pipeline_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/infra/pipeline"
	"github.com/effectively-once/webhooks/internal/config"
	"github.com/effectively-once/webhooks/internal/warehouse"
)

// Every prop the construct renders into a function's environment, set to
// a value that function refuses at cold start, is refused when the props
// are checked, naming the prop: a stack that synthesizes can start.
func TestEveryValueAFunctionRefusesAtStartIsRefusedAtSynth(t *testing.T) {
	wh := func(w pipeline.WarehouseProps) *pipeline.WarehouseProps { return &w }
	for name, c := range map[string]struct {
		p         pipeline.Props
		prop      string
		env, val  string // the variable and value the functions would read
		functions []string
	}{
		"a state limit above what a record carries (512 KiB to 1 MiB)": {
			pipeline.Props{Warehouse: wh(pipeline.WarehouseProps{MaxStateBytes: 600 << 10})}, "Warehouse.MaxStateBytes",
			"WAREHOUSE_MAX_STATE_BYTES", "614400", []string{"processor", "dispatcher", "reconciler"}},
		"a state limit of 1 MiB": {
			pipeline.Props{Warehouse: wh(pipeline.WarehouseProps{MaxStateBytes: 1 << 20})}, "Warehouse.MaxStateBytes",
			"WAREHOUSE_MAX_STATE_BYTES", "1048576", []string{"processor", "dispatcher", "reconciler"}},
		"a negative state limit": {
			pipeline.Props{Warehouse: wh(pipeline.WarehouseProps{MaxStateBytes: -1})}, "Warehouse.MaxStateBytes",
			"WAREHOUSE_MAX_STATE_BYTES", "-1", []string{"processor", "dispatcher", "reconciler"}},
		"a log level no function knows": {
			pipeline.Props{LogLevel: "verbose"}, "LogLevel", "LOG_LEVEL", "verbose", []string{"intake", "processor", "dispatcher", "reconciler"}},
		"a retention below the ledger's least": {
			pipeline.Props{RetentionDays: 3}, "RetentionDays", "RETENTION_DAYS", "3", []string{"intake", "processor", "dispatcher", "reconciler"}},
		"a retention above the ledger's most": {
			pipeline.Props{RetentionDays: 3651}, "RetentionDays", "RETENTION_DAYS", "3651", []string{"intake", "processor", "dispatcher", "reconciler"}},
		"more due shards than the index has": {
			pipeline.Props{DueShards: 65}, "DueShards", "DUE_SHARDS", "65", []string{"intake", "processor", "dispatcher", "reconciler"}},
		"an event source EventBridge reserves": {
			pipeline.Props{OutboxEventSource: "aws.orders"}, "OutboxEventSource", "OUTBOX_EVENT_SOURCE", "aws.orders", []string{"dispatcher"}},
		"an event source with a space": {
			pipeline.Props{OutboxEventSource: "orders events"}, "OutboxEventSource", "OUTBOX_EVENT_SOURCE", "orders events", []string{"dispatcher"}},
		"fewer shards read than written": {
			pipeline.Props{DueShards: 8, DueShardsRead: 4}, "DueShardsRead", "DUE_SHARDS_READ", "4", []string{"intake", "processor", "dispatcher", "reconciler"}},
	} {
		t.Run(name, func(t *testing.T) {
			// GIVEN props with one value a function refuses at cold start
			p := c.p
			p.Sources = stripe
			// THEN the functions' own loaders refuse it (the premise)
			env := map[string]string{"TABLE_NAME": "t", "WAREHOUSE_BUCKET": "records-bucket", c.env: c.val}
			if c.env == "DUE_SHARDS_READ" {
				env["DUE_SHARDS"] = "8"
			}
			get := func(k string) string { return env[k] }
			_, errBase := config.LoadBase(get)
			_, errWh := warehouse.Load(get)
			_, errSrc := config.EventSource(get)
			if errBase == nil && errWh == nil && errSrc == nil {
				t.Fatalf("%s=%s: the functions accept it", c.env, c.val)
			}
			// AND checking the props (as New and `cdk synth` do) refuses
			// it, naming the prop
			err := p.Validate()
			var pe *pipeline.PropError
			if !errors.Is(err, pipeline.ErrProps) || !errors.As(err, &pe) {
				t.Fatalf("Validate = %v; want a *PropError naming %s (the %s refuse %s=%s at start)", err, c.prop, strings.Join(c.functions, ", "), c.env, c.val)
			}
			if pe.Prop != c.prop {
				t.Errorf("err = %v (prop %q), want prop %q", err, pe.Prop, c.prop)
			}
		})
	}
}
