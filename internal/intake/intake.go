// Package intake provides the webhook intake: verify the raw bytes, record
// the event in the ledger, enqueue a pointer, and answer with the status code
// that tells the provider whether to retry (see docs/providers.md).
//
// The core (Handler.Handle) takes plain Go values; HandleHTTPAPI adapts it to
// API Gateway HTTP API (payload format 2.0) events. HandleEventBridge is the
// second path, for providers that deliver to an Amazon EventBridge partner
// event bus (no signature; see eventbridge.go); both paths record and
// enqueue through the same step (Handler.accept).
package intake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/metrics"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/source"
	"github.com/effectively-once/webhooks/pkg/provider"
)

// Request is one delivery: the {source} path parameter, lower-cased headers
// and the raw body bytes (already base64-decoded if the gateway encoded them).
type Request struct {
	Source    string
	Headers   map[string]string
	Body      []byte
	RequestID string
}

// Response is the HTTP answer. Body is JSON and never echoes internal errors.
type Response struct {
	Status int
	Body   []byte
}

// Ledger is what intake needs from the ledger.
type Ledger interface {
	Accept(ctx context.Context, d ledger.Delivery) (ledger.Accepted, error)
	ClaimBody(ctx context.Context, source, hash, eventID string) (string, error)
}

// Queue is what intake needs from the events queue.
type Queue interface {
	Send(ctx context.Context, p queue.Pointer) error
}

// SecretSource resolves a source's active secrets.
type SecretSource interface {
	For(ctx context.Context, src source.Source, fresh bool) ([]string, error)
}

var (
	_ Ledger       = (*ledger.Ledger)(nil)
	_ Queue        = queue.Sender{}
	_ SecretSource = (*source.Secrets)(nil)
)

// Handler is the intake core.
type Handler struct {
	Sources *source.Set
	Secrets SecretSource
	Ledger  Ledger
	Queue   Queue
	Now     func() time.Time // default time.Now
	Log     *slog.Logger     // default slog.Default()
	// Metrics receives one EMF record per request (nil: none).
	Metrics *metrics.Emitter
	// DLQSenders are who may write the bridge DLQ (SweepEventBridgeDLQ):
	// the bridge function's role. Only the sweep reads it.
	DLQSenders queue.Senders

	verifiers sync.Map // source name → provider.Verifier, built once per source
}

// verifier returns the source's verifier, built from its options on first
// use (the options were validated when the configuration was parsed).
func (h *Handler) verifier(src source.Source) (provider.Verifier, error) {
	if v, ok := h.verifiers.Load(src.Name); ok {
		return v.(provider.Verifier), nil
	}
	v, err := provider.New(src.Kind, src.Options)
	if err != nil {
		return nil, err
	}
	actual, _ := h.verifiers.LoadOrStore(src.Name, v)
	return actual.(provider.Verifier), nil
}

func (h *Handler) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

func (h *Handler) log() *slog.Logger {
	if h.Log != nil {
		return h.Log
	}
	return slog.Default()
}

func reply(status int, body map[string]any) Response {
	b, _ := json.Marshal(body)
	return Response{Status: status, Body: b}
}

// tally counts what one request did, for its metrics record.
type tally struct{ accepted, duplicates, conflicts, replays, displaced, connect int }

// quarantineConnect is the error code of an event of a connected account
// the source does not accept (source.Source.Connect).
const quarantineConnect = "connect_account_not_allowed"

// Handle processes one delivery. It never panics on input and never returns
// a 2xx before the ledger write succeeded. It emits one metrics record:
// Received, Accepted (new events), Duplicates, Conflicts (a known id with
// other bytes), SuspectedReplays (a known body under a new unsigned id),
// ReplaysDisplaced (an event whose own bytes displaced a suspected replay
// that held its id; also counted as Accepted), ConnectRefused (events of a
// connected account the source does not accept, kept quarantined),
// Rejected (4xx) and IntakeLatencyMs, with source, status and request id
// as properties.
func (h *Handler) Handle(ctx context.Context, req Request) Response {
	start := h.now()
	var t tally
	resp := h.handle(ctx, req, &t)
	rejected := 0
	if resp.Status >= 400 && resp.Status < 500 {
		rejected = 1
	}
	h.Metrics.Emit(map[string]any{"function": "intake", "source": req.Source, "status": resp.Status, "request_id": req.RequestID},
		metrics.N("Received", 1), metrics.N("Accepted", t.accepted), metrics.N("Duplicates", t.duplicates),
		metrics.N("Conflicts", t.conflicts), metrics.N("SuspectedReplays", t.replays), metrics.N("ReplaysDisplaced", t.displaced),
		metrics.N("ConnectRefused", t.connect),
		metrics.N("Rejected", rejected), metrics.Latency("IntakeLatencyMs", h.now().Sub(start)))
	return resp
}

