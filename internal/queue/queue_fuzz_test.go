package queue_test

import (
	"testing"

	"github.com/effectively-once/webhooks/internal/queue"
)

// FuzzParsePointer: a message body is either a complete pointer that
// round-trips or ErrBadPointer; never a panic.
func FuzzParsePointer(f *testing.F) {
	f.Add(queue.Pointer{Source: "stripe", EventID: "evt_1"}.Encode())
	f.Add(`{"v":1,"source":"s","event_id":"e","reason":"replay"}`)
	f.Add(`{"v":1}`)
	f.Fuzz(func(t *testing.T, body string) {
		p, err := queue.ParsePointer(body)
		if err != nil {
			return
		}
		if p.Source == "" || p.EventID == "" {
			t.Fatalf("accepted an incomplete pointer %+v", p)
		}
		q, err := queue.ParsePointer(p.Encode())
		if err != nil || q.Source != p.Source || q.EventID != p.EventID {
			t.Fatalf("round trip: %+v %v", q, err)
		}
	})
}
