package config_test

import (
	"errors"
	"maps"
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
	env["BRIDGE_DLQ_SENDERS"] = "AROAEXAMPLEBRIDGE01"
	if r, err = config.LoadReconciler(with(env)); err != nil || r.BridgeDLQURL != queueURL+"-bridge-dlq" {
		t.Fatalf("%+v %v", r.BridgeDLQURL, err)
	}
}

// The bridge DLQ's allowed senders come with it: a reconciler that sweeps
// the bridge DLQ without knowing who may write it, or with a value that
// names nobody, refuses to start, naming the variable.
func TestLoadReconcilerBridgeDLQNeedsItsAllowedSenders(t *testing.T) {
	base := map[string]string{"EVENTS_DLQ_URL": queueURL + "-dlq", "EFFECTS_DLQ_URL": effectsURL + "-dlq", "BRIDGE_DLQ_URL": queueURL + "-bridge-dlq"}
	r, err := config.LoadReconciler(with(merge(base, map[string]string{"BRIDGE_DLQ_SENDERS": " AROAEXAMPLEBRIDGE01, AIDAEXAMPLEOPERATOR1"})))
	if err != nil || r.BridgeDLQSenders.String() != "AROAEXAMPLEBRIDGE01,AIDAEXAMPLEOPERATOR1" || !r.BridgeDLQSenders.Allows("AROAEXAMPLEBRIDGE01:webhooks-prod-bridge") {
		t.Fatalf("%v %v", r.BridgeDLQSenders, err)
	}
	for _, c := range []map[string]string{
		{},
		{"BRIDGE_DLQ_SENDERS": " , "},
		{"BRIDGE_DLQ_SENDERS": "arn:aws:iam::123456789012:role/bridge"},
		{"BRIDGE_DLQ_SENDERS": "*"},
		{"BRIDGE_DLQ_URL": "", "BRIDGE_DLQ_SENDERS": "AROAEXAMPLEBRIDGE01"},
	} {
		if _, err := config.LoadReconciler(with(merge(base, c))); !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), "BRIDGE_DLQ_SENDERS") {
			t.Errorf("%v: err %v", c, err)
		}
	}
}

func merge(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}