// handle is the request path: verify the raw bytes, keep a delivery
// without a usable identity quarantined, otherwise accept (and enqueue)
// each event, confirm when the provider asks for it, and answer.
func (h *Handler) handle(ctx context.Context, req Request, t *tally) Response {
	log := h.log().With("source", req.Source, "request_id", req.RequestID)
	src, verified, refused, ok := h.verifyRequest(ctx, log, req)
	if !ok {
		return refused
	}
	if reason, attrs := identityProblem(verified, req.Body); reason != "" {
		return h.keepUnidentified(ctx, log, unidentifiedDelivery(src.Name, verified, req.Body, attrs), reason)
	}
	status := http.StatusOK
	results := make([]map[string]any, 0, len(verified.Events))
	for _, ident := range verified.Events {
		res, err := h.accept(ctx, log, src, ident, req.Body, t)
		if err != nil {
			return h.acceptFailed(log, ident.EventID, err)
		}
		answer, st := eventAnswer(ident.EventID, res)
		status = max(status, st)
		results = append(results, answer)
	}
	if verified.Confirm != nil {
		// Recorded first, acted on second: a failed confirmation gets a 5xx
		// so the sender retries, and the retry finds the row already there.
		if err := verified.Confirm(ctx); err != nil {
			log.Error("confirmation failed after the delivery was recorded", "status", 502, "err", err)
			return reply(http.StatusBadGateway, map[string]any{"error": "confirmation failed"})
		}
		log.Info("confirmed", "events", len(results))
	}
	return eventsReply(status, results)
}

// verifyRequest finds the source, checks the body's size and verifies the
// signature on the raw bytes (reloading the secrets once on a bad
// signature, in case they were just rotated). ok is false when the request
// goes no further; refused is then its answer.
func (h *Handler) verifyRequest(ctx context.Context, log *slog.Logger, req Request) (src source.Source, verified provider.Verified, refused Response, ok bool) {
	src, ok = h.Sources.Lookup(req.Source)
	if !ok || !src.HTTPS() {
		// A source whose delivery is eventbridge only has no webhook URL
		// (and perhaps no secret): to HTTPS it does not exist.
		log.Warn("unknown source", "status", 404, "eventbridge_only", ok)
		return src, verified, reply(http.StatusNotFound, map[string]any{"error": "unknown source"}), false
	}
	if len(req.Body) > src.BodyLimit() {
		log.Warn("body too large", "status", 413, "bytes", len(req.Body), "limit", src.BodyLimit())
		return src, verified, reply(http.StatusRequestEntityTooLarge, map[string]any{"error": "body too large", "limit_bytes": src.BodyLimit()}), false
	}
	verifier, err := h.verifier(src)
	if err != nil {
		log.Error("source has an unknown provider kind", "kind", src.Kind)
		return src, verified, reply(http.StatusInternalServerError, map[string]any{"error": "source misconfigured"}), false
	}
	verified, err = h.verify(ctx, verifier, src, req, false)
	if errors.Is(err, provider.ErrBadSignature) {
		verified, err = h.verify(ctx, verifier, src, req, true)
	}
	if err == nil {
		return src, verified, Response{}, true
	}
	if verifyUnavailable(err) {
		log.Error("verification material unavailable", "status", 503, "err", err)
		return src, verified, reply(http.StatusServiceUnavailable, map[string]any{"error": "temporarily unavailable"}), false
	}
	log.Warn("signature rejected", "status", 401, "reason", rejectReason(err))
	return src, verified, reply(http.StatusUnauthorized, map[string]any{"error": "invalid signature"}), false
}

// verifyUnavailable reports whether a verification error is ours (no
// secrets, no certificate right now) rather than the request's: it is
// answered with a 5xx so the sender retries (SNS never retries a 4xx).
func verifyUnavailable(err error) bool {
	return errors.Is(err, source.ErrSecrets) || errors.Is(err, provider.ErrNoSecrets) || errors.Is(err, provider.ErrCertUnavailable)
}

