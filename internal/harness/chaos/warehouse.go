package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/builtin"
)

// I9, the warehouse follows the truth: with the warehouse sink on, every
// applied revision of a subject becomes a change record in the store, and
// the store's current row of a subject (its record of the highest version,
// as localwarehouse's current_state reads it) is the subject's truth. The
// expected warehouse comes from the model (the business rules, the
// schedule and, for the processing order, the recorded outcomes, as for
// I3), never from the ledger's projections; the ledger's record intents
// are read only to find the ones an operator owns (QUARANTINED, FAILED)
// and to check that SUCCEEDED means the store holds the record.
//
//   - Every record is one of a version the model says the subject
//     reached (an event applied it, found it already applied, or advanced
//     the version with the same state), carries the state the model gives
//     that version, names an event that made it, and belongs to the
//     subject's scope and projection; a stale or quarantined revision, or
//     one never sent, has no record.
//   - Each (subject, version) appears at most once in the change log.
//   - Once the run settled (the reconciler's warehouse check at its end
//     included): the current row is the model's final version and state,
//     unless that version's record intent (or its latest repair) is
//     QUARANTINED; and every revision an event applied has its record,
//     unless its record intent (or its latest repair) is QUARANTINED or
//     FAILED (the check repairs the current version only).
//   - A SUCCEEDED record intent, original or repair, was observed: the
//     store holds its record at its key, byte for byte.

// subjectModel is what the model says one subject went through: the
// versions its projection reached, with the states and the events that
// made them; the versions an event applied (each wrote a record intent);
// and its final version and state (ok is false when the model cannot
// say: I3 reports why).
type subjectModel struct {
	scope, projection string
	states            map[int64]map[string]bool
	events            map[int64]map[string]bool
	applied           map[int64]bool
	final             int64
	state             string
	ok                bool
}

func newSubjectModel(source string) subjectModel {
	m := subjectModel{states: map[int64]map[string]bool{}, events: map[int64]map[string]bool{}, applied: map[int64]bool{},
		scope: SourceOrders, projection: builtin.OrderProjection}
	if source == SourceStripe {
		m.scope, m.projection = SourceStripe, builtin.StripeSubscriptionProjection
	}
	return m
}

// reach records that event made version v with state (applied: it
// changed the state there; else it found v there, or advanced to it with
// the same state).
func (m subjectModel) reach(v int64, state, event string, applied bool) {
	if m.states[v] == nil {
		m.states[v], m.events[v] = map[string]bool{}, map[string]bool{}
	}
	m.states[v][state], m.events[v][event] = true, true
	if applied {
		m.applied[v] = true
	}
}

// recordState is a record's state as the model names states: an order's
// status; a subscription's status, "+deleted" when it was deleted.
func recordState(r warehouse.Record) string {
	st := fmt.Sprint(r.State["status"])
	if r.Source == SourceStripe || r.Scope == SourceStripe {
		if r.State["deleted"] == true {
			st += "+deleted"
		}
	}
	return st
}

// warehouseObs is what the warehouse sink's store holds at the end of a
// run, and the record intents.
type warehouseObs struct {
	prefix  string
	objects map[string][]byte             // by key
	intents map[string]ledger.IntentState // record intents (originals and repairs), by operation id
	writes  []localaws.S3Write            // every object written, in order
}

// stored is one change record the store holds.
type stored struct {
	key string
	rec warehouse.Record
	v   int64
}

func (s *stored) String() string {
	if s == nil {
		return "missing (no record)"
	}
	return fmt.Sprintf("version %d (%s, by %s)", s.v, recordState(s.rec), s.rec.EventID)
}

// decodeRecord reads a stored record (its version exact).
func decodeRecord(body []byte) (warehouse.Record, int64, error) {
	var rec warehouse.Record
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&rec); err != nil {
		return rec, 0, err
	}
	v, err := strconv.ParseInt(string(rec.Version), 10, 64)
	return rec, v, err
}

// owned reports whether an operator owns the record of subject's version
// v: its intent, or the latest of its repairs, is QUARANTINED, or FAILED
// when v is not the current version (the reconciler's check repairs the
// current version's only).
func (w *warehouseObs) owned(m subjectModel, subject string, v int64, current bool) (bool, string) {
	op := warehouse.OperationID(m.scope, m.projection, subject, v)
	last, ok := w.intents[op]
	if !ok {
		return false, "no record intent"
	}
	for n := 1; n <= 5; n++ {
		if in, ok := w.intents[warehouse.RepairID(op, n)]; ok {
			last = in
		}
	}
	desc := fmt.Sprintf("record intent %s %s %s", short(last.OperationID), last.Status, last.ErrorCode)
	switch last.Status {
	case ledger.IntentStatusQuarantined:
		return true, desc
	case ledger.IntentStatusFailed:
		return !current, desc
	}
	return false, desc
}

