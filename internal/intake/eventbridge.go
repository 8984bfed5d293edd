package intake

// The EventBridge envelopes. Stripe (an event destination of type
// amazon_eventbridge): source "aws.partner/stripe.com/ed_<destination>",
// detail-type the event's type, resources the event source's ARN, detail
// the Stripe event object itself, snapshot
// ({"id":"evt_…","object":"event","data":{"object":…}}) or thin
// ({"object":"v2.core.event","related_object":…}). Sources: Stripe's "Send
// events to Amazon EventBridge"
// (docs.stripe.com/event-destinations/eventbridge: the destination is
// created in Workbench, Stripe creates the partner event source in the
// chosen account and region, and it must be associated with an event bus
// within 7 days) and the EventBridge fixtures of Stripe's own SDK tests (a
// stripe Go client's ConstructEventFromCloudProvider test: detail-type
// "customer.created", detail the evt_ object; a thin
// "v2.core.event_destination.ping"), which match public consumers'
// recorded events. Shopify: see provider.ShopifyEventBridgeIdentity.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/metrics"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/pkg/provider"
)

// Errors of the EventBridge path.
var (
	// ErrUnknownEventSource: no source's delivery includes eventbridge with
	// this event_source. The stack's rules match configured event sources
	// only, so this is a misconfiguration (SOURCES changed without a
	// deploy, or a hand-made rule), never provider input to drop.
	ErrUnknownEventSource = errors.New("intake: no source receives events from this event source")
	// ErrNotEventBridgeKind: a source's kind has no EventBridge identity
	// (source.Parse refuses such a configuration; kept for safety).
	ErrNotEventBridgeKind = errors.New("intake: source kind has no EventBridge identity")
)

// Ledger attributes the EventBridge path adds to an event.
const (
	// attrVia is "eventbridge" on the attributes an EventBridge delivery
	// brings (https deliveries add none). The ledger keeps the attributes
	// of the first delivery that carried any, so it names the path that
	// created the row, except after a Stripe snapshot webhook (which has no
	// attributes) when the bus's are the first.
	attrVia        = "via"
	viaEventBridge = "eventbridge"
	// attrEventBridgeID is the EventBridge event's own id.
	attrEventBridgeID = "eventbridge_id"
)

// HandleEventBridge accepts one event from an Amazon EventBridge partner
// event source (Stripe event destinations, Shopify): the second intake
// path, beside Handle's signed HTTPS webhooks. The detail reaches the
// ledger exactly as EventBridge delivered it (events.EventBridgeEvent
// keeps it as raw bytes).
//
// No signature exists on this path: trust comes from the partner event
// source, which only the partner can write, the stack's rule matching
// exactly the configured event_source, and the one source whose delivery
// includes eventbridge with that event_source (source.Set.ByEventSource).
// Its provider kind reads the identity the HTTPS path reads
// (provider.StripeIdentity over the detail, which is the stored payload;
// provider.ShopifyEventBridgeIdentity, which stores detail.payload), so
// one fact delivered both ways is one ledger row; a duplicate through the
// other path has other bytes (EventBridge re-serializes the JSON), keeps
// the first payload and is logged at info level. The EventBridge id is the
// attribute eventbridge_id (and the delivery id when the provider names
// none); the attribute via is "eventbridge".
//
// It returns nil once every identity is durably accepted by Handle's
// accept step (and enqueued when it waits), and an error otherwise, so
// Lambda's asynchronous retries and then the function's dead-letter queue
// keep the event (nothing is acknowledged before the ledger has it: I1,
// see docs/architecture.md):
//
//   - ledger or queue failure: an error (a row already written stays
//     RECEIVED and the reconciler re-enqueues it).
//   - unknown event source: an error wrapping ErrUnknownEventSource, as
//     dropping it would lose a fact the partner delivered: after the
//     retries it waits in the bridge DLQ (alarmed) until the configuration
//     names the source (SweepEventBridgeDLQ accepts it).
//   - body over max_body_bytes, or no usable identity: QUARANTINED under
//     ledger.ContentID of the detail, as on the HTTPS path; nil.
//   - a Stripe connected account the source does not accept: QUARANTINED
//     under its own id (connect_account_not_allowed); nil.
//
// It never panics on input and emits one metrics record with function
// "intake-eventbridge": Received, Accepted, Duplicates, ConnectRefused,
// Rejected (unknown event source) and IntakeLatencyMs.
func (h *Handler) HandleEventBridge(ctx context.Context, ev events.EventBridgeEvent) error {
	start := h.now()
	var t tally
	name, outcome, err := h.handleEventBridge(ctx, ev, &t)
	rejected := 0
	if errors.Is(err, ErrUnknownEventSource) {
		rejected = 1
	}
	h.Metrics.Emit(map[string]any{"function": "intake-eventbridge", "source": name, "event_source": ev.Source, "outcome": outcome,
		"request_id": requestID(ctx), "eventbridge_id": ev.ID},
		metrics.N("Received", 1), metrics.N("Accepted", t.accepted), metrics.N("Duplicates", t.duplicates),
		metrics.N("ConnectRefused", t.connect), metrics.N("Rejected", rejected), metrics.Latency("IntakeLatencyMs", h.now().Sub(start)))
	return err
}

