package state

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// TransactGetter is the call Components makes, beside GetItem.
// *dynamodb.Client is one. IAM authorizes it as a GetItem of each item,
// so GrantReadState is all it needs.
type TransactGetter interface {
	TransactGetItems(ctx context.Context, in *dynamodb.TransactGetItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactGetItemsOutput, error)
}

var _ TransactGetter = (*dynamodb.Client)(nil)

// MaxComponents is how many projections Components reads at once: one
// TransactGetItems.
const MaxComponents = ledger.MaxTogether

// Components are several projections' states of one subject, read as of
// one instant (Reader.Components).
type Components struct {
	Scope string // the scope that owns them; "" for an unscoped source
	ID    string // the subject id they share, e.g. "sub_1"
	// Subjects are the projections' states by projection name (without
	// Intents). A projection none of whose events of the subject has
	// been processed is absent.
	Subjects map[string]Subject
}

// States are the components' states by projection name, the argument a
// combine function takes: a projection with no state of the subject is
// absent, so a combine function reads a missing component as nil.
// Numbers are json.Number, as in Subject.State.
func (c Components) States() map[string]map[string]any {
	out := make(map[string]map[string]any, len(c.Subjects))
	for name, s := range c.Subjects {
		out[name] = s.State
	}
	return out
}

// Components reads the current state of several projections of one
// subject id in one scope (a subscription's own projection and the one
// its invoices feed, say) in one consistent read: one TransactGetItems of
// their projection items, so every state is as of the same instant and
// none changed halfway through the read. Pass the result's States to the
// team's combine function, a pure function of the components' current
// states (docs/combining.md).
//
// It reads projection items only (GrantReadState), at most
// MaxComponents, and costs twice the read units of as many strongly
// consistent GetItem calls. A projection without the subject is absent
// from the result; when none has it, the error is ErrNotFound. A read
// cancelled by a write in flight on one of the items is an error worth a
// retry. The Reader's client must also implement TransactGetter, as
// *dynamodb.Client does.
func (r *Reader) Components(ctx context.Context, scope, id string, projections ...string) (Components, error) {
	if len(projections) == 0 || len(projections) > MaxComponents {
		return Components{}, fmt.Errorf("state: read %d projections of a subject together: between 1 and %d", len(projections), MaxComponents)
	}
	names := make([]string, len(projections))
	seen := map[string]bool{}
	for i, p := range projections {
		if err := checkName(scope, p, id); err != nil {
			return Components{}, err
		}
		if seen[p] {
			return Components{}, fmt.Errorf("state: projection %q named twice", p)
		}
		seen[p] = true
		names[i] = projection.ScopedName(scope, p)
	}
	got, err := r.r.ProjectionsTogether(ctx, names, id)
	what := fmt.Sprintf("subject %s of %s", id, strings.Join(names, ", "))
	switch {
	case errors.Is(err, ledger.ErrNoTransactGet):
		return Components{}, fmt.Errorf("state: read %s: %w: the client given to New must implement state.TransactGetter", what, err)
	case err != nil:
		return Components{}, wrap(err, what)
	}
	c := Components{Scope: scope, ID: id, Subjects: map[string]Subject{}}
	for i, p := range got {
		if p == nil {
			continue
		}
		c.Subjects[projections[i]] = subjectOf(scope, projections[i], id, *p)
	}
	if len(c.Subjects) == 0 {
		return c, fmt.Errorf("%w: %s", ErrNotFound, what)
	}
	return c, nil
}
