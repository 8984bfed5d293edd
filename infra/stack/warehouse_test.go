package stack_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/effectively-once/webhooks/infra/pipeline"
	"github.com/effectively-once/webhooks/infra/stack"
)

// warehouseStack is the stack with -c warehouse=true and a prefix of its
// own, as the command line gives them (strings).
func warehouseStack(t testing.TB) *synthed {
	return synth(t, "warehouse", map[string]any{stack.KeyWarehouse: "true", stack.KeyWarehousePrefix: "changes/v1"})
}

// fromContext reads cdk.json's context with overrides applied.
func fromContext(t *testing.T, overrides map[string]any) (stack.Config, error) {
	t.Helper()
	ctx := cdkContext(t)
	for k, v := range overrides {
		ctx[k] = v
	}
	return stack.FromContext(func(k string) any { return ctx[k] })
}

func TestTheWarehouseContextKeysMapToItsProps(t *testing.T) {
	// GIVEN cdk.json's context alone
	cfg, err := fromContext(t, nil)
	// THEN the warehouse is off
	if err != nil || cfg.Warehouse != nil || cfg.Props().Warehouse != nil {
		t.Fatalf("default: %+v, %v", cfg.Warehouse, err)
	}
	for _, c := range []struct {
		name string
		ctx  map[string]any
		want pipeline.WarehouseProps
	}{
		{"-c warehouse=true", map[string]any{"warehouse": "true"}, pipeline.WarehouseProps{}},
		{"-c strings", map[string]any{"warehouse": "true", "warehousePrefix": "wh/changes", "warehouseMaxStateBytes": "65536",
			"warehouseRetentionDays": "3650", "warehouseVersioned": "true", "warehouseNoncurrentVersionDays": "7", "warehouseQueryResultsDays": "14"},
			pipeline.WarehouseProps{Prefix: "wh/changes", MaxStateBytes: 65536, RetentionDays: 3650, Versioned: true, NoncurrentVersionDays: 7, QueryResultsDays: 14}},
		{"cdk.json types", map[string]any{"warehouse": true, "warehouseRetentionDays": 30.0, "warehouseVersioned": false},
			pipeline.WarehouseProps{RetentionDays: 30}},
	} {
		// WHEN the warehouse keys are given
		cfg, err := fromContext(t, c.ctx)
		// THEN they become the construct's Warehouse props
		if err != nil || cfg.Warehouse == nil || !reflect.DeepEqual(*cfg.Warehouse, c.want) || cfg.Props().Warehouse != cfg.Warehouse {
			t.Errorf("%s: %+v, %v; want %+v", c.name, cfg.Warehouse, err, c.want)
		}
	}
	// AND warehouse=false is off
	if cfg, err := fromContext(t, map[string]any{"warehouse": "false"}); err != nil || cfg.Warehouse != nil {
		t.Errorf("warehouse=false: %+v, %v", cfg.Warehouse, err)
	}
}

func TestAWrongWarehouseContextFailsSynthNamingTheKey(t *testing.T) {
	for name, c := range map[string]struct {
		ctx       map[string]any
		key, says string
	}{
		"not a boolean":            {map[string]any{"warehouse": "sometimes"}, "warehouse", "invalid syntax"},
		"a prefix, warehouse off":  {map[string]any{"warehousePrefix": "changes"}, "warehousePrefix", "warehouse is not true"},
		"retention, warehouse off": {map[string]any{"warehouse": "false", "warehouseRetentionDays": "30"}, "warehouseRetentionDays", "warehouse is not true"},
		"not an integer":           {map[string]any{"warehouse": "true", "warehouseMaxStateBytes": "64k"}, "warehouseMaxStateBytes", "want an integer"},
		"a prefix with a slash":    {map[string]any{"warehouse": "true", "warehousePrefix": "changes/"}, "warehousePrefix", "no leading or trailing '/'"},
		"a state limit too large":  {map[string]any{"warehouse": "true", "warehouseMaxStateBytes": "4194304"}, "warehouseMaxStateBytes", "between 1 and 524288"},
		// a record carries its state within 1 MiB: the functions refuse
		// more than half of it at start, so the synth does too
		"a state limit over 512 KiB": {map[string]any{"warehouse": "true", "warehouseMaxStateBytes": "600000"}, "warehouseMaxStateBytes", "between 1 and 524288"},
		"noncurrent, not versioned":  {map[string]any{"warehouse": "true", "warehouseNoncurrentVersionDays": "7"}, "warehouseNoncurrentVersionDays", "warehouseVersioned is false"},
		"results kept too long":      {map[string]any{"warehouse": "true", "warehouseQueryResultsDays": "9999"}, "warehouseQueryResultsDays", "outside 1..3650"},
	} {
		t.Run(name, func(t *testing.T) {
			// GIVEN a wrong warehouse value
			// WHEN the context is read
			_, err := fromContext(t, c.ctx)
			// THEN it fails, naming the key as the context spells it
			if !errors.Is(err, stack.ErrConfig) || !strings.Contains(err.Error(), c.key+": ") && !strings.Contains(err.Error(), c.key+" is set") ||
				!strings.Contains(err.Error(), c.says) {
				t.Errorf("err = %v, want %s saying %q", err, c.key, c.says)
			}
		})
	}
}

