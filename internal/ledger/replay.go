package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// CodeSuspectedReplay is the error code of a delivery kept as a suspected
// replay: its id is not signed, and its bytes were first delivered under
// another id (see ClaimBody). Such a row holds another event's bytes, so
// it yields its id to the event's own bytes (see Accept).
const CodeSuspectedReplay = "suspected_replay"

// displaceable reports whether a row holds a suspected replay that no
// worker or operator has acted on: QUARANTINED as CodeSuspectedReplay on
// accept, never attempted (an operator's replay or hold changes its status
// or error code, and any processing its attempts).
func displaceable(ev Event) bool {
	return ev.Status == StatusQuarantined && ev.ErrorCode == CodeSuspectedReplay && ev.TotalAttempts == 0
}

// errDisplaceLost: the suspected replay's row changed before displace
// wrote it.
var errDisplaceLost = errors.New("the suspected replay's row changed first")

// displace gives the row of a suspected replay (ev, displaceable) to
// delivery d, the event's own bytes, in one UpdateItem conditioned on the
// row as read: still the untouched replay, with the replay's payload hash.
// Of two deliveries racing to displace it exactly one wins; the other gets
// errDisplaceLost and is judged again against the winner's row (a
// duplicate of the same bytes, a conflict with other ones).
//
// The row becomes what Accept would have written for d on an empty key:
// RECEIVED on its work shard (due now), d's type, subject, version hint,
// attributes, payload and delivery, received now, one delivery. What made
// it a replay leaves the row's fields (error code and message, the
// replay's attributes and replay_of, its deliveries, and the conflicts
// recorded against its bytes) and is kept in the audit: the replay's own
// quarantine_on_accept entry stays, and a "displace_replay" entry
// (QUARANTINED to RECEIVED) names the replayed event, the replay's hash,
// its delivery and conflict counts, and d's hash and delivery. The
// replay's bytes are the replayed event's (ClaimBody keyed them by hash),
// so no evidence is lost with its payload. Chunks of a large payload are
// written after the row, as for a new event.
//
// Cost: this one UpdateItem after the upsert's refusal, as a conflict's
// record costs (both are billed by the item's size); moving the row from
// its attention shard to its work shard adds two index writes (the due
// index deletes one entry and puts another).
func (l *Ledger) displace(ctx context.Context, in acceptInput, ev Event) (Accepted, error) {
	d, key := in.d, eventKey(in.d.Source, in.d.EventID)
	reason := displaceReason(in, ev)
	u := displacePlan(in, ev, l.opts.Actor, reason)
	req := u.input(l.opts.Table, key)
	req.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	if _, err := l.db.UpdateItem(ctx, req); err != nil {
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return Accepted{}, fmt.Errorf("displace the suspected replay %s/%s: %w", d.Source, d.EventID, translate(err))
		}
		if _, own := l.appliedBefore(ctx, ccf, key, u.vals[":audit"]); !own {
			return Accepted{}, fmt.Errorf("displace the suspected replay %s/%s: %w", d.Source, d.EventID, errDisplaceLost)
		}
		// This very displacement, applied by an earlier attempt whose
		// answer was lost (see appliedBefore).
	}
	if in.payload.chunks > 0 {
		if err := l.putChunks(ctx, d.Source, d.EventID, in.payload.hash, in.payload.bytes, in.payload.chunks); err != nil {
			return Accepted{}, err
		}
	}
	replay := ev
	return Accepted{Event: displacedEvent(in, ev, l.opts.Actor, reason), Displaced: &replay}, nil
}

// displaceReason is the reason of the displace_replay audit entry: the
// replayed event, the replay's hash, delivery and conflict counts, and the
// displacing delivery's hash and id.
func displaceReason(in acceptInput, ev Event) string {
	conflicts := ""
	if ev.Conflicts > 0 {
		conflicts = fmt.Sprintf(", %d conflicting deliveries", ev.Conflicts)
	}
	return fmt.Sprintf("%s displaced by the event's own bytes (sha256/128 %s, delivery %q): this id held a replay of %q (sha256/128 %s, %d deliveries%s)",
		CodeSuspectedReplay, in.payload.hash, truncate(in.d.DeliveryID, 64), truncate(ev.Attributes["replay_of"], 64), ev.PayloadHash, ev.DeliveryCount, conflicts)
}

