package capacity

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
)

// Index describes a global secondary index for the meter.
type Index struct {
	Name              string
	HashKey, RangeKey string
	Projected         []string // INCLUDE attributes
}

// Reader reads items without being metered.
type Reader interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// Meter computes write units for the requests of the clients it is
// installed on. It reads each written item before and after the write, so
// it is meant for sequential measurement runs (a concurrent writer between
// the reads would be attributed to this request).
type Meter struct {
	Reader    Reader
	Table     string
	TableKeys []string // hash key, range key
	Indexes   []Index

	mu     sync.Mutex
	totals Totals
}

// OpTotals are one operation's numbers.
type OpTotals struct {
	Requests   int // successful writes
	TableUnits int // base-table write units
	IndexUnits int // global secondary index write units
}

// Totals are a run's numbers.
type Totals struct {
	ByOp map[string]OpTotals
	// ConditionFailures counts writes refused by a condition (billed by
	// DynamoDB, not counted in the units here).
	ConditionFailures int
}

// Units is the sum of table and index units.
func (t Totals) Units() int {
	n := 0
	for _, o := range t.ByOp {
		n += o.TableUnits + o.IndexUnits
	}
	return n
}

// String renders the totals, sorted by operation.
func (t Totals) String() string {
	ops := make([]string, 0, len(t.ByOp))
	for op := range t.ByOp {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	parts := make([]string, 0, len(ops))
	for _, op := range ops {
		o := t.ByOp[op]
		parts = append(parts, fmt.Sprintf("%s×%d=%d+%dgsi", op, o.Requests, o.TableUnits, o.IndexUnits))
	}
	return strings.Join(parts, " ")
}

// Totals returns a copy of what was measured.
func (m *Meter) Totals() Totals {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Totals{ByOp: maps.Clone(m.totals.ByOp), ConditionFailures: m.totals.ConditionFailures}
}

// Reset clears the totals.
func (m *Meter) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.totals = Totals{}
}

type write struct {
	key map[string]types.AttributeValue
	txn bool
}

func writesOf(params any) []write {
	switch in := params.(type) {
	case *dynamodb.PutItemInput:
		return []write{{key: in.Item}}
	case *dynamodb.UpdateItemInput:
		return []write{{key: in.Key}}
	case *dynamodb.DeleteItemInput:
		return []write{{key: in.Key}}
	case *dynamodb.TransactWriteItemsInput:
		var out []write
		for _, it := range in.TransactItems {
			switch {
			case it.Put != nil:
				out = append(out, write{key: it.Put.Item, txn: true})
			case it.Update != nil:
				out = append(out, write{key: it.Update.Key, txn: true})
			case it.Delete != nil:
				out = append(out, write{key: it.Delete.Key, txn: true})
			}
		}
		return out
	}
	return nil
}

func (m *Meter) keyOf(item map[string]types.AttributeValue) map[string]types.AttributeValue {
	k := map[string]types.AttributeValue{}
	for _, name := range m.TableKeys {
		if v, ok := item[name]; ok {
			k[name] = v
		}
	}
	return k
}

func (m *Meter) read(ctx context.Context, key map[string]types.AttributeValue) map[string]types.AttributeValue {
	out, err := m.Reader.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(m.Table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil || out == nil {
		return nil
	}
	return out.Item
}

// APIOption installs the meter on a client's middleware stack.
func (m *Meter) APIOption(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("capacity",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			ws := writesOf(in.Parameters)
			if len(ws) == 0 {
				return next.HandleInitialize(ctx, in)
			}
			before := make([]map[string]types.AttributeValue, len(ws))
			for i := range ws {
				ws[i].key = m.keyOf(ws[i].key)
				before[i] = m.read(ctx, ws[i].key)
			}
			out, md, err := next.HandleInitialize(ctx, in)
			op := awsmiddleware.GetOperationName(ctx)
			if err != nil {
				var ccf *types.ConditionalCheckFailedException
				var tce *types.TransactionCanceledException
				if errors.As(err, &ccf) || errors.As(err, &tce) {
					m.mu.Lock()
					m.totals.ConditionFailures++
					m.mu.Unlock()
				}
				return out, md, err
			}
			var table, index int
			for i, w := range ws {
				after := m.read(ctx, w.key)
				u := Units(max(ItemSize(before[i]), ItemSize(after)))
				if w.txn {
					u *= 2
				}
				table += u
				index += m.indexUnits(before[i], after)
			}
			m.mu.Lock()
			if m.totals.ByOp == nil {
				m.totals.ByOp = map[string]OpTotals{}
			}
			t := m.totals.ByOp[op]
			t.Requests++
			t.TableUnits += table
			t.IndexUnits += index
			m.totals.ByOp[op] = t
			m.mu.Unlock()
			return out, md, err
		}), middleware.After)
}

// entry is an item's entry in an index, or nil when it has none.
func (m *Meter) entry(ix Index, item map[string]types.AttributeValue) map[string]types.AttributeValue {
	if item == nil {
		return nil
	}
	if _, ok := item[ix.HashKey]; !ok {
		return nil
	}
	if ix.RangeKey != "" {
		if _, ok := item[ix.RangeKey]; !ok {
			return nil
		}
	}
	e := map[string]types.AttributeValue{}
	for _, name := range append(append([]string{ix.HashKey, ix.RangeKey}, m.TableKeys...), ix.Projected...) {
		if v, ok := item[name]; ok && name != "" {
			e[name] = v
		}
	}
	return e
}

func (m *Meter) indexUnits(before, after map[string]types.AttributeValue) int {
	n := 0
	for _, ix := range m.Indexes {
		b, a := m.entry(ix, before), m.entry(ix, after)
		switch {
		case b == nil && a == nil:
		case b == nil:
			n += Units(ItemSize(a))
		case a == nil:
			n += Units(ItemSize(b))
		case !reflect.DeepEqual(b[ix.HashKey], a[ix.HashKey]) || !reflect.DeepEqual(b[ix.RangeKey], a[ix.RangeKey]):
			n += Units(ItemSize(b)) + Units(ItemSize(a))
		case !reflect.DeepEqual(b, a):
			n += Units(max(ItemSize(b), ItemSize(a)))
		}
	}
	return n
}
