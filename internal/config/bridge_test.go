package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/internal/config"
)

func TestLoadBridge(t *testing.T) {
	eb := `{"sources":[{"name":"stripe","kind":"stripe","delivery":"eventbridge","event_source":"aws.partner/stripe.com/ed_test_FAKE_1"}]}`
	// A source with eventbridge delivery and no secret: the bridge starts.
	b, err := config.LoadBridge(with(map[string]string{"SOURCES": eb}))
	if err != nil || b.EventsQueueURL != queueURL {
		t.Fatalf("LoadBridge: %+v %v", b, err)
	}
	if _, ok := b.Sources.ByEventSource("aws.partner/stripe.com/ed_test_FAKE_1"); !ok {
		t.Fatal("the event source is not routed to its source")
	}
	// No eventbridge source, or no queue: it refuses to start, naming why.
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{}, "no source has delivery eventbridge"},
		{map[string]string{"SOURCES": eb, "EVENTS_QUEUE_URL": ""}, "EVENTS_QUEUE_URL"},
	} {
		if _, err := config.LoadBridge(with(c.env)); !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want %q", c.env, err, c.want)
		}
	}
}

func TestLoadReconcilerBridgeDLQIsOptional(t *testing.T) {
	env := map[string]string{"EVENTS_DLQ_URL": queueURL + "-dlq", "EFFECTS_DLQ_URL": effectsURL + "-dlq"}
	r, err := config.LoadReconciler(with(env))
	if err != nil || r.BridgeDLQURL != "" {
		t.Fatalf("%+v %v", r.BridgeDLQURL, err)
	}
	env["BRIDGE_DLQ_URL"] = queueURL + "-bridge-dlq"
	if r, err = config.LoadReconciler(with(env)); err != nil || r.BridgeDLQURL != queueURL+"-bridge-dlq" {
		t.Fatalf("%+v %v", r.BridgeDLQURL, err)
	}
}
