package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Delivery is one verified webhook fact to accept. Source and EventID are
// keys: Accept refuses one that CheckEventID would. The other text fields
// are the sender's, often unsigned: Accept stores them in Printable form,
// cut to the ledger's bounds.
type Delivery struct {
	Source     string
	EventID    string
	EventType  string
	DeliveryID string // transport attempt id when the provider sends one
	Subject    string // provider subject hint, may be empty
	Payload    []byte // the raw verified bytes

	// VersionHint is the source's revision of the subject when the delivery
	// says (kept for operators and the reconciler; projections read the payload).
	VersionHint string
	// Attributes are other identities and facts worth keeping (bounded).
	Attributes map[string]string

	// Quarantine, when set, accepts the event directly as QUARANTINED with
	// this error code: it was verified but cannot be processed as it came
	// (no usable identity: kept under a content-hash id; a suspected
	// replay; an account the source does not accept), so it is kept for an
	// operator instead of thrown away. QuarantineReason, when set, is its
	// error message.
	Quarantine       string
	QuarantineReason string
}

// Accepted is the outcome of Accept.
type Accepted struct {
	Event Event
	// Duplicate is false for exactly one caller per (source, event_id),
	// and for the one delivery that displaced a suspected replay under it.
	Duplicate bool
	// Displaced is the suspected replay this delivery displaced, as the
	// row was before (nil when none): the row under this id held another
	// event's bytes, and now holds this delivery's, RECEIVED (see Accept).
	Displaced *Event
	// PayloadMismatch: a duplicate whose bytes differ from the stored payload.
	PayloadMismatch bool
	// Conflict: the event id is known with other bytes in the same form
	// (same delivery path, same format): not a duplicate, and nothing on
	// the row changed but its conflict record (Event.Conflicts). Only a
	// different path or form (FormAttributes) makes other bytes a
	// duplicate.
	Conflict bool
}

// FormAttributes are the delivery attributes that say in which form an
// event arrived: the same fact delivered through another path (EventBridge
// re-serializes the JSON) or in another form (a Stripe thin twin) has
// other bytes by design and is still a duplicate. Any other difference in
// bytes under the same id is a conflict (see Accept).
var FormAttributes = []string{"via", "format"}

// Accept records a verified delivery in one request: an UpdateItem upsert
// that returns the old row (ReturnValues ALL_OLD), so exactly one caller per
// (source, event_id) sees no old row, and every duplicate learns the row from
// the same response. Every stored field is written with if_not_exists, so a
// duplicate never changes the event's identity, status, payload, result or
// audit; it only records itself: delivery_count and one slot ("dh<n>") of
// the bounded delivery history, which also tells the last delivery's time
// and id (see Event.RecentDeliveries). That holds for a duplicate of a
// finished event too: it costs the one request it cost when its write was
// refused by a condition and recorded nothing (DynamoDB bills a refused
// write by the item's size as well).
//
// The due index's keys. A new row gets a work shard; a row that has due
// keys keeps them (unfinished: its work shard; DEAD or QUARANTINED: its
// attention shard). A PROCESSED row lost them at completion, which left
// done_shard ("done#<n>") behind instead, and that is what the fallback
// writes:
//
//	due_shard = if_not_exists(due_shard, if_not_exists(done_shard, :shard))
//	due_at    = if_not_exists(due_at, :now)
//
// Both operands are evaluated against the item as it was before the update
// (DynamoDB's update expression grammar lets an operand be a path or a
// function, so if_not_exists nests), so a duplicate of a finished event
// puts it on a done shard that no query reads, never back on the work
// shards where the reconciler would re-enqueue it. (Its first duplicate
// therefore adds one index entry, one more write unit; later ones change no
// index key and no projected attribute, and write no index.) A row finished
// before done_shard existed falls back to its work shard; ListDue's status
// filter still keeps it from being re-enqueued.
//
// A duplicate of a DEAD or QUARANTINED row that is not on its attention
// shard (written so by an older version) moves it there: one more request,
// once (see toAttention).
//
// A delivery without identity (Quarantine set) is accepted QUARANTINED on
// its attention shard. Its write alone is conditioned (not on a PROCESSED
// row), so its error code can never land on an event an operator replayed
// to completion; such a duplicate is refused and changes nothing.
//
// A suspected replay yields its id. When the row is QUARANTINED as
// CodeSuspectedReplay and was never attempted, it holds bytes first
// delivered under another id, re-sent under this one (a captured delivery
// under the sender's next id, created before the sender used it). A
// delivery that is not itself quarantined, with other bytes in any form,
// is then the event's own: it is not a conflict or a duplicate of the
// replay, it displaces it (see displace), and the row becomes this event,
// RECEIVED. The upsert's condition refuses such a row, so a delivery in
// another form (through EventBridge) does not merely count as its
// duplicate.
//
// Large payloads then add their chunk writes for a new event.
func (l *Ledger) Accept(ctx context.Context, d Delivery) (Accepted, error) {
	return l.accept(ctx, d, true)
}

