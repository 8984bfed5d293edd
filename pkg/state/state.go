package state

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// DynamoDB is the one call the Reader makes. *dynamodb.Client is one; a
// test or a caching layer can be another.
type DynamoDB interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

var _ DynamoDB = (*dynamodb.Client)(nil)

// ErrNotFound: no such subject in that scope (no event of it has been
// processed there), or no intent with that operation id (never written,
// or expired with its retention).
var ErrNotFound = errors.New("state: not found")

// Status is an intent's dispatch state.
type Status string

// The intent states. PENDING, DISPATCHING, RETRY_WAIT and UNCERTAIN are
// on their way; the others are final, except that a CONTRADICTED intent
// becomes SUCCEEDED when its recovery owner resolves it.
const (
	// Pending: written with the revision that caused it, not yet claimed.
	Pending Status = "PENDING"
	// Dispatching: a dispatcher holds it and may be calling the downstream.
	Dispatching Status = "DISPATCHING"
	// RetryWait: a call failed in a way worth retrying; it is due again later.
	RetryWait Status = "RETRY_WAIT"
	// Uncertain: a call may have reached the downstream (a timeout); the
	// dispatcher asks the downstream, or retries with the same key, later.
	Uncertain Status = "UNCERTAIN"
	// Succeeded: the downstream performed it (once).
	Succeeded Status = "SUCCEEDED"
	// Failed: the downstream refused it for good.
	Failed Status = "FAILED"
	// Quarantined: it cannot be performed as it is (its scope is not one
	// the effect serves, no effect for its kind, an uncertain outcome past
	// the downstream's idempotency window); an operator decides.
	Quarantined Status = "QUARANTINED"
	// Obsolete: a while_current intent whose reason a newer revision
	// removed before it was performed; no call was made.
	Obsolete Status = "OBSOLETE"
	// Superseded: a latest intent whose state a newer intent carries; no
	// call was made.
	Superseded Status = "SUPERSEDED"
	// Contradicted: performed, and then a newer revision removed its
	// reason, with no compensation declared for its kind; its recovery
	// owner decides.
	Contradicted Status = "CONTRADICTED"
)

// Done reports whether no dispatcher will act on the intent again.
func (s Status) Done() bool { return ledger.IntentStatus(s).Terminal() }

// Subject is one subject's canonical state and the intents it records.
type Subject struct {
	Scope      string // the scope that owns it; "" for an unscoped source
	Projection string // the projection's name, e.g. "order"
	ID         string // the subject id, e.g. "O-42"
	// State is the projected business state. Numbers are json.Number,
	// exactly as the provider sent them.
	State    map[string]any
	Version  int64 // the provider's version of the subject (a revision, a timestamp)
	Terminal bool  // no later version may change it (a deletion)
	// UpdatedAt is when the pipeline last wrote the subject: a new state,
	// or a newer version with the same state.
	UpdatedAt time.Time
	// LastEvent is the event that wrote Version, "<source>/<event id>".
	LastEvent string
	// Intents are the intents the subject records (see the package
	// documentation for which), oldest first. State leaves it nil.
	Intents []Intent
}

// Intent is one outbox intent and its outcome so far.
type Intent struct {
	// OperationID is the intent's key: the Idempotency-Key the downstream
	// receives.
	OperationID string
	Kind        string // the effect kind, e.g. "refund"
	Subject     string // the subject the downstream knows
	Scope       string // the scope whose fact it acts on
	Source      string // the source of the event that caused it
	Causation   string // that event, "<source>/<event id>"
	Status      Status
	// Policy is what the dispatcher checked against the current state
	// before it performed the intent; intents written before policies
	// existed read as once.
	Policy projection.Policy
	// Version is the subject's version the intent came from (0 for
	// intents written before it was recorded).
	Version int64
	// Payload is what the effect receives. Numbers are json.Number.
	Payload map[string]any
	// Attempts counts how many times a dispatcher claimed it.
	Attempts int
	// ErrorCode and Detail are what the last attempt learned: the
	// downstream's answer ("ok_200" and its body for a success), or why
	// the intent failed, waits or was quarantined.
	ErrorCode string
	Detail    string
	// ContradictedBy is the version of the revision that removed a
	// while_current intent's reason (0: none did); CompensatedBy the
	// operation id of the compensation that revision created.
	ContradictedBy int64
	CompensatedBy  string
	CreatedAt      time.Time // when the revision that caused it was committed
	// UpdatedAt is its last transition (CreatedAt until the first).
	UpdatedAt time.Time
	// FinishedAt is when it reached a final status; zero until then.
	FinishedAt time.Time
}

// Reader reads one ledger table.
type Reader struct {
	r ledger.Reader
}

// New returns a Reader of the ledger table named table.
func New(db DynamoDB, table string) *Reader {
	return &Reader{r: ledger.NewReader(db, table)}
}

// State reads a subject's state without its intents: one GetItem.
func (r *Reader) State(ctx context.Context, scope, projectionName, id string) (Subject, error) {
	s, _, err := r.state(ctx, scope, projectionName, id)
	return s, err
}

