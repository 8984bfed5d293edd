package builtin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// OrderProjection is the generic order projection's name in the ledger.
const OrderProjection = "order"

// DefaultHopBudget is how many automation hops an order event may have
// travelled, counting ours, before it is quarantined as a runaway chain.
const DefaultHopBudget = 5

// OrderOptions configure the generic order projection. The zero value works.
type OrderOptions struct {
	// HopBudget is the largest hop an intent may carry (origin.hop + 1);
	// an event past it is quarantined with code "hop_budget". Zero or less
	// means DefaultHopBudget.
	HopBudget int64
}

// Orders projects a generic order workflow delivered as Standard Webhooks:
// {"type":"order.updated","data":{"id":"O-42","revision":12,
// "status":"cancelled",...},"origin":{"automation":"A","hop":2}}.
//
// Ordering: subject = data.id, version = data.revision, an integer the
// source increments with every change (required: without it the event is
// malformed). A newer revision wins and an older one is stale (a late r11
// CONFIRMED never resurrects an r12 CANCELLED); the same revision with the
// same state is a noop, with another state it is quarantined
// (version_conflict). No state is terminal.
//
// State: data as sent (numbers exact) minus "revision" and "updated_at",
// which change with every revision without being business facts; status
// lower-cased, "canceled" read as "cancelled", and implied by
// order.created, order.confirmed and order.cancelled when absent. The
// envelope ("type", "timestamp", "origin") is not state, so an automation
// echoing the same state back under another type or origin triggers
// nothing. The type is the one recorded at intake, or the body's "type"
// when that is not an order type.
//
// Intents: an applied cancelled state emits "refund", keyed
// projection.OperationID(order, "refund_due_to_cancellation", revision),
// and "notify_cancellation", keyed projection.OperationID(order,
// "notify_cancellation", revision), carrying the order id, revision, the
// money and customer fields present and the state. Both are while_current
// on status=cancelled: one still waiting when a newer revision un-cancels
// the order ends OBSOLETE without a call. When the effect was already
// performed, the newer revision's commit makes the refund CONTRADICTED (an
// attention item: money has no safe compensation) and compensates the
// notice with "notify_reinstatement" (projection.CompensationID, once). A
// later revision that stays cancelled but changes a business field emits
// intents of its own revision, so the refund effect must treat an order's
// cancellation as refunded once one refund for it succeeded.
//
// Hop budget: "origin" is copied into every intent's payload with hop+1
// (absent hop is 0), for the automation performing the effect to pass on;
// an event whose hop+1 exceeds the budget is quarantined with
// projection.Permanent("hop_budget"), since a chain that long is a loop
// between automations.
type Orders struct {
	budget int64
}

var _ projection.Projection = (*Orders)(nil)

// NewOrders returns the projection.
func NewOrders(opts OrderOptions) *Orders {
	if opts.HopBudget <= 0 {
		opts.HopBudget = DefaultHopBudget
	}
	return &Orders{budget: opts.HopBudget}
}

// Name returns the projection name.
func (*Orders) Name() string { return OrderProjection }

// EventTypes lists the order event types it handles.
func (*Orders) EventTypes() []string {
	return []string{"order.created", "order.updated", "order.confirmed", "order.cancelled"}
}

// orderTypeStatus is the status an order type implies ("" for
// order.updated: it implies none).
var orderTypeStatus = map[string]string{
	"order.created":   "created",
	"order.updated":   "",
	"order.confirmed": "confirmed",
	"order.cancelled": "cancelled",
}

// orderNotState are data fields that are not business facts.
var orderNotState = map[string]bool{"revision": true, "updated_at": true}

// orderCopied are data fields copied into intent payloads when present.
var orderCopied = []string{"customer_id", "currency", "total_minor", "total", "amount_minor", "amount", "payment_id"}

