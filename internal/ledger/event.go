package ledger

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/effectively-once/webhooks/pkg/projection"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Attribute names shared by expressions.
const (
	attrPK       = "pk"
	attrSK       = "sk"
	skEvent      = "EV"
	skProjection = "PJ"
	skIntent     = "OP"

	// DueIndex is the sparse GSI over unfinished events.
	DueIndex     = "due"
	attrDueShard = "due_shard"
	attrDueAt    = "due_at"
	// attrDoneShard is what a finished (PROCESSED) event keeps of its due
	// shard once it left the index: doneShardPrefix and the shard number.
	// Accept falls back to it for due_shard (see Accept), so a duplicate of
	// a finished event lands on a "done" shard that no query reads.
	attrDoneShard = "done_shard"
	// TTLAttribute is the table's TTL attribute (epoch seconds).
	TTLAttribute = "expires_at"
)

// Bounds on what the ledger stores, so a hostile or broken payload cannot
// grow an item without limit.
const (
	MaxIDLength        = projection.MaxIDLength
	MaxTypeLength      = 128
	MaxErrorMessageLen = 512
	MaxErrorCodeLen    = 64
	MaxReasonLen       = 512
)

// AuditEntry is one transition: when, from what to what, by whom and why.
type AuditEntry struct {
	At     time.Time `json:"at"`
	From   Status    `json:"from,omitempty"`
	To     Status    `json:"to"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Reason string    `json:"reason,omitempty"`
}

// Result is what a processed event did (the stored result). Operators read
// all of it; a duplicate delivery of the event is told only its Outcome.
//
// In DynamoDB its fields keep their Go names (as rows written before the
// tags were added have them), and empty ones are left out: every byte of
// the event item is paid again by each later write of it. Intents is not
// stored when Operations are (it is their number).
type Result struct {
	Outcome    Outcome `json:"outcome"`
	Projection string  `json:"projection,omitempty" dynamodbav:",omitempty"`
	Subject    string  `json:"subject,omitempty" dynamodbav:",omitempty"`
	Version    int64   `json:"version,omitempty" dynamodbav:",omitempty"`
	Intents    int     `json:"intents,omitempty" dynamodbav:",omitempty"`
	// Operations are the intents this event's commit wrote: their
	// operation ids (the downstream's idempotency keys) and kinds. An
	// intent another event had already written (the same business intent)
	// is not among them. Stored as one compact string attribute (see
	// Operations.MarshalDynamoDBAttributeValue).
	Operations Operations `json:"operations,omitempty" dynamodbav:"ops,omitempty"`
}

// Operation names one intent: what the downstream sees as its
// idempotency key, and the effect kind.
type Operation struct {
	ID   string `json:"operation_id"`
	Kind string `json:"kind"`
}

// Operations are a result's intents. In DynamoDB they are one string,
// "<operation id>\t<kind>" per intent joined by "\n" (neither may contain
// a control character; Commit checks): about 50 bytes for one intent, the
// least that keeps them readable in the console, where a list of maps
// would cost about 15 bytes more per intent.
type Operations []Operation

// MarshalDynamoDBAttributeValue encodes the operations as one string.
func (o Operations) MarshalDynamoDBAttributeValue() (types.AttributeValue, error) {
	if len(o) == 0 {
		return &types.AttributeValueMemberNULL{Value: true}, nil
	}
	parts := make([]string, len(o))
	for i, op := range o {
		parts[i] = op.ID + "\t" + op.Kind
	}
	return &types.AttributeValueMemberS{Value: strings.Join(parts, "\n")}, nil
}

// UnmarshalDynamoDBAttributeValue decodes what MarshalDynamoDBAttributeValue wrote.
func (o *Operations) UnmarshalDynamoDBAttributeValue(av types.AttributeValue) error {
	s, ok := av.(*types.AttributeValueMemberS)
	if !ok {
		*o = nil
		return nil
	}
	var out Operations
	for _, line := range strings.Split(s.Value, "\n") {
		if line == "" {
			continue
		}
		id, kind, _ := strings.Cut(line, "\t")
		out = append(out, Operation{ID: id, Kind: kind})
	}
	*o = out
	return nil
}

// DeliveryRecord is one delivery the ledger remembers: when it arrived,
// and its delivery id when the provider sends one.
type DeliveryRecord struct {
	At time.Time `json:"at"`
	ID string    `json:"delivery_id,omitempty"`
}

// DeliveryHistorySlots bounds the deliveries an event remembers beyond
// the first and the last (Event.RecentDeliveries).
const DeliveryHistorySlots = 4

// Event is the read model of one ledger row.
type Event struct {
	Source    string
	EventID   string
	EventType string
	Subject   string // provider subject hint from intake, may be empty
	// VersionHint and Attributes are what the provider's delivery said
	// beyond the identity (see Delivery).
	VersionHint string
	Attributes  map[string]string

	Status        Status
	Attempts      int // attempts in the current round (reset by redrive and replay)
	TotalAttempts int
	LeaseOwner    string
	LeaseToken    string
	LeaseExpires  time.Time
	NextAttemptAt time.Time
	ErrorCode     string
	ErrorMessage  string

	ReceivedAt  time.Time
	ProcessedAt time.Time
	ExpiresAt   time.Time

	// DeliveryCount counts every delivery the ledger accepted for this
	// event, duplicates of a finished event included. FirstDeliveryID is
	// the first delivery's id; LastDeliveryAt and LastDeliveryID are when
	// the newest delivery arrived and its id (empty when it had none, as
	// Stripe's have). They are read from RecentDeliveries, whose newest
	// record is always the newest delivery (rows written before the
	// history existed keep them as attributes).
	DeliveryCount   int
	FirstDeliveryID string
	LastDeliveryID  string
	LastDeliveryAt  time.Time
	// RecentDeliveries is a bounded sample of the deliveries, newest
	// first: up to DeliveryHistorySlots slots, each delivery written into
	// the slot its delivery id hashes to (its arrival time when it has no
	// id). A redelivery under the same id updates its own slot; distinct
	// ids may share a slot, and then the newer one is kept.
	RecentDeliveries []DeliveryRecord

	PayloadHash   string
	PayloadSize   int
	PayloadChunks int // 0 when inline

	// Conflicts counts deliveries of this id with other bytes in the same
	// form (not duplicates: see Accept); LastConflict is the newest one's
	// "<epoch ms>|<payload hash>|<delivery id>".
	Conflicts    int
	LastConflict string

	Result *Result
	Audit  []AuditEntry

	payload []byte // stored bytes when inline (possibly gzip)
	encoded string // "raw" or "gzip"
}

// item is the DynamoDB shape of an event. Times are epoch milliseconds so that
// conditions can compare them.
type item struct {
	PK            string            `dynamodbav:"pk"`
	SK            string            `dynamodbav:"sk"`
	Source        string            `dynamodbav:"source"`
	EventID       string            `dynamodbav:"event_id"`
	EventType     string            `dynamodbav:"event_type"`
	Subject       string            `dynamodbav:"subject,omitempty"`
	VersionHint   string            `dynamodbav:"version_hint,omitempty"`
	Attrs         map[string]string `dynamodbav:"attrs,omitempty"`
	Status        Status            `dynamodbav:"status"`
	Attempts      int               `dynamodbav:"attempts"`
	TotalAttempts int               `dynamodbav:"total_attempts"`
	LeaseOwner    string            `dynamodbav:"lease_owner,omitempty"`
	LeaseToken    string            `dynamodbav:"lease_token,omitempty"`
	LeaseExpires  int64             `dynamodbav:"lease_expires_at,omitempty"`
	NextAttemptAt int64             `dynamodbav:"next_attempt_at,omitempty"`
	ErrorCode     string            `dynamodbav:"error_code,omitempty"`
	ErrorMessage  string            `dynamodbav:"error_message,omitempty"`
	ReceivedAt    int64             `dynamodbav:"received_at"`
	ProcessedAt   int64             `dynamodbav:"processed_at,omitempty"`
	ExpiresAt     int64             `dynamodbav:"expires_at,omitempty"`
	DeliveryCount int               `dynamodbav:"delivery_count"`
	FirstDelivery string            `dynamodbav:"first_delivery_id,omitempty"`
	LastDelivery  string            `dynamodbav:"last_delivery_id,omitempty"`
	LastDelivAt   int64             `dynamodbav:"last_delivery_at,omitempty"`
	PayloadHash   string            `dynamodbav:"payload_hash"`
	PayloadSize   int               `dynamodbav:"payload_size"`
	PayloadChunks int               `dynamodbav:"payload_chunks"`
	PayloadEnc    string            `dynamodbav:"payload_enc"`
	Conflicts     int               `dynamodbav:"conflict_count,omitempty"`
	LastConflict  string            `dynamodbav:"last_conflict,omitempty"`
	Payload       []byte            `dynamodbav:"payload,omitempty"`
	Result        *Result           `dynamodbav:"result,omitempty"`
	Audit         []auditItem       `dynamodbav:"audit"`
}

// auditItem is one stored audit entry. It is written as one string,
// "<unix ms>\t<from>\t<to>\t<action>\t<actor>[\t<reason>]" (auditText):
// every later write of an item pays again for its audit's bytes, and a map
// per entry costs about 35 bytes more (six attribute names and the map's
// overhead) than the same fields in one string. Entries written as maps
// (by versions before this encoding) still decode.
type auditItem struct {
	At     int64  `dynamodbav:"at"`
	From   string `dynamodbav:"from,omitempty"`
	To     string `dynamodbav:"to"`
	Actor  string `dynamodbav:"actor"`
	Action string `dynamodbav:"action"`
	Reason string `dynamodbav:"reason,omitempty"`
}

// UnmarshalDynamoDBAttributeValue reads an entry in either encoding.
func (a *auditItem) UnmarshalDynamoDBAttributeValue(av types.AttributeValue) error {
	switch v := av.(type) {
	case *types.AttributeValueMemberS:
		f := strings.SplitN(v.Value, "\t", 6)
		if len(f) < 5 {
			return fmt.Errorf("audit entry %q: want at least 5 tab-separated fields, have %d", truncate(v.Value, 80), len(f))
		}
		at, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return fmt.Errorf("audit entry %q: time: %v", truncate(v.Value, 80), err)
		}
		*a = auditItem{At: at, From: f[1], To: f[2], Action: f[3], Actor: f[4]}
		if len(f) == 6 {
			a.Reason = f[5]
		}
		return nil
	case *types.AttributeValueMemberM:
		type plain auditItem // without this method
		var p plain
		if err := attributevalue.UnmarshalMap(v.Value, &p); err != nil {
			return err
		}
		*a = auditItem(p)
		return nil
	}
	return fmt.Errorf("audit entry: unexpected %T", av)
}

// auditText encodes one entry (see auditItem). A tab or line break in the
// actor or the action would shift the fields, so they become spaces; the
// reason is the last field and is kept as it is.
func auditText(at time.Time, from, to Status, actor, action, reason string) string {
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '\t' || r == '\n' || r == '\r' {
				return ' '
			}
			return r
		}, s)
	}
	s := strconv.FormatInt(ms(at), 10) + "\t" + string(from) + "\t" + string(to) + "\t" + clean(action) + "\t" + clean(truncate(actor, MaxIDLength))
	if reason != "" {
		s += "\t" + truncate(reason, MaxReasonLen)
	}
	return s
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

func eventPK(source, eventID string) string { return "EV#" + source + "#" + eventID }

func eventKey(source, eventID string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		attrPK: &types.AttributeValueMemberS{Value: eventPK(source, eventID)},
		attrSK: &types.AttributeValueMemberS{Value: skEvent},
	}
}

// The due index's shard families. Every query names the shards it reads
// (prefix + number), so one family never sees another's items:
//   - work shards ("0" … "n-1"): unfinished events and intents; ListDue,
//     ListDueIntents, ListOpen and the reconciler read them;
//   - attention shards (attentionPrefix, "A0" …): DEAD and QUARANTINED
//     items; ListOpen reads them, the work queries never do;
//   - done shards (doneShardPrefix, "done#0" …): finished events that
//     received a duplicate after they left the index (see Accept); no query
//     reads them, and the TTL removes them with the event.
const doneShardPrefix = "done#"

// dueShard spreads unfinished events over the GSI partitions.
func (l *Ledger) dueShard(source, eventID string) string {
	return strconv.Itoa(DueShard(l.opts.DueShards, source, eventID))
}

// MaxDueShards bounds the due index's shard count: every query reads each
// shard, so the count is also a cost per query.
const MaxDueShards = 64

// DueShard is the due-index shard (0 … shards-1) of an item keyed by a
// and b (an event's source and id; "OP" and an operation id): an FNV-1a
// hash, so items spread evenly whatever their ids look like.
func DueShard(shards int, a, b string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(a + "#" + b))
	return int(h.Sum32() % uint32(shards))
}

func decodeEvent(av map[string]types.AttributeValue) (Event, error) {
	var it item
	if err := attributevalue.UnmarshalMap(av, &it); err != nil {
		return Event{}, fmt.Errorf("decode event item: %w", err)
	}
	ev := Event{
		Source: it.Source, EventID: it.EventID, EventType: it.EventType, Subject: it.Subject,
		VersionHint: it.VersionHint, Attributes: it.Attrs,
		Status: it.Status, Attempts: it.Attempts, TotalAttempts: it.TotalAttempts,
		LeaseOwner: it.LeaseOwner, LeaseToken: it.LeaseToken, LeaseExpires: fromMS(it.LeaseExpires),
		NextAttemptAt: fromMS(it.NextAttemptAt), ErrorCode: it.ErrorCode, ErrorMessage: it.ErrorMessage,
		ReceivedAt: fromMS(it.ReceivedAt), ProcessedAt: fromMS(it.ProcessedAt),
		DeliveryCount: it.DeliveryCount, FirstDeliveryID: it.FirstDelivery, LastDeliveryID: it.LastDelivery,
		LastDeliveryAt: fromMS(it.LastDelivAt),
		PayloadHash:    it.PayloadHash, PayloadSize: it.PayloadSize, PayloadChunks: it.PayloadChunks,
		Conflicts: it.Conflicts, LastConflict: it.LastConflict,
		Result: it.Result, payload: it.Payload, encoded: it.PayloadEnc,
	}
	if it.ExpiresAt != 0 {
		ev.ExpiresAt = time.Unix(it.ExpiresAt, 0).UTC()
	}
	for i := range DeliveryHistorySlots {
		if v, ok := av[historyAttr(i)].(*types.AttributeValueMemberS); ok {
			if r, ok := parseDeliveryRecord(v.Value); ok {
				ev.RecentDeliveries = append(ev.RecentDeliveries, r)
			}
		}
	}
	sortDeliveries(ev.RecentDeliveries)
	if len(ev.RecentDeliveries) > 0 {
		ev.LastDeliveryAt, ev.LastDeliveryID = ev.RecentDeliveries[0].At, ev.RecentDeliveries[0].ID
	}
	if r := ev.Result; r != nil {
		if r.Intents == 0 {
			r.Intents = len(r.Operations)
		}
		if r.Projection != "" && r.Subject == "" {
			r.Subject = ev.Subject // stored once, on the event (finishUpdate)
		}
	}
	for _, a := range it.Audit {
		ev.Audit = append(ev.Audit, AuditEntry{At: fromMS(a.At), From: Status(a.From), To: Status(a.To), Actor: a.Actor, Action: a.Action, Reason: a.Reason})
	}
	return ev, nil
}

// historyAttr names delivery history slot i ("dh0" …): short, because
// every later write of the item pays for its bytes.
func historyAttr(i int) string { return "dh" + strconv.Itoa(i) }

// historySlot is the slot a delivery goes to: by its delivery id, or by
// its arrival time when it has none.
func historySlot(deliveryID string, at time.Time) int {
	key := deliveryID
	if key == "" {
		key = strconv.FormatInt(ms(at), 10)
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % DeliveryHistorySlots)
}

// deliveryRecord encodes one slot: "<epoch ms>" or "<epoch ms> <delivery id>".
func deliveryRecord(deliveryID string, at time.Time) string {
	s := strconv.FormatInt(ms(at), 10)
	if deliveryID != "" {
		s += " " + deliveryID
	}
	return s
}

func parseDeliveryRecord(s string) (DeliveryRecord, bool) {
	at, id, _ := strings.Cut(s, " ")
	n, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return DeliveryRecord{}, false
	}
	return DeliveryRecord{At: fromMS(n), ID: id}, true
}

// sortDeliveries orders records newest first.
func sortDeliveries(rs []DeliveryRecord) {
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].At.After(rs[j].At) })
}

// auditValue encodes one audit entry as a one-element list for list_append.
func auditValue(at time.Time, from, to Status, actor, action, reason string) types.AttributeValue {
	return &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: auditText(at, from, to, actor, action, reason)}}}
}

// appliedBefore reports whether a refused write is this very request,
// applied by an earlier attempt whose answer was lost and sent again by the
// SDK (it retries a reset connection or a 500, and the write may have been
// applied before either): the item's last audit entry is the one sent (an
// auditValue: time to the millisecond, actor, transition, reason). It
// returns the item. DynamoDB sends the item back with the refusal
// (ALL_OLD); from a store that does not (dynalite) it is read, on this
// refusal path only.
func (l *Ledger) appliedBefore(ctx context.Context, ccf *types.ConditionalCheckFailedException, key map[string]types.AttributeValue, sent types.AttributeValue) (map[string]types.AttributeValue, bool) {
	item := ccf.Item
	if len(item) == 0 {
		got, err := l.getItem(ctx, key, "refused item")
		if err != nil {
			return nil, false
		}
		item = got
	}
	return item, lastAuditIs(item, sent)
}

// lastAuditIs reports whether an item's last audit entry is the one entry
// of sent (an auditValue).
func lastAuditIs(item map[string]types.AttributeValue, sent types.AttributeValue) bool {
	have, ok := item["audit"].(*types.AttributeValueMemberL)
	want, ok2 := sent.(*types.AttributeValueMemberL)
	if !ok || !ok2 || len(have.Value) == 0 || len(want.Value) != 1 {
		return false
	}
	a, ok := have.Value[len(have.Value)-1].(*types.AttributeValueMemberS)
	b, ok2 := want.Value[0].(*types.AttributeValueMemberS)
	return ok && ok2 && a.Value == b.Value
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary.
	for n > 0 && (s[n]&0xC0) == 0x80 {
		n--
	}
	return s[:n]
}

func validID(kind, v string, maxLen int) error {
	if v == "" {
		return fmt.Errorf("%w: empty %s", ErrInvalid, kind)
	}
	if len(v) > maxLen {
		return fmt.Errorf("%w: %s longer than %d bytes", ErrInvalid, kind, maxLen)
	}
	if !utf8.ValidString(v) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, kind)
	}
	for _, r := range v {
		if unicode.IsControl(r) || r == 0xFFFE || r == 0xFFFF {
			// SQS message bodies (where an id travels in its pointer) allow
			// #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF;
			// valid UTF-8 has no surrogates; controls (C0, DEL, C1) have no
			// place in keys and log lines either.
			return fmt.Errorf("%w: %s contains control characters or code points SQS refuses (U+%04X)", ErrInvalid, kind, r)
		}
	}
	return nil
}
