package projection

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The codes of the permanent errors Validate returns, and of a panic in
// a projection or a call that outlived its budget, as the pipeline
// records them when it quarantines the event.
const (
	// CodeInvalidResult: the result breaks the contract (a missing or
	// oversized id, an unknown policy, a Condition the policy ignores, a
	// value that is not data, ...). No retry can fix it; the projection
	// must.
	CodeInvalidResult = "projection_invalid_result"
	// CodeUnstorable: the result's values are data, but beyond what
	// DynamoDB stores (a NaN, a number out of its range, nesting over 32
	// levels, an item over 400 KB, too many intents for one transaction).
	CodeUnstorable = "value_unstorable"
	// CodePanic: the projection panicked. The pipeline recovers, and
	// quarantines the event with this code.
	CodePanic = "projection_panic"
	// CodeTimeout: the projection did not return within its budget. The
	// pipeline stops waiting for it, discards whatever it returns later,
	// and quarantines the event with this code.
	CodeTimeout = "projection_timeout"
	// CodeOperationIDReused: an intent reuses an operation id that
	// another intent already holds for another action (a latest intent of
	// another revision or payload, a while_current one of another payload
	// or condition, any intent of another kind or policy). One operation
	// id names one action, so the pipeline quarantines the event rather
	// than drop the newer intent: the rule must put the revision in the
	// id, e.g. OperationID(subject, kind, strconv.FormatInt(version, 10)).
	// A once intent of the same kind under a held id (and a while_current
	// one with the same payload and condition) is the declared
	// deduplication instead: not written again, and recorded on the event.
	CodeOperationIDReused = "operation_id_reused"
)

// MaxIntents is the most intents one result may return. One commit is one
// DynamoDB transaction of at most 100 writes, and with every option on it
// also holds the event, the projection, the warehouse's record of the
// revision, and for each of the subject's 32 watched while_current
// intents a newer revision can contradict, its update and its
// compensation: 100 - 3 - 2×32 = 33. A result within it never fails for
// the transaction's size, whatever the deployment turns on.
const MaxIntents = 33

// MaxKindLength is the longest intent kind (and Compensation kind): 128
// bytes of UTF-8.
const MaxKindLength = 128

// The storage limits Validate estimates (the commit checks the real items
// against the same rules, and DynamoDB is the judge).
const (
	maxNesting   = 32        // levels; the state (or payload) attribute itself is level 1
	maxItemBytes = 400 << 10 // one item, attribute names included
	// A number's magnitude is 1E-130 to 9.99…E+125, with at most 38
	// significant digits.
	maxNumberDigits   = 38
	maxNumberExponent = 125
	minNumberExponent = -130
	// itemOverhead is a generous estimate of the attributes the ledger
	// adds to a projection or intent item besides its state or payload.
	itemOverhead = 1 << 10
)

// Validate checks a projection's result as the pipeline does before it
// commits it, and returns nil or a *PermanentError whose message names the
// projection and the rule:
//
//	projection_invalid_result: projection "orders/order": intent 0 has no operation id
//
// name is the projection's name as the message should show it (the
// pipeline passes "<scope>/<name>"). The processor quarantines an event
// whose result fails with CodeInvalidResult (the rest of its batch goes
// on) and leaves one failing with CodeUnstorable to the commit, which
// records an older revision stale and quarantines the others with that
// code. A team's tests call Validate on their projections' results
// (projection.Validate("order", res)) to find the same mistakes first.
//
// The rules:
//   - intents need a Write (an intent is stored with the state it comes
//     from; without one the event changes nothing);
//   - the Write has a name (no "/" or "#": they separate scopes and key
//     parts), a subject and a fingerprint; a name, a subject, an
//     operation id or an intent subject is at most MaxIDLength bytes of
//     UTF-8 without control characters, a kind at most MaxKindLength;
//   - each intent has an operation id, unique within the result (and not
//     another intent's CompensationID), a kind and a subject;
//   - no kind (nor Compensation) of the platform's reserved family
//     ("warehouse", "warehouse.…": ReservedKind) and no operation id of
//     its reserved shape ("warehouse.…": ReservedOperationID);
//   - a policy is "" (once), once, while_current or latest;
//   - a Condition and a Compensation belong to while_current intents
//     only, and a while_current intent has a Condition, with non-empty
//     field names, that holds in the Write's state (otherwise the
//     dispatcher would find the intent OBSOLETE at once);
//   - state and payload values are data: nil, booleans, strings, numbers
//     (Go integers, finite floats, json.Number), []byte, time.Time, and
//     slices, arrays and string-keyed maps of them (pointers and
//     interfaces are followed). A channel, a func, a complex number, a
//     struct or a map with other keys is CodeInvalidResult: the store and
//     the fingerprint would each see something else, or nothing;
//   - CodeUnstorable: a NaN or infinite float, a number outside DynamoDB's
//     range or over 38 significant digits, nesting over 32 levels, a state
//     or payload whose item would exceed 400 KB, more than MaxIntents intents.
func Validate(name string, r Result) error {
	v := validation{name: name}
	v.result(r)
	switch {
	case v.invalid != "":
		return &PermanentError{Code: CodeInvalidResult, Err: fmt.Errorf("projection %q: %s", name, v.invalid)}
	case v.unstorable != "":
		return &PermanentError{Code: CodeUnstorable, Err: fmt.Errorf("projection %q: %s", name, v.unstorable)}
	}
	return nil
}

