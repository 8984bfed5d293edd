package ledger

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/pkg/projection"
)

// The ledger's own bounds on what it stores, so a hostile or broken
// delivery cannot grow an item without limit. Keys (ids) that break them
// are refused (validID); free text is cut to them (truncate).
const (
	MaxIDLength        = projection.MaxIDLength
	MaxTypeLength      = 128
	MaxErrorMessageLen = 512
	MaxErrorCodeLen    = 64
	MaxReasonLen       = 512
	// MaxPayloadBytes is the largest raw payload the ledger stores (1 MiB).
	MaxPayloadBytes = 1 << 20
)

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary.
	for n > 0 && (s[n]&0xC0) == 0x80 {
		n--
	}
	return s[:n]
}

// validID refuses, wrapping ErrInvalid, an id that cannot be a key: empty,
// longer than maxLen bytes, not UTF-8, or holding a character a key, an
// SQS message body or a log line must not hold.
func validID(kind, v string, maxLen int) error {
	if v == "" {
		return fmt.Errorf("%w: empty %s", ErrInvalid, kind)
	}
	if len(v) > maxLen {
		return fmt.Errorf("%w: %s longer than %d bytes", ErrInvalid, kind, maxLen)
	}
	if !utf8.ValidString(v) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, kind)
	}
	for _, r := range v {
		if unicode.IsControl(r) || r == 0xFFFE || r == 0xFFFF {
			// SQS message bodies (where an id travels in its pointer) allow
			// #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF;
			// valid UTF-8 has no surrogates; controls (C0, DEL, C1) have no
			// place in keys and log lines either.
			return fmt.Errorf("%w: %s contains control characters or code points SQS refuses (U+%04X)", ErrInvalid, kind, r)
		}
	}
	return nil
}

// CheckEventID returns nil when id can be an event id everywhere one goes:
// a DynamoDB key (at most MaxIDLength bytes of UTF-8), the body of an SQS
// pointer message (no code point SQS refuses: U+FFFE, U+FFFF, C0 controls
// but tab and newlines), and a log line (no control characters at all).
// Otherwise it returns an error wrapping ErrInvalid, as Accept would. The
// id is the sender's input: intake checks it first and keeps a verified
// delivery whose id fails under its ContentID instead.
func CheckEventID(id string) error { return validID("event id", id, MaxIDLength) }

// Bounds on Delivery.Attributes.
const (
	maxAttributes       = 16
	maxAttributeLen     = 256
	maxAttributeNameLen = 64
)

// What DynamoDB refuses to store. Commit checks every item of its
// transaction against these rules before it sends it, so that a value no
// retry can store (a projection copied a 1e200 total from a payload) is a
// permanent failure the processor quarantines, named, at the first
// attempt, instead of a cancelled transaction retried until the event is
// DEAD. The emulators accept all of these; DynamoDB cancels the
// transaction with a ValidationError reason, which classifyCancellation
// also treats as permanent (the rules below are the documented ones, and
// DynamoDB stays the judge).
//
// Sources (Amazon DynamoDB Developer Guide): "Constraints in Amazon
// DynamoDB" (data types, items, attributes, transactions), "Supported data
// types and naming rules", "DynamoDB item sizes and formats".
const (
	// MaxItemBytes is DynamoDB's item size limit (400 KB, binary units),
	// attribute names included.
	MaxItemBytes = 400 << 10
	// MaxNestingLevels is the deepest a value may be nested: a top-level
	// attribute is level 1, each map or list adds one.
	MaxNestingLevels = 32
	// MaxNumberDigits is a number's precision: significant digits, leading
	// and trailing zeros not counted.
	MaxNumberDigits = 38
	// A nonzero number's magnitude is 1E-130 to
	// 9.9999999999999999999999999999999999999E+125: the exponent of its
	// first significant digit lies in [minNumberExponent, maxNumberExponent].
	maxNumberExponent = 125
	minNumberExponent = -130
	// MaxTransactItems and MaxTransactBytes bound one TransactWriteItems:
	// 100 actions, 4 MB of items in all.
	MaxTransactItems = 100
	MaxTransactBytes = 4 << 20
)

// CodeUnstorable is the error code an event is quarantined with when what
// its projection computed cannot be stored (UnstorableError).
const CodeUnstorable = "value_unstorable"

// UnstorableError says which value of which item DynamoDB would refuse (or
// refused), and by which rule. It wraps ErrInvalid: no retry can store it.
type UnstorableError struct {
	Item string // "projection orders/order/O-42", "intent <operation id>", "transaction item 3"
	Path string // the attribute: "state.total", "payload.lines[2].qty"; "" for a whole item
	Rule string // the rule it breaks, or DynamoDB's own reason
}

