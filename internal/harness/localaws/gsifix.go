package localaws

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"unsafe"

	"github.com/truora/minidyn/core"
	"github.com/truora/minidyn/server"
	"github.com/truora/minidyn/types"

	"github.com/effectively-once/webhooks/internal/harness/httpstatus"
)

// indexRepair keeps minidyn v0.8.2's tables and secondary indexes as
// DynamoDB's would be, at a cost per write independent of the table's size.
//
// minidyn gets three things wrong that matter here:
//   - each index keeps a map from primary key to index key (refs) and a
//     sorted list of index keys (sortedKeys) that its Query walks in
//     lockstep with the sorted map; when an UpdateItem gives an item index
//     keys it did not have (every upsert that creates an item), it
//     overwrites sortedKeys[0] instead of inserting, so another item drops
//     out of every query on that index;
//   - it ignores REMOVE in update expressions, so an item never leaves a
//     sparse index (the ledger's due index only grew);
//   - its costs per write grow with the table: every new item re-sorts the
//     table's and each index's key list, and every TransactWriteItems
//     deep-copies each table it touches (its rollback snapshot).
//
// So every write runs, one at a time, against a scratch view of the tables
// it names: their Data holds copies of only the items the request's keys
// name, and their key lists and indexes start empty. minidyn then does its
// conditions, updates, transactions and rollbacks on a few items. Afterwards
// the real state is put back and the items the write produced are merged
// into it: Data entries set or deleted, the table's key list and each
// index's list kept sorted by binary insertion and removal, refs holding
// exactly the items whose index key attributes are all present. REMOVE is
// emulated for top-level attributes: when a successful update's REMOVE
// names one, the attribute leaves the item, and if it is an index key, the
// item leaves the index. (Nested paths are left to minidyn.)
//
// It reaches minidyn's unexported fields by reflection. Their shape is
// checked once (checkMinidyn); if it does not match, every request fails
// with an error that names the cause, instead of silently returning
// incomplete query results (TestMinidynInternals checks it).
type indexRepair struct {
	mu     sync.Mutex
	srv    *server.Server
	tables map[string]*core.Table
	err    error // minidyn's internals are not what this code knows
	// parts are the tables' and indexes' partitions for Query (query.go),
	// built on a table's first query and kept up to date by every write.
	parts map[string]*tableParts
	// fullQuery turns the partition fast path off (tests compare the two).
	fullQuery bool
}

// errMinidynChanged says that minidyn's internals differ from v0.8.2's.
var errMinidynChanged = errors.New("localaws: minidyn's internals changed; the index repair (gsifix.go) cannot run, update it")

func newIndexRepair() *indexRepair {
	srv := server.NewServer()
	f := &indexRepair{srv: srv}
	f.tables, f.err = minidynTables(srv)
	return f
}

// field returns a settable view of an unexported struct field, or an
// invalid Value when the struct has no such field.
func field(v reflect.Value, name string) reflect.Value {
	f := v.FieldByName(name)
	if !f.IsValid() || !f.CanAddr() {
		return reflect.Value{}
	}
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
}

// minidynTables returns the server's table map, after checking that the
// index type has the fields this code uses.
func minidynTables(s *server.Server) (map[string]*core.Table, error) {
	client := field(reflect.ValueOf(s).Elem(), "client")
	if !client.IsValid() || client.Kind() != reflect.Pointer || client.IsNil() {
		return nil, fmt.Errorf("%w: server.Server has no *Client field client", errMinidynChanged)
	}
	tv := field(client.Elem(), "tables")
	if !tv.IsValid() {
		return nil, fmt.Errorf("%w: server.Client has no field tables", errMinidynChanged)
	}
	tables, ok := tv.Interface().(map[string]*core.Table)
	if !ok {
		return nil, fmt.Errorf("%w: server.Client.tables is %s", errMinidynChanged, tv.Type())
	}
	ixt := reflect.TypeOf(core.Table{}.Indexes).Elem()
	if ixt.Kind() != reflect.Pointer || ixt.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("%w: Table.Indexes holds %s", errMinidynChanged, ixt)
	}
	st := ixt.Elem()
	want := map[string]reflect.Type{
		"refs":       reflect.TypeOf(map[string]string(nil)),
		"sortedKeys": reflect.TypeOf([]string(nil)),
	}
	for name, typ := range want {
		f, ok := st.FieldByName(name)
		if !ok || f.Type != typ {
			return nil, fmt.Errorf("%w: index.%s is not a %s", errMinidynChanged, name, typ)
		}
	}
	ks, ok := st.FieldByName("keySchema")
	if !ok || !ks.Type.Implements(reflect.TypeOf((*keyer)(nil)).Elem()) {
		return nil, fmt.Errorf("%w: index.keySchema has no GetKey(map[string]string, map[string]*types.Item)", errMinidynChanged)
	}
	return tables, nil
}