// identityProblem says why a verified delivery cannot be accepted under
// its events' ids ("" when it can), and the attributes to record about it.
// The verifier may have found no identity; a signed empty body (an id in a
// header, perhaps) carries nothing to apply and no retry will change it;
// and an id may be unusable as a ledger key (unusableID). Such a delivery
// is kept quarantined under its content id, never answered with a 5xx.
// The content id, not a header's id, so that a later delivery with a body
// under that id is a new event, not a conflict.
func identityProblem(v provider.Verified, body []byte) (string, map[string]string) {
	if v.Unidentified != "" {
		return v.Unidentified, nil
	}
	if len(body) == 0 {
		return "empty body", nil
	}
	return unusableID(v)
}

// unidentifiedDelivery is the ledger row of a verified delivery without a
// usable identity: under its content id, quarantined, with the delivery id
// of its first event when there is one.
func unidentifiedDelivery(srcName string, v provider.Verified, body []byte, attrs map[string]string) ledger.Delivery {
	deliveryID := ""
	if len(v.Events) > 0 {
		deliveryID = v.Events[0].DeliveryID
	}
	return ledger.Delivery{Source: srcName, EventID: ledger.ContentID(body), EventType: "unidentified", DeliveryID: deliveryID,
		Payload: body, Quarantine: "no_identity", Attributes: attrs}
}

// keepUnidentified records d (unidentifiedDelivery) and answers 202 with
// its content id; nothing is enqueued for a quarantined row.
func (h *Handler) keepUnidentified(ctx context.Context, log *slog.Logger, d ledger.Delivery, reason string) Response {
	res, err := h.Ledger.Accept(ctx, d)
	if err != nil {
		return h.storeFailed(log, err)
	}
	log.Warn("verified delivery without identity kept quarantined", "event_id", d.EventID, "reason", reason, "duplicate", res.Duplicate, "status", 202)
	return reply(http.StatusAccepted, map[string]any{"status": "quarantined", "event_id": d.EventID})
}

// acceptFailed answers an event that accept could not record or enqueue.
func (h *Handler) acceptFailed(log *slog.Logger, eventID string, err error) Response {
	if errors.Is(err, errEnqueue) {
		// The row stays RECEIVED; the reconciler re-enqueues it and the
		// provider's retry will too. 5xx so the provider retries.
		return reply(http.StatusInternalServerError, map[string]any{"error": "temporarily unavailable"})
	}
	return h.storeFailed(log.With("event_id", eventID), err)
}

// eventAnswer is one event's entry in the reply and the status it asks
// for: 200 for a duplicate of a processed event (nothing more will happen
// to it), 202 for every other (accepted, waiting, or a conflict that
// changed nothing). The reply's status is the highest of its events'.
func eventAnswer(eventID string, res accepted) (map[string]any, int) {
	switch ev := res.Event; {
	case res.Conflict:
		return map[string]any{"event_id": eventID, "status": "conflict",
			"detail": "this event id was first delivered with other bytes; nothing was changed"}, http.StatusAccepted
	case res.Duplicate && ev.Status == ledger.StatusProcessed:
		return duplicateAnswer(ev), http.StatusOK
	case !res.Duplicate:
		return map[string]any{"event_id": eventID, "status": "accepted", "ledger_status": ev.Status}, http.StatusAccepted
	default:
		// A duplicate of an event that is not processed: it waits for a
		// worker (re-enqueued when it might wait forever) or for an operator.
		return map[string]any{"event_id": eventID, "status": "duplicate", "ledger_status": ev.Status,
			"reenqueued": res.Enqueued, "delivery_count": ev.DeliveryCount}, http.StatusAccepted
	}
}

// eventsReply is the answer to an identified delivery: the events' entries
// in a list, except that one processed duplicate is answered with its
// entry alone.
func eventsReply(status int, results []map[string]any) Response {
	if status == http.StatusOK && len(results) == 1 {
		return reply(http.StatusOK, results[0])
	}
	return reply(status, map[string]any{"events": results})
}

// duplicateAnswer is all a duplicate of a processed event learns: that it
// is a duplicate, of which event, and the outcome (applied, stale,
// ignored, …). A provider needs only the 200; a sender reconciling its own
// records may use the id and the outcome. The rest of the row stays
// internal: its operation ids (the downstream's idempotency keys), the
// projection, subject and version, the delivery count and when it was
// processed. Whoever replays a captured delivery gets this answer too (a
// signature stays valid for the tolerance, or for ever in a scheme that
// signs no time), and must not learn from it which intents exist or what
// state the subject is in; operators read all of it with webhookctl
// events show.
func duplicateAnswer(ev ledger.Event) map[string]any {
	out := map[string]any{"status": "duplicate", "event_id": ev.EventID}
	if o := resultOutcome(ev); o != "" {
		out["outcome"] = o
	}
	return out
}