// handleEventBridge is HandleEventBridge without the metrics record; the
// bridge DLQ sweep runs it too. It returns the source's name and an
// outcome word for the record.
func (h *Handler) handleEventBridge(ctx context.Context, ev events.EventBridgeEvent, t *tally) (name, outcome string, err error) {
	log := h.log().With("event_source", ev.Source, "eventbridge_id", ev.ID, "detail_type", ev.DetailType, "request_id", requestID(ctx))
	src, ok := h.Sources.ByEventSource(ev.Source)
	if !ok {
		log.Error("event from an event source no source receives; left to the bridge DLQ until SOURCES names it", "outcome", "unknown_event_source")
		return "", "unknown_event_source", fmt.Errorf("%w: %q (event %s)", ErrUnknownEventSource, ev.Source, ev.ID)
	}
	log = log.With("source", src.Name)
	detail := []byte(ev.Detail)

	var verified provider.Verified
	switch {
	case len(detail) > src.BodyLimit():
		verified = provider.Verified{Unidentified: fmt.Sprintf("detail of %d bytes is over the source's limit of %d", len(detail), src.BodyLimit())}
	case src.Kind == "stripe":
		verified = provider.StripeIdentity(detail)
	case src.Kind == "shopify":
		verified = provider.ShopifyEventBridgeIdentity(detail)
	default:
		log.Error("source has no EventBridge identity", "kind", src.Kind)
		return src.Name, "misconfigured", fmt.Errorf("%w: source %s is %s", ErrNotEventBridgeKind, src.Name, src.Kind)
	}

	attrs := map[string]string{attrVia: viaEventBridge, attrEventBridgeID: ev.ID}
	if verified.Unidentified == "" {
		var bad map[string]string
		verified.Unidentified, bad = unusableID(verified)
		maps.Copy(attrs, bad)
	}
	if verified.Unidentified != "" {
		code := "no_identity"
		if len(detail) > src.BodyLimit() {
			code = "too_large"
		}
		id := ledger.ContentID(detail)
		res, err := h.Ledger.Accept(ctx, ledger.Delivery{Source: src.Name, EventID: id, EventType: "unidentified", DeliveryID: ev.ID,
			Payload: detail, Quarantine: code, Attributes: attrs})
		if err != nil {
			log.Error("ledger write failed", "event_id", id, "err", err)
			return src.Name, "failed", fmt.Errorf("quarantine event %s of %s: %w", ev.ID, src.Name, err)
		}
		log.Warn("event without usable identity kept quarantined", "event_id", id, "reason", verified.Unidentified, "duplicate", res.Duplicate, "outcome", "quarantined")
		return src.Name, "quarantined", nil
	}

	outcome = "accepted"
	for _, ident := range verified.Events {
		ident.Attributes = maps.Clone(ident.Attributes)
		if ident.Attributes == nil {
			ident.Attributes = map[string]string{}
		}
		ident.Attributes[attrVia] = viaEventBridge
		if ev.ID != "" {
			ident.Attributes[attrEventBridgeID] = ev.ID
		}
		if ident.DeliveryID == "" {
			ident.DeliveryID = ev.ID
		}
		res, err := h.accept(ctx, log, src, ident, detail, t)
		if err != nil {
			if !errors.Is(err, errEnqueue) {
				log.Error("ledger write failed", "event_id", ident.EventID, "err", err)
			}
			return src.Name, "failed", fmt.Errorf("accept %s/%s (event %s): %w", src.Name, ident.EventID, ev.ID, err)
		}
		if res.Duplicate {
			outcome = "duplicate"
		}
	}
	return src.Name, outcome, nil
}

