package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

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
// that returns the old row (ReturnValues ALL_OLD), so exactly one caller
// per (source, event_id) sees no old row, and every duplicate learns the
// row from the same response. (A conditional PutItem would learn it too,
// but could not record the duplicate without a second write.) Every
// stored field is written with if_not_exists, so a duplicate never
// changes the event's identity, status, payload, result or audit; it only
// records itself: delivery_count and one slot of the bounded delivery
// history (Event.RecentDeliveries). A duplicate of a finished event costs
// that one request too.
//
// A new row goes on its work shard of the due index; a row keeps the due
// keys it has. A PROCESSED row has none, and kept done_shard instead,
// which the upsert falls back to (if_not_exists nests, and both operands
// read the item as it was), so a duplicate of a finished event lands on
// a done shard that no query reads, never back on the work shards: its
// first duplicate adds one index write, later ones none. A duplicate of a
// DEAD or QUARANTINED row off its attention shard moves it there.
//
// Other bytes under the same id in the same form (FormAttributes) are a
// conflict, not a duplicate: only the conflict is recorded. A delivery
// without identity (Quarantine set) is accepted QUARANTINED on its
// attention shard, and never recorded on a PROCESSED row. A row that
// holds a suspected replay (CodeSuspectedReplay, never attempted) yields
// to a delivery of other bytes that is not itself quarantined: the row
// becomes this event, RECEIVED (see displace).
//
// A payload too large to keep inline is written in chunk items after the
// row (see storePayload).
func (l *Ledger) Accept(ctx context.Context, d Delivery) (Accepted, error) {
	return l.accept(ctx, d, true)
}

// accept is Accept; retry says whether a displacement that lost a race
// may run it once more (it then finds the winner's row).
func (l *Ledger) accept(ctx context.Context, d Delivery, retry bool) (Accepted, error) {
	in, err := l.acceptInput(d)
	if err != nil {
		return Accepted{}, err
	}
	old, recorded, err := l.upsert(ctx, in)
	if err != nil {
		return Accepted{}, err
	}
	var ev *Event
	if _, existed := old["status"]; existed {
		e, err := decodeEvent(old)
		if err != nil {
			return Accepted{}, err
		}
		ev = &e
	}
	switch judgeDelivery(in, ev, recorded) {
	case deliveryNew:
		return l.acceptNew(ctx, in)
	case deliveryDisplaces:
		res, err := l.displace(ctx, in, *ev)
		if errors.Is(err, errDisplaceLost) && retry {
			// Another delivery changed the row first (the same event's
			// retry displaced it, say): this one is judged against that.
			return l.accept(ctx, d, false)
		}
		return res, err
	case deliveryConflicts:
		conflicts, err := l.recordConflict(ctx, in.d, in.payload.hash, *ev)
		if err != nil {
			return Accepted{}, err
		}
		ev.Conflicts = conflicts
		return Accepted{Event: *ev, Conflict: true, PayloadMismatch: true}, nil
	}
	return l.acceptDuplicate(ctx, in, *ev, old, recorded)
}

// acceptInput is a delivery ready for the upsert: checked, its free text
// in Printable form, its payload encoded, and what its row is if it is new.
type acceptInput struct {
	d       Delivery
	now     time.Time
	payload storedPayload
	status  Status // RECEIVED, or QUARANTINED for a delivery without identity
	action  string // the audit action of a new row
	shard   string // a new row's due shard: its work shard, or its attention shard when QUARANTINED
	slot    int    // the delivery history slot this delivery writes
}

// acceptInput prepares d (prepareDelivery) and its payload (storePayload)
// and places a new row on the due index.
func (l *Ledger) acceptInput(d Delivery) (acceptInput, error) {
	d, err := prepareDelivery(d)
	if err != nil {
		return acceptInput{}, err
	}
	now := l.now()
	p, err := storePayload(d.Source, d.EventID, d.Payload, l.opts.InlinePayloadMax)
	if err != nil {
		return acceptInput{}, err
	}
	in := acceptInput{d: d, now: now, payload: p, status: StatusReceived, action: "accept",
		shard: l.dueShard(d.Source, d.EventID), slot: historySlot(d.DeliveryID, now)}
	if d.Quarantine != "" {
		in.status, in.action, in.shard = StatusQuarantined, "quarantine_on_accept", attentionPrefix+in.shard
	}
	return in, nil
}

