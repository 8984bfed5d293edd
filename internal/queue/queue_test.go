package queue_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/internal/queue"
)

func TestPointerRoundTripAndBadBodies(t *testing.T) {
	p := queue.Pointer{Source: "stripe", EventID: "evt_1", Reason: "accept"}
	got, err := queue.ParsePointer(p.Encode())
	if err != nil || got.Source != "stripe" || got.EventID != "evt_1" || got.V != 1 {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for name, body := range map[string]string{
		"not json":        "hello",
		"no version":      `{"source":"stripe","event_id":"evt_1"}`,
		"future version":  `{"v":2,"source":"stripe","event_id":"evt_1"}`,
		"no event id":     `{"v":1,"source":"stripe"}`,
		"oversized":       `{"v":1,"source":"stripe","event_id":"` + strings.Repeat("x", queue.MaxPointerBytes) + `"}`,
		"payload instead": `{"id":"evt_1","object":"event"}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := queue.ParsePointer(body); !errors.Is(err, queue.ErrBadPointer) {
				t.Fatalf("err %v", err)
			}
		})
	}
}

func TestEventsSpecFollowsAWSGuidance(t *testing.T) {
	s := queue.Events("dev-")
	if s.VisibilityTimeout < 6*queue.ProcessorTimeout {
		t.Fatalf("visibility %s < 6 × processor timeout %s", s.VisibilityTimeout, queue.ProcessorTimeout)
	}
	if s.Name != "dev-events" || s.DLQName() != "dev-events-dlq" || s.MaxReceiveCount != 5 {
		t.Fatalf("spec %+v", s)
	}
}