// displacePlan is displace's write: the row as a new row of in, every
// field the replay had and in has not removed, conditioned on the row
// still being the untouched replay ev.
func displacePlan(in acceptInput, ev Event, actor, reason string) *update {
	u := (&update{}).Name("#status", "status").Values(rowValues(in)).Values(map[string]types.AttributeValue{
		":received": sv(string(StatusReceived)),
		":quar":     sv(string(StatusQuarantined)),
		":replay":   sv(CodeSuspectedReplay),
		":oldhash":  sv(ev.PayloadHash),
		":audit":    auditValue(in.now, StatusQuarantined, StatusReceived, actor, "displace_replay", truncate(reason, MaxReasonLen)),
	})
	u.Set(
		"#status = :received", "event_type = :etype", "received_at = :now",
		"payload_hash = :hash", "payload_size = :size", "payload_chunks = :chunks", "payload_enc = :enc",
		attrDueShard+" = :shard", attrDueAt+" = :now", "delivery_count = :one",
		historyAttr(in.slot)+" = :hist", "audit = list_append(audit, :audit)",
	)
	u.Remove("error_code", "error_message", "conflict_count", "last_conflict", "last_delivery_id", "last_delivery_at")
	for i := range DeliveryHistorySlots {
		if i != in.slot {
			u.Remove(historyAttr(i))
		}
	}
	for _, f := range optionalFields(in) {
		if f.present {
			u.Value(f.ph, f.v).Set(f.attr + " = " + f.ph)
		} else {
			u.Remove(f.attr)
		}
	}
	return u.If("#status = :quar", "error_code = :replay", "total_attempts = :zero", "payload_hash = :oldhash")
}

// displacedEvent is the row displace wrote, built here rather than read
// back: the replay's audit with the displace_replay entry, and in's
// fields as a new row.
func displacedEvent(in acceptInput, ev Event, actor, reason string) Event {
	d, now := in.d, in.now
	audit := append(append([]AuditEntry(nil), ev.Audit...), AuditEntry{
		At: now.UTC().Truncate(time.Millisecond), From: StatusQuarantined, To: StatusReceived, Actor: truncate(actor, MaxIDLength),
		Action: "displace_replay", Reason: truncate(reason, MaxReasonLen),
	})
	return Event{
		Source: d.Source, EventID: d.EventID, EventType: d.EventType, Subject: d.Subject, VersionHint: d.VersionHint,
		Status: StatusReceived, ReceivedAt: now, DeliveryCount: 1, FirstDeliveryID: d.DeliveryID,
		LastDeliveryID: d.DeliveryID, LastDeliveryAt: now, PayloadHash: in.payload.hash, PayloadSize: in.payload.size,
		PayloadChunks: in.payload.chunks, RecentDeliveries: []DeliveryRecord{{At: now, ID: d.DeliveryID}}, Audit: audit,
	}
}

// ClaimBody records that a body arrived under eventID, for schemes whose
// ids are not signed (provider.Identity.UnsignedID): one conditional
// PutItem of a small marker keyed by the source and the body's hash, kept
// for the events' retention. It returns the event id that first claimed
// the body: eventID itself for a first delivery or a redelivery of the same
// event; another id means the same bytes came back under a new id, a
// suspected replay of a captured delivery.
func (l *Ledger) ClaimBody(ctx context.Context, source, hash, eventID string) (string, error) {
	now := l.now()
	key := bodyKey(source, hash)
	item := map[string]types.AttributeValue{
		attrPK: key[attrPK], attrSK: key[attrSK], "item": sv("body"), "event_id": sv(eventID),
		"first_at": nv(ms(now)), TTLAttribute: nv(now.Add(l.opts.Retention).Unix()),
	}
	_, err := l.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           aws.String(l.opts.Table),
		Item:                                item,
		ConditionExpression:                 aws.String("attribute_not_exists(pk) OR event_id = :eid"),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":eid": sv(eventID)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return eventID, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return "", fmt.Errorf("claim body %s/%s: %w", source, hash, translate(err))
	}
	old := ccf.Item
	if _, ok := old["event_id"]; !ok {
		if old, err = l.getItem(ctx, key, "body "+source+"/"+hash); err != nil {
			return "", fmt.Errorf("claim body %s/%s: %w", source, hash, err)
		}
	}
	if v, ok := old["event_id"].(*types.AttributeValueMemberS); ok {
		return v.Value, nil
	}
	return "", fmt.Errorf("claim body %s/%s: marker without an event id: %w", source, hash, ErrConflict)
}
