// Package stripefake provides an in-memory, concurrency-safe fake of the
// parts of the Stripe API this project calls, to be served with
// net/http/httptest in tests or as a long-running local server (a *Server
// is a plain http.Handler).
//
// What it serves, as Stripe does:
//
//   - GET /v1/subscriptions/{id}, /v1/invoices/{id}, /v1/payment_intents/{id}:
//     the JSON last given to PutObject, byte for byte; an unknown or deleted
//     id is a 404 with code "resource_missing". (Stripe itself still returns
//     a canceled subscription on retrieve; to model that, put it with
//     status "canceled" instead of deleting it.)
//   - GET /v1/events, newest first (by created, ties by insertion, the
//     later inserted first), with limit (default 10, at most 100),
//     starting_after, ending_before, created and created[gt|gte|lt|lte],
//     delivery_success, type (a trailing ".*" is a wildcard) and types[]
//     (indexed, types[0]=…, as stripe-go sends them, or types[]=…); an
//     unknown parameter is a 400 "parameter_unknown". Each event is the raw
//     JSON given to AddEvent. GET /v1/events/{id} retrieves one.
//   - Authentication: "Authorization: Bearer <key>" or basic auth with the
//     key as user name; anything else is a 401 before any other step.
//   - Errors in Stripe's shape, {"error":{"type":…,"code":…,"message":…}};
//     an unknown path is a 404 "Unrecognized request URL (GET: /v1/…)".
//   - Every answer carries Content-Type: application/json, a Request-Id and
//     a Date header read from Server.Now (so a test controls Stripe's clock).
//
// Failures are scripted per path prefix with Script: rate limiting (429,
// type "invalid_request_error", code "rate_limit", a
// Stripe-Rate-Limited-Reason header and, when asked for, a Retry-After),
// lock timeouts (429, code "lock_timeout"), server errors (5xx,
// "api_error"), any other error, and hangs that last until the client gives
// up or ReleaseHangs is called. Scripted answers are consumed in order, after
// authentication; then normal behaviour resumes.
//
// Requests and Count tell a test what was asked: method, path, query, time
// and the status answered.
//
// Stripe does not document a Retry-After header on its 429s (it documents
// Stripe-Rate-Limited-Reason and asks clients to back off exponentially);
// the fake sends one only when the script asks for it, so clients can be
// tested both ways.
//
// Not modelled: writes (POST/DELETE), expand[], other list endpoints,
// per-endpoint rate limits, livemode, API versions (objects are returned as
// put, whatever Stripe-Version the request carries).
package stripefake