// keyer is what minidyn's keySchema provides: the string an item is
// stored under in a table or an index ("" and no error: not in a sparse
// index).
type keyer interface {
	GetKey(attrs map[string]string, item map[string]*types.Item) (string, error)
}

// indexView is one index's mutable state.
type indexView struct {
	refs   *map[string]string
	sorted *[]string
	ks     keyer
}

func indexViews(t *core.Table) map[string]indexView {
	out := make(map[string]indexView, len(t.Indexes))
	for name, ix := range t.Indexes {
		v := reflect.ValueOf(ix).Elem()
		out[name] = indexView{
			refs:   field(v, "refs").Addr().Interface().(*map[string]string),
			sorted: field(v, "sortedKeys").Addr().Interface().(*[]string),
			ks:     field(v, "keySchema").Interface().(keyer),
		}
	}
	return out
}

func opName(target string) string { return target[strings.LastIndexByte(target, '.')+1:] }

// serve runs one request exclusively; a write runs on a scratch view of the
// tables it names (see indexRepair).
func (f *indexRepair) serve(w http.ResponseWriter, r *http.Request, body []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		// minidyn may replace its table map (Reset): look it up every time.
		f.tables, f.err = minidynTables(f.srv)
	}
	if f.err != nil {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = fmt.Fprintf(w, `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":%q}`, f.err.Error())
		return
	}
	op := opName(r.Header.Get("X-Amz-Target"))
	// current are the stored items as they are (for a read's answer).
	current := func(table string) (map[string]map[string]*types.Item, bool) {
		t, ok := f.tables[table]
		if !ok {
			return nil, false
		}
		return t.Data, true
	}
	switch op {
	case "PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems":
	case "UpdateTable", "CreateTable":
		// A new index on a table with items: minidyn fills it itself.
		f.srv.ServeHTTP(w, r)
		f.rebuildAll()
		return
	case "Query":
		f.recordAnswer(w, op, body, func(w http.ResponseWriter) {
			if f.fullQuery || !f.query(w, r, body) {
				f.srv.ServeHTTP(w, r)
			}
		}, current, current)
		return
	case "GetItem", "Scan", "BatchGetItem", "TransactGetItems":
		f.recordAnswer(w, op, body, func(w http.ResponseWriter) { f.srv.ServeHTTP(w, r) }, current, current)
		return
	default:
		f.srv.ServeHTTP(w, r)
		return
	}
	touched, err := f.parseWrite(op, body)
	if err != nil {
		// Not a request this code understands (minidyn will most likely
		// refuse it too): run it on the real state, then rebuild.
		f.srv.ServeHTTP(w, r)
		f.rebuildAll()
		return
	}
	before := f.snapshot(touched)
	old := func(table string) (map[string]map[string]*types.Item, bool) {
		items, ok := before[table]
		return items, ok
	}
	var after storedItems
	f.recordAnswer(w, op, body, func(w http.ResponseWriter) {
		rec := &httpstatus.Writer{ResponseWriter: w}
		f.runScratch(touched, exactNumbers(body), func() { f.srv.ServeHTTP(rec, r) }, func() bool { return rec.Code == 0 || rec.Code == http.StatusOK })
		after = f.snapshot(touched)
	}, old, func(table string) (map[string]map[string]*types.Item, bool) {
		items, ok := after[table]
		return items, ok
	})
}

// touchedTable is what one write does to one table: the primary keys it
// names, and the top-level attributes its updates REMOVE, by primary key.
type touchedTable struct {
	keys    map[string]bool
	removes map[string][]string
	// named are the top-level attributes an update's expression names,
	// by primary key (numbers.go).
	named map[string]map[string]bool
}

// writeReq holds the fields of the write requests this code reads.
type writeReq struct {
	TableName                string
	Item                     map[string]json.RawMessage
	Key                      map[string]json.RawMessage
	UpdateExpression         string
	ExpressionAttributeNames map[string]string
	TransactItems            []struct {
		Put, Update, Delete, ConditionCheck *writeReq
	}
	RequestItems map[string][]struct {
		PutRequest    *struct{ Item map[string]json.RawMessage }
		DeleteRequest *struct{ Key map[string]json.RawMessage }
	}
}