// validation records the first broken rule of each class: a result with
// both is reported invalid (the contract first).
type validation struct {
	name                string
	invalid, unstorable string
}

func (v *validation) bad(format string, args ...any) {
	if v.invalid == "" {
		v.invalid = fmt.Sprintf(format, args...)
	}
}

func (v *validation) tooBig(format string, args ...any) {
	if v.unstorable == "" {
		v.unstorable = fmt.Sprintf(format, args...)
	}
}

func (v *validation) result(r Result) {
	if r.Write == nil {
		if len(r.Intents) > 0 {
			v.bad("%d intents without a Write (an intent is stored with the state it comes from)", len(r.Intents))
		}
		return
	}
	w := r.Write
	if why := idProblem(w.Name, MaxIDLength); why != "" {
		v.bad("the Write's name %s", why)
	} else if i := strings.IndexAny(w.Name, "/#"); i >= 0 {
		v.bad("the Write's name %q contains %q (it separates scopes and key parts)", w.Name, w.Name[i:i+1])
	}
	if why := idProblem(w.Subject, MaxIDLength); why != "" {
		v.bad("the Write's subject %s", why)
	}
	if w.Fingerprint == "" {
		v.bad("the Write has no fingerprint")
	}
	v.values("state", w.State, len(w.Name)+len(w.Subject)+len(w.Fingerprint)+len(w.Note))
	if len(r.Intents) > MaxIntents {
		v.tooBig("%d intents; a result holds at most %d (one DynamoDB transaction of 100 writes, with the event, the projection, the warehouse record and the contradicted intents of a full watch list)", len(r.Intents), MaxIntents)
	}
	ops := make(map[string]int, len(r.Intents))
	comps := map[string]int{}
	for i, in := range r.Intents {
		v.intent(i, in, w)
		if in.OperationID == "" {
			continue
		}
		if j, dup := ops[in.OperationID]; dup {
			v.bad("intent %d repeats intent %d's operation id %q", i, j, in.OperationID)
		}
		ops[in.OperationID] = i
		if in.Compensation != "" {
			comps[CompensationID(in.OperationID)] = i
		}
	}
	for i, in := range r.Intents {
		if j, ok := comps[in.OperationID]; ok {
			v.bad("intent %d's operation id %q is the compensation id of intent %d", i, in.OperationID, j)
		}
	}
}

