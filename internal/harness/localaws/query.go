package localaws

import (
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/truora/minidyn/core"
	"github.com/truora/minidyn/types"
)

// minidyn v0.8.2 answers a Query by sorting every entry of the index (or
// every key of the table) and evaluating the key condition on each, so a
// query's cost grows with everything ever written (over a soak of 50,000
// deliveries, the reconciler's once-a-minute sweep grows from 3.9 s to
// 30 s, and every request waits behind it). DynamoDB reads only the
// queried partition, and within it only the range of sort keys the
// condition selects.
//
// So a Query whose key condition names its partition (hash key = value, a
// string or binary) runs on a scratch view of the index (or table) that
// holds only that partition's entries, narrowed further to the sort key
// range of a simple condition (<, <=, >, >=, =, BETWEEN). minidyn still
// evaluates the whole key condition, the filter, the projection, Limit and
// ExclusiveStartKey on that view, so the narrowing only has to keep a
// superset of the answer; a condition it does not understand narrows
// nothing. The partitions are kept up to date by the same write path that
// repairs the indexes (partitions.note), at a cost per write independent
// of the table's size.

// partitions are one table's or index's entries by hash key value, each
// partition sorted by sort key.
type partitions struct {
	hash, rng string                 // key attribute names ("" rng: no sort key)
	parts     map[string][]partEntry // hash value → entries sorted by (sort key, primary key)
	where     map[string]partRef     // primary key → where its entry is
}

type partEntry struct {
	sort partKey
	pk   string // the item's primary key string (minidyn's)
}

type partRef struct {
	hash string
	sort partKey
}

// partKey is a sort key value: numbers compare as numbers, strings and
// binaries bytewise, as DynamoDB orders them.
type partKey struct {
	num   float64
	str   string
	isNum bool
}

func (a partKey) less(b partKey) bool {
	if a.isNum && b.isNum {
		return a.num < b.num
	}
	return a.str < b.str
}

func (e partEntry) less(o partEntry) bool {
	if e.sort.less(o.sort) {
		return true
	}
	if o.sort.less(e.sort) {
		return false
	}
	return e.pk < o.pk
}

// hashValue is a partition key value as a map key; ok is false for a type
// the fast path leaves to minidyn (numbers: "1" and "1.0" are one value).
func hashValue(v *types.Item) (string, bool) {
	switch {
	case v == nil:
		return "", false
	case v.S != nil:
		return "S" + *v.S, true
	case v.B != nil:
		return "B" + string(v.B), true
	}
	return "", false
}

func sortValue(v *types.Item) (partKey, bool) {
	switch {
	case v == nil:
		return partKey{}, false
	case v.N != nil:
		f, err := strconv.ParseFloat(*v.N, 64)
		return partKey{num: f, isNum: true}, err == nil
	case v.S != nil:
		return partKey{str: *v.S}, true
	case v.B != nil:
		return partKey{str: string(v.B)}, true
	}
	return partKey{}, false
}

// note makes the partitions agree with the item stored under pk (nil:
// none).
func (p *partitions) note(pk string, item map[string]*types.Item) {
	if old, ok := p.where[pk]; ok {
		es := p.parts[old.hash]
		e := partEntry{sort: old.sort, pk: pk}
		i := sort.Search(len(es), func(i int) bool { return !es[i].less(e) })
		if i < len(es) && es[i].pk == pk {
			es = append(es[:i], es[i+1:]...)
		}
		if len(es) == 0 {
			delete(p.parts, old.hash)
		} else {
			p.parts[old.hash] = es
		}
		delete(p.where, pk)
	}
	if item == nil {
		return
	}
	h, ok := hashValue(item[p.hash])
	if !ok {
		return
	}
	var s partKey
	if p.rng != "" {
		if s, ok = sortValue(item[p.rng]); !ok {
			return // not in this (sparse) index
		}
	}
	e := partEntry{sort: s, pk: pk}
	es := p.parts[h]
	i := sort.Search(len(es), func(i int) bool { return !es[i].less(e) })
	es = append(es, partEntry{})
	copy(es[i+1:], es[i:])
	es[i] = e
	p.parts[h] = es
	p.where[pk] = partRef{hash: h, sort: s}
}

// tableParts are the partitions of one table and of each of its indexes
// ("" is the table).
type tableParts struct {
	table *core.Table // the table they were built from (minidyn may replace it)
	views map[string]*partitions
}

// keyNames reads a minidyn key schema's attribute names.
func keyNames(ks reflect.Value) (hash, rng string) {
	return ks.FieldByName("HashKey").String(), ks.FieldByName("RangeKey").String()
}

