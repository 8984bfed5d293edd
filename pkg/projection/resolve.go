package projection

import (
	"context"
	"errors"
	"time"
)

// A Resolver turns an event that names its object without carrying its
// state (a Stripe thin event, an "order.changed" ping) into the event the
// projections read, by fetching the object's current state.
//
// The processor calls the resolver of the event's source for every event
// of that source, after it claims the event and before it looks up the
// projection; the projection registered for (kind, Resolved.Type) then
// reads Resolved.Payload. The fetch runs there, never in the intake, and
// a fetch that fails is retried or quarantined like a projection's error:
//
//   - ErrNothingToResolve (or an error wrapping it): not this resolver's
//     business (a snapshot event, a type no projection reads); the event
//     is projected as delivered;
//   - a Permanent error (the object does not exist, the event names an
//     object of the wrong type): the event is QUARANTINED with its code;
//   - a Retryable or RetryAfter error (the API is down, rate limited, the
//     key refused): the event waits in RETRY_WAIT, at least After, and is
//     DEAD once its attempts are exhausted;
//   - any other error: retried, with code "resolve_failed".
//
// A panic in Resolve is the resolver's bug: the event is QUARANTINED with
// CodeResolverPanic.
//
// Fetched state is the object's state when it was read, not when the
// event happened: a resolver versions what it returns by the time of the
// read (the provider's clock when it says, as a Date header does), so a
// later fetch always wins and the projection converges to the provider's
// state once the events stop. Resolvers are built per source by a
// ResolverFactory, registered by provider kind.
type Resolver interface {
	Resolve(ctx context.Context, ev Event) (Resolved, error)
}

// Resolved is what the projections read in place of the delivered event.
// Its source, kind and id stay the delivered event's.
type Resolved struct {
	// Type is the event type of the object's current state: the processor
	// looks up the projection for (kind, Type). "" means the object is in
	// a state no projection models: the event is processed as ignored.
	Type string
	// Payload is what that projection reads, for example a snapshot
	// event built around the fetched object.
	Payload []byte
	// Note is added to the event's completion audit: where the state came
	// from ("fetched from Stripe at 2026-11-30T12:00:00Z").
	Note string
}

// ErrNothingToResolve is what a Resolver returns for an event it has
// nothing to do with: the event is projected as delivered.
var ErrNothingToResolve = errors.New("projection: nothing to resolve")

// CodeResolverPanic is the code an event is quarantined with when its
// source's resolver panicked.
const CodeResolverPanic = "resolver_panic"

// RetryableError marks a failure worth retrying later: a provider API
// that is down, rate limited, or refusing the key until an operator
// fixes it. Code is a short stable identifier recorded with the event
// while it waits ("stripe_api_unavailable"); After, when positive, is the
// least wait before the next attempt (a server's Retry-After; the
// pipeline's own backoff applies too, capped by its retry cap).
type RetryableError struct {
	Code  string
	After time.Duration
	Err   error
}

func (e *RetryableError) Error() string { return e.Code + ": " + e.Err.Error() }
func (e *RetryableError) Unwrap() error { return e.Err }

// Retryable wraps err as a retryable failure with a code.
func Retryable(code string, err error) error { return &RetryableError{Code: code, Err: err} }

// RetryAfter wraps err as a retryable failure with a code, to be tried
// again no sooner than after (zero or less: the pipeline's backoff alone).
func RetryAfter(code string, err error, after time.Duration) error {
	return &RetryableError{Code: code, After: max(after, 0), Err: err}
}

// AsRetryable reports whether err is marked retryable, with its code and
// least wait.
func AsRetryable(err error) (code string, after time.Duration, ok bool) {
	var r *RetryableError
	if errors.As(err, &r) {
		return r.Code, r.After, true
	}
	return "", 0, false
}

// A ResolverFactory builds the resolver of one configured source. The
// pipeline calls it once per source of the kind it is registered for
// (app.Rules.Resolvers), when the processor starts; an error stops the
// processor from starting, naming the source. A nil Resolver means the
// source needs none: its events are projected as delivered.
type ResolverFactory func(src ResolverSource) (Resolver, error)

// ResolverSource is what a resolver is built from: one source of the
// SOURCES configuration, with the means to read its credentials.
type ResolverSource struct {
	Name string // the source's name ("stripe", "shop-eu")
	Kind string // its provider kind
	// API is the source's "api" settings (the provider API its objects
	// are fetched from), nil when it configures none.
	API *SourceAPI
	// Secret reads a secret reference (API.Secret: "env:NAME", a Secrets
	// Manager ARN) through the pipeline's cached secret store. Call it
	// for each fetch, not once at build time, so a rotated key is picked
	// up.
	Secret func(ctx context.Context, ref string) (string, error)
	// Reads reports whether a projection is registered for an event type
	// of this kind, so a resolver need not fetch an object no projection
	// would read. nil: every type is read.
	Reads func(eventType string) bool
}

// SourceAPI is a source's "api" settings.
//
//	{"secret":"arn:…"}                                   the provider's API, a read-only key
//	{"secret":"env:KEY","url":"http://127.0.0.1:3003"}   a local fake
type SourceAPI struct {
	Secret  string        // a reference to the API key; read it with ResolverSource.Secret
	URL     string        // another API base (tests, a local fake); "" means the provider's own
	Timeout time.Duration // bounds each request (default 5 s)
}
