package stack_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/infra/pipeline"
	"github.com/effectively-once/webhooks/infra/stack"
)

func TestEachStagePutsItsEventsUnderItsOwnSource(t *testing.T) {
	// GIVEN the dev and prod stages, and a stage that keeps the source its
	// bus rules already match
	for _, c := range []struct {
		variant string
		ctx     map[string]any
		want    string
	}{
		{"default", nil, "effectively-once.webhooks-dev"},
		{"prod source", map[string]any{"stage": "prod"}, "effectively-once.webhooks-prod"},
		{"kept source", map[string]any{"outboxEventSource": "effectively-once.outbox"}, "effectively-once.outbox"},
	} {
		s := synth(t, c.variant, c.ctx)
		// THEN the dispatcher, and no other function, reads its source
		if got := s.env(t, pipeline.Dispatcher)["OUTBOX_EVENT_SOURCE"]; got != c.want {
			t.Errorf("%s: the dispatcher's OUTBOX_EVENT_SOURCE is %q, want %q", c.variant, got, c.want)
		}
		for _, fn := range []string{pipeline.Intake, pipeline.Processor, pipeline.Reconciler} {
			if v, ok := s.env(t, fn)["OUTBOX_EVENT_SOURCE"]; ok {
				t.Errorf("%s: %s reads OUTBOX_EVENT_SOURCE=%q", c.variant, fn, v)
			}
		}
	}
	// AND a source EventBridge would refuse fails the synth, naming the key
	for _, bad := range []string{"aws.orders", "orders events", strings.Repeat("o", 257)} {
		ctx := cdkContext(t)
		ctx["outboxEventSource"] = bad
		_, err := stack.FromContext(func(k string) any { return ctx[k] })
		if !errors.Is(err, stack.ErrConfig) || !strings.Contains(err.Error(), "outboxEventSource: ") {
			t.Errorf("outboxEventSource=%q: %v, want ErrConfig naming outboxEventSource", bad, err)
		}
	}
}
