package devstack

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
)

// maxRequestBytes is API Gateway HTTP API's payload limit (10 MB); the
// intake's own cap (1 MiB) answers 413 well below it.
const maxRequestBytes = 10 << 20

// httpAPI emulates API Gateway HTTP API with one route,
// POST /webhooks/{source} → intake (payload format 2.0), plus dev-only
// endpoints: GET /_dev/health, POST /_dev/crash (kill a processor runtime
// during its next batch, for the demo), GET /_dev/downstream[?key=] (the
// fake downstream's requests, effective calls per key, pending scripted
// answers and its per-subject view of the versions applied), POST /_dev/downstream/script (its next answers for one effect
// kind), DELETE /_dev/downstream/script[?kind=] (drop the scripted answers
// no request used) and POST /_dev/eventbridge/{source} (an event from the source's partner event
// source to the bridge), and the fake Stripe API's /_dev/stripe/…
// (StripeAPI.DevHandler).
func (s *Stack) httpAPI() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_dev/health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("content-type", "application/json")
		health := map[string]any{"status": "ok", "table": s.cfg.Table, "queue": s.Queues.Queue, "dlq": s.Queues.DLQ,
			"effects_queue": s.EffectsQueues.Queue, "effects_dlq": s.EffectsQueues.DLQ, "bridge_dlq": s.BridgeDLQ, "downstream": "http://" + s.Downstream.Addr(),
			"stripe_api": "http://" + s.Stripe.Addr(), "visibility_seconds": s.cfg.Visibility.Seconds(), "lease_seconds": s.cfg.Lease.Seconds(),
			"effects_visibility_seconds": s.cfg.EffectsVisibility.Seconds(), "dispatch_lease_seconds": s.cfg.DispatchLease.Seconds()}
		if bucket, prefix := s.Warehouse(); bucket != "" {
			// Where the warehouse sink's records are (absent: the sink is off).
			health["warehouse"] = map[string]string{"s3": s.S3.URL, "bucket": bucket, "prefix": prefix}
		}
		_ = json.NewEncoder(w).Encode(health)
	})
	mux.HandleFunc("GET /_dev/downstream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.Downstream.State(r.URL.Query().Get("key")))
	})
	mux.HandleFunc("GET /_dev/targets", func(w http.ResponseWriter, _ *http.Request) {
		cfgs, _ := s.file.effects()
		w.Header().Set("content-type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.Targets.State(cfgs, s.file.EffectFunctions))
	})
	mux.HandleFunc("POST /_dev/downstream/script", func(w http.ResponseWriter, r *http.Request) {
		var sc Script
		dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&sc); err != nil {
			writeJSON(w, http.StatusBadRequest, `{"message":"want {\"kind\":\"refund\",\"then\":[{\"mode\":\"hang_after_apply\"}]}"}`)
			return
		}
		if err := s.Downstream.Script(sc); err != nil {
			b, _ := json.Marshal(map[string]string{"message": err.Error()})
			writeJSON(w, http.StatusBadRequest, string(b))
			return
		}
		modes := make([]string, len(sc.Then))
		for i, b := range sc.Then {
			modes[i] = b.Mode
		}
		s.logs.Printf("downstream", "scripted %s: next %s", sc.Kind, strings.Join(modes, ", "))
		writeJSON(w, http.StatusAccepted, `{"message":"scripted"}`)
	})
	mux.HandleFunc("DELETE /_dev/downstream/script", func(w http.ResponseWriter, r *http.Request) {
		kind := r.URL.Query().Get("kind")
		cleared, err := s.Downstream.ClearScript(kind)
		if err != nil {
			b, _ := json.Marshal(map[string]string{"message": err.Error()})
			writeJSON(w, http.StatusBadRequest, string(b))
			return
		}
		total := 0
		for _, n := range cleared {
			total += n
		}
		scope := "every kind"
		if kind != "" {
			scope = kind
		}
		s.logs.Printf("downstream", "cleared %d pending scripted answers (%s)", total, scope)
		b, _ := json.Marshal(map[string]any{"cleared": cleared, "total": total})
		writeJSON(w, http.StatusOK, string(b))
	})
	mux.HandleFunc("POST /_dev/crash", func(w http.ResponseWriter, _ *http.Request) {
		s.crashMu.Lock()
		s.crashes++
		s.crashMu.Unlock()
		s.logs.Printf("http-api", "armed: the next processor batch will have its runtime killed mid-invocation")
		w.WriteHeader(http.StatusAccepted)
	})
	mux.HandleFunc("POST /_dev/eventbridge/{source}", s.eventBridge)
	mux.Handle("/_dev/stripe/", s.Stripe.DevHandler())
	mux.HandleFunc("POST /webhooks/{source}", s.webhook)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotFound, `{"message":"Not Found"}`)
	})
	return mux
}