// Project computes the order state from one event.
func (p *Orders) Project(ev projection.Event) (projection.Result, error) {
	var body struct {
		Type   string          `json:"type"`
		Data   json.RawMessage `json:"data"`
		Origin json.RawMessage `json:"origin"`
	}
	if err := json.Unmarshal(ev.Payload, &body); err != nil {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("order event is not a JSON object: %v", err))
	}
	typ := ev.Type
	if _, ok := orderTypeStatus[typ]; !ok {
		typ = body.Type
	}
	implied, ok := orderTypeStatus[typ]
	if !ok {
		return projection.Result{}, projection.Permanent("unsupported_type", fmt.Errorf("order projection does not handle %q (body type %q)", ev.Type, body.Type))
	}
	var data map[string]any
	if err := decodeObject(body.Data, &data); err != nil || data == nil {
		return projection.Result{}, projection.Permanent("malformed", errors.New("order event has no data object"))
	}
	if hasEmptyKey(data) {
		// The state keeps every business field; one the store cannot hold
		// is refused rather than silently dropped.
		return projection.Result{}, projection.Permanent("malformed", errors.New("order data has a field with an empty name"))
	}
	idRaw, _ := json.Marshal(data["id"])
	id := idText(idRaw)
	if err := validSubject("data.id", id); err != nil {
		return projection.Result{}, err
	}
	revRaw, _ := json.Marshal(data["revision"])
	revision, ok := jsonInt(revRaw)
	if !ok || revision < 0 {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("order %s: data.revision must be a non-negative integer", id))
	}
	status, _ := data["status"].(string)
	status = strings.ToLower(strings.TrimSpace(status))
	if status == "canceled" {
		status = "cancelled"
	}
	if status == "" {
		status = implied
	}
	if status == "" {
		return projection.Result{}, projection.Permanent("malformed", fmt.Errorf("order %s revision %d has no status", id, revision))
	}
	origin, err := p.nextOrigin(body.Origin)
	if err != nil {
		return projection.Result{}, err
	}

	state := make(map[string]any, len(data))
	for k, v := range data {
		if !orderNotState[k] {
			state[k] = normalizeJSON(v)
		}
	}
	state["status"] = status
	res := projection.Result{Write: &projection.Write{
		Name: OrderProjection, Subject: id, Version: revision,
		Fingerprint: projection.Fingerprint(state), State: state,
	}}
	if status != "cancelled" {
		return res, nil
	}
	rev := strconv.FormatInt(revision, 10)
	for _, in := range []struct{ kind, transition, compensation string }{
		{"refund", "refund_due_to_cancellation", ""},
		{"notify_cancellation", "notify_cancellation", "notify_reinstatement"},
	} {
		payload := map[string]any{
			"order_id": id, "revision": revision, "version": revision, "status": status,
			"reason": "cancellation", "origin": deepCopy(origin), "order": deepCopy(state),
		}
		for _, k := range orderCopied {
			if v, ok := state[k]; ok {
				payload[k] = v
			}
		}
		res.Intents = append(res.Intents, projection.Intent{
			OperationID: projection.OperationID(id, in.transition, rev),
			Kind:        in.kind,
			Subject:     id,
			Payload:     payload,
			// A refund and its notice are justified by the cancellation:
			// performed only while the order is still cancelled.
			Policy:       projection.PolicyWhileCurrent,
			Condition:    map[string]string{"status": "cancelled"},
			Compensation: in.compensation,
		})
	}
	return res, nil
}

// nextOrigin reads the body's origin and returns it with hop+1, refusing
// the event when that passes the budget.
func (p *Orders) nextOrigin(raw json.RawMessage) (map[string]any, error) {
	origin := map[string]any{}
	if t := bytes.TrimSpace(raw); len(t) > 0 && string(t) != "null" {
		if err := decodeObject(t, &origin); err != nil || origin == nil {
			return nil, projection.Permanent("malformed", errors.New("origin is not a JSON object"))
		}
		if hasEmptyKey(origin) {
			return nil, projection.Permanent("malformed", errors.New("origin has a field with an empty name"))
		}
		origin = normalizeJSON(origin).(map[string]any)
	}
	var hop int64
	if h, present := origin["hop"]; present {
		n, ok := h.(int64)
		if !ok || n < 0 {
			return nil, projection.Permanent("malformed", errors.New("origin.hop must be a non-negative integer"))
		}
		hop = n
	}
	if hop >= p.budget {
		return nil, projection.Permanent("hop_budget", fmt.Errorf("origin hop %d + 1 exceeds the budget of %d: a runaway automation chain?", hop, p.budget))
	}
	origin["hop"] = hop + 1
	return origin, nil
}

// deepCopy copies a JSON-shaped map through its JSON form, so intents
// never share a map or slice with each other or with the write.
func deepCopy(m map[string]any) map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = decodeObject(b, &out)
	return normalizeJSON(out).(map[string]any)
}
