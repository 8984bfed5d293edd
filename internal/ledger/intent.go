package ledger

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// ProjectionWrite, Intent and Policy are the projection contract's types
// (package projection owns them; a projection never imports the ledger).
type (
	ProjectionWrite = projection.Write
	Intent          = projection.Intent
	Policy          = projection.Policy
)

// The policies, as the projection contract names them.
const (
	PolicyOnce         = projection.PolicyOnce
	PolicyWhileCurrent = projection.PolicyWhileCurrent
	PolicyLatest       = projection.PolicyLatest
)

// CompensationID is projection.CompensationID.
func CompensationID(op string) string { return projection.CompensationID(op) }

// Family is the kind family of an intent kind: the part before the first
// dot ("entitlement" for "entitlement.grant"), or the kind itself.
func Family(kind string) string {
	if i := strings.IndexByte(kind, '.'); i > 0 {
		return kind[:i]
	}
	return kind
}

// StoredIntent is an outbox intent as stored.
type StoredIntent struct {
	OperationID string         `dynamodbav:"operation_id"`
	Kind        string         `dynamodbav:"kind"`
	Subject     string         `dynamodbav:"subject"`
	Status      string         `dynamodbav:"status"`
	Payload     map[string]any `dynamodbav:"payload"`
	Causation   string         `dynamodbav:"causation"` // source/event_id that created it
	Scope       string         `dynamodbav:"scope"`     // may be absent (see IntentState.Scope)
	Source      string         `dynamodbav:"source"`    // likewise
	CreatedAt   int64          `dynamodbav:"created_at"`
}

// IntentPending is the status of a newly written intent. The dispatcher
// moves it on (see IntentStatus).
const IntentPending = "PENDING"

// IntentStatus is an outbox intent's dispatch state. It is a different
// dimension from an event's Status: a processed event can own an UNCERTAIN
// intent.
//
//	PENDING ──claim──> DISPATCHING(lease_owner, lease_token, lease_expires_at, attempts+1)
//	DISPATCHING ──record──> SUCCEEDED | FAILED | QUARANTINED   (terminal: no due keys)
//	DISPATCHING ──record──> OBSOLETE | SUPERSEDED  (terminal, no call: the truth moved on; see Policy)
//	SUCCEEDED ──commit of a contradicting revision──> CONTRADICTED  (attention: performed, then its reason was removed)
//	DISPATCHING, UNCERTAIN marked contradicted ──record as performed──> CONTRADICTED
//	CONTRADICTED ──operator resolve──> SUCCEEDED  (acknowledged by the recovery owner)
//	DISPATCHING ──record──> RETRY_WAIT(next_attempt_at) | UNCERTAIN(next_check_at)  (due_at = that time)
//	RETRY_WAIT, UNCERTAIN when due ──claim──> DISPATCHING
//	DISPATCHING, lease expired ──claim by another dispatcher──> DISPATCHING (new token)
type IntentStatus string

// The intent states.
const (
	IntentStatusPending     IntentStatus = IntentPending
	IntentStatusDispatching IntentStatus = "DISPATCHING"
	IntentStatusSucceeded   IntentStatus = "SUCCEEDED"
	IntentStatusFailed      IntentStatus = "FAILED"
	IntentStatusUncertain   IntentStatus = "UNCERTAIN"
	IntentStatusRetryWait   IntentStatus = "RETRY_WAIT"
	IntentStatusQuarantined IntentStatus = "QUARANTINED"
	// IntentStatusObsolete: a while_current intent whose reason a newer
	// revision removed before it was performed; no call was made.
	IntentStatusObsolete IntentStatus = "OBSOLETE"
	// IntentStatusSuperseded: a latest intent whose state a newer one
	// carries; no call was made.
	IntentStatusSuperseded IntentStatus = "SUPERSEDED"
	// IntentStatusContradicted: a while_current intent that was performed
	// (the downstream applied it) and that a newer revision contradicted
	// afterwards, with no compensation declared for its kind. It waits on
	// the attention shards for the recovery owner: an irreversible effect
	// whose reason went away is never silent, and since the ledger cannot
	// take it back, a human contains and records it.
	IntentStatusContradicted IntentStatus = "CONTRADICTED"
)

// Terminal reports whether no dispatcher will pick the intent up again.
func (s IntentStatus) Terminal() bool {
	switch s {
	case IntentStatusSucceeded, IntentStatusFailed, IntentStatusQuarantined, IntentStatusObsolete, IntentStatusSuperseded, IntentStatusContradicted:
		return true
	}
	return false
}