func requestID(ctx context.Context) string {
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		return lc.AwsRequestID
	}
	return ""
}

// BridgeDLQReport counts what one sweep of the bridge dead-letter queue did.
type BridgeDLQReport struct {
	Seen int `json:"seen"`
	// Accepted: delivered to the ledger (new, or a duplicate of a row that
	// exists) and deleted from the DLQ.
	Accepted int `json:"accepted"`
	// UnknownSource: kept; no source receives its event source yet.
	UnknownSource int `json:"unknown_source"`
	// Unreadable: kept; not an EventBridge event.
	Unreadable int `json:"unreadable"`
	// Refused: written by a sender DLQSenders does not name; recorded
	// QUARANTINED under RefusedDLQSource, never redelivered, and deleted.
	Refused int `json:"refused"`
}

// What the bridge DLQ sweep records of a dead letter it refuses.
const (
	// RefusedDLQSource is the ledger source a refused letter is recorded
	// under. It is no source's name (names have no '/'), so a refused
	// letter never takes the event id of a real event, and the processor
	// never applies one: released, it finds no such source and quarantines
	// it again.
	RefusedDLQSource = "bridge-dlq/refused"
	// CodeDLQSenderRefused is its error code.
	CodeDLQSenderRefused = "dlq_sender_refused"
	// refusedEventType is its event type.
	refusedEventType = "refused_dead_letter"
)

// SweepEventBridgeDLQ redelivers the bridge's dead letters. The bridge DLQ
// holds raw EventBridge events: the rule's target DLQ gets an event
// EventBridge could not deliver to the function, and the function's
// asynchronous-invocation DLQ gets an event whose invocations all failed.
//
// A letter is trusted only for who wrote it. The partner path has no
// signature, so a letter is redelivered only when SQS names its sender
// (the SenderId system attribute, which the sweep asks for) as one of
// h.DLQSenders: the bridge function's role, whose session Lambda uses to
// put a failed event there. Any other letter, or one SQS names no sender
// for, is refused: recorded in the ledger QUARANTINED under
// RefusedDLQSource (event id the content id of its sender and body, error
// code CodeDLQSenderRefused, the letter as payload, its sender, the reason
// and what it claims in its attributes), where an operator lists it, and
// deleted only once recorded. Nothing of it is accepted under the partner
// source, so it is never processed. With no DLQSenders, every letter is
// refused.
//
// An allowed letter goes through the same path as a live event
// (handleEventBridge: identity, Accept, enqueue), which is idempotent by
// event id, and is deleted only once accepted. A message whose event
// source no source receives, or that is not an event at all, is kept (the
// DLQ's alarm stays on) for the next sweep or an operator. A ledger or
// queue failure ends the sweep with the error; the message stays. A Lambda
// on-failure destination record ({"requestPayload": event, …}) is read too.
func (h *Handler) SweepEventBridgeDLQ(ctx context.Context, c queue.DLQClient, dlqURL string, maxMessages int) (BridgeDLQReport, error) {
	var rep BridgeDLQReport
	// SenderId: who wrote it. RULE_ARN and ERROR_CODE: what EventBridge
	// adds to a letter it writes, kept on a refusal's record (as what the
	// letter says: its sender may set them too).
	ask := queue.Ask{System: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameSenderId}, Message: []string{"RULE_ARN", "ERROR_CODE"}}
	seen, err := queue.SweepDLQMessages(ctx, c, dlqURL, maxMessages, ask, func(ctx context.Context, m sqstypes.Message) (bool, error) {
		body := aws.ToString(m.Body)
		if sender := m.Attributes[string(sqstypes.MessageSystemAttributeNameSenderId)]; !h.DLQSenders.Allows(sender) {
			if err := h.refuseDeadLetter(ctx, m, sender); err != nil {
				return false, fmt.Errorf("bridge DLQ: %w", err)
			}
			rep.Refused++
			return true, nil
		}
		ev, ok := dlqEvent(body)
		if !ok {
			rep.Unreadable++
			h.log().Warn("bridge DLQ message is not an EventBridge event; kept", "bytes", len(body))
			return false, nil
		}
		var t tally
		_, _, err := h.handleEventBridge(ctx, ev, &t)
		switch {
		case err == nil:
			rep.Accepted++
			return true, nil
		case errors.Is(err, ErrUnknownEventSource), errors.Is(err, ErrNotEventBridgeKind):
			rep.UnknownSource++
			return false, nil
		}
		return false, fmt.Errorf("bridge DLQ: %w", err)
	})
	rep.Seen = seen
	return rep, err
}

