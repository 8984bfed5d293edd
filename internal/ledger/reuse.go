package ledger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// One operation id names one action. A commit whose intent finds its
// operation id held by an intent already written (the conditional put
// fails, and the refusal returns the held item) tells three cases apart
// by what the held item records:
//
//   - the same intent: same kind and policy, the same truth (projection,
//     subject, version) and the same payload hash. Not written again, and
//     nothing to say: it is this very commit's intent, or its twin's;
//   - a once intent of the same kind and policy from another revision or
//     event, or a while_current one with the same payload hash and
//     condition: the declared deduplication. Not written again, and
//     recorded on the event in the commit itself (Result.Deduplicated and
//     an audit entry "intent_deduplicated");
//   - anything else (a latest intent of another revision or payload, a
//     while_current one of another payload or condition, another kind or
//     policy under the id): a reuse, the rule's bug. Nothing of the commit is written; the event
//     is QUARANTINED projection.CodeOperationIDReused, naming the id and
//     both payload hashes (Reuse).
//
// A warehouse record's id names its revision (warehouse.Intent): a held
// one is the same record, not written again. A commit's answer that was
// lost never reaches this path: the retried transaction is refused by the
// event's own fencing first (cancelLeaseLost), and a replayed or
// duplicated revision by the projection's version guard.

// IntentPayloadHash is the canonical hash of an intent's payload stored
// on the intent item (payload_hash): projection.Fingerprint of the
// payload, an absent payload hashed as an empty one.
func IntentPayloadHash(payload map[string]any) string {
	if payload == nil {
		payload = map[string]any{}
	}
	return projection.Fingerprint(payload)
}

// Reuse is a commit refused because one of its intents reuses an
// operation id another intent holds (see the package's reuse.go).
type Reuse struct {
	OperationID string
	// The refused intent: its kind, policy, payload hash, and the revision
	// that emitted it.
	Kind        string
	Policy      Policy
	PayloadHash string
	Projection  string
	Subject     string
	Version     int64
	// The intent that holds the id: its kind, policy and payload hash, the
	// event that wrote it ("<source>/<event id>") and its version.
	HeldKind        string
	HeldPolicy      Policy
	HeldPayloadHash string
	HeldBy          string
	HeldVersion     int64
}

// Message is the quarantined event's reason: what was reused, by whom,
// and how the rule is fixed.
func (r *Reuse) Message() string {
	return fmt.Sprintf("operation id %q reused: projection %s emitted %s (policy %s) for %s at version %d with payload hash %s, "+
		"but %s (policy %s) of %s at version %d holds the id with payload hash %s; one operation id names one action: "+
		"include the revision in the id, e.g. projection.OperationID(subject, kind, strconv.FormatInt(version, 10))",
		r.OperationID, r.Projection, r.Kind, policyName(r.Policy), r.Subject, r.Version, r.PayloadHash,
		r.HeldKind, policyName(r.HeldPolicy), r.HeldBy, r.HeldVersion, r.HeldPayloadHash)
}

func policyName(p Policy) Policy {
	if p == "" {
		return PolicyOnce
	}
	return p
}

// Deduplication is a once intent (or a while_current one with the same
// payload and condition) a commit did not write because another intent of
// the same kind already holds its operation id: the declared
// deduplication, recorded on the event.
type Deduplication struct {
	OperationID string `json:"operation_id"`
	Kind        string `json:"kind"`
	// HeldBy is the event whose commit wrote the intent that holds the id
	// ("<source>/<event id>"), HeldVersion its projection version.
	HeldBy      string `json:"held_by"`
	HeldVersion int64  `json:"held_version"`
	// SamePayload: the held intent's payload hash is this one's.
	SamePayload bool `json:"same_payload"`
}

// Deduplications are a result's deduplicated intents. In DynamoDB they
// are one string, "<operation id>\t<kind>\t<held by>\t<held version>\t<same|differs>"
// per intent joined by "\n", as Operations are.
type Deduplications []Deduplication

// MarshalDynamoDBAttributeValue encodes the deduplications as one string.
func (d Deduplications) MarshalDynamoDBAttributeValue() (types.AttributeValue, error) {
	if len(d) == 0 {
		return &types.AttributeValueMemberNULL{Value: true}, nil
	}
	parts := make([]string, len(d))
	for i, x := range d {
		same := "differs"
		if x.SamePayload {
			same = "same"
		}
		parts[i] = strings.Join([]string{x.OperationID, x.Kind, x.HeldBy, strconv.FormatInt(x.HeldVersion, 10), same}, "\t")
	}
	return &types.AttributeValueMemberS{Value: strings.Join(parts, "\n")}, nil
}

