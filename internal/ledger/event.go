package ledger

import (
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

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
	// record is always the newest delivery, or from the attributes
	// last_delivery_at and last_delivery_id of a row without a history.
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
	ev.RecentDeliveries = storedDeliveries(av, -1)
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
	ev.Audit = auditEntries(it.Audit)
	return ev, nil
}
