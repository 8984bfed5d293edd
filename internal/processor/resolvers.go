package processor

import (
	"context"
	"fmt"

	"github.com/effectively-once/webhooks/internal/source"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// BuildResolvers builds the resolver of every source whose kind has a
// factory (app.Rules.Resolvers), for Options.Resolvers. A factory is
// given its source's name, kind and api settings, secret (which reads a
// secret reference; the processor passes its cached secret store) and
// whether the registry reads an event type of the kind. A source that
// configures an api when its kind has no resolver is an error: nothing
// would read it, and its thin events would be projected as delivered.
func BuildResolvers(set *source.Set, reg *projection.Registry, factories map[string]projection.ResolverFactory, secret func(ctx context.Context, ref string) (string, error)) (map[string]projection.Resolver, error) {
	out := map[string]projection.Resolver{}
	for _, name := range set.Names() {
		src, _ := set.Lookup(name)
		factory := factories[src.Kind]
		if factory == nil {
			if src.API != nil {
				return nil, fmt.Errorf("source %s configures an api, but no resolver is registered for kind %s (app.Rules.Resolvers; builtin.Resolvers has Stripe's)", name, src.Kind)
			}
			continue
		}
		rs := projection.ResolverSource{Name: name, Kind: src.Kind, Secret: secret, Reads: reads(reg, src.Kind)}
		if src.API != nil {
			rs.API = &projection.SourceAPI{Secret: src.API.Secret, URL: src.API.URL, Timeout: src.API.Timeout()}
		}
		r, err := factory(rs)
		if err != nil {
			return nil, fmt.Errorf("source %s: resolver: %w", name, err)
		}
		if r != nil {
			out[name] = r
		}
	}
	return out, nil
}

// reads reports whether reg has a projection for an event type of kind.
func reads(reg *projection.Registry, kind string) func(string) bool {
	return func(eventType string) bool {
		_, ok := reg.Lookup(kind, eventType)
		return ok
	}
}