// maxEventBridgeBytes is EventBridge's limit on one event (256 KB).
const maxEventBridgeBytes = 256 << 10

// eventBridge stands in for a partner event bus: the request body becomes
// the detail of an EventBridge event from the source's event_source
// (Stripe: the event object, detail-type its type; Shopify: a body of
// {"payload": …, "metadata": {header: value}}, detail-type shopifyWebhook),
// and the bridge function is invoked with it, synchronously so the answer
// says what happened: 202 once the bridge accepted it; 502 when the bridge
// failed, and the event is then in the bridge DLQ, as after Lambda's
// asynchronous retries, for the reconciler to redeliver.
func (s *Stack) eventBridge(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("source")
	src, ok := s.sources.Lookup(name)
	if !ok || !src.EventBridge() {
		writeJSON(w, http.StatusNotFound, `{"message":"no source `+jsonText(name)+` with eventbridge delivery in scripts/devstack.json"}`)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxEventBridgeBytes+1))
	switch {
	case err != nil:
		writeJSON(w, http.StatusBadRequest, `{"message":"Bad Request"}`)
		return
	case len(body) > maxEventBridgeBytes:
		writeJSON(w, http.StatusRequestEntityTooLarge, `{"message":"over EventBridge's 256 KB event limit"}`)
		return
	}
	ev, err := EventBridgeEvent(src.Kind, src.EventSource, body, time.Now())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, `{"message":`+strconv.Quote(err.Error())+`}`)
		return
	}
	payload, _ := json.Marshal(ev)
	if _, err := s.Invoke(r.Context(), "bridge", payload, nil); err != nil {
		if serr := s.DeadLetter(r.Context(), string(payload)); serr != nil {
			s.logs.Printf("http-api", "eventbridge %s → bridge failed (%v) and the DLQ too (%v)", name, err, serr)
			writeJSON(w, http.StatusInternalServerError, `{"message":"bridge and bridge DLQ failed"}`)
			return
		}
		s.logs.Printf("http-api", "eventbridge %s → bridge failed, event %s in the bridge DLQ (%v)", name, ev.ID, err)
		writeJSON(w, http.StatusBadGateway, `{"status":"dead_lettered","eventbridge_id":"`+ev.ID+`"}`)
		return
	}
	s.logs.Printf("http-api", "eventbridge %s → bridge accepted event %s", name, ev.ID)
	writeJSON(w, http.StatusAccepted, `{"status":"accepted","eventbridge_id":"`+ev.ID+`"}`)
}

// EventBridgeEvent wraps body as the detail of the event a partner puts on
// its partner event bus: source the partner event source, detail-type the
// Stripe event's type or Shopify's "shopifyWebhook". A Shopify body must be
// {"payload": {...}, "metadata": {...}} (see provider.ShopifyEventBridgeIdentity).
func EventBridgeEvent(kind, eventSource string, body []byte, now time.Time) (events.EventBridgeEvent, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil {
		return events.EventBridgeEvent{}, errors.New("the body must be a JSON object: it becomes the event's detail")
	}
	detailType := ""
	switch kind {
	case "stripe":
		_ = json.Unmarshal(doc["type"], &detailType)
	case "shopify":
		if len(doc["payload"]) == 0 || len(doc["metadata"]) == 0 {
			return events.EventBridgeEvent{}, errors.New(`a shopify body is {"payload": <the webhook body>, "metadata": {"X-Shopify-Topic": …, "X-Shopify-Event-Id": …}}`)
		}
		detailType = "shopifyWebhook"
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	h := hex.EncodeToString(id)
	return events.EventBridgeEvent{
		Version: "0", ID: h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], DetailType: detailType,
		Source: eventSource, AccountID: "000000000000", Time: now.UTC().Truncate(time.Second), Region: localaws.Region,
		Resources: []string{}, Detail: json.RawMessage(body),
	}, nil
}