// UnmarshalDynamoDBAttributeValue decodes what MarshalDynamoDBAttributeValue wrote.
func (d *Deduplications) UnmarshalDynamoDBAttributeValue(av types.AttributeValue) error {
	s, ok := av.(*types.AttributeValueMemberS)
	if !ok {
		*d = nil
		return nil
	}
	var out Deduplications
	for _, line := range strings.Split(s.Value, "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, "\t", 5)
		for len(f) < 5 {
			f = append(f, "")
		}
		v, _ := strconv.ParseInt(f[3], 10, 64)
		out = append(out, Deduplication{OperationID: f[0], Kind: f[1], HeldBy: f[2], HeldVersion: v, SamePayload: f[4] == "same"})
	}
	*d = out
	return nil
}

// heldVerdict is what a held operation id means for one new intent.
type heldVerdict int

const (
	heldSame heldVerdict = iota
	heldDeduplicated
	heldReused
)

// judgeHeld compares a new intent of revision w with the intent that
// holds its operation id.
func judgeHeld(held IntentState, in Intent, w *ProjectionWrite) heldVerdict {
	if held.Kind != in.Kind || policyName(held.Policy) != policyName(in.Policy) {
		return heldReused
	}
	if held.Projection == w.Name && held.ProjectionSubject == w.Subject && held.Version == w.Version && held.PayloadHash == IntentPayloadHash(in.Payload) {
		return heldSame
	}
	switch policyName(in.Policy) {
	case PolicyOnce:
		return heldDeduplicated
	case PolicyWhileCurrent:
		// The same action justified by the same condition, carried again
		// by a later revision that still satisfies it ("ship the order
		// while it is paid", keyed by order): the held intent is
		// performed exactly when this one would be.
		if held.PayloadHash == IntentPayloadHash(in.Payload) && maps.Equal(held.Condition, in.Condition) {
			return heldDeduplicated
		}
	}
	return heldReused
}

// sortedHeld is what a commit does with its intents whose operation id is
// held: those to drop, the deduplications to record, or the reuse that
// refuses the commit.
type sortedHeld struct {
	drop  map[int]bool
	dedup []Deduplication
	reuse *Reuse
}

// sortHeld judges each intent (by index) whose operation id is held,
// against the held item the refusal returned, read when the store
// returned none (see the package doc). An intent whose held item is gone
// by the time it is read is kept: the next attempt writes it.
func (l *Ledger) sortHeld(ctx context.Context, w *ProjectionWrite, intents []Intent, held map[int]map[string]types.AttributeValue, known map[int]IntentState) (sortedHeld, error) {
	s := sortedHeld{drop: map[int]bool{}}
	for i := range intents {
		item, isHeld := held[i]
		k, isKnown := known[i]
		if !isHeld && !isKnown {
			continue
		}
		in := intents[i]
		if in.Kind == warehouse.Kind || IsRecordIntent(in.OperationID) {
			s.drop[i] = true
			continue
		}
		if !isKnown {
			if len(item) == 0 {
				got, err := l.getItem(ctx, intentKey(in.OperationID), "intent "+in.OperationID)
				if errors.Is(err, ErrNotFound) {
					continue
				}
				if err != nil {
					return s, err
				}
				item = got
			}
			var err error
			if k, err = decodeIntent(item); err != nil {
				return s, err
			}
		}
		switch judgeHeld(k, in, w) {
		case heldSame:
			s.drop[i] = true
		case heldDeduplicated:
			s.drop[i] = true
			s.dedup = append(s.dedup, Deduplication{OperationID: in.OperationID, Kind: in.Kind, HeldBy: k.Causation, HeldVersion: k.Version,
				SamePayload: k.PayloadHash == IntentPayloadHash(in.Payload)})
		case heldReused:
			s.reuse = &Reuse{
				OperationID: in.OperationID, Kind: in.Kind, Policy: policyName(in.Policy), PayloadHash: IntentPayloadHash(in.Payload),
				Projection: w.Name, Subject: w.Subject, Version: w.Version,
				HeldKind: k.Kind, HeldPolicy: policyName(k.Policy), HeldPayloadHash: k.PayloadHash, HeldBy: k.Causation, HeldVersion: k.Version,
			}
			return s, nil
		}
	}
	return s, nil
}

// heldByWatch are the commit's intents (by index) whose operation id is
// a watched intent this revision contradicts: the transaction would both
// put and update that item, which DynamoDB refuses, so they are judged
// before it, against the intent the plan read.
func heldByWatch(intents []Intent, watch watchPlan) map[int]IntentState {
	var out map[int]IntentState
	for i, in := range intents {
		for _, k := range watch.contra {
			if k.intent.OperationID == in.OperationID {
				if out == nil {
					out = map[int]IntentState{}
				}
				out[i] = k.intent
			}
		}
	}
	return out
}

// dedupReason is the reason of a deduplication's audit entry.
func dedupReason(d Deduplication) string {
	payload := "same payload"
	if !d.SamePayload {
		payload = "another payload"
	}
	return fmt.Sprintf("%s (%s) is held by %s at version %d: deduplicated, not written again (%s)", d.OperationID, d.Kind, d.HeldBy, d.HeldVersion, payload)
}