// unusableID checks every event id of a verified delivery against what
// the ledger keys, SQS carries and logs hold (ledger.CheckEventID). The
// id is the sender's input, and a delivery with an id that fails would be
// accepted and then fail to enqueue on every retry; it is kept instead,
// like a delivery without identity, under its content id. The first id
// that fails is returned quoted (ASCII, bounded) for the row's attribute
// unusable_event_id and the log, with the reason; "" and nil when every
// id is usable.
func unusableID(v provider.Verified) (string, map[string]string) {
	for _, ident := range v.Events {
		if ledger.CheckEventID(ident.EventID) == nil {
			continue
		}
		q := strconv.QuoteToASCII(ident.EventID)
		if len(q) > ledger.MaxIDLength {
			q = q[:ledger.MaxIDLength-3] + "..."
		}
		return "event id " + q + " cannot be a ledger key or travel in a queue message", map[string]string{"unusable_event_id": q}
	}
	return "", nil
}

// errEnqueue: the event is in the ledger, but its pointer could not be
// sent (the row stays RECEIVED; the reconciler re-enqueues it).
var errEnqueue = errors.New("enqueue failed after accept")

// accepted is what accept did: the ledger's answer, and whether a pointer
// was sent.
type accepted struct {
	ledger.Accepted
	Enqueued bool
}

// accept records one identified event and sends its pointer when it waits
// for a worker. Both delivery paths use it, so they behave identically: a
// duplicate of a processed event enqueues nothing, a duplicate that waits is
// re-enqueued (needsEnqueue). payload is the event's bytes unless the
// identity carries its own. It returns the ledger's answer, or the ledger's
// error, or one wrapping errEnqueue.
func (h *Handler) accept(ctx context.Context, log *slog.Logger, src source.Source, ident provider.Identity, payload []byte, t *tally) (accepted, error) {
	evLog := log.With("event_id", ident.EventID, "type", ident.Type, "delivery_id", ident.DeliveryID)
	d := eventDelivery(src.Name, ident, payload)
	if ident.UnsignedID {
		// The id is not signed: the same body under a new id is a
		// suspected replay of a captured delivery. It is kept, quarantined,
		// and creates no business work. Bytes first seen under this id are
		// the event's own: if a replay was sent under the id before them,
		// the ledger gives them the row (Accepted.Displaced).
		first, err := h.Ledger.ClaimBody(ctx, src.Name, ledger.PayloadHash(d.Payload), ident.EventID)
		if err != nil {
			return accepted{}, err
		}
		if first != ident.EventID {
			d.Quarantine = ledger.CodeSuspectedReplay
			d.Attributes = withAttribute(d.Attributes, "replay_of", first)
			t.replays++
			evLog.Warn("suspected replay: this body was first delivered under another id", "first_event_id", first)
		}
	}
	if policy := src.Connect(); d.Quarantine == "" {
		if acct, refused := policy.Refused(ident.ConnectAccounts); refused {
			// Signed by the provider, but of an account the source does
			// not accept (a Stripe connected account): kept, quarantined
			// with the reason, and no business work unless an operator
			// releases it.
			d.Quarantine, d.QuarantineReason = quarantineConnect, policy.Reason(acct)
			t.connect++
			evLog.Warn("event of a connected account the source does not accept; kept quarantined", "connect_account", acct, "accepts", policy.String())
		}
	}
	lres, err := h.Ledger.Accept(ctx, d)
	res := accepted{Accepted: lres}
	if err != nil {
		return res, err
	}
	ev := res.Event
	switch {
	case res.Conflict:
		t.conflicts++
		evLog.Warn("event id delivered with other bytes: a conflict, not a duplicate; nothing changed", "payload_hash", ev.PayloadHash, "conflicts", ev.Conflicts)
		return res, nil
	case res.Duplicate:
		t.duplicates++
	default:
		t.accepted++
	}
	if r := res.Displaced; r != nil {
		t.displaced++
		evLog.Warn("the event's own bytes displaced a suspected replay that held its id; the replay stays in the row's audit",
			"replay_of", r.Attributes["replay_of"], "replay_payload_hash", r.PayloadHash, "replay_deliveries", r.DeliveryCount, "payload_hash", ev.PayloadHash)
	}
	if res.Duplicate && ev.Status == ledger.StatusProcessed {
		evLog.Info("duplicate of a processed event", "outcome", resultOutcome(ev), "duplicate", true)
		return res, nil
	}
	if res.PayloadMismatch {
		if ident.Attributes[attrVia] != ev.Attributes[attrVia] || ident.Attributes["format"] != ev.Attributes["format"] {
			// The same fact through the other path (EventBridge re-serializes
			// the JSON) or in the other form (a Stripe thin twin of a
			// snapshot event): the bytes differ by design.
			evLog.Info("duplicate through the other delivery path or form; the first payload is kept", "payload_hash", ev.PayloadHash)
		} else {
			evLog.Warn("duplicate event id with different bytes; the first payload is kept", "payload_hash", ev.PayloadHash)
		}
	}
	if needsEnqueue(lres, h.now()) {
		reason := "accept"
		if res.Duplicate {
			reason = "duplicate"
		}
		if err := h.Queue.Send(ctx, queue.Pointer{Source: src.Name, EventID: ident.EventID, Reason: reason}); err != nil {
			evLog.Error("enqueue failed after accept; row stays RECEIVED", "err", err)
			return res, fmt.Errorf("%w: %w", errEnqueue, err)
		}
		res.Enqueued = true
	}
	evLog.Info("accepted", "duplicate", res.Duplicate, "ledger_status", ev.Status, "enqueued", res.Enqueued)
	return res, nil
}