// accept is Accept; retry says whether a displacement that lost a race
// may run it once more (it then finds the winner's row).
func (l *Ledger) accept(ctx context.Context, d Delivery, retry bool) (Accepted, error) {
	if err := validID("source", d.Source, MaxIDLength); err != nil {
		return Accepted{}, err
	}
	if err := validID("event id", d.EventID, MaxIDLength); err != nil {
		return Accepted{}, err
	}
	if d.EventType == "" {
		d.EventType = "unknown"
	}
	// The free-text fields come from the sender: from headers no signature
	// covers (a delivery id, a Shopify topic or shop domain) or from the
	// body. They are stored with their control and bidirectional
	// characters escaped (Printable), never raw, so the row an operator
	// inspects cannot rewrite their terminal; and never refused, because
	// the delivery is verified and an unsigned header must not cost its
	// fact. The event id is checked above instead: it is a key.
	d.EventType = printableWithin(d.EventType, MaxTypeLength)
	d.Subject = printableWithin(d.Subject, MaxIDLength)
	d.DeliveryID = printableWithin(d.DeliveryID, MaxIDLength)
	d.VersionHint = printableWithin(d.VersionHint, MaxIDLength)
	d.Attributes = printableAttributes(d.Attributes)
	if len(d.Payload) > MaxPayloadBytes {
		return Accepted{}, fmt.Errorf("%w: payload of %d bytes exceeds %d", ErrInvalid, len(d.Payload), MaxPayloadBytes)
	}

	now := l.now()
	stored, enc, err := encodePayload(d.Payload)
	if err != nil {
		return Accepted{}, err
	}
	hash := payloadHash(d.Payload)
	chunks := 0
	if len(stored) > l.opts.InlinePayloadMax {
		chunks = (len(stored) + chunkBytes - 1) / chunkBytes
	}

	status := StatusReceived
	action := "accept"
	shard := l.dueShard(d.Source, d.EventID)
	if d.Quarantine != "" {
		status = StatusQuarantined
		action = "quarantine_on_accept"
		shard = attentionPrefix + shard
	}
	slot := historySlot(d.DeliveryID, now)

	names := map[string]string{"#status": "status", "#item": "item", "#source": "source"}
	vals := map[string]types.AttributeValue{
		":status": sv(string(status)),
		":itemev": sv("event"),
		":source": sv(d.Source),
		":eid":    sv(d.EventID),
		":etype":  sv(d.EventType),
		":now":    nv(ms(now)),
		":zero":   nv(0),
		":one":    nv(1),
		":hash":   sv(hash),
		":size":   nv(int64(len(d.Payload))),
		":chunks": nv(int64(chunks)),
		":enc":    sv(enc),
		":shard":  sv(shard),
		":hist":   sv(deliveryRecord(d.DeliveryID, now)),
		":audit":  auditValue(now, "", status, l.opts.Actor, action, deliveryReason(d)),
	}
	set := []string{
		"#status = if_not_exists(#status, :status)",
		"#item = if_not_exists(#item, :itemev)",
		"#source = if_not_exists(#source, :source)",
		"event_id = if_not_exists(event_id, :eid)",
		"event_type = if_not_exists(event_type, :etype)",
		"received_at = if_not_exists(received_at, :now)",
		"attempts = if_not_exists(attempts, :zero)",
		"total_attempts = if_not_exists(total_attempts, :zero)",
		"payload_hash = if_not_exists(payload_hash, :hash)",
		"payload_size = if_not_exists(payload_size, :size)",
		"payload_chunks = if_not_exists(payload_chunks, :chunks)",
		"payload_enc = if_not_exists(payload_enc, :enc)",
		"audit = if_not_exists(audit, :audit)",
		attrDueShard + " = if_not_exists(" + attrDueShard + ", if_not_exists(" + attrDoneShard + ", :shard))",
		attrDueAt + " = if_not_exists(" + attrDueAt + ", :now)",
		historyAttr(slot) + " = :hist",
	}
	if d.Subject != "" {
		vals[":subject"] = sv(d.Subject)
		set = append(set, "subject = if_not_exists(subject, :subject)")
	}
	if d.VersionHint != "" {
		vals[":vhint"] = sv(d.VersionHint)
		set = append(set, "version_hint = if_not_exists(version_hint, :vhint)")
	}
	if attrs := boundedAttributes(d.Attributes); len(attrs) > 0 {
		vals[":attrs"] = &types.AttributeValueMemberM{Value: attrs}
		set = append(set, "attrs = if_not_exists(attrs, :attrs)")
	}
	if d.DeliveryID != "" {
		vals[":did"] = sv(d.DeliveryID)
		set = append(set, "first_delivery_id = if_not_exists(first_delivery_id, :did)")
	}
	if chunks == 0 && len(stored) > 0 {
		// An empty payload is stored as no attribute: DynamoDB accepts an
		// empty Binary outside keys, but minidyn refuses one, and Payload
		// reads a missing attribute as the empty body its hash names.
		vals[":payload"] = &types.AttributeValueMemberB{Value: stored}
		set = append(set, "payload = if_not_exists(payload, :payload)")
	}
	// A row of this id is recorded on only when it holds the same bytes,
	// or the same fact in another form; other bytes in the same form are a
	// conflict, and the row is not touched here. Nor is a suspected
	// replay's row with other bytes, for a delivery that is not
	// quarantined itself: it is displaced below.
	otherForm := "NOT " + sameForm(d.Attributes, names, vals)
	if status != StatusQuarantined {
		vals[":quar"] = sv(string(StatusQuarantined))
		vals[":replay"] = sv(CodeSuspectedReplay)
		otherForm = "(" + otherForm + " AND NOT (#status = :quar AND error_code = :replay AND total_attempts = :zero))"
	}
	conds := []string{"(attribute_not_exists(pk) OR payload_hash = :hash OR " + otherForm + ")"}
	if status == StatusQuarantined {
		vals[":code"] = sv(truncate(d.Quarantine, MaxErrorCodeLen))
		vals[":processed"] = sv(string(StatusProcessed))
		set = append(set, "error_code = if_not_exists(error_code, :code)")
		if d.QuarantineReason != "" {
			vals[":msg"] = sv(truncate(d.QuarantineReason, MaxErrorMessageLen))
			set = append(set, "error_message = if_not_exists(error_message, :msg)")
		}
		conds = append(conds, "(attribute_not_exists(pk) OR #status <> :processed)")
	}
	cond := aws.String(strings.Join(conds, " AND "))
	update := "SET " + join(set) + " ADD delivery_count :one"

	in := &dynamodb.UpdateItemInput{
		TableName:                           aws.String(l.opts.Table),
		Key:                                 eventKey(d.Source, d.EventID),
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 cond,
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           vals,
		ReturnValues:                        types.ReturnValueAllOld,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	out, err := l.db.UpdateItem(ctx, in)
	var old map[string]types.AttributeValue
	recorded := true
	switch {
	case err == nil:
		old = out.Attributes
	default:
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return Accepted{}, fmt.Errorf("accept %s/%s: %w", d.Source, d.EventID, translate(err))
		}
		old, recorded = ccf.Item, false // a delivery without identity of a PROCESSED row: nothing was written
		if _, ok := old["status"]; !ok {
			// DynamoDB returns the item with the refusal (an emulator may
			// not): the condition only fails on an existing row, so read it.
			if old, err = l.getItem(ctx, eventKey(d.Source, d.EventID), "event "+d.Source+"/"+d.EventID); err != nil {
				return Accepted{}, fmt.Errorf("accept %s/%s: %w", d.Source, d.EventID, err)
			}
		}
	}

	// A new row has no old status. (DynamoDB returns no attributes for a new
	// item; minidyn returns its key, so test for the status, not for nil.)
	if _, existed := old["status"]; !existed {
		// New row: store the payload chunks before anyone can be told about it.
		if chunks > 0 {
			if err := l.putChunks(ctx, d.Source, d.EventID, hash, stored, chunks); err != nil {
				return Accepted{}, err
			}
		}
		ev := Event{
			Source: d.Source, EventID: d.EventID, EventType: d.EventType, Subject: d.Subject,
			Status: status, ReceivedAt: now, DeliveryCount: 1, FirstDeliveryID: d.DeliveryID, VersionHint: d.VersionHint,
			LastDeliveryID: d.DeliveryID, LastDeliveryAt: now, PayloadHash: hash, PayloadSize: len(d.Payload),
			PayloadChunks: chunks, RecentDeliveries: []DeliveryRecord{{At: now, ID: d.DeliveryID}},
		}
		if status == StatusQuarantined {
			ev.ErrorCode, ev.ErrorMessage = truncate(d.Quarantine, MaxErrorCodeLen), truncate(d.QuarantineReason, MaxErrorMessageLen)
		}
		return Accepted{Event: ev}, nil
	}

	ev, err := decodeEvent(old)
	if err != nil {
		return Accepted{}, err
	}
	if !recorded && status != StatusQuarantined && ev.PayloadHash != hash && displaceable(ev) {
		res, err := l.displace(ctx, d, now, hash, stored, enc, chunks, slot, ev)
		if errors.Is(err, errDisplaceLost) && retry {
			// Another delivery changed the row first (the same event's
			// retry displaced it, say): this one is judged against that.
			return l.accept(ctx, d, false)
		}
		return res, err
	}
	if !recorded && ev.PayloadHash != hash && sameFormAs(d.Attributes, ev.Attributes) {
		conflicts, err := l.recordConflict(ctx, d, hash, ev)
		if err != nil {
			return Accepted{}, err
		}
		ev.Conflicts = conflicts
		return Accepted{Event: ev, Conflict: true, PayloadMismatch: true}, nil
	}
	res := Accepted{Event: ev, Duplicate: true, PayloadMismatch: ev.PayloadHash != hash}
	if recorded {
		// The row as it is now: this delivery recorded on it.
		res.Event.DeliveryCount++
		res.Event.LastDeliveryAt, res.Event.LastDeliveryID = now, d.DeliveryID
		res.Event.RecentDeliveries = withDelivery(old, slot, DeliveryRecord{At: now, ID: d.DeliveryID})
	}
	if !ev.Status.Terminal() {
		// The first delivery may have crashed between the event write and the
		// chunk writes; rewriting identical, hash-keyed chunks is idempotent.
		if ev.PayloadChunks > 0 && !res.PayloadMismatch && ev.Status == StatusReceived {
			if err := l.putChunks(ctx, d.Source, d.EventID, hash, stored, ev.PayloadChunks); err != nil {
				return Accepted{}, err
			}
		}
	}
	if err := l.toAttention(ctx, d.Source, d.EventID, ev.Status, old); err != nil {
		return Accepted{}, err
	}
	return res, nil
}