// IntentState is the full read model of one intent item: what commit wrote
// plus the dispatch bookkeeping and the audit trail.
type IntentState struct {
	OperationID string
	Kind        string
	Subject     string
	Status      IntentStatus
	Payload     map[string]any
	// PayloadHash is the payload's canonical hash (IntentPayloadHash), as the
	// commit stored it, or computed from the payload for an item written
	// before it was stored.
	PayloadHash string
	Causation   string
	CreatedAt   time.Time
	// Scope owns the fact the intent acts on (the scope of its projection,
	// "" for an unscoped source's) and Source delivered the event that
	// caused it. An intent item without them has them derived when read:
	// the scope from the projection's name
	// ("<scope>/<name>", ScopeOf), the source from Causation
	// ("<source>/<event id>"); an intent without a scoped projection has
	// scope "", which only an effect open to every scope performs.
	Scope  string
	Source string

	// The truth the intent came from (empty when the item does not record
	// it): the projection, its subject, version and state fingerprint at
	// the commit, and the dispatch policy.
	Projection        string
	ProjectionSubject string
	Version           int64
	Fingerprint       string
	Policy            Policy // "" means PolicyOnce
	Condition         map[string]string

	// ContradictedBy is the projection version of the newer revision that
	// removed a while_current intent's reason while the intent was
	// performed or in flight (0: never). CompensatedBy is the operation id
	// of the compensation intent the commit of that revision created, when
	// the projection declares one for the kind.
	ContradictedBy int64
	CompensatedBy  string
	// MaybeSent: some earlier attempt may have reached the downstream
	// (it timed out after sending, or its dispatcher died mid-call). It
	// stays set through later attempts that learned nothing about that one
	// (a 500 on a retry with the same key), so a decision without a call
	// (OBSOLETE, SUPERSEDED) still asks the downstream first: deciding
	// from the last attempt alone would end as never sent an intent an
	// earlier attempt may have performed.
	MaybeSent bool

	Attempts       int
	FirstAttemptAt time.Time // first claim: when the downstream may first have seen the key
	LeaseOwner     string
	LeaseToken     string
	LeaseExpires   time.Time
	NextAttemptAt  time.Time // RETRY_WAIT
	NextCheckAt    time.Time // UNCERTAIN
	ErrorCode      string
	Detail         string
	FinishedAt     time.Time
	ExpiresAt      time.Time // when DynamoDB's TTL may delete a finished intent
	Audit          []AuditEntry
}

type intentItem struct {
	OperationID    string            `dynamodbav:"operation_id"`
	Kind           string            `dynamodbav:"kind"`
	Subject        string            `dynamodbav:"subject"`
	Status         IntentStatus      `dynamodbav:"status"`
	Payload        any               `dynamodbav:"payload"` // a map; commit stores an empty payload as NULL
	PayloadHash    string            `dynamodbav:"payload_hash"`
	Causation      string            `dynamodbav:"causation"`
	Scope          string            `dynamodbav:"scope"`
	Source         string            `dynamodbav:"source"`
	CreatedAt      int64             `dynamodbav:"created_at"`
	Projection     string            `dynamodbav:"projection"`
	ProjSubject    string            `dynamodbav:"proj_subject"`
	Version        int64             `dynamodbav:"version"`
	VersionText    string            `dynamodbav:"version_s"`
	Fingerprint    string            `dynamodbav:"fingerprint"`
	Policy         Policy            `dynamodbav:"policy"`
	Condition      map[string]string `dynamodbav:"condition"`
	ContradictedBy int64             `dynamodbav:"contradicted_by"`
	CompensatedBy  string            `dynamodbav:"compensated_by"`
	MaybeSent      bool              `dynamodbav:"maybe_sent"`
	Attempts       int               `dynamodbav:"attempts"`
	FirstAttemptAt int64             `dynamodbav:"first_attempt_at"`
	LeaseOwner     string            `dynamodbav:"lease_owner"`
	LeaseToken     string            `dynamodbav:"lease_token"`
	LeaseExpires   int64             `dynamodbav:"lease_expires_at"`
	NextAttemptAt  int64             `dynamodbav:"next_attempt_at"`
	NextCheckAt    int64             `dynamodbav:"next_check_at"`
	ErrorCode      string            `dynamodbav:"error_code"`
	Detail         string            `dynamodbav:"detail"`
	FinishedAt     int64             `dynamodbav:"finished_at"`
	ExpiresAt      int64             `dynamodbav:"expires_at"`
	Audit          []auditItem       `dynamodbav:"audit"`
}

