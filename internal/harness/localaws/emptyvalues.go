package localaws

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"

	"github.com/truora/minidyn/types"
)

// DynamoDB stores and returns an empty list ({"L": []}) and an empty map
// ({"M": {}}) as they were written. minidyn v0.8.2 stores them (an L or M
// that is empty but not nil) and evaluates expressions on them correctly,
// but loses their type on the way out:
//   - its wire type tags L and M `omitempty`, so every answer holding one
//     (GetItem, Query, Scan, BatchGetItem, a write's ReturnValues) encodes
//     it as {}, a value of no type, which the SDK decodes as nil or as
//     another value of the same item (an empty list read back as the map
//     beside it, a projection's [] as its number "1");
//   - the old item of a refused write (ConditionalCheckFailedException,
//     a transaction's cancellation reasons) goes through a mapping whose
//     default is NULL, so there each comes back as {"NULL": true};
//   - its deep copy, the snapshot a transaction rolls back to, copies a
//     list or a map only when it has elements, so a cancelled transaction
//     put back items holding values of no type, and every later update of
//     one failed ("unsupported expression or attribute type").
//
// So a refused write leaves the stored items as they were (runScratch
// does not merge what minidyn left), and every answer that holds items is
// repaired here: each value of no type (and each NULL) where the stored
// item the answer was read from holds an empty list or map becomes that
// list or map again. The stored item is the one under the answer item's
// primary key: for a read, as it is; for a write's answer, as it was before
// (ReturnValues ALL_OLD and UPDATED_OLD, a refused condition's item) or as
// the write left it (the other ReturnValues), the other one when that one
// does not hold the value. A value of no type that no stored item
// explains fails the request (InternalServerError) rather than reach the
// SDK, which would decode it as something else.

// storedItems are stored items by table and primary key string.
type storedItems map[string]map[string]map[string]*types.Item

// snapshot returns the items that the touched keys name now (a write
// replaces an item's map, it never changes one in place: runScratch).
func (f *indexRepair) snapshot(touched map[string]*touchedTable) storedItems {
	out := storedItems{}
	for name, tt := range touched {
		t, ok := f.tables[name]
		if !ok {
			continue
		}
		items := map[string]map[string]*types.Item{}
		for k := range tt.keys {
			if it, ok := t.Data[k]; ok {
				items[k] = it
			}
		}
		out[name] = items
	}
	return out
}

// answerReq holds the fields of a request that tell where its answer's
// items come from.
type answerReq struct {
	TableName     string
	ReturnValues  string
	TransactItems []struct {
		Get, Put, Update, Delete, ConditionCheck *struct{ TableName string }
	}
}

func (r answerReq) transactTable(i int) string {
	if i >= len(r.TransactItems) {
		return ""
	}
	it := r.TransactItems[i]
	for _, p := range []*struct{ TableName string }{it.Get, it.Put, it.Update, it.Delete, it.ConditionCheck} {
		if p != nil {
			return p.TableName
		}
	}
	return ""
}

// errNoStoredValue says that an answer holds a value of no type that no
// stored item explains.
var errNoStoredValue = errors.New("localaws: minidyn answered a value of no type (an empty list or map) that no stored item explains")