// partsOf returns the table's partitions, building them from its items
// the first time (or after minidyn replaced the table).
func (f *indexRepair) partsOf(name string, t *core.Table) *tableParts {
	if tp := f.parts[name]; tp != nil && tp.table == t {
		return tp
	}
	tp := &tableParts{table: t, views: map[string]*partitions{}}
	h, r := keyNames(reflect.ValueOf(t.KeySchema))
	tp.views[""] = &partitions{hash: h, rng: r, parts: map[string][]partEntry{}, where: map[string]partRef{}}
	for ixName, ix := range t.Indexes {
		h, r := keyNames(field(reflect.ValueOf(ix).Elem(), "keySchema"))
		tp.views[ixName] = &partitions{hash: h, rng: r, parts: map[string][]partEntry{}, where: map[string]partRef{}}
	}
	for pk, item := range t.Data {
		for _, p := range tp.views {
			p.note(pk, item)
		}
	}
	if f.parts == nil {
		f.parts = map[string]*tableParts{}
	}
	f.parts[name] = tp
	return tp
}

// noteWrite keeps the partitions of a table already built in step with a
// write's result for pk.
func (f *indexRepair) noteWrite(name string, t *core.Table, pk string, item map[string]*types.Item) {
	tp := f.parts[name]
	if tp == nil {
		return // built on its first query
	}
	if tp.table != t {
		delete(f.parts, name)
		return
	}
	for _, p := range tp.views {
		p.note(pk, item)
	}
}

type queryReq struct {
	TableName                 string
	IndexName                 string
	KeyConditionExpression    string
	ExpressionAttributeNames  map[string]string
	ExpressionAttributeValues map[string]json.RawMessage
	ExclusiveStartKey         map[string]json.RawMessage
	Limit                     int
	ScanIndexForward          *bool
}

var (
	eqRE          = regexp.MustCompile(`^\s*\(?\s*(#?[A-Za-z0-9_]+)\s*=\s*(:[A-Za-z0-9_]+)\s*\)?\s*$`)
	cmpRE         = regexp.MustCompile(`^\s*\(?\s*(#?[A-Za-z0-9_]+)\s*(<=|<|>=|>|=)\s*(:[A-Za-z0-9_]+)\s*\)?\s*$`)
	betweenRE     = regexp.MustCompile(`(?i)^\s*\(?\s*(#?[A-Za-z0-9_]+)\s+BETWEEN\s+(:[A-Za-z0-9_]+)\s+AND\s+(:[A-Za-z0-9_]+)\s*\)?\s*$`)
	andRE         = regexp.MustCompile(`(?i)\s+AND\s+`)
	findBetweenRE = regexp.MustCompile(`(?i)(#?[A-Za-z0-9_]+)\s+BETWEEN\s+:[A-Za-z0-9_]+\s+AND\s+:[A-Za-z0-9_]+`)
)

// keyCondition is what the fast path understood of a key condition: the
// partition's hash value, and bounds on the sort key (nil: none).
type keyCondition struct {
	hash         string
	lo, hi       *partKey
	loInc, hiInc bool
}

// parseKeyCondition reads "<hash> = :v [AND <sort condition>]". ok is
// false when the partition cannot be told; an unknown sort condition just
// leaves the bounds open.
func parseKeyCondition(q queryReq, p *partitions) (keyCondition, bool) {
	name := func(s string) string {
		if strings.HasPrefix(s, "#") {
			return q.ExpressionAttributeNames[s]
		}
		return s
	}
	value := func(ref string) (*types.Item, bool) {
		raw, ok := q.ExpressionAttributeValues[ref]
		if !ok {
			return nil, false
		}
		var v types.Item
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, false
		}
		return &v, true
	}
	// BETWEEN's own AND would split it: take it out first.
	expr := q.KeyConditionExpression
	var between []string
	if loc := findBetweenRE.FindStringIndex(expr); loc != nil {
		between = betweenRE.FindStringSubmatch(expr[loc[0]:loc[1]])
		expr = expr[:loc[0]] + " __between__ " + expr[loc[1]:]
	}
	var kc keyCondition
	found := false
	for _, clause := range andRE.Split(expr, -1) {
		if strings.TrimSpace(clause) == "__between__" {
			if between != nil && name(between[1]) == p.rng {
				lo, ok1 := value(between[2])
				hi, ok2 := value(between[3])
				l, ok3 := sortValue(lo)
				h, ok4 := sortValue(hi)
				if ok1 && ok2 && ok3 && ok4 {
					kc.lo, kc.hi, kc.loInc, kc.hiInc = &l, &h, true, true
				}
			}
			continue
		}
		if m := eqRE.FindStringSubmatch(clause); m != nil && name(m[1]) == p.hash && !found {
			v, ok := value(m[2])
			if !ok {
				return kc, false
			}
			if kc.hash, ok = hashValue(v); !ok {
				return kc, false
			}
			found = true
			continue
		}
		if m := cmpRE.FindStringSubmatch(clause); m != nil && p.rng != "" && name(m[1]) == p.rng {
			v, ok := value(m[3])
			if !ok {
				continue
			}
			k, ok := sortValue(v)
			if !ok {
				continue
			}
			switch m[2] {
			case "<":
				kc.hi, kc.hiInc = &k, false
			case "<=":
				kc.hi, kc.hiInc = &k, true
			case ">":
				kc.lo, kc.loInc = &k, false
			case ">=":
				kc.lo, kc.loInc = &k, true
			case "=":
				kc.lo, kc.hi, kc.loInc, kc.hiInc = &k, &k, true, true
			}
		}
	}
	return kc, found
}

