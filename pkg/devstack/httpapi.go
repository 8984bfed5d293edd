package devstack

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
)

// maxRequestBytes is API Gateway HTTP API's payload limit (10 MB); the
// intake's own cap (1 MiB) answers 413 well below it.
const maxRequestBytes = 10 << 20

// httpAPI emulates API Gateway HTTP API with one route,
// POST /webhooks/{source} → intake (payload format 2.0), plus dev-only
// endpoints: GET /_dev/health, POST /_dev/crash (kill a processor runtime
// during its next batch, for the demo), GET /_dev/downstream[?key=] (the
// fake downstream's requests and effective calls per key) and
// POST /_dev/downstream/script (its next answers for one effect kind).
func (s *Stack) httpAPI() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_dev/health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("content-type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "ok", "table": s.cfg.Table, "queue": s.Queues.Queue, "dlq": s.Queues.DLQ,
			"effects_queue": s.EffectsQueues.Queue, "effects_dlq": s.EffectsQueues.DLQ, "downstream": "http://" + s.Downstream.Addr(),
			"visibility_seconds": s.cfg.Visibility.Seconds(), "lease_seconds": s.cfg.Lease.Seconds(),
			"effects_visibility_seconds": s.cfg.EffectsVisibility.Seconds(), "dispatch_lease_seconds": s.cfg.DispatchLease.Seconds()})
	})
	mux.HandleFunc("GET /_dev/downstream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.Downstream.State(r.URL.Query().Get("key")))
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
	mux.HandleFunc("POST /_dev/crash", func(w http.ResponseWriter, _ *http.Request) {
		s.crashMu.Lock()
		s.crashes++
		s.crashMu.Unlock()
		s.logs.Printf("http-api", "armed: the next processor batch will have its runtime killed mid-invocation")
		w.WriteHeader(http.StatusAccepted)
	})
	mux.HandleFunc("POST /webhooks/{source}", s.webhook)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotFound, `{"message":"Not Found"}`)
	})
	return mux
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