func (e *UnstorableError) Error() string {
	s := "value DynamoDB cannot store: " + e.Item
	if e.Path != "" {
		s += " attribute " + e.Path
	}
	return s + ": " + e.Rule
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *UnstorableError) Unwrap() error { return ErrInvalid }

// checkTransaction checks every write of a transaction: each Put's whole
// item (values, nesting, size), each Update's values (values and nesting;
// the item it changes is not known here), the number of writes and their
// total size.
func checkTransaction(items []types.TransactWriteItem) error {
	if len(items) > MaxTransactItems {
		return &UnstorableError{Item: "the transaction", Rule: fmt.Sprintf("%d writes, over DynamoDB's %d per transaction", len(items), MaxTransactItems)}
	}
	total := 0
	for _, it := range items {
		switch {
		case it.Put != nil:
			n, err := checkItem(transactItemName(it), it.Put.Item)
			if err != nil {
				return err
			}
			total += n
		case it.Update != nil:
			name := transactItemName(it)
			for _, k := range sortedKeys(it.Update.ExpressionAttributeValues) {
				v := it.Update.ExpressionAttributeValues[k]
				var w walk
				if err := w.value(name, k, v, 1); err != nil {
					return err
				}
				total += w.size
			}
		}
	}
	if total > MaxTransactBytes {
		return &UnstorableError{Item: "the transaction", Rule: fmt.Sprintf("about %d bytes of items, over DynamoDB's 4 MB per transaction", total)}
	}
	return nil
}

// checkItem checks one whole item and returns its estimated size.
func checkItem(name string, item map[string]types.AttributeValue) (int, error) {
	var w walk
	for _, k := range sortedKeys(item) {
		if k == "" {
			return 0, &UnstorableError{Item: name, Rule: "an attribute with an empty name"}
		}
		if err := w.value(name, k, item[k], 1); err != nil {
			return 0, err
		}
		w.size += len(k)
	}
	if w.size > MaxItemBytes {
		return 0, &UnstorableError{Item: name, Path: w.largest, Rule: fmt.Sprintf(
			"the item would be about %d bytes (%d of them this value), over DynamoDB's 400 KB item limit", w.size, w.largestSize)}
	}
	return w.size, nil
}

// walk checks values and adds up their sizes, by the guide's rules
// ("DynamoDB item sizes and formats"), rounded up: a string or binary
// counts its bytes, a number 1 byte per two significant digits plus 1 (we
// add 1 more, and 1 for a sign), a boolean or null 1 byte, a map or list 3
// bytes plus 1 per element plus its elements (and a map's keys), a set its
// elements plus 1 each.
type walk struct {
	size        int
	largest     string // the path of the largest scalar seen
	largestSize int
}

func (w *walk) scalar(path string, n int) {
	w.size += n
	if n > w.largestSize {
		w.largest, w.largestSize = path, n
	}
}

func (w *walk) value(item, path string, v types.AttributeValue, level int) error {
	bad := func(rule string) error { return &UnstorableError{Item: item, Path: shortPath(path), Rule: rule} }
	if level > MaxNestingLevels {
		return bad(fmt.Sprintf("nested %d levels deep, over DynamoDB's %d", level, MaxNestingLevels))
	}
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		w.scalar(path, len(x.Value))
	case *types.AttributeValueMemberB:
		w.scalar(path, len(x.Value))
	case *types.AttributeValueMemberN:
		n, rule := numberSize(x.Value)
		if rule != "" {
			return bad(rule)
		}
		w.scalar(path, n)
	case *types.AttributeValueMemberBOOL:
		w.scalar(path, 1)
	case *types.AttributeValueMemberNULL:
		if !x.Value {
			return bad("a NULL value must be true")
		}
		w.scalar(path, 1)
	case *types.AttributeValueMemberSS:
		if len(x.Value) == 0 {
			return bad("an empty set")
		}
		n := 0
		for _, s := range x.Value {
			n += len(s) + 1
		}
		w.scalar(path, n)
	case *types.AttributeValueMemberBS:
		if len(x.Value) == 0 {
			return bad("an empty set")
		}
		n := 0
		for _, b := range x.Value {
			n += len(b) + 1
		}
		w.scalar(path, n)
	case *types.AttributeValueMemberNS:
		if len(x.Value) == 0 {
			return bad("an empty set")
		}
		n := 0
		for _, s := range x.Value {
			m, rule := numberSize(s)
			if rule != "" {
				return bad(rule)
			}
			n += m + 1
		}
		w.scalar(path, n)
	case *types.AttributeValueMemberL:
		w.size += 3 + len(x.Value)
		for i, e := range x.Value {
			if err := w.value(item, path+"["+strconv.Itoa(i)+"]", e, level+1); err != nil {
				return err
			}
		}
	case *types.AttributeValueMemberM:
		w.size += 3 + len(x.Value)
		for _, k := range sortedKeys(x.Value) {
			w.size += len(k)
			if err := w.value(item, path+"."+k, x.Value[k], level+1); err != nil {
				return err
			}
		}
	case nil:
		return bad("no value")
	default:
		return bad(fmt.Sprintf("a value of type %T", v))
	}
	return nil
}

