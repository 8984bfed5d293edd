package intake

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/source"
	"github.com/effectively-once/webhooks/pkg/provider"
)

func TestVerifyUnavailable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{source.ErrSecrets, true},
		{fmt.Errorf("load: %w", source.ErrSecrets), true},
		{provider.ErrNoSecrets, true},
		{provider.ErrCertUnavailable, true},
		{provider.ErrBadSignature, false},
		{provider.ErrNotSigned, false},
		{provider.ErrStale, false},
		{errors.New("malformed"), false},
	} {
		if got := verifyUnavailable(tc.err); got != tc.want {
			t.Errorf("verifyUnavailable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestIdentityProblem(t *testing.T) {
	ok := provider.Identity{EventID: "evt_1"}
	bad := provider.Identity{EventID: "evt\n2"}
	badQuoted := `"evt\n2"`
	for _, tc := range []struct {
		name      string
		v         provider.Verified
		body      []byte
		want      string
		wantAttrs map[string]string
	}{
		{"identified", provider.Verified{Events: []provider.Identity{ok}}, []byte("{}"), "", nil},
		{"verifier found none", provider.Verified{Unidentified: "no id"}, []byte("{}"), "no id", nil},
		{"verifier's reason wins over an empty body", provider.Verified{Unidentified: "no id"}, nil, "no id", nil},
		{"empty body", provider.Verified{Events: []provider.Identity{ok}}, nil, "empty body", nil},
		{"empty body wins over an unusable id", provider.Verified{Events: []provider.Identity{bad}}, []byte{}, "empty body", nil},
		{"unusable id", provider.Verified{Events: []provider.Identity{ok, bad}}, []byte("{}"),
			"event id " + badQuoted + " cannot be a ledger key or travel in a queue message", map[string]string{"unusable_event_id": badQuoted}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, attrs := identityProblem(tc.v, tc.body)
			if got != tc.want || !reflect.DeepEqual(attrs, tc.wantAttrs) {
				t.Fatalf("identityProblem = %q %v, want %q %v", got, attrs, tc.want, tc.wantAttrs)
			}
		})
	}
}

func TestUnidentifiedDelivery(t *testing.T) {
	body := []byte(`{"x":1}`)
	attrs := map[string]string{"unusable_event_id": `"a"`}
	for _, tc := range []struct {
		name string
		v    provider.Verified
		want ledger.Delivery
	}{
		{"no events", provider.Verified{}, ledger.Delivery{Source: "s", EventID: ledger.ContentID(body), EventType: "unidentified",
			Payload: body, Quarantine: "no_identity", Attributes: attrs}},
		{"first event's delivery id", provider.Verified{Events: []provider.Identity{{EventID: "a", DeliveryID: "d1"}, {EventID: "b", DeliveryID: "d2"}}},
			ledger.Delivery{Source: "s", EventID: ledger.ContentID(body), EventType: "unidentified", DeliveryID: "d1",
				Payload: body, Quarantine: "no_identity", Attributes: attrs}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := unidentifiedDelivery("s", tc.v, body, attrs); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestEventDelivery(t *testing.T) {
	attrs := map[string]string{"k": "v"}
	ident := provider.Identity{EventID: "e", DeliveryID: "d", Type: "t", Subject: "sub", VersionHint: "7", Attributes: attrs}
	whole := ledger.Delivery{Source: "s", EventID: "e", EventType: "t", DeliveryID: "d", Subject: "sub",
		Payload: []byte("body"), VersionHint: "7", Attributes: attrs}
	if got := eventDelivery("s", ident, []byte("body")); !reflect.DeepEqual(got, whole) {
		t.Fatalf("whole body: got %+v", got)
	}
	ident.Payload = []byte("own")
	own := whole
	own.Payload = []byte("own")
	if got := eventDelivery("s", ident, []byte("body")); !reflect.DeepEqual(got, own) {
		t.Fatalf("own payload: got %+v", got)
	}
}

func TestEventAnswer(t *testing.T) {
	processed := ledger.Event{EventID: "e", Status: ledger.StatusProcessed, DeliveryCount: 3,
		Result: &ledger.Result{Outcome: ledger.OutcomeApplied}}
	for _, tc := range []struct {
		name       string
		res        accepted
		want       map[string]any
		wantStatus int
	}{
		{"new", accepted{Accepted: ledger.Accepted{Event: ledger.Event{Status: ledger.StatusReceived}}, Enqueued: true},
			map[string]any{"event_id": "e", "status": "accepted", "ledger_status": ledger.StatusReceived}, 202},
		{"new quarantined", accepted{Accepted: ledger.Accepted{Event: ledger.Event{Status: ledger.StatusQuarantined}}},
			map[string]any{"event_id": "e", "status": "accepted", "ledger_status": ledger.StatusQuarantined}, 202},
		{"conflict", accepted{Accepted: ledger.Accepted{Conflict: true, Duplicate: true, Event: processed}},
			map[string]any{"event_id": "e", "status": "conflict", "detail": "this event id was first delivered with other bytes; nothing was changed"}, 202},
		{"duplicate of a processed event", accepted{Accepted: ledger.Accepted{Duplicate: true, Event: processed}},
			map[string]any{"event_id": "e", "status": "duplicate", "outcome": string(ledger.OutcomeApplied)}, 200},
		{"duplicate of a processed event without result", accepted{Accepted: ledger.Accepted{Duplicate: true,
			Event: ledger.Event{EventID: "e", Status: ledger.StatusProcessed}}},
			map[string]any{"event_id": "e", "status": "duplicate"}, 200},
		{"duplicate re-enqueued", accepted{Accepted: ledger.Accepted{Duplicate: true,
			Event: ledger.Event{Status: ledger.StatusReceived, DeliveryCount: 2}}, Enqueued: true},
			map[string]any{"event_id": "e", "status": "duplicate", "ledger_status": ledger.StatusReceived, "reenqueued": true, "delivery_count": 2}, 202},
		{"duplicate of a dead event", accepted{Accepted: ledger.Accepted{Duplicate: true,
			Event: ledger.Event{Status: ledger.StatusDead, DeliveryCount: 5}}},
			map[string]any{"event_id": "e", "status": "duplicate", "ledger_status": ledger.StatusDead, "reenqueued": false, "delivery_count": 5}, 202},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, st := eventAnswer("e", tc.res)
			if !reflect.DeepEqual(got, tc.want) || st != tc.wantStatus {
				t.Fatalf("eventAnswer = %v %d, want %v %d", got, st, tc.want, tc.wantStatus)
			}
		})
	}
}

func TestEventsReply(t *testing.T) {
	dup := map[string]any{"event_id": "a", "status": "duplicate"}
	acc := map[string]any{"event_id": "b", "status": "accepted"}
	for _, tc := range []struct {
		name    string
		status  int
		results []map[string]any
		want    Response
	}{
		{"one processed duplicate alone", 200, []map[string]any{dup},
			Response{Status: 200, Body: []byte(`{"event_id":"a","status":"duplicate"}`)}},
		{"two processed duplicates in a list", 200, []map[string]any{dup, dup},
			Response{Status: 200, Body: []byte(`{"events":[{"event_id":"a","status":"duplicate"},{"event_id":"a","status":"duplicate"}]}`)}},
		{"one accepted in a list", 202, []map[string]any{acc},
			Response{Status: 202, Body: []byte(`{"events":[{"event_id":"b","status":"accepted"}]}`)}},
		{"no events", 200, []map[string]any{},
			Response{Status: 200, Body: []byte(`{"events":[]}`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := eventsReply(tc.status, tc.results); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("eventsReply = %d %s, want %d %s", got.Status, got.Body, tc.want.Status, tc.want.Body)
			}
		})
	}
}

func TestAcceptFailed(t *testing.T) {
	h := &Handler{}
	for _, tc := range []struct {
		err    error
		status int
		msg    string
	}{
		{fmt.Errorf("%w: %w", errEnqueue, errors.New("sqs down")), http.StatusInternalServerError, "temporarily unavailable"},
		{fmt.Errorf("x: %w", ledger.ErrInvalid), http.StatusBadRequest, "event identity not storable"},
		{ledger.ErrUnavailable, http.StatusServiceUnavailable, "temporarily unavailable"},
		{ledger.ErrConflict, http.StatusServiceUnavailable, "temporarily unavailable"},
		{errors.New("boom"), http.StatusInternalServerError, "internal error"},
	} {
		got := h.acceptFailed(h.log(), "e", tc.err)
		var body map[string]any
		if err := json.Unmarshal(got.Body, &body); err != nil {
			t.Fatal(err)
		}
		if got.Status != tc.status || body["error"] != tc.msg || len(body) != 1 || strings.Contains(string(got.Body), "sqs down") {
			t.Errorf("acceptFailed(%v) = %d %s, want %d %q", tc.err, got.Status, got.Body, tc.status, tc.msg)
		}
	}
}