// recordAnswer runs serve into a recorder and writes its answer to w with
// its empty lists and maps repaired (see above): old and new are the
// stored items before and after the request (the same for a read).
func (f *indexRepair) recordAnswer(w http.ResponseWriter, op string, body []byte, serve func(w http.ResponseWriter), old, new func(table string) (map[string]map[string]*types.Item, bool)) {
	rec := httptest.NewRecorder()
	serve(rec)
	out := rec.Body.Bytes()
	fixed, err := repairAnswer(op, body, out, func(table string, item map[string]any, wantOld bool) []*types.Item {
		return f.storedFor(table, item, wantOld, old, new)
	})
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	if err != nil {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = fmt.Fprintf(w, `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":%q}`, err.Error())
		return
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(fixed)
}

// storedFor returns the stored items an answer item of table may have been
// read from, the preferred one first.
func (f *indexRepair) storedFor(table string, item map[string]any, wantOld bool, old, new func(string) (map[string]map[string]*types.Item, bool)) []*types.Item {
	t, ok := f.tables[table]
	if !ok {
		return nil
	}
	gens := []func(string) (map[string]map[string]*types.Item, bool){new, old}
	if wantOld {
		gens[0], gens[1] = old, new
	}
	key := ""
	keyItem := map[string]*types.Item{}
	for _, name := range []string{t.KeySchema.HashKey, t.KeySchema.RangeKey} {
		if name == "" {
			continue
		}
		raw, err := json.Marshal(item[name])
		var v types.Item
		if item[name] == nil || err != nil || json.Unmarshal(raw, &v) != nil {
			keyItem = nil
			break
		}
		keyItem[name] = &v
	}
	if keyItem != nil {
		if k, err := t.KeySchema.GetKey(t.AttributesDef, keyItem); err == nil {
			key = k
		}
	}
	var out []*types.Item
	for _, gen := range gens {
		items, ok := gen(table)
		if !ok {
			continue
		}
		it, found := items[key]
		if key == "" && len(items) == 1 {
			// An answer item without its key (UPDATED_NEW, UPDATED_OLD)
			// from the only item there is (a write's: of one item).
			for _, only := range items {
				it, found = only, true
			}
		}
		if found {
			out = append(out, &types.Item{M: it})
		}
	}
	return out
}

// repairAnswer gives the items of op's answer out their empty lists and
// maps back; stored returns the stored items (as whole-item maps, the
// preferred first) an answer item of a table was read from.
func repairAnswer(op string, body, out []byte, stored func(table string, item map[string]any, wantOld bool) []*types.Item) ([]byte, error) {
	if !bytes.Contains(out, []byte("{}")) && !bytes.Contains(out, []byte(`"NULL":true`)) {
		return out, nil
	}
	var req answerReq
	if err := json.Unmarshal(body, &req); err != nil {
		return out, nil // minidyn answered a request it could not read: no items
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return out, nil
	}
	changed := false
	var failed error
	fix := func(table string, v any, wantOld bool) {
		item, ok := v.(map[string]any)
		if !ok {
			return
		}
		refs := stored(table, item, wantOld)
		for name, av := range item {
			var sub []*types.Item
			for _, r := range refs {
				if x, ok := r.M[name]; ok {
					sub = append(sub, x)
				}
			}
			nv, ch, err := repairValue(av, sub, name)
			if err != nil && failed == nil {
				failed = fmt.Errorf("%w (table %s)", err, table)
			}
			if ch {
				item[name] = nv
				changed = true
			}
		}
	}
	items := func(table string, v any, wantOld bool) {
		l, _ := v.([]any)
		for _, it := range l {
			fix(table, it, wantOld)
		}
	}
	wantOld := req.ReturnValues == "ALL_OLD" || req.ReturnValues == "UPDATED_OLD"
	switch op {
	case "GetItem":
		fix(req.TableName, doc["Item"], false)
	case "Query", "Scan":
		items(req.TableName, doc["Items"], false)
	case "BatchGetItem":
		resp, _ := doc["Responses"].(map[string]any)
		for table, l := range resp {
			items(table, l, false)
		}
	case "TransactGetItems":
		resp, _ := doc["Responses"].([]any)
		for i, r := range resp {
			if m, ok := r.(map[string]any); ok {
				fix(req.transactTable(i), m["Item"], false)
			}
		}
	case "PutItem", "UpdateItem", "DeleteItem":
		fix(req.TableName, doc["Attributes"], wantOld)
		if req.ReturnValues == "UPDATED_NEW" || req.ReturnValues == "UPDATED_OLD" {
			// minidyn tells the updated attributes by comparing the item
			// with its deep copy from before, which lacks the empty lists
			// and maps: an attribute holding one always looks updated. An
			// attribute the write left equal is not one it updated.
			if attrs, ok := doc["Attributes"].(map[string]any); ok {
				if refs := stored(req.TableName, attrs, wantOld); len(refs) == 2 {
					for name := range attrs {
						a, inA := refs[0].M[name]
						b, inB := refs[1].M[name]
						if inA && inB && reflect.DeepEqual(a, b) {
							delete(attrs, name)
							changed = true
						}
					}
				}
			}
		}
		fix(req.TableName, doc["Item"], true) // a refused condition's old item
	case "TransactWriteItems":
		reasons, _ := doc["CancellationReasons"].([]any)
		for i, r := range reasons {
			if m, ok := r.(map[string]any); ok {
				fix(req.transactTable(i), m["Item"], true)
			}
		}
	}
	if failed != nil {
		return nil, failed
	}
	if !changed {
		return out, nil
	}
	return json.Marshal(doc)
}

// repairValue returns av (at path in its item) with each value of no type,
// and each NULL, that the stored values refs (the preferred first) hold as
// an empty list or map turned into that list or map, and whether it changed
// anything.
func repairValue(av any, refs []*types.Item, path string) (any, bool, error) {
	m, ok := av.(map[string]any)
	if !ok {
		return av, false, nil
	}
	typeless := len(m) == 0
	if isNull := len(m) == 1 && m["NULL"] == true; typeless || isNull {
		// The first stored item that holds the value decides: a NULL it
		// holds as NULL stays one.
		for _, r := range refs {
			if r == nil {
				continue
			}
			switch {
			case r.L != nil && len(r.L) == 0:
				return map[string]any{"L": []any{}}, true, nil
			case r.M != nil && len(r.M) == 0:
				return map[string]any{"M": map[string]any{}}, true, nil
			}
			break
		}
		if typeless {
			return av, false, fmt.Errorf("%w: %s", errNoStoredValue, path)
		}
		return av, false, nil
	}
	changed := false
	if sub, ok := m["M"].(map[string]any); ok && len(m) == 1 {
		for k, v := range sub {
			var rs []*types.Item
			for _, r := range refs {
				if r != nil && r.M != nil {
					rs = append(rs, r.M[k])
				}
			}
			nv, ch, err := repairValue(v, rs, path+"."+k)
			if err != nil {
				return av, false, err
			}
			if ch {
				sub[k], changed = nv, true
			}
		}
	}
	if l, ok := m["L"].([]any); ok && len(m) == 1 {
		for i, v := range l {
			var rs []*types.Item
			for _, r := range refs {
				if r != nil && i < len(r.L) {
					rs = append(rs, r.L[i])
				}
			}
			nv, ch, err := repairValue(v, rs, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return av, false, err
			}
			if ch {
				l[i], changed = nv, true
			}
		}
	}
	return av, changed, nil
}