func jsonText(s string) string {
	b, _ := json.Marshal(s)
	return strings.Trim(string(b), `"`)
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func (s *Stack) webhook(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes+1))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, `{"message":"Bad Request"}`)
		return
	}
	if len(body) > maxRequestBytes {
		writeJSON(w, http.StatusRequestEntityTooLarge, `{"message":"Request Entity Too Large"}`)
		return
	}
	ev := GatewayEvent(r, body, start)
	payload, _ := json.Marshal(ev)
	out, err := s.Invoke(r.Context(), "intake", payload, nil)
	if err != nil {
		s.logs.Printf("http-api", "%s %s → 500 (%v)", r.Method, r.URL.Path, err)
		writeJSON(w, http.StatusInternalServerError, `{"message":"Internal Server Error"}`)
		return
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil || resp.StatusCode == 0 {
		s.logs.Printf("http-api", "%s %s → 500 (malformed function response)", r.Method, r.URL.Path)
		writeJSON(w, http.StatusInternalServerError, `{"message":"Internal Server Error"}`)
		return
	}
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	respBody := []byte(resp.Body)
	if resp.IsBase64Encoded {
		respBody, _ = base64.StdEncoding.DecodeString(resp.Body)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(respBody)
	s.logs.Printf("http-api", "%s %s → %d in %s", r.Method, r.URL.Path, resp.StatusCode, time.Since(start).Round(time.Millisecond))
}

// GatewayEvent builds the API Gateway HTTP API payload 2.0 event for a
// request: raw path and query, lower-cased headers (repeated values joined
// by commas), path parameter "source", the body as text when it is UTF-8
// text and base64 otherwise, and a request context with an id and time.
func GatewayEvent(r *http.Request, body []byte, now time.Time) events.APIGatewayV2HTTPRequest {
	headers := map[string]string{}
	var cookies []string
	for k, vs := range r.Header {
		lk := strings.ToLower(k)
		if lk == "cookie" {
			cookies = append(cookies, vs...)
			continue
		}
		headers[lk] = strings.Join(vs, ",")
	}
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	ev := events.APIGatewayV2HTTPRequest{
		Version:        "2.0",
		RouteKey:       "POST /webhooks/{source}",
		RawPath:        r.URL.Path,
		RawQueryString: r.URL.RawQuery,
		Cookies:        cookies,
		Headers:        headers,
		PathParameters: map[string]string{"source": r.PathValue("source")},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			AccountID:  "000000000000",
			APIID:      "local",
			DomainName: r.Host,
			RequestID:  hex.EncodeToString(id),
			RouteKey:   "POST /webhooks/{source}",
			Stage:      "$default",
			Time:       now.UTC().Format("02/Jan/2006:15:04:05 -0700"),
			TimeEpoch:  now.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method: r.Method, Path: r.URL.Path, Protocol: r.Proto,
				SourceIP: strings.Split(r.RemoteAddr, ":")[0], UserAgent: r.UserAgent(),
			},
		},
	}
	if isText(headers["content-type"], body) {
		ev.Body = string(body)
	} else {
		ev.Body = base64.StdEncoding.EncodeToString(body)
		ev.IsBase64Encoded = true
	}
	return ev
}

// isText follows API Gateway: text media types and JSON/XML bodies pass as
// strings, everything else is base64-encoded.
func isText(contentType string, body []byte) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	textual := strings.HasPrefix(mt, "text/") || mt == "application/json" || mt == "application/xml" ||
		mt == "application/x-www-form-urlencoded" || strings.HasSuffix(mt, "+json") || strings.HasSuffix(mt, "+xml")
	return textual && utf8.Valid(body)
}