func TestWithTheWarehouseOnTheStackOutputsItAndKeepsEveryLogicalID(t *testing.T) {
	// GIVEN the stack with -c warehouse=true -c warehousePrefix=changes/v1
	s := warehouseStack(t)
	w := s.stack.Warehouse
	if w == nil {
		t.Fatal("no warehouse")
	}
	// THEN the outputs name the bucket, the Glue database and table, and
	// the workgroup
	val := func(id string) string {
		o, ok := s.outputs[id].(map[string]any)
		if !ok {
			t.Errorf("no output %s", id)
			return ""
		}
		return render(o["Value"], func(id string) string { return "{" + id + "}" })
	}
	var bucket string
	for id := range s.ofType("AWS::S3::Bucket") {
		if strings.HasPrefix(id, "WarehouseBucket") {
			bucket = id
		}
	}
	if got := val("WarehouseBucketName"); bucket == "" || got != "{"+bucket+"}" {
		t.Errorf("bucket output %s (bucket %s)", got, bucket)
	}
	for id, want := range map[string]string{"WarehouseDatabase": "webhooks_dev_warehouse", "WarehouseTable": "change_records", "WarehouseWorkGroup": "webhooks-dev-warehouse"} {
		if got := val(id); got != want {
			t.Errorf("%s = %s, want %s", id, got, want)
		}
	}
	// AND the functions read the prefix the context gave
	for _, fn := range []string{pipeline.Processor, pipeline.Dispatcher, pipeline.Reconciler} {
		if env := s.env(t, fn); env["WAREHOUSE_PREFIX"] != "changes/v1" || env["WAREHOUSE_BUCKET"] != bucket {
			t.Errorf("%s: %v %v", fn, env["WAREHOUSE_PREFIX"], env["WAREHOUSE_BUCKET"])
		}
	}
	// AND every resource of the default stack keeps its logical id: the
	// warehouse only adds
	def := defaultStack(t)
	for id := range def.res {
		if _, ok := s.res[id]; !ok {
			t.Errorf("logical id %s is gone with the warehouse on", id)
		}
	}
	for id, r := range s.res {
		if _, ok := def.res[id]; !ok && !strings.HasPrefix(id, "Warehouse") {
			t.Errorf("the warehouse added %s (%s), not named Warehouse…", id, r["Type"])
		}
	}
	// AND cdk-nag finds nothing to report
	ann := assertions.Annotations_FromStack(s.stack.Stack)
	rule := assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))
	for _, m := range append(*ann.FindError(jsii.String("*"), rule), *ann.FindWarning(jsii.String("*"), rule)...) {
		t.Errorf("cdk-nag at %s: %v", *m.Id, m.Entry.Data)
	}
	// AND without it (the default and full stacks) there is no warehouse
	// output
	for _, variant := range []string{"default", "full"} {
		for id := range stackOf(t, variant).outputs {
			if strings.HasPrefix(id, "Warehouse") {
				t.Errorf("%s: output %s", variant, id)
			}
		}
	}
}
