package source_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/internal/source"
)

// Business state has an owner. By default a source owns its
// subjects (scope = its name); a domain is explicit, and two sources of
// one kind in one domain (or both unscoped) must each say so.
func TestOwnershipValidation(t *testing.T) {
	sw := func(name, extra string) string {
		return `{"name":"` + name + `","kind":"standard-webhooks","secrets":["env:S_` + name + `"]` + extra + `}`
	}
	doc := func(srcs ...string) []byte { return []byte(`{"sources":[` + strings.Join(srcs, ",") + `]}`) }
	for _, tc := range []struct {
		name, want string
		doc        []byte
		scopes     map[string]string
	}{
		{name: "two sources, own scopes", doc: doc(sw("orders", ""), sw("vendor", "")), scopes: map[string]string{"orders": "orders", "vendor": "vendor"}},
		{name: "one domain, different kinds", doc: doc(sw("orders", `,"domain":"shop"`), `{"name":"gh","kind":"github","secrets":["env:G"],"domain":"shop"}`),
			scopes: map[string]string{"orders": "shop", "gh": "shop"}},
		{name: "one domain, same kind, unmarked", doc: doc(sw("orders", `,"domain":"shop"`), sw("vendor", `,"domain":"shop"`)),
			want: `sources orders, vendor (all kind standard-webhooks) write the same subjects (domain "shop")`},
		{name: "one domain, same kind, one marked", doc: doc(sw("orders", `,"domain":"shop","shared_domain":true`), sw("vendor", `,"domain":"shop"`)),
			want: "missing on vendor"},
		{name: "one domain, same kind, both marked", doc: doc(sw("orders", `,"domain":"shop","shared_domain":true`), sw("vendor", `,"domain":"shop","shared_domain":true`)),
			scopes: map[string]string{"orders": "shop", "vendor": "shop"}},
		{name: "a domain named like another source", doc: doc(sw("orders", ""), sw("vendor", `,"domain":"orders"`)),
			want: `write the same subjects (domain "orders")`},
		{name: "two unscoped", doc: doc(sw("orders", `,"unscoped":true`), sw("vendor", `,"unscoped":true`)), want: "(the unscoped keys)"},
		{name: "unscoped and a domain", doc: doc(sw("orders", `,"unscoped":true,"domain":"shop"`)), want: "either unscoped"},
		{name: "bad domain", doc: doc(sw("orders", `,"domain":"Shop#1"`)), want: "domain must match"},
		{name: "one unscoped", doc: doc(sw("orders", `,"unscoped":true`)), scopes: map[string]string{"orders": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set, err := source.Parse(tc.doc)
			if tc.want != "" {
				if !errors.Is(err, source.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for name, scope := range tc.scopes {
				if s, _ := set.Lookup(name); s.Scope() != scope {
					t.Fatalf("%s scope %q, want %q", name, s.Scope(), scope)
				}
			}
		})
	}
}