func (f *indexRepair) parseWrite(op string, body []byte) (map[string]*touchedTable, error) {
	var req writeReq
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	out := map[string]*touchedTable{}
	add := func(table string, item map[string]json.RawMessage, update *writeReq) error {
		t, ok := f.tables[table]
		if !ok {
			return fmt.Errorf("no table %q", table)
		}
		keyItem := map[string]*types.Item{}
		for _, name := range []string{t.KeySchema.HashKey, t.KeySchema.RangeKey} {
			if name == "" {
				continue
			}
			raw, ok := item[name]
			if !ok {
				return fmt.Errorf("no key attribute %q", name)
			}
			var v types.Item
			if err := json.Unmarshal(raw, &v); err != nil {
				return err
			}
			keyItem[name] = &v
		}
		key, err := t.KeySchema.GetKey(t.AttributesDef, keyItem)
		if err != nil || key == "" {
			return fmt.Errorf("key of %s: %v", table, err)
		}
		tt := out[table]
		if tt == nil {
			tt = &touchedTable{keys: map[string]bool{}, removes: map[string][]string{}, named: map[string]map[string]bool{}}
			out[table] = tt
		}
		tt.keys[key] = true
		if update != nil {
			if rm := removedAttrs(t, update.UpdateExpression, update.ExpressionAttributeNames); len(rm) > 0 {
				tt.removes[key] = rm
			}
			tt.named[key] = namedAttrs(update.UpdateExpression, update.ExpressionAttributeNames)
		}
		return nil
	}
	var err error
	switch op {
	case "PutItem":
		err = add(req.TableName, req.Item, nil)
	case "UpdateItem":
		err = add(req.TableName, req.Key, &req)
	case "DeleteItem":
		err = add(req.TableName, req.Key, nil)
	case "TransactWriteItems":
		for _, it := range req.TransactItems {
			if err != nil {
				break
			}
			switch {
			case it.Put != nil:
				err = add(it.Put.TableName, it.Put.Item, nil)
			case it.Update != nil:
				err = add(it.Update.TableName, it.Update.Key, it.Update)
			case it.Delete != nil:
				err = add(it.Delete.TableName, it.Delete.Key, nil)
			case it.ConditionCheck != nil:
				err = add(it.ConditionCheck.TableName, it.ConditionCheck.Key, nil)
			default:
				err = errors.New("empty transaction item")
			}
		}
	case "BatchWriteItem":
		for table, reqs := range req.RequestItems {
			for _, wr := range reqs {
				if err != nil {
					break
				}
				switch {
				case wr.PutRequest != nil:
					err = add(table, wr.PutRequest.Item, nil)
				case wr.DeleteRequest != nil:
					err = add(table, wr.DeleteRequest.Key, nil)
				default:
					err = errors.New("empty write request")
				}
			}
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

var clauseRE = regexp.MustCompile(`(?i)\b(SET|REMOVE|ADD|DELETE)\b`)

// removedAttrs returns the top-level attributes that expr's REMOVE clause
// names (nested paths are left to minidyn), other than t's primary key.
func removedAttrs(t *core.Table, expr string, names map[string]string) []string {
	var out []string
	locs := clauseRE.FindAllStringSubmatchIndex(expr, -1)
	for i, loc := range locs {
		if !strings.EqualFold(expr[loc[2]:loc[3]], "REMOVE") {
			continue
		}
		end := len(expr)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		for _, p := range strings.Split(expr[loc[1]:end], ",") {
			p = strings.TrimSpace(p)
			if p == "" || strings.ContainsAny(p, ".[") {
				continue
			}
			if n, ok := names[p]; ok {
				p = n
			}
			if p != t.KeySchema.HashKey && p != t.KeySchema.RangeKey {
				out = append(out, p)
			}
		}
	}
	return out
}

// runScratch runs write against scratch views of the touched tables, then
// merges what it produced into the real state, its integers exact again
// (exact: the request's, by float64; see numbers.go).
func (f *indexRepair) runScratch(touched map[string]*touchedTable, exact map[float64]string, write func(), ok func() bool) {
	type saved struct {
		data    map[string]map[string]*types.Item
		sorted  []string
		indexes map[string]indexView
		refs    map[string]map[string]string
		ixKeys  map[string][]string
	}
	real := map[string]*saved{}
	for name, tt := range touched {
		t := f.tables[name]
		s := &saved{data: t.Data, sorted: t.SortedKeys, indexes: indexViews(t), refs: map[string]map[string]string{}, ixKeys: map[string][]string{}}
		real[name] = s
		scratch := make(map[string]map[string]*types.Item, len(tt.keys))
		keys := make([]string, 0, len(tt.keys))
		for k := range tt.keys {
			if it, ok := t.Data[k]; ok {
				scratch[k] = copyItem(it)
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		t.Data, t.SortedKeys = scratch, keys
		for ixName, iv := range s.indexes {
			s.refs[ixName], s.ixKeys[ixName] = *iv.refs, *iv.sorted
			*iv.refs, *iv.sorted = map[string]string{}, []string{}
		}
	}
	done := false
	defer func() {
		if done {
			return
		}
		// minidyn panicked: put the real state back untouched.
		for name, s := range real {
			t := f.tables[name]
			t.Data, t.SortedKeys = s.data, s.sorted
			for ixName, iv := range s.indexes {
				*iv.refs, *iv.sorted = s.refs[ixName], s.ixKeys[ixName]
			}
		}
	}()
	write()
	succeeded := ok()
	for name, s := range real {
		t := f.tables[name]
		tt := touched[name]
		produced := t.Data
		t.Data, t.SortedKeys = s.data, s.sorted
		for ixName, iv := range s.indexes {
			*iv.refs, *iv.sorted = s.refs[ixName], s.ixKeys[ixName]
		}
		if !succeeded {
			// A refused write changed nothing, as in DynamoDB; what minidyn
			// left is dropped (its rollback copies items without their
			// empty lists and maps, emptyvalues.go).
			continue
		}
		keys := make(map[string]bool, len(tt.keys)+len(produced))
		for k := range tt.keys {
			keys[k] = true
		}
		for k := range produced {
			keys[k] = true
		}
		for k := range keys {
			it, exists := produced[k]
			if exists {
				for _, a := range tt.removes[k] {
					delete(it, a)
				}
				restoreNumbers(it, t.Data[k], exact, tt.named[k])
				if _, had := t.Data[k]; !had {
					t.SortedKeys = insertSorted(t.SortedKeys, k)
				}
				t.Data[k] = it
			} else if _, had := t.Data[k]; had {
				delete(t.Data, k)
				t.SortedKeys = removeSorted(t.SortedKeys, k)
			}
			for _, iv := range s.indexes {
				updateIndex(t, iv, k, it)
			}
			f.noteWrite(name, t, k, it) // it is nil when the write deleted the item
		}
	}
	done = true
}

// updateIndex makes one index agree with the item stored under pk (nil:
// none).
func updateIndex(t *core.Table, iv indexView, pk string, item map[string]*types.Item) {
	want := ""
	if item != nil {
		if k, err := iv.ks.GetKey(t.AttributesDef, item); err == nil {
			want = k
		}
	}
	refs := *iv.refs
	old, had := refs[pk]
	if had && old == want {
		return
	}
	if had {
		*iv.sorted = removeSorted(*iv.sorted, old)
		delete(refs, pk)
	}
	if want != "" {
		refs[pk] = want
		*iv.sorted = insertSorted(*iv.sorted, want)
	}
}

func insertSorted(s []string, v string) []string {
	i := sort.SearchStrings(s, v)
	s = append(s, "")
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}

func removeSorted(s []string, v string) []string {
	i := sort.SearchStrings(s, v)
	if i == len(s) || s[i] != v {
		return s
	}
	return append(s[:i], s[i+1:]...)
}

// copyItem copies an item deeply enough that minidyn's updates and
// rollbacks of the copy leave the original as it was.
func copyItem(it map[string]*types.Item) map[string]*types.Item {
	out := make(map[string]*types.Item, len(it))
	for k, v := range it {
		out[k] = copyValue(v)
	}
	return out
}

func copyValue(v *types.Item) *types.Item {
	if v == nil {
		return nil
	}
	c := *v
	if v.L != nil {
		c.L = make([]*types.Item, len(v.L))
		for i, e := range v.L {
			c.L[i] = copyValue(e)
		}
	}
	if v.M != nil {
		c.M = copyItem(v.M)
	}
	c.B = append([]byte(nil), v.B...)
	if v.B == nil {
		c.B = nil
	}
	c.BS = append([][]byte(nil), v.BS...)
	c.NS = append([]*string(nil), v.NS...)
	c.SS = append([]*string(nil), v.SS...)
	if v.BS == nil {
		c.BS = nil
	}
	if v.NS == nil {
		c.NS = nil
	}
	if v.SS == nil {
		c.SS = nil
	}
	return &c
}

// rebuildAll rebuilds every index of every table from the table's items:
// the slow path, after requests the incremental repair does not handle.
func (f *indexRepair) rebuildAll() {
	f.parts = nil // rebuilt on each table's next query
	for _, t := range f.tables {
		for _, iv := range indexViews(t) {
			refs := map[string]string{}
			keys := make([]string, 0, len(*iv.refs))
			for pk, item := range t.Data {
				if k, err := iv.ks.GetKey(t.AttributesDef, item); err == nil && k != "" {
					refs[pk] = k
					keys = append(keys, k)
				}
			}
			sort.Strings(keys)
			*iv.refs, *iv.sorted = refs, keys
		}
		keys := make([]string, 0, len(t.Data))
		for k := range t.Data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		t.SortedKeys = keys
	}
}