// toAttention moves a DEAD or QUARANTINED row that is not on its attention
// shard there (due_shard "A"+shard, due_at kept, or now when it has none).
// Every path that sets either status writes the attention keys in the
// same request; a row an older version wrote (a delivery without identity
// was accepted QUARANTINED on its work shard) has them wrong, where
// ListOpen, and so stats, events list --status and the gauges, cannot see
// it, and it costs this one extra request when it is delivered again. The
// write is conditioned on the row as it was, so it never moves a row that
// changed in between.
func (l *Ledger) toAttention(ctx context.Context, source, eventID string, st Status, old map[string]types.AttributeValue) error {
	if st != StatusDead && st != StatusQuarantined {
		return nil
	}
	shard, _ := old[attrDueShard].(*types.AttributeValueMemberS)
	if _, hasDue := old[attrDueAt]; shard != nil && strings.HasPrefix(shard.Value, attentionPrefix) && hasDue {
		return nil
	}
	vals := map[string]types.AttributeValue{":st": sv(string(st)), ":ashard": sv(attentionPrefix + l.dueShard(source, eventID)), ":now": nv(ms(l.now()))}
	cond := "#status = :st AND attribute_not_exists(" + attrDueShard + ")"
	if shard != nil {
		cond = "#status = :st AND " + attrDueShard + " = :old"
		vals[":old"] = sv(shard.Value)
	}
	_, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(l.opts.Table),
		Key:                       eventKey(source, eventID),
		UpdateExpression:          aws.String("SET " + attrDueShard + " = :ashard, " + attrDueAt + " = if_not_exists(" + attrDueAt + ", :now)"),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  map[string]string{"#status": "status"},
		ExpressionAttributeValues: vals,
	})
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return fmt.Errorf("move %s/%s to its attention shard: %w", source, eventID, translate(err))
	}
	return nil
}