// refuseDeadLetter records a letter from a sender DLQSenders does not name.
func (h *Handler) refuseDeadLetter(ctx context.Context, m sqstypes.Message, sender string) error {
	body := aws.ToString(m.Body)
	who := sender
	if who == "" {
		who = "(SQS named none)"
	}
	reason := "sender " + who + " may not write the bridge DLQ (allowed: " + h.DLQSenders.String() + ")"
	attrs := map[string]string{attrVia: "bridge-dlq", "sender_id": who, "reason": reason, "sqs_message_id": aws.ToString(m.MessageId)}
	if ev, ok := dlqEvent(body); ok {
		attrs["event_source"], attrs[attrEventBridgeID], attrs["detail_type"] = ev.Source, ev.ID, ev.DetailType
	}
	for name, key := range map[string]string{"RULE_ARN": "letter_rule_arn", "ERROR_CODE": "letter_error_code"} {
		if v, ok := m.MessageAttributes[name]; ok && v.StringValue != nil {
			attrs[key] = *v.StringValue
		}
	}
	id := ledger.ContentID([]byte(who + "\n" + body))
	log := h.log().With("sender_id", who, "sqs_message_id", aws.ToString(m.MessageId), "event_id", id, "claimed_event_source", attrs["event_source"])
	res, err := h.Ledger.Accept(ctx, ledger.Delivery{Source: RefusedDLQSource, EventID: id, EventType: refusedEventType,
		DeliveryID: aws.ToString(m.MessageId), Payload: []byte(body), Quarantine: CodeDLQSenderRefused, Attributes: attrs})
	if err != nil {
		log.Error("recording a refused bridge DLQ letter failed; it stays in the DLQ", "err", err)
		return fmt.Errorf("record refused letter %s: %w", aws.ToString(m.MessageId), err)
	}
	log.Error("bridge DLQ letter from a sender that is not the bridge: recorded QUARANTINED, not redelivered", "reason", reason,
		"duplicate", res.Duplicate, "outcome", "refused")
	return nil
}

// dlqEvent reads a bridge dead letter: an EventBridge event, or a Lambda
// destination record around one.
func dlqEvent(body string) (events.EventBridgeEvent, bool) {
	var rec struct {
		RequestPayload json.RawMessage `json:"requestPayload"`
	}
	raw := []byte(body)
	if json.Unmarshal(raw, &rec) == nil && len(rec.RequestPayload) > 0 && !bytes.Equal(rec.RequestPayload, []byte("null")) {
		raw = rec.RequestPayload
	}
	var ev events.EventBridgeEvent
	if err := json.Unmarshal(raw, &ev); err != nil || ev.Source == "" || len(ev.Detail) == 0 {
		return events.EventBridgeEvent{}, false
	}
	return ev, true
}
