package ledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// Status is an event's processing state. It is a different dimension from
// business state: a cancelled order can have an uncertain refund.
//
//	RECEIVED ──claim──> PROCESSING(lease_owner, lease_token, lease_expires_at, attempts+1)
//	PROCESSING ──commit──> PROCESSED(outcome: applied | stale | noop | ignored)
//	PROCESSING ──transient error──> RETRY_WAIT(next_attempt_at) ──claim──> PROCESSING
//	PROCESSING, lease expired ──claim by another worker──> PROCESSING (new token)
//	PROCESSING ──attempts exhausted──> DEAD
//	PROCESSING ──permanent error──> QUARANTINED
//	PROCESSING ──payload never stored──> RETRY_WAIT (AwaitPayload: no attempt counted)
//	RETRY_WAIT, DEAD, QUARANTINED without the payload ──provider's retry stores it──> RECEIVED
//	DEAD ──redrive from the DLQ──> PROCESSING (audited as a redrive)
//	DEAD, QUARANTINED ──operator replay(reason, actor)──> RECEIVED (same identity)
//
// Every transition is one conditional write that also appends an audit
// entry (when, what, who, why) to the event item, so the trail can never
// disagree with the status.
type Status string

// The processing states.
const (
	StatusReceived    Status = "RECEIVED"
	StatusProcessing  Status = "PROCESSING"
	StatusProcessed   Status = "PROCESSED"
	StatusRetryWait   Status = "RETRY_WAIT"
	StatusDead        Status = "DEAD"
	StatusQuarantined Status = "QUARANTINED"
)

// Terminal reports whether no worker will pick the event up again without an
// operator (or a DLQ redrive).
func (s Status) Terminal() bool {
	return s == StatusProcessed || s == StatusDead || s == StatusQuarantined
}

// Outcome says what a PROCESSED event did to business state.
type Outcome string

// The outcomes of a processed event.
const (
	OutcomeApplied Outcome = "applied" // the projection changed
	OutcomeStale   Outcome = "stale"   // an older version than the projection holds
	OutcomeNoop    Outcome = "noop"    // the projection already had this state
	OutcomeIgnored Outcome = "ignored" // no projection handles this event type
)

// Errors returned by the ledger. AWS exceptions are translated into these at
// this boundary; callers use errors.Is.
var (
	// ErrNotFound: no event item under that identity.
	ErrNotFound = errors.New("ledger: not found")
	// ErrNotClaimable: the event is in a state that cannot be claimed now
	// (processed, quarantined, a live lease elsewhere, or a retry not yet due).
	ErrNotClaimable = errors.New("ledger: event not claimable")
	// ErrLeaseLost: the caller's lease token is no longer the event's; another
	// worker took over and this one must not complete (fencing, I5).
	ErrLeaseLost = errors.New("ledger: lease lost")
	// ErrConflict: a concurrent writer touched the same items; retry later.
	ErrConflict = errors.New("ledger: concurrent write conflict")
	// ErrUnavailable: DynamoDB throttled or failed; retryable.
	ErrUnavailable = errors.New("ledger: store unavailable")
	// ErrInvalid: the caller passed something the ledger refuses to store.
	ErrInvalid = errors.New("ledger: invalid input")
	// ErrNotReplayable: replay asked for an event that is not DEAD or QUARANTINED.
	ErrNotReplayable = errors.New("ledger: event not in a replayable state")
	// ErrPayloadMissing: a chunk of the event's payload was never stored
	// (the intake that wrote the row died before its chunks). Unlike a
	// stored payload that cannot be read (ErrUnavailable), only the
	// provider's retry of the delivery can bring it (see AwaitPayload).
	ErrPayloadMissing = errors.New("ledger: payload not stored")
)

// The error codes of an event whose payload never arrived (see
// AwaitPayload): waiting for the provider's retry, and still missing past
// the source's retry horizon.
const (
	CodePayloadMissing      = "payload_missing"
	CodePayloadNeverArrived = "payload_never_arrived"
)

// Clock tells the time. Tests inject a fake one so leases, retries and TTLs
// are deterministic.
type Clock interface{ Now() time.Time }

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// TokenSource mints lease tokens. Each claim gets a fresh one.
type TokenSource func() string

// RandomTokens mints 128-bit random hex tokens.
func RandomTokens() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// DynamoDB is the part of the DynamoDB client the ledger uses.
type DynamoDB interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