func (v *validation) intent(i int, in Intent, w *Write) {
	switch why := idProblem(in.OperationID, MaxIDLength); {
	case in.OperationID == "":
		v.bad("intent %d has no operation id", i)
	case why != "":
		v.bad("intent %d's operation id %s", i, why)
	}
	switch why := idProblem(in.Kind, MaxKindLength); {
	case in.Kind == "":
		v.bad("intent %d has no kind", i)
	case why != "":
		v.bad("intent %d's kind %s", i, why)
	case ReservedKind(in.Kind):
		v.bad("intent %d's kind %q is reserved: the platform's own intents (the warehouse's records) use the family %q, a projection's never", i, in.Kind, ReservedFamily)
	}
	if ReservedOperationID(in.OperationID) {
		v.bad("intent %d's operation id %q is reserved: the platform's own intents' ids start with %q, a projection's never", i, in.OperationID, ReservedOperationPrefix)
	}
	switch why := idProblem(in.Subject, MaxIDLength); {
	case in.Subject == "":
		v.bad("intent %d has no subject", i)
	case why != "":
		v.bad("intent %d's subject %s", i, why)
	}
	policy := in.Policy
	if policy == "" {
		policy = PolicyOnce
	}
	switch policy {
	case PolicyOnce, PolicyLatest:
		if len(in.Condition) > 0 {
			v.bad("intent %d (policy %s) has a Condition; only a while_current intent is checked against one", i, policy)
		}
		if in.Compensation != "" {
			v.bad("intent %d (policy %s) has a Compensation; only a while_current intent is compensated", i, policy)
		}
	case PolicyWhileCurrent:
		v.condition(i, in, w)
		if in.Compensation != "" {
			if why := idProblem(in.Compensation, MaxKindLength); why != "" {
				v.bad("intent %d's Compensation %s", i, why)
			} else if ReservedKind(in.Compensation) {
				v.bad("intent %d's Compensation %q is reserved: the platform's own intents (the warehouse's records) use the family %q, a projection's never", i, in.Compensation, ReservedFamily)
			}
		}
	default:
		v.bad("intent %d has policy %q; the policies are %q, %q and %q", i, in.Policy, PolicyOnce, PolicyWhileCurrent, PolicyLatest)
	}
	v.values(fmt.Sprintf("intents[%d].payload", i), in.Payload, len(in.OperationID)+len(in.Kind)+len(in.Subject)+len(w.Name)+len(w.Subject)+len(w.Fingerprint))
}

// condition checks a while_current intent's Condition against the state
// it is written with, comparing as the dispatcher does: the state's value
// as text (fmt.Sprint; "" for a missing field).
func (v *validation) condition(i int, in Intent, w *Write) {
	if len(in.Condition) == 0 {
		v.bad("intent %d is while_current without a Condition (nothing to check it against)", i)
		return
	}
	for _, k := range sortedKeys(in.Condition) {
		if k == "" {
			v.bad("intent %d's Condition has an empty field name", i)
			return
		}
	}
	for _, k := range sortedKeys(in.Condition) {
		got := ""
		if x, ok := w.State[k]; ok && x != nil {
			got = fmt.Sprint(x)
		}
		if got != in.Condition[k] {
			v.bad("intent %d's Condition does not hold in the state it is written with: %s=%s, the intent needs %s=%s", i, k, got, k, in.Condition[k])
			return
		}
	}
}

// idProblem says what is wrong with an id-like text ("" if nothing), by
// the rules the ledger keys by: not empty, at most max bytes of UTF-8,
// no control characters (nor U+FFFE, U+FFFF, which SQS refuses).
func idProblem(s string, max int) string {
	switch {
	case s == "":
		return "is empty"
	case len(s) > max:
		return fmt.Sprintf("is %d bytes, over %d", len(s), max)
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == 0xFFFE || r == 0xFFFF {
			return fmt.Sprintf("contains a control character (U+%04X)", r)
		}
	}
	return ""
}

var (
	timeType       = reflect.TypeFor[time.Time]()
	jsonNumberType = reflect.TypeFor[json.Number]()
)

// values walks a state or payload (the attribute at path, level 1) and
// estimates the size of the item that holds it (overhead: the item's
// other texts).
func (v *validation) values(path string, m map[string]any, overhead int) {
	w := walker{v: v}
	w.value(path, reflect.ValueOf(m), 1)
	if size := w.size + overhead + itemOverhead; size > maxItemBytes && v.invalid == "" {
		v.tooBig("%s: the item would be about %d bytes, over DynamoDB's 400 KB item limit", path, size)
	}
}

// walker walks one value tree. It stops at its first finding: a value
// nested too deep may be a cycle, which must not be followed.
type walker struct {
	v    *validation
	size int
	done bool
}

