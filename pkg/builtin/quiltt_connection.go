package builtin

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// QuilttConnectionProjection is the Quiltt connection health projection's
// name in the ledger.
const QuilttConnectionProjection = "quiltt_connection"

// QuilttConnections projects Quiltt connection events into one health state
// per connection (record.id). The payload is one events[] element of a
// Quiltt delivery, as the intake stores it.
//
// State: {connection_id, health, error_kind}. health comes from the event
// type: connection.synced.successful (and its .initial and .historical
// variants) is healthy, connection.synced.errored.* is unhealthy
// (error_kind: repairable, service, provider or institution, the type's
// last segment), connection.disconnected is disconnected. Record fields
// that change with every sync are not state, so a repeated report of the
// same health is a noop or a version advance, never a change.
//
// Ordering: version = the element's "at" (when the event occurred) in
// Unix milliseconds, since Quiltt batches events per delivery and retries
// deliveries, so arrival order says nothing. Without "at" the version is
// projection.Event.ReceivedAt (fixed at first acceptance, so every retry
// and replay projects the same version): arrival order, weaker, so two
// disagreeing events of one connection in one delivery share it and the
// second is quarantined (version_conflict) instead of guessed at, as are
// two of one millisecond with different health. With neither, the event
// is malformed.
//
// Intents: an applied change into an unhealthy state emits one
// "connection.alert" keyed projection.OperationID("quiltt_connection",
// connection id, "unhealthy", version). Staying unhealthy alerts once (an
// unchanged state is not written); a change of error kind (an outage
// becoming "repairable", which needs the user to reconnect) alerts again;
// an unhealthy report older than the stored state is stale and alerts
// nothing. connection.alert is while_current on health=unhealthy: one
// still waiting when the connection recovers ends OBSOLETE, and one
// already sent is compensated by "connection.alert_cleared"
// (projection.CompensationID of the alert, once).
type QuilttConnections struct{}

var _ projection.Projection = (*QuilttConnections)(nil)

// NewQuilttConnections returns the projection.
func NewQuilttConnections() *QuilttConnections { return &QuilttConnections{} }

// Name returns the projection name.
func (*QuilttConnections) Name() string { return QuilttConnectionProjection }

// EventTypes lists the Quiltt event types it handles.
func (*QuilttConnections) EventTypes() []string {
	return []string{
		"connection.synced.successful", "connection.synced.successful.initial", "connection.synced.successful.historical",
		"connection.synced.errored.repairable", "connection.synced.errored.service",
		"connection.synced.errored.provider", "connection.synced.errored.institution",
		"connection.disconnected",
	}
}

// Connection health states.
const (
	HealthHealthy      = "healthy"
	HealthUnhealthy    = "unhealthy"
	HealthDisconnected = "disconnected"
)

// quilttHealth maps an event type to health and error kind.
func quilttHealth(typ string) (health, kind string, ok bool) {
	switch {
	case typ == "connection.synced.successful" || typ == "connection.synced.successful.initial" || typ == "connection.synced.successful.historical":
		return HealthHealthy, "", true
	case strings.HasPrefix(typ, "connection.synced.errored."):
		kind = strings.TrimPrefix(typ, "connection.synced.errored.")
		return HealthUnhealthy, kind, kind != "" && !strings.Contains(kind, ".")
	case typ == "connection.disconnected":
		return HealthDisconnected, "", true
	}
	return "", "", false
}

type quilttEvent struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	At     string `json:"at"`
	Record struct {
		ID        string `json:"id"`
		ProfileID string `json:"profileId"`
		Status    string `json:"status"`
		Source    string `json:"source"`
	} `json:"record"`
	Profile struct {
		ID string `json:"id"`
	} `json:"profile"`
}

// Project computes the connection health from one event element.
func (*QuilttConnections) Project(ev projection.Event) (projection.Result, error) {
	var e quilttEvent
	if err := json.Unmarshal(ev.Payload, &e); err != nil {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("quiltt event is not JSON: %v", err))
	}
	typ := e.Type
	if typ == "" {
		typ = ev.Type
	}
	if ev.Type != "" && e.Type != "" && ev.Type != e.Type {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("event type %q but the element says %q", ev.Type, e.Type))
	}
	health, kind, ok := quilttHealth(typ)
	if !ok {
		return projection.Result{}, projection.Permanent("unsupported_type", fmt.Errorf("quiltt connection projection does not handle %q", typ))
	}
	conn := e.Record.ID
	if err := validSubject("record.id (the connection)", conn); err != nil {
		return projection.Result{}, err
	}
	var version int64
	var err error
	switch {
	case e.At != "":
		version, err = unixMillis("at", e.At)
	case !ev.ReceivedAt.IsZero() && ev.ReceivedAt.UnixMilli() > 0:
		version = ev.ReceivedAt.UnixMilli()
	default:
		err = projection.Permanent("malformed", errors.New("quiltt event has no \"at\" and no receipt time"))
	}
	if err != nil {
		return projection.Result{}, err
	}
	state := map[string]any{
		"connection_id": conn,
		"health":        health,
		"error_kind":    kind,
	}
	res := projection.Result{Write: &projection.Write{
		Name: QuilttConnectionProjection, Subject: conn, Version: version,
		Fingerprint: projection.Fingerprint(state), State: state,
	}}
	if health == HealthUnhealthy {
		profile := e.Record.ProfileID
		if profile == "" {
			profile = e.Profile.ID
		}
		res.Intents = []projection.Intent{{
			OperationID: projection.OperationID(QuilttConnectionProjection, conn, HealthUnhealthy, strconv.FormatInt(version, 10)),
			Kind:        "connection.alert",
			Subject:     conn,
			// An alert about an unhealthy connection is moot once it has
			// recovered: sent only while the connection is still unhealthy.
			Policy:       projection.PolicyWhileCurrent,
			Condition:    map[string]string{"health": HealthUnhealthy},
			Compensation: "connection.alert_cleared",
			Payload: map[string]any{
				"connection_id": conn, "profile_id": profile, "event_type": typ, "error_kind": kind,
				"connection_status": e.Record.Status, "provider": e.Record.Source,
				"at": e.At, "version": version,
			},
		}}
	}
	return res, nil
}
