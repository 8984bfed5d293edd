package ledger

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// An irreversible effect whose reason a newer revision removes after it
// was performed is never silent. The projection item of
// a subject lists the while_current intents it created (Watch). The commit
// of every later revision of that subject evaluates their conditions
// against the new state, and for each one the new state breaks, in the
// same transaction:
//
//   - SUCCEEDED (performed): a compensation intent (CompensationID, policy
//     once) when the projection declared one for the kind, else the intent
//     becomes CONTRADICTED, an attention item for the recovery owner;
//   - in flight or waiting (DISPATCHING, UNCERTAIN, PENDING, RETRY_WAIT):
//     marked contradicted_by; the dispatcher ends it OBSOLETE without a
//     call, or, when it turns out performed, CONTRADICTED (RecordIntent,
//     the dispatcher's lookup);
//   - finished otherwise (FAILED, QUARANTINED, OBSOLETE, expired): nothing
//     more to do.
//
// Each update is conditioned on the status the commit read, so a
// dispatcher that moves the intent in between cancels the transaction and
// the commit starts over with fresh reads. Only subjects that watch
// something pay: the projection write is conditioned on the watch list it
// was planned with (none, or the projection version read), and a subject
// with a list costs one failed transaction to learn it, then one
// consistent read per broken entry.

// MaxWatch bounds a subject's watch list. The oldest entries are dropped
// past it, and the commit's audit says so.
const MaxWatch = 32

// ConditionHolds reports whether a projection state satisfies an intent's
// condition (every field equal, compared as text), and if not, which field
// differs.
func ConditionHolds(cond map[string]string, state map[string]any) (bool, string) {
	keys := make([]string, 0, len(cond))
	for k := range cond {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if got := textOf(state[k]); got != cond[k] {
			return false, fmt.Sprintf("%s=%s, the intent needs %s=%s", k, got, k, cond[k])
		}
	}
	return true, ""
}