// prepareDelivery refuses a delivery whose keys (source, event id) cannot
// be keys or whose payload is over MaxPayloadBytes (ErrInvalid), and
// returns it with its free text in the ledger's form. That text comes
// from the sender, from headers no signature covers (a delivery id, a
// Shopify topic or shop domain) or from the body: it is stored in
// Printable form, cut to the ledger's bounds, so the row an operator
// inspects cannot rewrite their terminal; and never refused, because the
// delivery is verified and an unsigned header must not cost its fact.
func prepareDelivery(d Delivery) (Delivery, error) {
	if err := validID("source", d.Source, MaxIDLength); err != nil {
		return Delivery{}, err
	}
	if err := validID("event id", d.EventID, MaxIDLength); err != nil {
		return Delivery{}, err
	}
	if d.EventType == "" {
		d.EventType = "unknown"
	}
	d.EventType = printableWithin(d.EventType, MaxTypeLength)
	d.Subject = printableWithin(d.Subject, MaxIDLength)
	d.DeliveryID = printableWithin(d.DeliveryID, MaxIDLength)
	d.VersionHint = printableWithin(d.VersionHint, MaxIDLength)
	d.Attributes = printableAttributes(d.Attributes)
	if len(d.Payload) > MaxPayloadBytes {
		return Delivery{}, fmt.Errorf("%w: payload of %d bytes exceeds %d", ErrInvalid, len(d.Payload), MaxPayloadBytes)
	}
	return d, nil
}

// upsertPlan is Accept's one write (see Accept): every field of a new row
// under if_not_exists, this delivery's history slot and count, and the
// condition that keeps a conflicting delivery (and a displaceable
// replay's row, and for a delivery without identity a PROCESSED row)
// untouched.
func upsertPlan(in acceptInput, actor string) *update {
	d := in.d
	u := (&update{}).Name("#status", "status").Name("#item", "item").Name("#source", "source").Values(rowValues(in))
	u.Values(map[string]types.AttributeValue{
		":status": sv(string(in.status)),
		":itemev": sv("event"),
		":source": sv(d.Source),
		":eid":    sv(d.EventID),
		":audit":  auditValue(in.now, "", in.status, actor, in.action, deliveryReason(d)),
	})
	u.Set(
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
		attrDueShard+" = if_not_exists("+attrDueShard+", if_not_exists("+attrDoneShard+", :shard))",
		attrDueAt+" = if_not_exists("+attrDueAt+", :now)",
		historyAttr(in.slot)+" = :hist",
	)
	for _, f := range optionalFields(in) {
		if f.present {
			u.Value(f.ph, f.v).Set(f.attr + " = if_not_exists(" + f.attr + ", " + f.ph + ")")
		}
	}

	// A row of this id is recorded on only when it holds the same bytes,
	// or the same fact in another form; other bytes in the same form are a
	// conflict, and the row is not touched here. Nor is a suspected
	// replay's row with other bytes, for a delivery that is not
	// quarantined itself: it is displaced instead.
	otherForm := "NOT " + sameForm(u, d.Attributes)
	if in.status != StatusQuarantined {
		u.Value(":quar", sv(string(StatusQuarantined))).Value(":replay", sv(CodeSuspectedReplay))
		otherForm = "(" + otherForm + " AND NOT (#status = :quar AND error_code = :replay AND total_attempts = :zero))"
	}
	u.If("(attribute_not_exists(pk) OR payload_hash = :hash OR " + otherForm + ")")
	if in.status == StatusQuarantined {
		u.Value(":code", sv(truncate(d.Quarantine, MaxErrorCodeLen))).Value(":processed", sv(string(StatusProcessed)))
		u.Set("error_code = if_not_exists(error_code, :code)")
		if d.QuarantineReason != "" {
			u.Value(":msg", sv(truncate(d.QuarantineReason, MaxErrorMessageLen)))
			u.Set("error_message = if_not_exists(error_message, :msg)")
		}
		u.If("(attribute_not_exists(pk) OR #status <> :processed)")
	}
	return u.Add("delivery_count :one")
}

// rowValues are the values every write of a new row for in defines:
// its type, arrival, payload, due shard, delivery record, and the
// numbers 0 and 1.
func rowValues(in acceptInput) map[string]types.AttributeValue {
	p := in.payload
	return map[string]types.AttributeValue{
		":etype":  sv(in.d.EventType),
		":now":    nv(ms(in.now)),
		":zero":   nv(0),
		":one":    nv(1),
		":hash":   sv(p.hash),
		":size":   nv(int64(p.size)),
		":chunks": nv(int64(p.chunks)),
		":enc":    sv(p.enc),
		":shard":  sv(in.shard),
		":hist":   sv(deliveryRecord(in.d.DeliveryID, in.now)),
	}
}

