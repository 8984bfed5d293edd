package app_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/app/intake"
	"github.com/effectively-once/webhooks/pkg/app/processor"
	"github.com/effectively-once/webhooks/pkg/app/reconciler"
	"github.com/effectively-once/webhooks/pkg/projection"
	"github.com/effectively-once/webhooks/pkg/provider"
)

func TestAFunctionThatCannotStartSaysWhy(t *testing.T) {
	reg := projection.NewRegistry()
	cases := []struct {
		name  string
		fn    app.Function
		rules app.Rules
		want  string
	}{
		{"processor without a registry", processor.Function, app.Rules{}, "the processor needs a Registry"},
		{"reconciler without a registry", reconciler.Function, app.Rules{}, "the reconciler needs a Registry"},
		{"a Function none of the function packages made", app.Function{}, app.Rules{Registry: reg}, "one of intake.Function"},
		{"intake without its table", intake.Function, app.Rules{}, "TABLE_NAME"},
		{"processor without its table", processor.Function, app.Rules{Registry: reg}, "TABLE_NAME"},
		{"a nil resolver", processor.Function, app.Rules{Registry: reg, Resolvers: map[string]projection.ResolverFactory{"acme": nil}}, `the resolver of kind "acme" is nil`},
		{"a provider kind that is built in", intake.Function, app.Rules{Providers: map[string]provider.Constructor{"stripe": func(map[string]string) (provider.Verifier, error) { return nil, nil }}}, "built in"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, v := range []string{"TABLE_NAME", "EVENTS_QUEUE_URL", "SOURCES", "SOURCES_FILE"} {
				t.Setenv(v, "")
			}
			err := app.Run(c.fn, c.rules)
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
