package recovery

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/httpstatus"
)

// recorder is a reverse proxy in front of the stack's HTTP API that notes,
// per event (source/event_id), when an answer 2xx first reached the
// sender, and which events were sent but never answered 2xx.
type recorder struct {
	proxy *httputil.ReverseProxy
	mu    sync.Mutex
	first map[string]time.Time // first 2xx answer
	sent  map[string]bool
	srv   *http.Server
	url   string
}

func newRecorder(target string) (*recorder, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	r := &recorder{proxy: httputil.NewSingleHostReverseProxy(u), first: map[string]time.Time{}, sent: map[string]bool{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	r.url = "http://" + l.Addr().String()
	go func() { _ = r.srv.Serve(l) }()
	return r, nil
}

func (r *recorder) Close() { _ = r.srv.Close() }

// ServeHTTP forwards every request; a webhook delivery's answer is noted.
func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	source, ok := strings.CutPrefix(req.URL.Path, "/webhooks/")
	if !ok || req.Method != http.MethodPost {
		r.proxy.ServeHTTP(w, req)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	key := source + "/" + eventID(req.Header, body)
	rec := &httpstatus.Writer{ResponseWriter: w}
	r.proxy.ServeHTTP(rec, req)
	at := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent[key] = true
	if rec.Code >= 200 && rec.Code <= 299 {
		if t, ok := r.first[key]; !ok || at.Before(t) {
			r.first[key] = at
		}
	}
}

// eventID is the provider's event id: Standard Webhooks' webhook-id (or
// svix-id) header, else the body's "id" (Stripe).
func eventID(h http.Header, body []byte) string {
	for _, k := range []string{"webhook-id", "svix-id"} {
		if v := h.Get(k); v != "" {
			return v
		}
	}
	var b struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(body, &b)
	return b.ID
}

// accepted returns each event's first 2xx answer, and the events sent but
// never answered 2xx.
func (r *recorder) accepted() (map[string]time.Time, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := make(map[string]time.Time, len(r.first))
	for k, t := range r.first {
		first[k] = t
	}
	var never []string
	for k := range r.sent {
		if _, ok := first[k]; !ok {
			never = append(never, k)
		}
	}
	return first, never
}