// numberSize returns the estimated stored size of a DynamoDB number
// (decimal text, optional sign, fraction and exponent), or the rule it
// breaks.
func numberSize(n string) (int, string) {
	digits, exp, neg, ok := parseDecimal(n)
	if !ok {
		return 0, fmt.Sprintf("%q is not a number", clip(n))
	}
	if digits == "" {
		return 2, "" // zero
	}
	switch {
	case len(digits) > MaxNumberDigits:
		return 0, fmt.Sprintf("number %s has %d significant digits, DynamoDB keeps at most %d", sci(digits, exp, neg), len(digits), MaxNumberDigits)
	case exp > maxNumberExponent:
		return 0, fmt.Sprintf("number %s overflows DynamoDB's range (magnitude at most 9.9999999999999999999999999999999999999E+125)", sci(digits, exp, neg))
	case exp < minNumberExponent:
		return 0, fmt.Sprintf("number %s underflows DynamoDB's range (magnitude at least 1E-130)", sci(digits, exp, neg))
	}
	size := 2 + (len(digits)+1)/2
	if neg {
		size++
	}
	return size, ""
}

// parseDecimal reads [+-]digits[.digits][(e|E)[+-]digits]. digits are the
// significant digits (no leading or trailing zeros; "" for zero) and exp
// the power of ten of the first of them.
func parseDecimal(s string) (digits string, exp int, neg, ok bool) {
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg, s = s[0] == '-', s[1:]
	}
	mant, e, hasExp := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	if intPart+frac == "" || !allDigits(intPart) || !allDigits(frac) {
		return "", 0, false, false
	}
	x := 0
	if hasExp {
		if len(e) > 12 {
			return "", 0, false, false
		}
		v, err := strconv.Atoi(e)
		if err != nil {
			return "", 0, false, false
		}
		x = v
	}
	all := intPart + frac
	first := strings.IndexFunc(all, func(r rune) bool { return r != '0' })
	if first < 0 {
		return "", 0, neg, true
	}
	digits = strings.TrimRight(all[first:], "0")
	return digits, len(intPart) - 1 - first + x, neg, true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// sci renders a number short: 1E+200, -1.2345678901234567890…E-140.
func sci(digits string, exp int, neg bool) string {
	s := digits[:1]
	if len(digits) > 1 {
		rest := digits[1:]
		if len(rest) > 20 {
			rest = rest[:20] + "…"
		}
		s += "." + rest
	}
	if neg {
		s = "-" + s
	}
	return fmt.Sprintf("%sE%+d", s, exp)
}

func clip(s string) string {
	if len(s) > 40 {
		return truncate(s, 40) + "…"
	}
	return s
}

// shortPath keeps an error's attribute path readable: a path nested 33
// levels deep is cut in the middle.
func shortPath(p string) string {
	const max = 160
	if len(p) <= max {
		return p
	}
	tail := len(p) - max/2
	for tail < len(p) && p[tail]&0xC0 == 0x80 {
		tail++ // start on a rune boundary
	}
	return truncate(p, max/2) + "…" + p[tail:]
}

// transactItemName names the item a transaction's write concerns.
func transactItemName(it types.TransactWriteItem) string {
	switch {
	case it.Put != nil:
		return itemName(it.Put.Item)
	case it.Update != nil:
		return itemName(it.Update.Key)
	case it.Delete != nil:
		return itemName(it.Delete.Key)
	case it.ConditionCheck != nil:
		return itemName(it.ConditionCheck.Key)
	}
	return "an empty write"
}

// itemName names an item by its key: "event <source>/<id>", "projection
// <name>/<subject>", "intent <operation id>", else the raw partition key.
func itemName(key map[string]types.AttributeValue) string {
	pk, _ := key[attrPK].(*types.AttributeValueMemberS)
	if pk == nil {
		return "an item without a key"
	}
	for prefix, kind := range map[string]string{pkEvent: "event ", pkProjection: "projection ", pkIntent: "intent "} {
		if rest, ok := strings.CutPrefix(pk.Value, prefix); ok {
			if kind != "intent " {
				// <source>#<id> or <name>#<subject>: the first # separates.
				if a, b, ok := strings.Cut(rest, "#"); ok {
					rest = a + "/" + b
				}
			}
			return kind + rest
		}
	}
	return "item " + pk.Value
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
