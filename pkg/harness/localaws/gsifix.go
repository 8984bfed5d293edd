package localaws

import (
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"
	"unsafe"

	"github.com/truora/minidyn/server"
)

// indexRepair works around a minidyn v0.8.2 bug that makes global secondary
// index queries miss items. Each index keeps a map from primary key to index
// key (refs, always right) and a sorted list of index keys (sortedKeys) that
// its Query walks in lockstep with the sorted map. When an UpdateItem gives
// an item index keys it did not have (every upsert that creates an item),
// minidyn overwrites sortedKeys[0] instead of inserting, so one other item
// silently drops out of every query on that index.
//
// After every write, and while no other request runs, indexRepair rebuilds
// each index's sorted list from its map: exactly what a correct insert would
// have produced. It reaches the unexported fields by reflection, and does
// nothing if their shape changes (a newer minidyn), so it cannot corrupt a
// fixed emulator; TestDueIndexSurvivesUpserts shows whether it is needed.
type indexRepair struct {
	mu  sync.Mutex
	srv *server.Server
}

func isWrite(target string) bool {
	op := target[strings.LastIndexByte(target, '.')+1:]
	switch op {
	case "PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems":
		return true
	}
	return false
}

// serve runs one request exclusively, repairing the indexes after a write.
func (f *indexRepair) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.srv.ServeHTTP(w, r)
	if isWrite(r.Header.Get("X-Amz-Target")) {
		repairIndexes(f.srv)
	}
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

func repairIndexes(s *server.Server) {
	client := field(reflect.ValueOf(s).Elem(), "client")
	if !client.IsValid() || client.Kind() != reflect.Pointer || client.IsNil() {
		return
	}
	tables := field(client.Elem(), "tables")
	if !tables.IsValid() || tables.Kind() != reflect.Map {
		return
	}
	for _, tk := range tables.MapKeys() {
		t := tables.MapIndex(tk)
		if t.Kind() != reflect.Pointer || t.IsNil() {
			continue
		}
		idxs := t.Elem().FieldByName("Indexes")
		if !idxs.IsValid() || idxs.Kind() != reflect.Map {
			continue
		}
		for _, ik := range idxs.MapKeys() {
			ix := idxs.MapIndex(ik)
			if ix.Kind() != reflect.Pointer || ix.IsNil() {
				continue
			}
			refs := field(ix.Elem(), "refs")
			sorted := field(ix.Elem(), "sortedKeys")
			if !refs.IsValid() || !sorted.IsValid() || refs.Kind() != reflect.Map || sorted.Type() != reflect.TypeOf([]string(nil)) {
				continue
			}
			keys := make([]string, 0, refs.Len())
			it := refs.MapRange()
			for it.Next() {
				if it.Value().Kind() != reflect.String {
					return
				}
				keys = append(keys, it.Value().String())
			}
			sort.Strings(keys)
			sorted.Set(reflect.ValueOf(keys))
		}
	}
}
