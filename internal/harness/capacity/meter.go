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
//
// The emulator the measurements run on (minidyn v0.8.2) ignores an update
// expression's REMOVE actions and keeps the attributes. The meter applies
// them itself: it remembers, per item, the top-level attributes a write
// removed and no later write set again, and leaves them out of the item
// images it bills (and of the index entries it derives from them), as
// DynamoDB would have removed them. What the emulator then evaluates
// against a kept attribute (an if_not_exists that finds it) can differ from
// DynamoDB in value, never in whether the attribute is written.
type Meter struct {
	Reader    Reader
	Table     string
	TableKeys []string // hash key, range key
	Indexes   []Index

	mu      sync.Mutex
	totals  Totals
	removed map[string]map[string]bool // item key → attributes DynamoDB would no longer have
}

// OpTotals are one operation's numbers.
type OpTotals struct {
	Requests   int // writes, refused ones included
	Refused    int // of which refused by their condition (ConditionalCheckFailed)
	TableUnits int // base-table write units
	IndexUnits int // global secondary index write units
}

// Totals are a run's numbers.
type Totals struct {
	ByOp map[string]OpTotals
	// ConditionFailures counts writes refused by a condition. A refused
	// standard write (PutItem, UpdateItem, DeleteItem) is billed as
	// DynamoDB documents it, by the size of the existing item (one unit
	// when there is none), and counted in its operation's units and
	// Refused. A cancelled transaction is counted here only: DynamoDB does
	// not document what it bills.
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
		refused := ""
		if o.Refused > 0 {
			refused = fmt.Sprintf(" (%d refused)", o.Refused)
		}
		parts = append(parts, fmt.Sprintf("%s×%d%s=%d+%dgsi", op, o.Requests, refused, o.TableUnits, o.IndexUnits))
	}
	return strings.Join(parts, " ")
}

// Totals returns a copy of what was measured.
func (m *Meter) Totals() Totals {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Totals{ByOp: maps.Clone(m.totals.ByOp), ConditionFailures: m.totals.ConditionFailures}
}

// Reset clears the totals (not what the meter knows of removed attributes).
func (m *Meter) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.totals = Totals{}
}

type write struct {
	key map[string]types.AttributeValue
	txn bool
	// whole: the write replaces or deletes the whole item (PutItem,
	// DeleteItem); otherwise set and remove are the top-level attributes
	// its update expression assigns (SET, ADD, DELETE) and removes.
	whole       bool
	set, remove []string
}

func updateWrite(key map[string]types.AttributeValue, expr *string, names map[string]string, txn bool) write {
	w := write{key: key, txn: txn}
	if expr != nil {
		w.set, w.remove = updateTargets(*expr, names)
	}
	return w
}

func writesOf(params any) []write {
	switch in := params.(type) {
	case *dynamodb.PutItemInput:
		return []write{{key: in.Item, whole: true}}
	case *dynamodb.UpdateItemInput:
		return []write{updateWrite(in.Key, in.UpdateExpression, in.ExpressionAttributeNames, false)}
	case *dynamodb.DeleteItemInput:
		return []write{{key: in.Key, whole: true}}
	case *dynamodb.TransactWriteItemsInput:
		var out []write
		for _, it := range in.TransactItems {
			switch {
			case it.Put != nil:
				out = append(out, write{key: it.Put.Item, txn: true, whole: true})
			case it.Update != nil:
				out = append(out, updateWrite(it.Update.Key, it.Update.UpdateExpression, it.Update.ExpressionAttributeNames, true))
			case it.Delete != nil:
				out = append(out, write{key: it.Delete.Key, txn: true, whole: true})
			}
		}
		return out
	}
	return nil
}

// updateTargets returns the top-level attributes an update expression
// assigns (SET, ADD, DELETE) and removes (REMOVE), with #names resolved. A
// path into a list or map counts as its top-level attribute when assigned,
// and is ignored when removed (the attribute stays).
func updateTargets(expr string, names map[string]string) (set, remove []string) {
	top := func(path string) (string, bool) {
		path = strings.TrimSpace(path)
		nested := strings.ContainsAny(path, ".[")
		if i := strings.IndexAny(path, ".["); i >= 0 {
			path = path[:i]
		}
		if n, ok := names[path]; ok {
			path = n
		}
		return path, nested
	}
	for _, c := range clauses(expr) {
		for _, action := range splitTop(c.body) {
			switch c.keyword {
			case "SET":
				lhs, _, _ := strings.Cut(action, "=")
				name, _ := top(lhs)
				set = append(set, name)
			case "ADD", "DELETE":
				name, _ := top(strings.Fields(action)[0])
				set = append(set, name)
			case "REMOVE":
				if name, nested := top(action); !nested {
					remove = append(remove, name)
				}
			}
		}
	}
	return set, remove
}

type clause struct{ keyword, body string }