// Subject reads a subject's state and the intents it records (see the
// package documentation): one GetItem for the state and one per intent
// (at most 8 at a time), all of projection and intent items.
func (r *Reader) Subject(ctx context.Context, scope, projectionName, id string) (Subject, error) {
	s, p, err := r.state(ctx, scope, projectionName, id)
	if err != nil {
		return Subject{}, err
	}
	var ops []string
	seen := map[string]bool{}
	add := func(op string) {
		if op != "" && !seen[op] {
			seen[op] = true
			ops = append(ops, op)
		}
	}
	families := make([]string, 0, len(p.Latest))
	for f := range p.Latest {
		families = append(families, f)
	}
	sort.Strings(families)
	for _, f := range families {
		add(p.Latest[f].OperationID)
	}
	for _, w := range p.Watch {
		add(w.OperationID)
	}
	// The revision that wrote the state names its other intents (once
	// intents, compensations) on the same item, so no event item is read:
	// its partition also holds the raw payload, which a reader of the
	// state is not granted.
	for _, o := range p.Others {
		add(o.ID)
	}
	if s.Intents, err = r.intents(ctx, ops); err != nil {
		return Subject{}, err
	}
	return s, nil
}

// state reads the projection item of a subject.
func (r *Reader) state(ctx context.Context, scope, projectionName, id string) (Subject, ledger.Projection, error) {
	if err := checkName(scope, projectionName, id); err != nil {
		return Subject{}, ledger.Projection{}, err
	}
	name := projection.ScopedName(scope, projectionName)
	p, err := r.r.Projection(ctx, name, id)
	if err != nil {
		return Subject{}, p, wrap(err, "subject "+name+" "+id)
	}
	return subjectOf(scope, projectionName, id, p), p, nil
}

// subjectOf is a projection item as a Subject, without its intents.
func subjectOf(scope, projectionName, id string, p ledger.Projection) Subject {
	return Subject{
		Scope: scope, Projection: projectionName, ID: id,
		State: p.State, Version: p.Version, Terminal: p.Terminal,
		UpdatedAt: fromMS(p.UpdatedAt), LastEvent: p.LastEvent,
	}
}

// Intent reads one intent by its operation id: the id as stored, which
// is the Idempotency-Key the downstream received. For the id a projection
// gave an intent in a scope, use projection.ScopedOperationID(scope, id).
func (r *Reader) Intent(ctx context.Context, operationID string) (Intent, error) {
	if operationID == "" {
		return Intent{}, errors.New("state: empty operation id")
	}
	in, err := r.r.Intent(ctx, operationID)
	if err != nil {
		return Intent{}, wrap(err, "intent "+operationID)
	}
	return intentOf(in), nil
}

// intents reads ops (at most 8 at a time) and returns those that exist,
// oldest first.
func (r *Reader) intents(ctx context.Context, ops []string) ([]Intent, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	found := make([]*Intent, len(ops))
	errs := make([]error, len(ops))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, op := range ops {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			in, err := r.r.Intent(ctx, op)
			switch {
			case errors.Is(err, ledger.ErrNotFound):
				// Expired with its retention: long finished.
			case err != nil:
				errs[i] = wrap(err, "intent "+op)
			default:
				it := intentOf(in)
				found[i] = &it
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := make([]Intent, 0, len(ops))
	for _, in := range found {
		if in != nil {
			out = append(out, *in)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].OperationID < out[j].OperationID
	})
	return out, nil
}

func intentOf(in ledger.IntentState) Intent {
	out := Intent{
		OperationID: in.OperationID, Kind: in.Kind, Subject: in.Subject, Scope: in.Scope, Source: in.Source,
		Causation: in.Causation, Status: Status(in.Status), Policy: in.Policy, Version: in.Version, Payload: in.Payload,
		Attempts: in.Attempts, ErrorCode: in.ErrorCode, Detail: in.Detail,
		ContradictedBy: in.ContradictedBy, CompensatedBy: in.CompensatedBy,
		CreatedAt: in.CreatedAt, UpdatedAt: in.CreatedAt, FinishedAt: in.FinishedAt,
	}
	if out.Policy == "" {
		out.Policy = projection.PolicyOnce
	}
	if n := len(in.Audit); n > 0 && in.Audit[n-1].At.After(out.UpdatedAt) {
		out.UpdatedAt = in.Audit[n-1].At
	}
	return out
}

// checkName refuses names that cannot key a subject: a scope never holds
// "/" (it would read another scope's items), and a projection and a
// subject are never empty.
func checkName(scope, projectionName, id string) error {
	switch {
	case strings.Contains(scope, "/"):
		return fmt.Errorf("state: scope %q contains /", scope)
	case projectionName == "" || strings.Contains(projectionName, "/"):
		return fmt.Errorf("state: projection name %q is empty or contains /", projectionName)
	case id == "":
		return errors.New("state: empty subject id")
	}
	return nil
}

// wrap turns the ledger's not-found into ErrNotFound, naming what was
// read, and names the package in every other error.
func wrap(err error, what string) error {
	if errors.Is(err, ledger.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, what)
	}
	return fmt.Errorf("state: read %s: %w", what, err)
}

func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}