func textOf(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// contradiction is one watched intent a new revision breaks.
type contradiction struct {
	entry  WatchEntry
	intent IntentState
	why    string
}

// watchPlan is what a commit does with the subject's watch list.
type watchPlan struct {
	keep    []WatchEntry
	contra  []contradiction
	dropped int // entries dropped past MaxWatch
}

// planWatch evaluates prev's watch list against the new state and reads
// the intents whose condition broke (strongly consistent), then adds the
// new while_current intents.
func (l *Ledger) planWatch(ctx context.Context, w *ProjectionWrite, intents []Intent, prev *Projection) (watchPlan, error) {
	var p watchPlan
	if prev != nil {
		for _, e := range prev.Watch {
			ok, why := ConditionHolds(e.Condition, w.State)
			if ok {
				p.keep = append(p.keep, e)
				continue
			}
			in, err := l.GetIntentState(ctx, e.OperationID)
			switch {
			case errors.Is(err, ErrNotFound):
				continue // expired with its retention: long finished
			case err != nil:
				return p, err
			}
			switch in.Status {
			case IntentStatusSucceeded, IntentStatusDispatching, IntentStatusUncertain, IntentStatusPending, IntentStatusRetryWait:
				p.contra = append(p.contra, contradiction{entry: e, intent: in, why: why})
			}
		}
	}
	for _, in := range intents {
		if in.Policy == PolicyWhileCurrent && len(in.Condition) > 0 {
			p.keep = append(p.keep, WatchEntry{OperationID: in.OperationID, Kind: in.Kind, Version: w.Version, Condition: in.Condition, Compensation: in.Compensation})
		}
	}
	if n := len(p.keep) - MaxWatch; n > 0 {
		p.dropped = n
		p.keep = p.keep[n:]
	}
	return p, nil
}

// compensates reports whether the commit writes a compensation for k: its
// intent was performed, and the projection declared a compensation for
// its kind.
func (k contradiction) compensates() bool {
	return k.intent.Status == IntentStatusSucceeded && k.entry.Compensation != ""
}

// contradictionUpdate records on k's intent that this revision removed its
// reason, conditioned on the status (and, in flight, the lease) the commit
// read: marked contradicted_by and, when performed, compensated_by its
// compensation or made CONTRADICTED on the attention shards.
func (l *Ledger) contradictionUpdate(c Claim, w *ProjectionWrite, k contradiction) *types.Update {
	now := l.now()
	in := k.intent
	op := in.OperationID
	reason := fmt.Sprintf("version %d of %s/%s removed its reason (%s)", w.Version, w.Name, w.Subject, k.why)
	u := (&update{}).Name("#status", "status").Values(map[string]types.AttributeValue{
		":seen": sv(string(in.Status)), ":by": nv(w.Version), ":empty": &types.AttributeValueMemberL{Value: []types.AttributeValue{}},
	})
	u.Set("contradicted_by = :by", "audit = list_append(if_not_exists(audit, :empty), :audit)").If("#status = :seen")
	if in.Status == IntentStatusDispatching {
		u.If("lease_token = :tok").Value(":tok", sv(in.LeaseToken))
	}
	switch {
	case k.compensates():
		cop := CompensationID(op)
		u.Set("compensated_by = :cop").Value(":cop", sv(cop))
		u.Value(":audit", auditValue(now, Status(in.Status), Status(in.Status), c.Owner, "compensate", truncate(reason+"; compensation "+k.entry.Compensation+" "+cop, MaxReasonLen)))
	case in.Status == IntentStatusSucceeded:
		u.Set("#status = :to", "error_code = :code", "detail = :detail", attrDueShard+" = :ashard", attrDueAt+" = :now")
		u.Remove(TTLAttribute) // an attention item waits for its owner, it does not expire
		u.Values(map[string]types.AttributeValue{
			":to":     sv(string(IntentStatusContradicted)),
			":code":   sv("contradicted"),
			":detail": sv(truncate("performed, then "+reason+"; the recovery owner must decide what to do", MaxErrorMessageLen)),
			":ashard": sv(attentionPrefix + l.dueShard("OP", op)),
			":now":    nv(ms(now)),
			":audit":  auditValue(now, Status(in.Status), Status(IntentStatusContradicted), c.Owner, "contradict", truncate(reason, MaxReasonLen)),
		})
	default:
		u.Value(":audit", auditValue(now, Status(in.Status), Status(in.Status), c.Owner, "contradict", truncate(reason, MaxReasonLen)))
	}
	return u.txUpdate(l.opts.Table, intentKey(op))
}

// compensationPut puts the compensation intent of k's performed intent,
// only if it is new.
func (l *Ledger) compensationPut(c Claim, w *ProjectionWrite, k contradiction, cop string) (*types.Put, error) {
	it, err := l.compensationItem(c, w, k, cop)
	if err != nil {
		return nil, err
	}
	return newItemOnly().txPut(l.opts.Table, it), nil
}

// compensationItem is the intent that compensates k's performed intent:
// policy once, its truth the revision that contradicted it.
func (l *Ledger) compensationItem(c Claim, w *ProjectionWrite, k contradiction, cop string) (map[string]types.AttributeValue, error) {
	payload, err := attributevalue.MarshalMap(map[string]any{
		"compensates":      k.intent.OperationID,
		"compensates_kind": k.intent.Kind,
		"performed_at":     strconv.FormatInt(k.entry.Version, 10),
		"contradicted_by":  strconv.FormatInt(w.Version, 10),
		"state":            w.State,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: compensation payload: %v", ErrInvalid, err)
	}
	it := l.intentItem(c, w, Intent{OperationID: cop, Kind: k.entry.Compensation, Subject: k.intent.Subject, Policy: PolicyOnce})
	it["payload"] = &types.AttributeValueMemberM{Value: payload}
	return it, nil
}
