package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Getter is the one DynamoDB call a Reader makes. *dynamodb.Client is one.
type Getter interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// Reader reads single items by key, strongly consistent, and decodes them
// as the Ledger does: the Ledger's own getters go through it, and so does
// package state, whose callers hold a client that may only read. Nothing
// else reads an item's attributes, so an item is understood the same way
// wherever it is read.
type Reader struct {
	db    Getter
	table string
}

// NewReader returns a Reader of table over db.
func NewReader(db Getter, table string) Reader { return Reader{db: db, table: table} }

// Event reads one event, with its audit trail.
func (r Reader) Event(ctx context.Context, source, eventID string) (Event, error) {
	it, err := r.getItem(ctx, eventKey(source, eventID), "event "+source+"/"+eventID)
	if err != nil {
		return Event{}, err
	}
	return decodeEvent(it)
}

// Projection reads the projection item of subject under its ledger name
// (projection.ScopedName: "<scope>/<name>", or the bare name for an
// unscoped source).
func (r Reader) Projection(ctx context.Context, name, subject string) (Projection, error) {
	it, err := r.getItem(ctx, projectionKey(name, subject), "projection "+name+"/"+subject)
	if err != nil {
		return Projection{}, err
	}
	p, err := decodeProjection(it)
	if err != nil {
		return Projection{}, fmt.Errorf("projection %s/%s: %w", name, subject, err)
	}
	return p, nil
}

// Intent reads one intent with its dispatch bookkeeping and audit trail.
func (r Reader) Intent(ctx context.Context, op string) (IntentState, error) {
	it, err := r.getItem(ctx, intentKey(op), "intent "+op)
	if err != nil {
		return IntentState{}, err
	}
	return decodeIntent(it)
}

// Cursor reads the subject cursor of a projection subject and kind family.
func (r Reader) Cursor(ctx context.Context, projection, subject, family string) (SubjectCursor, error) {
	it, err := r.getItem(ctx, cursorKey(projection, subject, family), "cursor "+projection+"/"+subject+"/"+family)
	if err != nil {
		return SubjectCursor{}, err
	}
	c, _, err := decodeCursor(it)
	return c, err
}

// getItem is a strongly consistent read of one item; a missing item is
// ErrNotFound. what names the item in errors.
func (r Reader) getItem(ctx context.Context, key map[string]types.AttributeValue, what string) (map[string]types.AttributeValue, error) {
	out, err := r.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(r.table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", what, translate(err))
	}
	if len(out.Item) == 0 {
		return nil, fmt.Errorf("get %s: %w", what, ErrNotFound)
	}
	return out.Item, nil
}

// Get reads one event (strongly consistent), with its audit trail.
func (l *Ledger) Get(ctx context.Context, source, eventID string) (Event, error) {
	return l.Reader().Event(ctx, source, eventID)
}

// Reader is the ledger's read path over its own client (see Reader).
func (l *Ledger) Reader() Reader { return NewReader(l.db, l.opts.Table) }

// getItem is a strongly consistent read of one item; a missing item is
// ErrNotFound. what names the item in errors.
func (l *Ledger) getItem(ctx context.Context, key map[string]types.AttributeValue, what string) (map[string]types.AttributeValue, error) {
	return l.Reader().getItem(ctx, key, what)
}

// GetProjection reads a projection (strongly consistent).
func (l *Ledger) GetProjection(ctx context.Context, name, subject string) (Projection, error) {
	return l.Reader().Projection(ctx, name, subject)
}

// GetIntentState reads an intent with its dispatch bookkeeping and audit
// trail (strongly consistent).
func (l *Ledger) GetIntentState(ctx context.Context, op string) (IntentState, error) {
	return l.Reader().Intent(ctx, op)
}

// GetCursor reads a subject cursor (strongly consistent).
func (l *Ledger) GetCursor(ctx context.Context, projection, subject, family string) (SubjectCursor, error) {
	return l.Reader().Cursor(ctx, projection, subject, family)
}

// TransactGetter is the call ProjectionsTogether makes. *dynamodb.Client
// is one.
type TransactGetter interface {
	TransactGetItems(ctx context.Context, in *dynamodb.TransactGetItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactGetItemsOutput, error)
}

var _ TransactGetter = (*dynamodb.Client)(nil)

// MaxTogether is how many items one TransactGetItems reads.
const MaxTogether = 100

// ErrNoTransactGet: the Reader's client has no TransactGetItems.
var ErrNoTransactGet = errors.New("the DynamoDB client has no TransactGetItems")

// ProjectionsTogether reads the projection items of one subject under
// several ledger names in one TransactGetItems: every item as of the same
// instant, none changed halfway through the read. out[i] is nil when
// names[i] has no item of the subject. The Reader's client must also be a
// TransactGetter; IAM authorizes the call as a GetItem of each item.
func (r Reader) ProjectionsTogether(ctx context.Context, names []string, subject string) ([]*Projection, error) {
	tg, ok := r.db.(TransactGetter)
	if !ok {
		return nil, ErrNoTransactGet
	}
	if len(names) == 0 || len(names) > MaxTogether {
		return nil, fmt.Errorf("read %d projections of %s together: between 1 and %d", len(names), subject, MaxTogether)
	}
	items := make([]types.TransactGetItem, len(names))
	for i, name := range names {
		items[i] = types.TransactGetItem{Get: &types.Get{TableName: aws.String(r.table), Key: projectionKey(name, subject)}}
	}
	res, err := tg.TransactGetItems(ctx, &dynamodb.TransactGetItemsInput{TransactItems: items})
	if err != nil {
		// A read cancelled by a write in flight on one of the items is
		// worth a retry, as a write's conflict is.
		var tce *types.TransactionCanceledException
		if errors.As(err, &tce) {
			return nil, fmt.Errorf("read projections of %s together: %w: %v", subject, ErrConflict, err)
		}
		return nil, fmt.Errorf("read projections of %s together: %w", subject, translate(err))
	}
	if len(res.Responses) != len(names) {
		return nil, fmt.Errorf("read projections of %s together: %d responses for %d items", subject, len(res.Responses), len(names))
	}
	out := make([]*Projection, len(names))
	for i, it := range res.Responses {
		if len(it.Item) == 0 {
			continue
		}
		p, err := decodeProjection(it.Item)
		if err != nil {
			return nil, fmt.Errorf("projection %s/%s: %w", names[i], subject, err)
		}
		out[i] = &p
	}
	return out, nil
}
