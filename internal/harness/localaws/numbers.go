package localaws

import (
	"encoding/json"
	"regexp"
	"strconv"

	"github.com/truora/minidyn/types"
)

// minidyn evaluates every update through its expression interpreter, whose
// numbers are float64, and writes each number of the item back from that
// float64: an integer above 2^53 comes back rounded, written as an update
// or merely kept (1152921511792670487 becomes 1152921511792670500).
// DynamoDB keeps numbers exact to 38 digits. So after each successful
// write (runScratch) every integer of the items it produced that a
// float64 rounded is given back its exact text: the text the request sent
// for it, or the text the item held before. Which one is told by the
// float64: in an attribute the update's expression names, the request's
// texts and the text at the same place in the item before, in that order,
// whose float64 equals the stored one; in any other attribute (the update
// left it as it was), the text before only. A float64 that two different
// texts of the request share is ambiguous and left as minidyn wrote it. Only integers are restored (DynamoDB answers
// a decimal in its own normal form, which minidyn's matches closely
// enough for the ledger, which stores integers only).

var integerRE = regexp.MustCompile(`^-?[0-9]+$`)

// exactNumbers returns the integer texts a write request carries (items,
// keys, expression values, at any depth and in every part of a
// transaction) that a float64 cannot hold, by their float64.
func exactNumbers(body []byte) map[float64]string {
	var doc any
	if json.Unmarshal(body, &doc) != nil {
		return nil
	}
	out := map[float64]string{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if n, ok := x["N"].(string); ok && len(x) == 1 {
				addExact(out, n)
				return
			}
			if ns, ok := x["NS"].([]any); ok && len(x) == 1 {
				for _, e := range ns {
					if n, ok := e.(string); ok {
						addExact(out, n)
					}
				}
				return
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(doc)
	return out
}

// addExact records n when it is an integer a float64 rounds; a float64
// two texts share is marked ambiguous ("").
func addExact(out map[float64]string, n string) {
	f, ok := rounded(n)
	if !ok {
		return
	}
	if have, seen := out[f]; seen && have != n {
		out[f] = ""
		return
	}
	out[f] = n
}

// rounded returns n's float64 when n is an integer text that the float64
// does not print back as n.
func rounded(n string) (float64, bool) {
	if !integerRE.MatchString(n) {
		return 0, false
	}
	f, err := strconv.ParseFloat(n, 64)
	if err != nil || strconv.FormatFloat(f, 'f', -1, 64) == n {
		return 0, false
	}
	return f, true
}

// restoreNumbers gives the numbers of item, as a write produced it, their
// exact text (see above); before is the item as it was (nil: none), named
// the attributes the update's expression names (nil: not an update, the
// request holds the whole item).
func restoreNumbers(item, before map[string]*types.Item, exact map[float64]string, named map[string]bool) {
	for k, v := range item {
		ex := exact
		if named != nil && !named[k] {
			ex = nil
		}
		restoreValue(v, before[k], ex)
	}
}

var identRE = regexp.MustCompile(`#?[A-Za-z_][A-Za-z0-9_]*`)

// namedAttrs are the identifiers of an update expression, placeholders
// resolved: a superset of the top-level attributes it writes (keywords
// and function names included, which name no attribute the item holds
// or are harmless when they do).
func namedAttrs(expr string, names map[string]string) map[string]bool {
	out := map[string]bool{}
	for _, id := range identRE.FindAllString(expr, -1) {
		if n, ok := names[id]; ok {
			id = n
		}
		out[id] = true
	}
	return out
}

func restoreValue(v, before *types.Item, exact map[float64]string) {
	if v == nil {
		return
	}
	switch {
	case v.N != nil:
		if s, ok := exactText(*v.N, before, exact); ok {
			v.N = &s
		}
	case len(v.NS) > 0:
		for i, n := range v.NS {
			if n == nil {
				continue
			}
			if s, ok := exactText(*n, nil, exact); ok {
				v.NS[i] = &s
			}
		}
	case v.M != nil:
		for k, e := range v.M {
			var b *types.Item
			if before != nil {
				b = before.M[k]
			}
			restoreValue(e, b, exact)
		}
	case v.L != nil:
		for i, e := range v.L {
			var b *types.Item
			if before != nil && i < len(before.L) {
				b = before.L[i]
			}
			restoreValue(e, b, exact)
		}
	}
}

// exactText is the exact text of the stored number n, if it is one that
// a float64 rounded: the request's, else the one before holds.
func exactText(n string, before *types.Item, exact map[float64]string) (string, bool) {
	f, err := strconv.ParseFloat(n, 64)
	if err != nil || !integerRE.MatchString(n) {
		return "", false
	}
	if s, ok := exact[f]; ok {
		return s, s != ""
	}
	if before != nil && before.N != nil {
		if bf, ok := rounded(*before.N); ok && bf == f {
			return *before.N, true
		}
	}
	return "", false
}
