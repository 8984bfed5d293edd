package builtin_test

import (
	"testing"
	"time"

	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

func FuzzQuilttConnectionProject(f *testing.F) {
	f.Add("connection.synced.errored.repairable", quilttEvent("connection.synced.errored.repairable", "2026-11-30T11:00:00Z").Payload, int64(0))
	f.Add("connection.synced.successful", []byte(`{"id":"e","type":"connection.synced.successful","record":{"id":"conn_1"}}`), quilttReceived.UnixMilli())
	f.Add("", []byte(`{"type":"connection.disconnected","at":"0001-01-01T00:00:00Z","record":{"id":"c"}}`), int64(-5))
	p := builtin.NewQuilttConnections()
	f.Fuzz(func(t *testing.T, typ string, payload []byte, receivedMS int64) {
		ev := projection.Event{Type: typ, Payload: payload}
		if receivedMS != 0 {
			ev.ReceivedAt = time.UnixMilli(receivedMS)
		}
		fuzzProject(t, p, ev, 1)
	})
}