// optionalField is an attribute of a new row that only some deliveries
// have: written when present, and absent otherwise.
type optionalField struct {
	attr, ph string
	v        types.AttributeValue
	present  bool
}

// optionalFields are in's optional attributes. An empty payload is stored
// as no attribute (see the package doc); Payload reads a missing attribute
// as the empty body its hash names.
func optionalFields(in acceptInput) []optionalField {
	d, p := in.d, in.payload
	attrs := boundedAttributes(d.Attributes)
	return []optionalField{
		{"subject", ":subject", sv(d.Subject), d.Subject != ""},
		{"version_hint", ":vhint", sv(d.VersionHint), d.VersionHint != ""},
		{"attrs", ":attrs", &types.AttributeValueMemberM{Value: attrs}, len(attrs) > 0},
		{"first_delivery_id", ":did", sv(d.DeliveryID), d.DeliveryID != ""},
		{"payload", ":payload", &types.AttributeValueMemberB{Value: p.bytes}, p.chunks == 0 && len(p.bytes) > 0},
	}
}

// upsert sends Accept's write. It returns the row as it was before (none
// for a new row) and whether this delivery was recorded on it: a refused
// write recorded nothing, and its row is the one the refusal returned or,
// from a store that returns none, the one read after it.
func (l *Ledger) upsert(ctx context.Context, in acceptInput) (map[string]types.AttributeValue, bool, error) {
	key := eventKey(in.d.Source, in.d.EventID)
	req := upsertPlan(in, l.opts.Actor).input(l.opts.Table, key)
	req.ReturnValues = types.ReturnValueAllOld
	req.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	out, err := l.db.UpdateItem(ctx, req)
	if err == nil {
		return out.Attributes, true, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return nil, false, fmt.Errorf("accept %s/%s: %w", in.d.Source, in.d.EventID, translate(err))
	}
	old := ccf.Item
	if _, ok := old["status"]; !ok {
		// The condition only fails on an existing row.
		if old, err = l.getItem(ctx, key, "event "+in.d.Source+"/"+in.d.EventID); err != nil {
			return nil, false, fmt.Errorf("accept %s/%s: %w", in.d.Source, in.d.EventID, err)
		}
	}
	return old, false, nil
}

// deliveryVerdict is what a delivery is to the row its upsert found.
type deliveryVerdict int

const (
	// deliveryNew: there was no row; the upsert created the event.
	deliveryNew deliveryVerdict = iota
	// deliveryDisplaces: the row is an untouched suspected replay with
	// other bytes, and this delivery (not itself quarantined) is the
	// event's own: it takes the row over (displace).
	deliveryDisplaces
	// deliveryConflicts: the row holds other bytes in the same form; the
	// upsert was refused, and only the conflict is recorded.
	deliveryConflicts
	// deliveryDuplicate: a duplicate, recorded on the row; or, refused, a
	// delivery without identity of a PROCESSED row, which changed nothing.
	deliveryDuplicate
)

// judgeDelivery decides what in is to ev, the row as it was before the
// upsert (nil: there was none), given whether the upsert recorded it.
func judgeDelivery(in acceptInput, ev *Event, recorded bool) deliveryVerdict {
	switch {
	case ev == nil:
		return deliveryNew
	case !recorded && in.status != StatusQuarantined && ev.PayloadHash != in.payload.hash && displaceable(*ev):
		return deliveryDisplaces
	case !recorded && ev.PayloadHash != in.payload.hash && sameFormAs(in.d.Attributes, ev.Attributes):
		return deliveryConflicts
	}
	return deliveryDuplicate
}

// acceptNew finishes a new row: its payload chunks are stored before
// anyone can be told about the event. It returns the row as written.
func (l *Ledger) acceptNew(ctx context.Context, in acceptInput) (Accepted, error) {
	if in.payload.chunks > 0 {
		if err := l.putChunks(ctx, in.d.Source, in.d.EventID, in.payload.hash, in.payload.bytes, in.payload.chunks); err != nil {
			return Accepted{}, err
		}
	}
	return Accepted{Event: newEvent(in)}, nil
}

