package builtin_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

var quilttReceived = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func quilttEvent(typ, at string) projection.Event {
	atField := ""
	if at != "" {
		atField = fmt.Sprintf(`"at":%q,`, at)
	}
	body := fmt.Sprintf(`{"id":"evt_%s_%s",%s"type":%q,"profile":{"id":"p_1"},"record":{"id":"conn_1","profileId":"p_1","status":"X","source":"MX"}}`, typ, at, atField, typ)
	return projection.Event{Source: "quiltt", Kind: "quiltt", EventID: "evt_" + typ + at, Type: typ, Payload: []byte(body), ReceivedAt: quilttReceived}
}

func TestQuilttFixtureFallsBackToReceipt(t *testing.T) {
	var delivery struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(fixture(t, "quiltt/connection-events.json"), &delivery); err != nil {
		t.Fatal(err)
	}
	p := builtin.NewQuilttConnections()
	ev := projection.Event{Kind: "quiltt", Type: "connection.synced.successful", Payload: delivery.Events[0], ReceivedAt: quilttReceived}
	res, err := p.Project(ev)
	if err != nil {
		t.Fatal(err)
	}
	w := res.Write
	if w.Name != builtin.QuilttConnectionProjection || w.Subject != "conn_1QfixtureConn0001" || w.Version != quilttReceived.UnixMilli() || w.State["health"] != "healthy" || len(res.Intents) != 0 {
		t.Fatalf("result %+v", res)
	}
	// Without "at" and without a receipt time there is no version.
	ev.ReceivedAt = time.Time{}
	if _, err := p.Project(ev); err == nil {
		t.Fatal("no version, no error")
	} else if code, _ := projection.AsPermanent(err); code != "malformed" {
		t.Fatal(err)
	}
}

func TestQuilttHealth(t *testing.T) {
	p := builtin.NewQuilttConnections()
	at := "2026-11-30T11:00:00.250Z"
	cases := []struct {
		typ, health, kind string
		alert             bool
	}{
		{"connection.synced.successful", "healthy", "", false},
		{"connection.synced.successful.initial", "healthy", "", false},
		{"connection.synced.successful.historical", "healthy", "", false},
		{"connection.synced.errored.repairable", "unhealthy", "repairable", true},
		{"connection.synced.errored.service", "unhealthy", "service", true},
		{"connection.synced.errored.provider", "unhealthy", "provider", true},
		{"connection.synced.errored.institution", "unhealthy", "institution", true},
		{"connection.disconnected", "disconnected", "", false},
	}
	for _, c := range cases {
		t.Run(c.typ, func(t *testing.T) {
			res, err := p.Project(quilttEvent(c.typ, at))
			if err != nil {
				t.Fatal(err)
			}
			w := res.Write
			if w.Subject != "conn_1" || w.Version != ms("2026-11-30T11:00:00.250Z") || w.State["health"] != c.health || w.State["error_kind"] != c.kind {
				t.Fatalf("write %+v", w)
			}
			if !c.alert {
				if len(res.Intents) != 0 {
					t.Fatalf("intents %+v", res.Intents)
				}
				return
			}
			in := res.Intents[0]
			if len(res.Intents) != 1 || in.Kind != "connection.alert" || in.OperationID != projection.OperationID("quiltt_connection", "conn_1", "unhealthy", fmt.Sprint(w.Version)) {
				t.Fatalf("intents %+v", res.Intents)
			}
			if in.Payload["profile_id"] != "p_1" || in.Payload["error_kind"] != c.kind || in.Payload["version"] != w.Version {
				t.Fatalf("payload %+v", in.Payload)
			}
		})
	}
}

func TestQuilttPermanentErrors(t *testing.T) {
	p := builtin.NewQuilttConnections()
	cases := map[string]struct {
		ev   projection.Event
		code string
	}{
		"not JSON":        {projection.Event{Type: "connection.disconnected", Payload: []byte(`[`)}, "malformed"},
		"no record id":    {projection.Event{Type: "connection.disconnected", Payload: []byte(`{"type":"connection.disconnected","at":"2026-11-30T11:00:00Z","record":{}}`)}, "malformed"},
		"bad at":          {quilttEvent("connection.disconnected", "noon"), "malformed"},
		"types disagree":  {projection.Event{Type: "connection.disconnected", Payload: []byte(`{"type":"connection.synced.successful","at":"2026-11-30T11:00:00Z","record":{"id":"c"}}`)}, "malformed"},
		"created":         {quilttEvent("connection.created", "2026-11-30T11:00:00Z"), "unsupported_type"},
		"errored, nested": {quilttEvent("connection.synced.errored.a.b", "2026-11-30T11:00:00Z"), "unsupported_type"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := p.Project(c.ev)
			if code, perm := projection.AsPermanent(err); !perm || code != c.code {
				t.Fatalf("err %v: permanent=%v code=%q, want %q", err, perm, code, c.code)
			}
		})
	}
}

func TestQuilttEveryOrder(t *testing.T) {
	// Healthy, a service outage reported twice, healthy again: every order
	// ends healthy. Whether the outage alerted depends on whether it was
	// seen before the recovery (a resolved outage arriving late is stale);
	// when it alerted, it alerted once, from an applied change.
	events := []labelled{
		{"ok#1", quilttEvent("connection.synced.successful", "2026-11-30T10:00:00Z")},
		{"service#1", quilttEvent("connection.synced.errored.service", "2026-11-30T10:10:00Z")},
		{"service#2", quilttEvent("connection.synced.errored.service", "2026-11-30T10:20:00Z")},
		{"ok#2", quilttEvent("connection.synced.successful", "2026-11-30T10:30:00Z")},
	}
	alerted := 0
	for _, r := range runPermutations(t, builtin.NewQuilttConnections(), "conn_1", events, false) {
		if r.final.State["health"] != "healthy" || r.final.Version != ms("2026-11-30T10:30:00Z") {
			t.Fatalf("order %v: %+v", r.order, r.final)
		}
		if n := len(r.sim.intents); n > 1 {
			t.Fatalf("order %v: %d alerts for one outage", r.order, n)
		}
		for _, in := range r.sim.intents {
			if in.Payload["error_kind"] != "service" {
				t.Fatalf("order %v: alert %+v", r.order, in)
			}
			alerted++
		}
	}
	if alerted == 0 {
		t.Fatal("no order alerted")
	}
	// Ending unhealthy: the newest failure alerts in every order, and a
	// change of error kind alerts again.
	events = []labelled{
		{"ok", quilttEvent("connection.synced.successful", "2026-11-30T10:00:00Z")},
		{"service", quilttEvent("connection.synced.errored.service", "2026-11-30T10:10:00Z")},
		{"repairable", quilttEvent("connection.synced.errored.repairable", "2026-11-30T10:20:00Z")},
	}
	last := projection.OperationID("quiltt_connection", "conn_1", "unhealthy", fmt.Sprint(ms("2026-11-30T10:20:00Z")))
	for _, r := range runPermutations(t, builtin.NewQuilttConnections(), "conn_1", events, false) {
		if r.final.State["error_kind"] != "repairable" {
			t.Fatalf("order %v: %+v", r.order, r.final)
		}
		if _, ok := r.sim.intents[last]; !ok {
			t.Fatalf("order %v: the repairable failure did not alert", r.order)
		}
	}
}