// printableAttributes is attrs with every name and value in Printable
// form, within the bounds boundedAttributes keeps (a copy; attrs is the
// caller's).
func printableAttributes(attrs map[string]string) map[string]string {
	if attrs == nil {
		return nil
	}
	out := make(map[string]string, len(attrs))
	for k, v := range attrs {
		out[printableWithin(k, maxAttributeNameLen)] = printableWithin(v, maxAttributeLen)
	}
	return out
}

func boundedAttributes(in map[string]string) map[string]types.AttributeValue {
	out := map[string]types.AttributeValue{}
	for k, v := range in {
		if len(out) == maxAttributes {
			break
		}
		if k == "" || v == "" {
			continue
		}
		out[truncate(k, maxAttributeNameLen)] = sv(truncate(v, maxAttributeLen))
	}
	return out
}

func deliveryReason(d Delivery) string {
	if d.DeliveryID == "" {
		return ""
	}
	return "delivery " + d.DeliveryID
}

// sameForm is a condition that holds when the stored row arrived in the
// same form as a delivery with attrs (FormAttributes equal, absent as
// absent).
func sameForm(attrs map[string]string, names map[string]string, vals map[string]types.AttributeValue) string {
	names["#attrs"] = "attrs"
	var parts []string
	for i, a := range FormAttributes {
		n, v := "#form"+strconv.Itoa(i), ":form"+strconv.Itoa(i)
		names[n] = a
		if attrs[a] == "" {
			parts = append(parts, "attribute_not_exists(#attrs."+n+")")
			continue
		}
		vals[v] = sv(attrs[a])
		parts = append(parts, "#attrs."+n+" = "+v)
	}
	return "(" + strings.Join(parts, " AND ") + ")"
}