// eventDelivery is the ledger row of one identified event: payload is the
// delivery's bytes unless the identity carries its own.
func eventDelivery(srcName string, ident provider.Identity, payload []byte) ledger.Delivery {
	if ident.Payload != nil {
		payload = ident.Payload
	}
	return ledger.Delivery{
		Source: srcName, EventID: ident.EventID, EventType: ident.Type, DeliveryID: ident.DeliveryID,
		Subject: ident.Subject, Payload: payload, VersionHint: ident.VersionHint, Attributes: ident.Attributes,
	}
}

func (h *Handler) verify(ctx context.Context, v provider.Verifier, src source.Source, req Request, fresh bool) (provider.Verified, error) {
	secrets, err := h.Secrets.For(ctx, src, fresh)
	if err != nil {
		return provider.Verified{}, err
	}
	return v.Verify(ctx, provider.Request{Headers: req.Headers, Body: req.Body}, provider.Config{
		Secrets: secrets, Tolerance: src.Tolerance(), Now: h.now,
	})
}

// needsEnqueue: a new event always; a duplicate when it is waiting for a
// worker that may never come (RECEIVED: the first send may have failed;
// RETRY_WAIT due; PROCESSING with an expired lease). DEAD and QUARANTINED
// wait for an operator, not for a provider retry.
func needsEnqueue(res ledger.Accepted, now time.Time) bool {
	if !res.Duplicate {
		return res.Event.Status == ledger.StatusReceived
	}
	ev := res.Event
	switch ev.Status {
	case ledger.StatusReceived:
		return true
	case ledger.StatusRetryWait:
		return !ev.NextAttemptAt.After(now)
	case ledger.StatusProcessing:
		return ev.LeaseExpires.Before(now)
	}
	return false
}

func (h *Handler) storeFailed(log *slog.Logger, err error) Response {
	if errors.Is(err, ledger.ErrInvalid) {
		log.Warn("ledger refused the event", "status", 400, "err", err)
		return reply(http.StatusBadRequest, map[string]any{"error": "event identity not storable"})
	}
	if errors.Is(err, ledger.ErrUnavailable) || errors.Is(err, ledger.ErrConflict) {
		log.Error("ledger unavailable", "status", 503, "err", err)
		return reply(http.StatusServiceUnavailable, map[string]any{"error": "temporarily unavailable"})
	}
	log.Error("ledger write failed", "status", 500, "err", err)
	return reply(http.StatusInternalServerError, map[string]any{"error": "internal error"})
}

func rejectReason(err error) string {
	switch {
	case errors.Is(err, provider.ErrNotSigned):
		return "not signed"
	case errors.Is(err, provider.ErrStale):
		return "timestamp outside tolerance"
	default:
		return "no valid signature"
	}
}

func resultOutcome(ev ledger.Event) string {
	if ev.Result == nil {
		return ""
	}
	return string(ev.Result.Outcome)
}

// withAttribute returns attrs with k=v added (a copy; attrs is the
// verifier's).
func withAttribute(attrs map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(attrs)+1)
	for a, b := range attrs {
		out[a] = b
	}
	out[k] = v
	return out
}
