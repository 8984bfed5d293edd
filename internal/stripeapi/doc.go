// Package stripeapi provides the Stripe API client the processor uses to
// fetch the object a Stripe thin event points at: a thin event carries only
// related_object {id, type, url}, so its state has to be read from Stripe.
//
// Client.Retrieve asks GET /v1/{collection}/{id} for the three object types
// we project (subscription, invoice, payment_intent) and returns the body
// exactly as Stripe sent it, with Stripe's own clock (the Date header) as
// the time it was observed. The path is derived from the type and a
// validated id only: the event's related_object.url is never followed, and
// the backend from NewBackend refuses redirects, so a signed payload cannot
// choose where our API key is sent.
//
// Every failure maps to one of five sentinels, decided here and nowhere
// further in (the stripe-go error types do not leave this package):
//
//	ErrNotFound     404                                    permanent
//	ErrUnsupported  an object type we do not fetch          permanent
//	ErrInvalid      a bad id, another 4xx, a body that is   permanent
//	                not the JSON object asked for
//	ErrAuth         401, 403, no key configured             the key's problem, not the event's
//	ErrUnavailable  429, 409, 5xx, timeout, cancellation,    transient
//	                network, the key source failing
//
// ErrAuth is kept apart because it is neither: a revoked or under-privileged
// key fails every event until an operator fixes it, so a caller should
// retry (and let attempts run out into DEAD, visible) rather than
// quarantine good events. A key source that fails (Secrets Manager
// throttled or down) is ErrUnavailable and also wraps the source's error.
//
// RetryAfter reports the Retry-After of a 429 (or 503) when the server sent
// one. Stripe documents none (its 429s carry Stripe-Rate-Limited-Reason and
// it asks for exponential backoff), so a caller must have its own backoff
// and use RetryAfter only as a floor. stripe-go needs no help to expose it:
// for an API error it returns a *stripe.Error whose embedded
// APIResource.LastResponse holds the response headers (ResponseToError sets
// it), so no RoundTripper is needed.
//
// The backend does not retry on its own (MaxNetworkRetries 0): the ledger's
// RETRY_WAIT is the retry, and a retry inside the call would multiply load
// on a rate-limited account. Errors carry the type, id, HTTP status, Stripe
// error code and request id, never the API key.
//
// stripe-go v82.5.1 sends Stripe-Version 2025-08-27.basil, and Stripe
// renders the object in the requested version, which need not be the
// webhook endpoint's version (the one snapshot events are rendered in).
// Client.APIVersion pins another one.
package stripeapi