func (w *walker) value(path string, x reflect.Value, level int) {
	if w.done || w.v.invalid != "" {
		return
	}
	if level > maxNesting {
		w.v.tooBig("%s: nested %d levels deep, over DynamoDB's %d", path, level, maxNesting)
		w.done = true
		return
	}
	for x.Kind() == reflect.Pointer || x.Kind() == reflect.Interface {
		if x.IsNil() {
			w.size++
			return
		}
		x = x.Elem()
	}
	switch x.Kind() {
	case reflect.Invalid, reflect.Bool:
		w.size++
	case reflect.String:
		if x.Type() == jsonNumberType {
			w.number(path, x.String())
			return
		}
		w.size += x.Len()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		w.number(path, strconv.FormatInt(x.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		w.number(path, strconv.FormatUint(x.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		f := x.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			w.v.tooBig("%s: %v is not a number DynamoDB stores", path, f)
			return
		}
		w.number(path, strconv.FormatFloat(f, 'g', -1, x.Type().Bits()))
	case reflect.Slice, reflect.Array:
		if x.Type().Elem().Kind() == reflect.Uint8 {
			w.size += x.Len() // binary
			return
		}
		w.size += 3 + x.Len()
		for i := 0; i < x.Len(); i++ {
			w.value(path+"["+strconv.Itoa(i)+"]", x.Index(i), level+1)
		}
	case reflect.Map:
		if x.Type().Key().Kind() != reflect.String {
			w.v.bad("%s is a map keyed by %s; keys must be strings", path, x.Type().Key())
			return
		}
		w.size += 3 + x.Len()
		keys := make([]string, 0, x.Len())
		for _, k := range x.MapKeys() {
			keys = append(keys, k.String())
		}
		slices.Sort(keys)
		for _, k := range keys {
			if k == "" {
				w.v.bad("%s has an empty key", path)
				return
			}
			w.size += len(k)
			w.value(path+"."+k, x.MapIndex(reflect.ValueOf(k).Convert(x.Type().Key())), level+1)
		}
	case reflect.Struct:
		if x.Type() == timeType {
			w.size += len(time.RFC3339Nano)
			return
		}
		w.v.bad("%s is a %s; state and payload values are data (maps, slices, strings, numbers, booleans, time.Time)", path, x.Type())
	default: // complex numbers, channels, funcs, unsafe pointers, uintptr
		w.v.bad("%s is a %s, which is not data", path, x.Type())
	}
}

// number checks a decimal number against DynamoDB's precision and range
// and adds its estimated size.
func (w *walker) number(path, n string) {
	digits, exp, ok := decimal(n)
	switch {
	case !ok:
		w.v.tooBig("%s: %q is not a number", path, n)
	case len(digits) > maxNumberDigits:
		w.v.tooBig("%s: %s has %d significant digits, DynamoDB keeps at most %d", path, n, len(digits), maxNumberDigits)
	case digits != "" && exp > maxNumberExponent:
		w.v.tooBig("%s: %s overflows DynamoDB's range (magnitude at most 9.99…E+125)", path, n)
	case digits != "" && exp < minNumberExponent:
		w.v.tooBig("%s: %s underflows DynamoDB's range (magnitude at least 1E-130)", path, n)
	default:
		w.size += 3 + (len(digits)+1)/2
	}
}

// decimal reads [+-]digits[.digits][(e|E)[+-]digits] and returns its
// significant digits ("" for zero) and the power of ten of the first.
func decimal(s string) (digits string, exp int, ok bool) {
	if s != "" && (s[0] == '-' || s[0] == '+') {
		s = s[1:]
	}
	mant, e, hasExp := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	if intPart+frac == "" || !allDigits(intPart) || !allDigits(frac) {
		return "", 0, false
	}
	x := 0
	if hasExp {
		v, err := strconv.Atoi(e)
		if err != nil || len(e) > 12 {
			return "", 0, false
		}
		x = v
	}
	all := intPart + frac
	first := strings.IndexFunc(all, func(r rune) bool { return r != '0' })
	if first < 0 {
		return "", 0, true
	}
	return strings.TrimRight(all[first:], "0"), len(intPart) - 1 - first + x, true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
