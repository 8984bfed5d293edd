package app

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/pkg/projection"
	"github.com/effectively-once/webhooks/pkg/provider"
)

func TestAFunctionThatCannotStartSaysWhy(t *testing.T) {
	none := func(string) string { return "" }
	reg := projection.NewRegistry()
	cases := []struct {
		name  string
		fn    Function
		rules Rules
		want  string
	}{
		{"processor without a registry", Processor, Rules{}, "the processor needs a Registry"},
		{"reconciler without a registry", Reconciler, Rules{}, "the reconciler needs a Registry"},
		{"a Function not made by this package", Function{}, Rules{Registry: reg}, "one of app.Intake"},
		{"intake without its table", Intake, Rules{}, "TABLE_NAME"},
		{"processor without its table", Processor, Rules{Registry: reg}, "TABLE_NAME"},
		{"a nil resolver", Processor, Rules{Registry: reg, Resolvers: map[string]projection.ResolverFactory{"acme": nil}}, `the resolver of kind "acme" is nil`},
		{"a provider kind that is built in", Intake, Rules{Providers: map[string]provider.Constructor{"stripe": func(map[string]string) (provider.Verifier, error) { return nil, nil }}}, "built in"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := build(context.Background(), c.fn, c.rules, none)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one naming %q", err, c.want)
			}
		})
	}
}

func TestATeamsProviderKindIsValidInSources(t *testing.T) {
	c := func(map[string]string) (provider.Verifier, error) { return nil, errors.New("not used") }
	if err := provider.Register("acme-webhooks", c); err != nil {
		t.Fatal(err)
	}
	if err := provider.Register("acme-webhooks", c); err != nil {
		t.Fatalf("the same constructor again: %v", err)
	}
	if err := provider.Register("acme-webhooks", func(map[string]string) (provider.Verifier, error) { return nil, nil }); !errors.Is(err, provider.ErrKindTaken) {
		t.Fatalf("another constructor for a taken kind: %v", err)
	}
	found := false
	for _, k := range provider.Kinds() {
		found = found || k == "acme-webhooks"
	}
	if !found {
		t.Fatalf("kinds %v lack the registered kind", provider.Kinds())
	}
}