// newEvent is the row the upsert created for in.
func newEvent(in acceptInput) Event {
	d := in.d
	ev := Event{
		Source: d.Source, EventID: d.EventID, EventType: d.EventType, Subject: d.Subject,
		Status: in.status, ReceivedAt: in.now, DeliveryCount: 1, FirstDeliveryID: d.DeliveryID, VersionHint: d.VersionHint,
		LastDeliveryID: d.DeliveryID, LastDeliveryAt: in.now, PayloadHash: in.payload.hash, PayloadSize: in.payload.size,
		PayloadChunks: in.payload.chunks, RecentDeliveries: []DeliveryRecord{{At: in.now, ID: d.DeliveryID}},
	}
	if in.status == StatusQuarantined {
		ev.ErrorCode, ev.ErrorMessage = truncate(d.Quarantine, MaxErrorCodeLen), truncate(d.QuarantineReason, MaxErrorMessageLen)
	}
	return ev
}

// acceptDuplicate answers a duplicate of ev (old is its row before the
// upsert). The first delivery may have stopped between the event write and
// the chunk writes; a duplicate with the same bytes restores them
// (restorePayload). A DEAD or QUARANTINED row off its attention shard is
// moved there (toAttention).
func (l *Ledger) acceptDuplicate(ctx context.Context, in acceptInput, ev Event, old map[string]types.AttributeValue, recorded bool) (Accepted, error) {
	d := in.d
	res := Accepted{Event: ev, Duplicate: true, PayloadMismatch: ev.PayloadHash != in.payload.hash}
	if recorded {
		// The row as it is now: this delivery recorded on it.
		res.Event.DeliveryCount++
		res.Event.LastDeliveryAt, res.Event.LastDeliveryID = in.now, d.DeliveryID
		res.Event.RecentDeliveries = withDelivery(old, in.slot, DeliveryRecord{At: in.now, ID: d.DeliveryID})
	}
	if ev.PayloadChunks > 0 && !res.PayloadMismatch && ev.Status != StatusProcessed {
		reopened, err := l.restorePayload(ctx, in, ev)
		if err != nil {
			return Accepted{}, err
		}
		if reopened != nil {
			res.Event = *reopened
			return res, nil
		}
	}
	if err := l.toAttention(ctx, d.Source, d.EventID, ev.Status, old); err != nil {
		return Accepted{}, err
	}
	return res, nil
}

// restorePayload writes the chunks of an unfinished event's payload again
// from a duplicate with the same bytes, where they may be missing, and
// reopens a row that waited for them. Rewriting identical, hash-keyed
// chunks is idempotent. The intake only writes (it reads nothing of the
// table), so where the chunks may be missing is told by the row:
//
//   - RECEIVED: the first delivery may still be writing them, or have
//     died before.
//   - PROCESSING: its worker may be finding them missing right now; it
//     then waits for them (AwaitPayload) and finds them at its next look.
//   - a row whose error code says its payload was not found
//     (payloadCodes), or a QUARANTINED row never attempted (quarantined on
//     accept): no worker has read the payload.
//
// Any other row had its payload read, and a duplicate costs it nothing
// more. After the write, a RETRY_WAIT or DEAD row that waited for or died
// without its payload, and a QUARANTINED one whose payload never arrived,
// is reopened: RECEIVED, its attempts reset, audited "payload_arrived"
// (reopenArrived); the caller enqueues it. A row quarantined on accept
// keeps its status: it waits for an operator, who now finds its payload.
func (l *Ledger) restorePayload(ctx context.Context, in acceptInput, ev Event) (*Event, error) {
	missed := slices.Contains(payloadCodes, ev.ErrorCode)
	switch {
	case ev.Status == StatusReceived, ev.Status == StatusProcessing:
	case missed && (ev.Status == StatusRetryWait || ev.Status == StatusDead || ev.Status == StatusQuarantined):
	case ev.Status == StatusQuarantined && ev.TotalAttempts == 0:
	default:
		return nil, nil
	}
	if err := l.putChunks(ctx, in.d.Source, in.d.EventID, in.payload.hash, in.payload.bytes, ev.PayloadChunks); err != nil {
		return nil, err
	}
	if missed && ev.Status != StatusReceived && ev.Status != StatusProcessing {
		return l.reopenArrived(ctx, ev)
	}
	return nil, nil
}

// payloadCodes are the error codes of a row whose payload a worker did
// not find: waiting for it (CodePayloadMissing), past the source's retry
// horizon (CodePayloadNeverArrived), and "payload_unavailable", which
// earlier versions recorded for a missing chunk as for any unreadable
// payload, retrying it until DEAD.
var payloadCodes = []string{CodePayloadMissing, CodePayloadNeverArrived, "payload_unavailable"}