func checkWarehouse(models map[string]subjectModel, o observed, settled bool, add func(string, string, ...any)) {
	w := o.warehouse
	rows := map[string][]stored{}
	keys := make([]string, 0, len(w.objects))
	for k := range w.objects {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		rec, v, err := decodeRecord(w.objects[k])
		if err != nil {
			add(I9, "object %s is not a change record with an exact version: %v", k, err)
			continue
		}
		rows[rec.Subject] = append(rows[rec.Subject], stored{key: k, rec: rec, v: v})
	}

	// Each record: a version the model reached, its state, its event.
	subjects := make([]string, 0, len(rows))
	for s := range rows {
		subjects = append(subjects, s)
	}
	sort.Strings(subjects)
	for _, subj := range subjects {
		m, known := models[subj]
		if !known {
			add(I9, "the warehouse holds %d record(s) of %s, whose events the model expects nowhere", len(rows[subj]), subj)
			continue
		}
		count := map[int64][]string{}
		for _, r := range rows[subj] {
			count[r.v] = append(count[r.v], r.key)
			got := recordState(r.rec)
			switch {
			case r.rec.Scope != m.scope || r.rec.Projection != m.projection:
				add(I9, "%s: the record %s names %s/%s, want %s/%s", subj, r.key, r.rec.Scope, r.rec.Projection, m.scope, m.projection)
			case m.states[r.v] == nil:
				add(I9, "%s: the change log holds version %d (%s, by %s), which the model says was never applied (stale, quarantined or never sent)", subj, r.v, got, r.rec.EventID)
			case !m.states[r.v][got]:
				add(I9, "%s: the record of version %d says %s; the event applied there said %v", subj, r.v, got, keysOf(m.states[r.v]))
			case !m.events[r.v][r.rec.EventID]:
				add(I9, "%s: the record of version %d names event %s, which did not make that version (%v did)", subj, r.v, r.rec.EventID, keysOf(m.events[r.v]))
			}
		}
		for v, ks := range count {
			if len(ks) > 1 {
				add(I9, "%s: version %d appears %d times in the change log (%v)", subj, v, len(ks), ks)
			}
		}
	}

	// A SUCCEEDED record intent was observed in the store.
	ops := make([]string, 0, len(w.intents))
	for op := range w.intents {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		in := w.intents[op]
		if in.Status != ledger.IntentStatusSucceeded {
			continue
		}
		rec, err := warehouse.FromPayload(in.Payload)
		if err != nil {
			add(I9, "record intent %s is SUCCEEDED, but its payload is no record: %v", short(op), err)
			continue
		}
		want, err := rec.Encode()
		if err != nil {
			add(I9, "record intent %s is SUCCEEDED, but its record cannot be encoded: %v", short(op), err)
			continue
		}
		key := warehouse.Key(w.prefix, rec.Scope, rec.Projection, rec.Subject, rec.VersionInt())
		switch body, ok := w.objects[key]; {
		case !ok:
			add(I9, "record intent %s (%s v%s) is SUCCEEDED, but the store holds nothing at its key %s: SUCCEEDED must mean the store said it holds the record", short(op), rec.Subject, rec.Version, key)
		case !bytes.Equal(body, want):
			add(I9, "record intent %s (%s v%s) is SUCCEEDED, but %s holds other bytes than its record", short(op), rec.Subject, rec.Version, key)
		}
	}
	if !settled {
		return // I1 says why; the current rows are judged on a settled run only
	}

	// The current row, and every applied revision's record.
	names := make([]string, 0, len(models))
	for s := range models {
		names = append(names, s)
	}
	sort.Strings(names)
	for _, subj := range names {
		m := models[subj]
		var cur *stored
		at := map[int64]bool{}
		for i, r := range rows[subj] {
			at[r.v] = true
			if cur == nil || r.v > cur.v {
				cur = &rows[subj][i]
			}
		}
		if m.ok && (cur == nil || cur.v != m.final || recordState(cur.rec) != m.state) {
			if owned, why := w.owned(m, subj, m.final, true); !owned {
				add(I9, "%s: the warehouse's current row is %s; the truth is version %d (%s) (%s)", subj, cur, m.final, m.state, why)
			}
		}
		applied := make([]int64, 0, len(m.applied))
		for v := range m.applied {
			applied = append(applied, v)
		}
		sort.Slice(applied, func(i, j int) bool { return applied[i] < applied[j] })
		for _, v := range applied {
			if at[v] || (m.ok && v == m.final) {
				continue // there, or judged as the current row above
			}
			if owned, why := w.owned(m, subj, v, false); !owned {
				add(I9, "%s: version %d was applied (by %v) but its record is not in the warehouse (%s)", subj, v, keysOf(m.events[v]), why)
			}
		}
	}
}

// warehouseStats counts what the sink went through in one run.
func warehouseStats(w *warehouseObs) Stats {
	var st Stats
	st.Records = len(w.objects)
	for _, in := range w.intents {
		waited, failed := false, false
		for _, a := range in.Audit {
			switch string(a.To) {
			case string(ledger.IntentStatusRetryWait), string(ledger.IntentStatusUncertain):
				waited = true
			case string(ledger.IntentStatusFailed):
				failed = true
			}
		}
		if waited {
			st.RecordsWaited++
		}
		if failed {
			st.RecordsFailed++
		}
	}
	// A late older record: written after a newer one of its subject.
	top := map[string]int64{}
	for _, wr := range w.writes {
		rec, v, err := decodeRecord(wr.Body)
		if err != nil {
			continue
		}
		if t, seen := top[rec.Subject]; seen && v < t {
			st.LateOlder = 1
		}
		top[rec.Subject] = max(top[rec.Subject], v)
	}
	return st
}