func decodeIntent(av map[string]types.AttributeValue) (IntentState, error) {
	var it intentItem
	// Numbers as written (UseNumber): a payload's version above 2^53 (a
	// Stripe deletion's) must reach the downstream exact, never through a
	// float64.
	if err := attributevalue.UnmarshalMapWithOptions(av, &it, func(o *attributevalue.DecoderOptions) { o.UseNumber = true }); err != nil {
		return IntentState{}, fmt.Errorf("decode intent item: %w", err)
	}
	in := IntentState{
		OperationID: it.OperationID, Kind: it.Kind, Subject: it.Subject, Status: it.Status,
		Causation: it.Causation, Scope: it.Scope, Source: it.Source, CreatedAt: fromMS(it.CreatedAt),
		Projection: it.Projection, ProjectionSubject: it.ProjSubject, Version: it.Version, Fingerprint: it.Fingerprint,
		Policy: it.Policy, Condition: it.Condition, ContradictedBy: it.ContradictedBy, CompensatedBy: it.CompensatedBy, MaybeSent: it.MaybeSent,
		Attempts: it.Attempts, FirstAttemptAt: fromMS(it.FirstAttemptAt),
		LeaseOwner: it.LeaseOwner, LeaseToken: it.LeaseToken, LeaseExpires: fromMS(it.LeaseExpires),
		NextAttemptAt: fromMS(it.NextAttemptAt), NextCheckAt: fromMS(it.NextCheckAt),
		ErrorCode: it.ErrorCode, Detail: it.Detail, FinishedAt: fromMS(it.FinishedAt),
	}
	if in.Scope == "" {
		in.Scope = ScopeOf(it.Projection) // not recorded: the projection's
	}
	if in.Source == "" {
		// Written before the source was recorded: a source's name never
		// contains "/", so Causation's first part is it.
		in.Source, _, _ = strings.Cut(it.Causation, "/")
	}
	if it.ExpiresAt > 0 {
		in.ExpiresAt = time.Unix(it.ExpiresAt, 0).UTC()
	}
	if v, err := strconv.ParseInt(it.VersionText, 10, 64); err == nil {
		in.Version = v // exact, where the number may have been rounded (see the package doc)
	}
	if p, ok := it.Payload.(map[string]any); ok {
		in.Payload = exactNumbers(p).(map[string]any)
	}
	in.PayloadHash = it.PayloadHash
	if in.PayloadHash == "" {
		in.PayloadHash = IntentPayloadHash(in.Payload)
	}
	in.Audit = auditEntries(it.Audit)
	return in, nil
}

// intentItem is a new PENDING intent as commit writes it, without its
// payload and condition.
func (l *Ledger) intentItem(c Claim, w *ProjectionWrite, in Intent) map[string]types.AttributeValue {
	now := l.now()
	it := intentKey(in.OperationID)
	it["item"] = sv("intent")
	it["operation_id"] = sv(in.OperationID)
	it["kind"] = sv(in.Kind)
	it["subject"] = sv(in.Subject)
	it["status"] = sv(IntentPending)
	it["causation"] = sv(c.Event.Source + "/" + c.Event.EventID)
	// Whose fact the intent acts on: the scope that owns its projection and
	// the source that delivered the event. The dispatcher checks the scope
	// against the effect's allowed scopes and sends both with the call.
	if scope := ScopeOf(w.Name); scope != "" {
		it["scope"] = sv(scope)
	}
	it["source"] = sv(c.Event.Source)
	it["created_at"] = nv(ms(now))
	// The truth the intent came from: the dispatcher compares it with the
	// projection when it claims the intent.
	it["projection"] = sv(w.Name)
	it["proj_subject"] = sv(w.Subject)
	it["version"] = nv(w.Version)
	// The same version as text, exact whatever rewrites the item (see the
	// package doc).
	it["version_s"] = sv(strconv.FormatInt(w.Version, 10))
	it["fingerprint"] = sv(w.Fingerprint)
	if in.Policy != "" && in.Policy != PolicyOnce {
		it["policy"] = sv(string(in.Policy))
	}
	it[attrDueShard] = sv(l.dueShard("OP", in.OperationID))
	it[attrDueAt] = nv(ms(now))
	return it
}