// selectKeys returns the primary keys of the partition's entries that a
// DynamoDB Query would read: those within the condition's sort key bounds,
// in the query's direction, from its ExclusiveStartKey (which is kept, as
// minidyn starts after the key it finds), at most Limit of them. ok is
// false when the start key is not in the partition (minidyn, walking from
// it, would find nothing; the caller leaves that to it).
func (kc keyCondition) selectKeys(p *partitions, q queryReq, t *core.Table) ([]string, bool) {
	es := kc.inRange(p)
	forward := q.ScanIndexForward == nil || *q.ScanIndexForward
	if !forward {
		rev := make([]partEntry, len(es))
		for i, e := range es {
			rev[len(es)-1-i] = e
		}
		es = rev
	}
	extra := 0
	if len(q.ExclusiveStartKey) > 0 {
		key := map[string]*types.Item{}
		for name, raw := range q.ExclusiveStartKey {
			var v types.Item
			if err := json.Unmarshal(raw, &v); err != nil {
				return nil, false
			}
			key[name] = &v
		}
		start, err := t.KeySchema.GetKey(t.AttributesDef, key)
		if err != nil {
			return nil, false
		}
		i := 0
		for i < len(es) && es[i].pk != start {
			i++
		}
		if i == len(es) {
			return nil, false
		}
		es, extra = es[i:], 1
	}
	if q.Limit > 0 && len(es) > q.Limit+extra {
		es = es[:q.Limit+extra]
	}
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, e.pk)
	}
	return out, true
}

// inRange is the partition's entries within the condition's sort key
// bounds, in ascending order.
func (kc keyCondition) inRange(p *partitions) []partEntry {
	es := p.parts[kc.hash]
	from, to := 0, len(es)
	if kc.lo != nil {
		lo := *kc.lo
		from = sort.Search(len(es), func(i int) bool {
			if kc.loInc {
				return !es[i].sort.less(lo)
			}
			return lo.less(es[i].sort)
		})
	}
	if kc.hi != nil {
		hi := *kc.hi
		to = sort.Search(len(es), func(i int) bool {
			if kc.hiInc {
				return hi.less(es[i].sort)
			}
			return !es[i].sort.less(hi)
		})
	}
	if from >= to {
		return nil
	}
	return es[from:to]
}

// query runs a Query on a scratch view of the index (or table) that holds
// only the partition (and sort key range) its key condition selects. It
// returns false, having written nothing, when it cannot tell the
// partition: the caller then lets minidyn walk everything.
func (f *indexRepair) query(w http.ResponseWriter, r *http.Request, body []byte) bool {
	var q queryReq
	if err := json.Unmarshal(body, &q); err != nil {
		return false
	}
	t, ok := f.tables[q.TableName]
	if !ok {
		return false
	}
	var iv indexView
	if q.IndexName != "" {
		if iv, ok = indexViews(t)[q.IndexName]; !ok {
			return false
		}
	}
	p := f.partsOf(q.TableName, t).views[q.IndexName]
	if p == nil {
		return false
	}
	kc, ok := parseKeyCondition(q, p)
	if !ok {
		return false
	}
	pks, ok := kc.selectKeys(p, q, t)
	if !ok {
		return false
	}
	if q.IndexName == "" {
		real := t.SortedKeys
		sub := append([]string(nil), pks...)
		sort.Strings(sub)
		t.SortedKeys = sub
		defer func() { t.SortedKeys = real }()
		f.srv.ServeHTTP(w, r)
		return true
	}
	realRefs, realSorted := *iv.refs, *iv.sorted
	refs := make(map[string]string, len(pks))
	keys := make([]string, 0, len(pks))
	for _, pk := range pks {
		if k, ok := realRefs[pk]; ok {
			refs[pk] = k
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	*iv.refs, *iv.sorted = refs, keys
	defer func() { *iv.refs, *iv.sorted = realRefs, realSorted }()
	f.srv.ServeHTTP(w, r)
	return true
}
