package projection

import "strings"

// Ownership (I8; see docs/architecture.md): the business state a source
// writes belongs to its scope (source.Source.Scope: its domain, else its
// name). Projections stay pure and scope-blind; the processor scopes their
// result before the commit, so two scopes never write the same projection
// item, subject cursor or intent.

// ScopedName is the ledger name of projection name in scope:
// "<scope>/<name>" ("orders/order"); name itself when scope is empty (an
// unscoped source, whose keys carry no scope). Scopes and built-in
// projection names never contain "/", so the two forms cannot collide.
func ScopedName(scope, name string) string {
	if scope == "" {
		return name
	}
	return scope + "/" + name
}

// ScopedOperationID is the operation id of intent op in scope: a hash of
// both, so a source of another scope can never take (or pre-empt) an
// intent's id; op itself when scope is empty.
func ScopedOperationID(scope, op string) string {
	if scope == "" {
		return op
	}
	return OperationID("scope", scope, op)
}

// Scoped returns r owned by scope: its write's projection name and its
// intents' operation ids scoped (compensation ids follow, being derived
// from them). r is not modified.
func Scoped(scope string, r Result) Result {
	if scope == "" {
		return r
	}
	out := Result{}
	if r.Write != nil {
		w := *r.Write
		w.Name = ScopedName(scope, w.Name)
		out.Write = &w
	}
	for _, in := range r.Intents {
		in.OperationID = ScopedOperationID(scope, in.OperationID)
		out.Intents = append(out.Intents, in)
	}
	return out
}

// SplitScoped splits a ledger projection name into its scope and the
// projection's own name ("orders/order" → "orders", "order"); a name
// without a scope has an empty one.
func SplitScoped(name string) (scope, base string) {
	if i := strings.IndexByte(name, '/'); i > 0 {
		return name[:i], name[i+1:]
	}
	return "", name
}