// clauses splits an update expression at its SET, REMOVE, ADD and DELETE
// keywords (whole words, outside parentheses).
func clauses(expr string) []clause {
	var out []clause
	depth, start, kw := 0, -1, ""
	isWord := func(b byte) bool {
		return b == '_' || b == '#' || b == ':' || b >= '0' && b <= '9' || b|0x20 >= 'a' && b|0x20 <= 'z'
	}
	for i := 0; i < len(expr); i++ {
		switch expr[i] {
		case '(':
			depth++
			continue
		case ')':
			depth--
			continue
		}
		if depth > 0 || (i > 0 && isWord(expr[i-1])) {
			continue
		}
		for _, k := range []string{"SET", "REMOVE", "ADD", "DELETE"} {
			end := i + len(k)
			if end <= len(expr) && strings.EqualFold(expr[i:end], k) && (end == len(expr) || !isWord(expr[end])) {
				if kw != "" {
					out = append(out, clause{kw, expr[start:i]})
				}
				kw, start = k, end
				i = end - 1
				break
			}
		}
	}
	if kw != "" {
		out = append(out, clause{kw, expr[start:]})
	}
	return out
}

// splitTop splits a clause's actions at commas outside parentheses.
func splitTop(body string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, body[start:i])
				start = i + 1
			}
		}
	}
	if s := strings.TrimSpace(body[start:]); s != "" {
		out = append(out, body[start:])
	}
	return out
}

// keyString identifies an item key for the removed-attribute memory.
func keyString(key map[string]types.AttributeValue) string {
	names := make([]string, 0, len(key))
	for k := range key {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, "%s=%v;", k, key[k])
	}
	return b.String()
}

// image is item without the attributes DynamoDB would have removed.
func (m *Meter) image(key string, item map[string]types.AttributeValue) map[string]types.AttributeValue {
	m.mu.Lock()
	gone := m.removed[key]
	m.mu.Unlock()
	if item == nil || len(gone) == 0 {
		return item
	}
	out := make(map[string]types.AttributeValue, len(item))
	for k, v := range item {
		if !gone[k] {
			out[k] = v
		}
	}
	return out
}

// applied records what a successful write did to the item's attributes.
func (m *Meter) applied(key string, w write) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w.whole {
		delete(m.removed, key)
		return
	}
	gone := m.removed[key]
	for _, name := range w.set {
		delete(gone, name)
	}
	for _, name := range w.remove {
		if gone == nil {
			gone = map[string]bool{}
		}
		gone[name] = true
	}
	if m.removed == nil {
		m.removed = map[string]map[string]bool{}
	}
	m.removed[key] = gone
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
			var (
				out middleware.InitializeOutput
				md  middleware.Metadata
				err error
			)
			m.around(ctx, awsmiddleware.GetOperationName(ctx), ws, func() outcome {
				out, md, err = next.HandleInitialize(ctx, in)
				var ccf *types.ConditionalCheckFailedException
				var tce *types.TransactionCanceledException
				switch {
				case err == nil:
					return done
				case errors.As(err, &ccf):
					return refused
				case errors.As(err, &tce):
					return cancelled
				}
				return failed
			})
			return out, md, err
		}), middleware.After)
}

// outcome is how a metered write ended.
type outcome int

const (
	done      outcome = iota
	refused           // by its condition (ConditionalCheckFailed)
	cancelled         // a transaction cancelled (a condition of one of its parts)
	failed            // any other error: nothing written, nothing billed here
)

// around bills one request whose writes are ws: it reads the items before,
// lets do perform the request, reads them after, and adds the units by
// DynamoDB's rules (see the package doc). It returns what it added.
func (m *Meter) around(ctx context.Context, op string, ws []write, do func() outcome) OpTotals {
	before := make([]map[string]types.AttributeValue, len(ws))
	keys := make([]string, len(ws))
	for i := range ws {
		ws[i].key = m.keyOf(ws[i].key)
		keys[i] = keyString(ws[i].key)
		before[i] = m.image(keys[i], m.read(ctx, ws[i].key))
	}
	switch do() {
	case refused:
		// Billed like a write of the existing item (one unit when there is
		// none); nothing is written, no index either.
		o := OpTotals{Requests: 1, Refused: 1, TableUnits: Units(ItemSize(before[0]))}
		m.add(op, o, true)
		return o
	case cancelled:
		m.add(op, OpTotals{}, true)
		return OpTotals{}
	case failed:
		return OpTotals{}
	}
	var table, index int
	for i, w := range ws {
		m.applied(keys[i], w)
		after := m.image(keys[i], m.read(ctx, w.key))
		u := Units(max(ItemSize(before[i]), ItemSize(after)))
		if w.txn {
			u *= 2
		}
		table += u
		index += m.indexUnits(before[i], after)
	}
	o := OpTotals{Requests: 1, TableUnits: table, IndexUnits: index}
	m.add(op, o, false)
	return o
}

// ItemBytes is the size of the item under key as DynamoDB would store it
// (without the attributes the emulator kept after a REMOVE), 0 when absent.
func (m *Meter) ItemBytes(ctx context.Context, key map[string]types.AttributeValue) int {
	return ItemSize(m.image(keyString(m.keyOf(key)), m.read(ctx, m.keyOf(key))))
}

// add adds one request's numbers to op's.
func (m *Meter) add(op string, o OpTotals, refused bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if refused {
		m.totals.ConditionFailures++
	}
	if o == (OpTotals{}) {
		return
	}
	m.totals.add(op, o)
}

// add adds o to op's numbers.
func (t *Totals) add(op string, o OpTotals) {
	if t.ByOp == nil {
		t.ByOp = map[string]OpTotals{}
	}
	x := t.ByOp[op]
	x.Requests += o.Requests
	x.Refused += o.Refused
	x.TableUnits += o.TableUnits
	x.IndexUnits += o.IndexUnits
	t.ByOp[op] = x
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