// reopenArrived moves ev, which waited for (or was given up on without)
// its payload, back to RECEIVED once the provider's retry stored it: its
// attempts reset, on its work shard, due now, audited "payload_arrived"
// by the intake. It is conditioned on the row as ev saw it (status and
// error code): a row that moved on meanwhile (a worker claimed it; it
// finds the payload now) is left alone, and ev is returned as it was
// (nil, no error).
func (l *Ledger) reopenArrived(ctx context.Context, ev Event) (*Event, error) {
	now := l.now()
	key := eventKey(ev.Source, ev.EventID)
	audit := auditValue(now, ev.Status, StatusReceived, l.opts.Actor, "payload_arrived",
		truncate("the provider's retry stored the payload the row was written without (it had "+ev.ErrorCode+")", MaxReasonLen))
	u := (&update{}).Name("#status", "status").Values(map[string]types.AttributeValue{
		":recv": sv(string(StatusReceived)), ":from": sv(string(ev.Status)), ":zero": nv(0),
		":shard": sv(l.dueShard(ev.Source, ev.EventID)), ":now": nv(ms(now)), ":audit": audit,
	})
	u.Set("#status = :recv", "attempts = :zero", attrDueShard+" = :shard", attrDueAt+" = :now", "audit = list_append(audit, :audit)")
	u.Remove("next_attempt_at", TTLAttribute)
	if ev.ErrorCode != "" {
		u.If("#status = :from", "error_code = :code").Value(":code", sv(ev.ErrorCode))
	} else {
		u.If("#status = :from", "attribute_not_exists(error_code)")
	}
	req := u.input(l.opts.Table, key)
	req.ReturnValues = types.ReturnValueAllNew
	req.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	out, err := l.db.UpdateItem(ctx, req)
	item := map[string]types.AttributeValue(nil)
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		item = out.Attributes
	case errors.As(err, &ccf):
		got, own := l.appliedBefore(ctx, ccf, key, audit)
		if !own {
			return nil, nil // the row moved on
		}
		item = got
	default:
		return nil, fmt.Errorf("reopen %s/%s for its payload: %w", ev.Source, ev.EventID, translate(err))
	}
	reopened, err := decodeEvent(item)
	if err != nil {
		return nil, err
	}
	return &reopened, nil
}

// toAttention moves a DEAD or QUARANTINED row that is not on its attention
// shard there (due_shard "A"+shard, due_at kept, or now when it has none).
// Every path that sets either status writes the attention keys in the same
// request, but a row quarantined on accept could have been left on its
// work shard, where ListOpen, and so stats, events list --status and the
// gauges, cannot see it; it costs this one extra request when it is
// delivered again. The write is conditioned on the row as it was, so it
// never moves a row that changed in between.
func (l *Ledger) toAttention(ctx context.Context, source, eventID string, st Status, old map[string]types.AttributeValue) error {
	if st != StatusDead && st != StatusQuarantined {
		return nil
	}
	shard, _ := old[attrDueShard].(*types.AttributeValueMemberS)
	if _, hasDue := old[attrDueAt]; shard != nil && strings.HasPrefix(shard.Value, attentionPrefix) && hasDue {
		return nil
	}
	u := (&update{}).Name("#status", "status").Values(map[string]types.AttributeValue{
		":st": sv(string(st)), ":ashard": sv(attentionPrefix + l.dueShard(source, eventID)), ":now": nv(ms(l.now())),
	})
	u.Set(attrDueShard+" = :ashard", attrDueAt+" = if_not_exists("+attrDueAt+", :now)")
	if shard != nil {
		u.If("#status = :st", attrDueShard+" = :old").Value(":old", sv(shard.Value))
	} else {
		u.If("#status = :st", "attribute_not_exists("+attrDueShard+")")
	}
	_, err := l.db.UpdateItem(ctx, u.input(l.opts.Table, eventKey(source, eventID)))
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
// absent); it defines its placeholders in u.
func sameForm(u *update, attrs map[string]string) string {
	u.Name("#attrs", "attrs")
	var parts []string
	for i, a := range FormAttributes {
		n, v := "#form"+strconv.Itoa(i), ":form"+strconv.Itoa(i)
		u.Name(n, a)
		if attrs[a] == "" {
			parts = append(parts, "attribute_not_exists(#attrs."+n+")")
			continue
		}
		u.Value(v, sv(attrs[a]))
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