// sameFormAs is sameForm evaluated in Go on a decoded row.
func sameFormAs(attrs, stored map[string]string) bool {
	for _, a := range FormAttributes {
		if attrs[a] != stored[a] {
			return false
		}
	}
	return true
}

// recordConflict records, on the row and nowhere else, that its id
// arrived with other bytes in the same form: a count, the last conflicting
// delivery (time, delivery id, hash), and an audit entry for the first one
// only (the audit stays bounded whatever a sender repeats). It returns the
// count after this one.
func (l *Ledger) recordConflict(ctx context.Context, d Delivery, hash string, ev Event) (int, error) {
	now := l.now()
	rec := sv(fmt.Sprintf("%d|%s|%s", ms(now), hash, truncate(d.DeliveryID, MaxIDLength)))
	reason := fmt.Sprintf("event id delivered with other bytes (sha256/128 %s, stored %s, delivery %q): not a duplicate; nothing changed", hash, ev.PayloadHash, truncate(d.DeliveryID, 64))
	for _, first := range []bool{true, false} {
		in := &dynamodb.UpdateItemInput{
			TableName:                 aws.String(l.opts.Table),
			Key:                       eventKey(d.Source, d.EventID),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": nv(1), ":rec": rec},
			ReturnValues:              types.ReturnValueUpdatedNew,
		}
		if first {
			in.UpdateExpression = aws.String("SET last_conflict = :rec, audit = list_append(audit, :audit) ADD conflict_count :one")
			in.ConditionExpression = aws.String("attribute_exists(pk) AND attribute_not_exists(conflict_count)")
			in.ExpressionAttributeValues[":audit"] = auditValue(now, ev.Status, ev.Status, l.opts.Actor, "conflict", truncate(reason, MaxReasonLen))
		} else {
			in.UpdateExpression = aws.String("SET last_conflict = :rec ADD conflict_count :one")
			in.ConditionExpression = aws.String("attribute_exists(pk)")
		}
		out, err := l.db.UpdateItem(ctx, in)
		var ccf *types.ConditionalCheckFailedException
		if first && errors.As(err, &ccf) {
			continue // not the first conflict
		}
		if err != nil {
			return 0, fmt.Errorf("record conflict on %s/%s: %w", d.Source, d.EventID, translate(err))
		}
		var n int
		if v, ok := out.Attributes["conflict_count"].(*types.AttributeValueMemberN); ok {
			n, _ = strconv.Atoi(v.Value)
		}
		return n, nil
	}
	return 0, fmt.Errorf("record conflict on %s/%s: %w", d.Source, d.EventID, ErrConflict)
}
