package stack_test

import (
	"testing"

	"github.com/effectively-once/webhooks/infra/pipeline"
	"github.com/effectively-once/webhooks/infra/stack"
)

func TestIntakeReservesConcurrencySoAFloodCannotStarveTheOtherFunctions(t *testing.T) {
	// GIVEN cdk.json's context (throttleBurstLimit 100) and no
	// intakeReservedConcurrency
	s := defaultStack(t)
	// THEN intake reserves (and is capped at) the stage's burst, and no
	// other function takes anything out of the account's unreserved pool
	for _, fn := range []string{pipeline.Intake, pipeline.Processor, pipeline.Dispatcher, pipeline.Reconciler} {
		_, p := s.function(t, fn)
		got, ok := p["ReservedConcurrentExecutions"]
		if fn == pipeline.Intake {
			if got != float64(s.stack.Config.ThrottleBurst) || got != 100.0 {
				t.Errorf("intake reserves %v, want the burst limit 100", got)
			}
		} else if ok {
			t.Errorf("%s reserves %v", fn, got)
		}
	}
	// AND the setting follows the burst limit unless given, and 0 reserves nothing
	for _, c := range []struct {
		ctx  map[string]any
		want int
	}{
		{map[string]any{}, 100},
		{map[string]any{"throttleBurstLimit": 300.0}, 300},                                   // cdk.json's numbers are float64
		{map[string]any{"throttleBurstLimit": 300.0, "intakeReservedConcurrency": "40"}, 40}, // -c gives strings
		{map[string]any{"intakeReservedConcurrency": 0.0}, 0},
	} {
		ctx := cdkContext(t)
		for k, v := range c.ctx {
			ctx[k] = v
		}
		cfg, err := stack.FromContext(func(k string) any { return ctx[k] })
		if err != nil || cfg.IntakeReservedConcurrency != c.want {
			t.Errorf("%v: reserved %d (%v), want %d", c.ctx, cfg.IntakeReservedConcurrency, err, c.want)
		}
	}
	none := synth(t, "intake-unreserved", map[string]any{"intakeReservedConcurrency": "0"})
	if _, p := none.function(t, pipeline.Intake); p["ReservedConcurrentExecutions"] != nil {
		t.Errorf("intakeReservedConcurrency=0 reserved %v", p["ReservedConcurrentExecutions"])
	}
}

func TestAllSourcesShareTheStageThrottleOnTheirOneRoute(t *testing.T) {
	// GIVEN the full stack: three HTTPS sources
	s := fullStack(t)
	// THEN they share one route (intake reads the source from its path
	// parameter), so API Gateway's per-route throttling cannot tell them
	// apart: the stage's limits apply to all of them together, and no
	// route overrides them (why: httpAPI in stack.go)
	if n := len(s.ofType("AWS::ApiGatewayV2::Route")); n != 1 {
		t.Fatalf("%d routes", n)
	}
	for _, st := range s.ofType("AWS::ApiGatewayV2::Stage") {
		p := props(st)
		if rs, ok := p["RouteSettings"]; ok {
			t.Errorf("route settings %v", rs)
		}
		d := p["DefaultRouteSettings"].(map[string]any)
		if d["ThrottlingRateLimit"] != 50.0 || d["ThrottlingBurstLimit"] != 100.0 {
			t.Errorf("stage throttle %v", d)
		}
	}
}