var _ DynamoDB = (*dynamodb.Client)(nil)

// Options configure a Ledger. The zero value of every field has a safe default.
type Options struct {
	// Table is the DynamoDB table name (required).
	Table string
	// Clock defaults to the wall clock.
	Clock Clock
	// Tokens defaults to RandomTokens.
	Tokens TokenSource
	// Retention is how long a terminal event is kept before DynamoDB's TTL
	// removes it. Default 30 days. It must not be shorter than the longest
	// provider retry window of the sources using this table (Stripe retries
	// for up to 3 days), or a late retry would be accepted as new.
	Retention time.Duration
	// PayloadRetention is how long an out-of-line payload chunk is kept; it is
	// written once and never updated, so its TTL is fixed at write time.
	// Default 400 days: far beyond Retention so an unresolved (DEAD or
	// QUARANTINED) event keeps its body while operators look at it.
	PayloadRetention time.Duration
	// DueShards is the number of partitions of the sparse "due" index that
	// new writes spread over (default 4, at most MaxDueShards). DynamoDB
	// limits one partition key to about 1,000 write units per second, and
	// an event with one effect writes about 7 index entries, so the due
	// index caps the pipeline near DueShards × 1000 / 7 events per second.
	DueShards int
	// DueShardsRead is how many shards the queries read (default
	// DueShards; never fewer). Raising DueShards on a live table is safe
	// at once: old items sit on shards the wider read still covers.
	// Lowering it is two steps: first lower DueShards and keep
	// DueShardsRead at the old count until nothing is due on the shards
	// being retired (the events' retention for done shards), then lower
	// DueShardsRead.
	DueShardsRead int
	// InlinePayloadMax is the largest stored (compressed) payload kept inside
	// the event item. Default 256 bytes: the event item's own attributes and
	// audit take most of a 1 KB write unit, and every status change is billed
	// by the whole item, so a larger payload is cheaper in its own item.
	InlinePayloadMax int
	// Actor names this process in audit entries (for example "processor" or
	// the Lambda log stream). Default "ledger".
	Actor string
}

// MinRetention is the floor for Options.Retention: the longest documented
// provider retry window (Stripe: 3 days) plus a day of margin.
const MinRetention = 4 * 24 * time.Hour

// Ledger is the DynamoDB-backed event ledger.
type Ledger struct {
	db   DynamoDB
	opts Options
}

// New returns a Ledger over db. It validates the options.
func New(db DynamoDB, opts Options) (*Ledger, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil DynamoDB client", ErrInvalid)
	}
	if opts.Table == "" {
		return nil, fmt.Errorf("%w: table name is required", ErrInvalid)
	}
	if opts.Clock == nil {
		opts.Clock = SystemClock{}
	}
	if opts.Tokens == nil {
		opts.Tokens = RandomTokens
	}
	if opts.Retention == 0 {
		opts.Retention = 30 * 24 * time.Hour
	}
	if opts.Retention < MinRetention {
		return nil, fmt.Errorf("%w: retention %s is shorter than the provider retry window floor %s", ErrInvalid, opts.Retention, MinRetention)
	}
	if opts.PayloadRetention == 0 {
		opts.PayloadRetention = 400 * 24 * time.Hour
	}
	if opts.PayloadRetention < opts.Retention {
		return nil, fmt.Errorf("%w: payload retention %s is shorter than event retention %s", ErrInvalid, opts.PayloadRetention, opts.Retention)
	}
	if opts.DueShards <= 0 {
		opts.DueShards = 4
	}
	if opts.DueShardsRead <= 0 {
		opts.DueShardsRead = opts.DueShards
	}
	if opts.DueShards > MaxDueShards || opts.DueShardsRead < opts.DueShards || opts.DueShardsRead > MaxDueShards {
		return nil, fmt.Errorf("%w: due shards: write %d, read %d; want 1 ≤ write ≤ read ≤ %d", ErrInvalid, opts.DueShards, opts.DueShardsRead, MaxDueShards)
	}
	if opts.InlinePayloadMax <= 0 {
		opts.InlinePayloadMax = 256
	}
	if opts.Actor == "" {
		opts.Actor = "ledger"
	}
	return &Ledger{db: db, opts: opts}, nil
}

// Table returns the table name.
func (l *Ledger) Table() string { return l.opts.Table }

func (l *Ledger) now() time.Time { return l.opts.Clock.Now().UTC() }
