package stripefake

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/httpstatus"
)

var (
	// ErrUnknownType: PutObject or DeleteObject with an object type the fake
	// does not serve.
	ErrUnknownType = errors.New("stripefake: unknown object type")
	// ErrInvalidJSON: an object or event that is not valid JSON.
	ErrInvalidJSON = errors.New("stripefake: invalid JSON")
	// ErrInvalidEvent: an event without an id, a type or a numeric created.
	ErrInvalidEvent = errors.New("stripefake: invalid event")
	// ErrDuplicateEvent: AddEvent with an id already added.
	ErrDuplicateEvent = errors.New("stripefake: duplicate event id")
	// ErrNoSuchEvent: SetDelivered with an id never added.
	ErrNoSuchEvent = errors.New("stripefake: no such event")
)

// collections maps each object type the fake serves to its path segment.
var collections = map[string]string{
	"subscription":   "subscriptions",
	"invoice":        "invoices",
	"payment_intent": "payment_intents",
}

// Server is the fake Stripe API. Create it with New; set Now and PageSize
// before it serves its first request.
type Server struct {
	// Now is Stripe's clock: the Date header of every answer and the time
	// of every recorded request. Nil means time.Now.
	Now func() time.Time
	// PageSize, when positive, caps every page of a list below the limit
	// asked for (1 exercises pagination); has_more stays truthful.
	PageSize int
	// OnAnswer, when set, is called after every request with what the
	// fake recorded of it (Status 0: the client gave up), e.g. to log it.
	OnAnswer func(Request)

	key string

	mu       sync.Mutex
	objects  map[string]map[string][]byte // type → id → JSON
	events   []event                      // insertion order
	eventSeq int
	scripts  map[string][]Answer // path prefix → answers left
	requests []Request
	release  chan struct{} // closed by ReleaseHangs
}

type event struct {
	id, typ   string
	created   int64
	seq       int
	delivered bool
	raw       []byte
}

// Request is one request the fake received.
type Request struct {
	Method   string
	Path     string
	RawQuery string
	Query    url.Values
	// Context is the Stripe-Context header the client sent (the connected
	// account it asks as), "" for none. The fake serves its objects in
	// every context.
	Context string
	Time    time.Time // Server.Now when it arrived
	// Status answered; 0 while it is being answered, or when the client
	// went away before an answer (a hang it gave up on).
	Status int
}

var _ http.Handler = (*Server)(nil)

// New returns a fake that accepts key as the only valid API key and holds
// no objects and no events.
func New(key string) *Server {
	return &Server{
		key:     key,
		objects: map[string]map[string][]byte{},
		scripts: map[string][]Answer{},
		release: make(chan struct{}),
	}
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// PutObject stores (or replaces) the object objType/id, served as body
// byte for byte.
func (s *Server) PutObject(objType, id string, body []byte) error {
	if _, ok := collections[objType]; !ok {
		return fmt.Errorf("%w: %q", ErrUnknownType, objType)
	}
	if !json.Valid(body) {
		return fmt.Errorf("%w: %s %s", ErrInvalidJSON, objType, id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.objects[objType] == nil {
		s.objects[objType] = map[string][]byte{}
	}
	s.objects[objType][id] = bytes.Clone(body)
	return nil
}

// DeleteObject removes objType/id; retrieving it is then a 404.
func (s *Server) DeleteObject(objType, id string) error {
	if _, ok := collections[objType]; !ok {
		return fmt.Errorf("%w: %q", ErrUnknownType, objType)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objects[objType], id)
	return nil
}

// AddEvent adds an event, listed and retrieved as raw byte for byte.
// delivered is its delivery_success: whether a webhook delivery of it
// succeeded.
func (s *Server) AddEvent(raw []byte, delivered bool) error {
	var head struct {
		ID      string          `json:"id"`
		Type    string          `json:"type"`
		Created json.RawMessage `json:"created"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	created, err := strconv.ParseInt(string(head.Created), 10, 64)
	if head.ID == "" || head.Type == "" || err != nil {
		return fmt.Errorf("%w: id %q, type %q, created %q", ErrInvalidEvent, head.ID, head.Type, head.Created)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.eventIndex(head.ID) >= 0 {
		return fmt.Errorf("%w: %s", ErrDuplicateEvent, head.ID)
	}
	s.eventSeq++
	s.events = append(s.events, event{id: head.ID, typ: head.Type, created: created, seq: s.eventSeq, delivered: delivered, raw: bytes.Clone(raw)})
	return nil
}

// SetDelivered changes an event's delivery_success (a webhook that finally
// got through, or one that is now failing).
func (s *Server) SetDelivered(id string, delivered bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.eventIndex(id)
	if i < 0 {
		return fmt.Errorf("%w: %s", ErrNoSuchEvent, id)
	}
	s.events[i].delivered = delivered
	return nil
}

func (s *Server) eventIndex(id string) int {
	return slices.IndexFunc(s.events, func(e event) bool { return e.id == id })
}

// Requests returns every request received so far, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.requests))
	for i, r := range s.requests {
		r.Query = cloneValues(r.Query)
		out[i] = r
	}
	return out
}

// Count returns how many requests were received for exactly this path,
// whatever their method, query or answer.
func (s *Server) Count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.requests {
		if r.Path == path {
			n++
		}
	}
	return n
}

func cloneValues(v url.Values) url.Values {
	out := make(url.Values, len(v))
	for k, vs := range v {
		out[k] = slices.Clone(vs)
	}
	return out
}

// ServeHTTP answers one request: authentication, then the next scripted
// answer for its path if any, then the API itself.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// One reading of the clock per request: the Date header a client
	// versions by is the Time recorded here.
	now := s.now()
	s.mu.Lock()
	n := len(s.requests)
	s.requests = append(s.requests, Request{
		Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Query: r.URL.Query(), Context: r.Header.Get("Stripe-Context"), Time: now,
	})
	s.mu.Unlock()

	rec := &httpstatus.Writer{ResponseWriter: w}
	s.serve(rec, r, n, now)
	s.mu.Lock()
	s.requests[n].Status = rec.Code
	done := s.requests[n]
	s.mu.Unlock()
	if s.OnAnswer != nil {
		s.OnAnswer(done)
	}
}

func (s *Server) serve(w *httpstatus.Writer, r *http.Request, n int, now time.Time) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Date", now.UTC().Format(http.TimeFormat))
	h.Set("Request-Id", fmt.Sprintf("req_fake%08d", n+1))
	if v := r.Header.Get("Stripe-Version"); v != "" {
		h.Set("Stripe-Version", v)
	}

	if !s.authorized(w, r) {
		return
	}
	if a, ok := s.nextAnswer(r.URL.Path); ok {
		switch a.kind {
		case kindError:
			for k, vs := range a.header {
				h[k] = vs
			}
			writeError(w, a.status, a.apiErr)
			return
		case kindHang:
			s.mu.Lock()
			release := s.release
			s.mu.Unlock()
			select {
			case <-r.Context().Done():
				return // the client gave up: nothing to answer
			case <-release:
			}
		}
	}
	s.route(w, r)
}

func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		w.Header().Set("Www-Authenticate", `Basic realm="Stripe"`)
		writeError(w, http.StatusUnauthorized, apiError{Type: "invalid_request_error",
			Message: "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY'). See https://stripe.com/docs/api#authentication for details, or we can help at https://support.stripe.com/."})
		return false
	}
	given, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		given, _, ok = r.BasicAuth()
	}
	if ok && given == s.key && s.key != "" {
		return true
	}
	writeError(w, http.StatusUnauthorized, apiError{Type: "invalid_request_error",
		Message: "Invalid API Key provided: " + maskKey(given)})
	return false
}

// maskKey shows what Stripe shows of a wrong key: its prefix and at most
// its last four characters.
func maskKey(k string) string {
	prefix := ""
	if i := strings.LastIndex(k, "_"); i >= 0 && i < 9 {
		prefix = k[:i+1]
	}
	if len(k)-len(prefix) <= 8 {
		return prefix + "****"
	}
	return prefix + "****" + k[len(k)-4:]
}

func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/")
	if !ok || r.Method != http.MethodGet {
		unrecognized(w, r)
		return
	}
	if rest == "events" {
		s.listEvents(w, r)
		return
	}
	collection, id, ok := strings.Cut(rest, "/")
	if !ok || id == "" || strings.Contains(id, "/") {
		unrecognized(w, r)
		return
	}
	if collection == "events" {
		s.retrieveEvent(w, id)
		return
	}
	for objType, c := range collections {
		if c == collection {
			s.retrieveObject(w, objType, id)
			return
		}
	}
	unrecognized(w, r)
}

func unrecognized(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, apiError{Type: "invalid_request_error",
		Message: fmt.Sprintf("Unrecognized request URL (%s: %s). Please see https://stripe.com/docs or we can help at https://support.stripe.com/.", r.Method, r.URL.Path)})
}

func noSuch(objType, id, param string) apiError {
	return apiError{Type: "invalid_request_error", Code: "resource_missing", Param: param,
		Message: fmt.Sprintf("No such %s: '%s'", objType, id), DocURL: "https://stripe.com/docs/error-codes/resource-missing"}
}

func (s *Server) retrieveObject(w http.ResponseWriter, objType, id string) {
	s.mu.Lock()
	body, ok := s.objects[objType][id]
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, noSuch(objType, id, "id"))
		return
	}
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

func (s *Server) retrieveEvent(w http.ResponseWriter, id string) {
	s.mu.Lock()
	var body []byte
	if i := s.eventIndex(id); i >= 0 {
		body = s.events[i].raw
	}
	s.mu.Unlock()
	if body == nil {
		writeError(w, http.StatusNotFound, noSuch("event", id, "id"))
		return
	}
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

// eventQuery is a parsed GET /v1/events query.
type eventQuery struct {
	limit                       int
	startingAfter, endingBefore string
	createdGT, createdLT        *int64 // exclusive bounds, after folding gte/lte/created
	delivery                    *bool
	typePattern                 string
	types                       []string
}

func invalidParam(param, msg string) apiError {
	return apiError{Type: "invalid_request_error", Code: "parameter_invalid", Param: param, Message: msg}
}

func parseEventQuery(q url.Values) (eventQuery, *apiError) {
	eq := eventQuery{limit: 10}
	fail := func(e apiError) (eventQuery, *apiError) { return eventQuery{}, &e }
	bound := func(param, v string, adjust int64, lower bool) *apiError {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			e := apiError{Type: "invalid_request_error", Code: "parameter_invalid_integer", Param: param, Message: "Invalid integer: " + v}
			return &e
		}
		n += adjust
		if lower {
			if eq.createdGT == nil || n > *eq.createdGT {
				eq.createdGT = &n
			}
		} else if eq.createdLT == nil || n < *eq.createdLT {
			eq.createdLT = &n
		}
		return nil
	}
	for k, vs := range q {
		v := vs[0]
		var perr *apiError
		switch {
		case k == "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 100 {
				return fail(apiError{Type: "invalid_request_error", Code: "parameter_invalid_integer", Param: k,
					Message: "Invalid limit: must be an integer between 1 and 100"})
			}
			eq.limit = n
		case k == "starting_after":
			eq.startingAfter = v
		case k == "ending_before":
			eq.endingBefore = v
		case k == "created":
			if perr = bound(k, v, -1, true); perr == nil {
				perr = bound(k, v, 1, false)
			}
		case k == "created[gt]":
			perr = bound(k, v, 0, true)
		case k == "created[gte]":
			perr = bound(k, v, -1, true)
		case k == "created[lt]":
			perr = bound(k, v, 0, false)
		case k == "created[lte]":
			perr = bound(k, v, 1, false)
		case k == "delivery_success":
			b, err := strconv.ParseBool(v)
			if err != nil || (v != "true" && v != "false") {
				return fail(invalidParam(k, "Invalid boolean: "+v))
			}
			eq.delivery = &b
		case k == "type":
			eq.typePattern = v
		case k == "types[]" || (strings.HasPrefix(k, "types[") && strings.HasSuffix(k, "]") && isDigits(k[len("types["):len(k)-1])):
			eq.types = append(eq.types, vs...)
		default:
			return fail(apiError{Type: "invalid_request_error", Code: "parameter_unknown", Param: k, Message: "Received unknown parameter: " + k})
		}
		if perr != nil {
			return eventQuery{}, perr
		}
	}
	if len(eq.types) > 20 {
		return fail(invalidParam("types", "types: at most 20 event types"))
	}
	if eq.startingAfter != "" && eq.endingBefore != "" {
		return fail(invalidParam("ending_before", "You may only specify one of these parameters: ending_before, starting_after."))
	}
	return eq, nil
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

func (eq eventQuery) match(e event) bool {
	if eq.createdGT != nil && e.created <= *eq.createdGT {
		return false
	}
	if eq.createdLT != nil && e.created >= *eq.createdLT {
		return false
	}
	if eq.delivery != nil && e.delivered != *eq.delivery {
		return false
	}
	if eq.typePattern != "" {
		if prefix, ok := strings.CutSuffix(eq.typePattern, "*"); ok {
			if !strings.HasPrefix(e.typ, prefix) {
				return false
			}
		} else if e.typ != eq.typePattern {
			return false
		}
	}
	if len(eq.types) > 0 && !slices.Contains(eq.types, e.typ) {
		return false
	}
	return true
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	eq, perr := parseEventQuery(r.URL.Query())
	if perr != nil {
		writeError(w, http.StatusBadRequest, *perr)
		return
	}
	size := eq.limit
	if s.PageSize > 0 {
		size = min(size, s.PageSize)
	}

	s.mu.Lock()
	all := slices.Clone(s.events)
	s.mu.Unlock()
	// Newest first; among equal created, the later inserted first.
	slices.SortFunc(all, func(a, b event) int {
		if a.created != b.created {
			return cmp.Compare(b.created, a.created)
		}
		return cmp.Compare(b.seq, a.seq)
	})

	// A cursor is a position in the whole order; the filters apply to what
	// lies beyond it.
	from, to := 0, len(all)
	if cursor := eq.startingAfter + eq.endingBefore; cursor != "" {
		i := slices.IndexFunc(all, func(e event) bool { return e.id == cursor })
		if i < 0 {
			param := "starting_after"
			if eq.endingBefore != "" {
				param = "ending_before"
			}
			writeError(w, http.StatusBadRequest, noSuch("event", cursor, param))
			return
		}
		if eq.startingAfter != "" {
			from = i + 1
		} else {
			to = i
		}
	}
	var matched []event
	for _, e := range all[from:to] {
		if eq.match(e) {
			matched = append(matched, e)
		}
	}
	var page []event
	hasMore := len(matched) > size
	if eq.endingBefore != "" {
		// The page just before the cursor, still newest first.
		page = matched[max(0, len(matched)-size):]
	} else {
		page = matched[:min(size, len(matched))]
	}

	var b bytes.Buffer
	fmt.Fprintf(&b, `{"object":"list","url":"/v1/events","has_more":%t,"data":[`, hasMore)
	for i, e := range page {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(e.raw)
	}
	b.WriteString("]}")
	w.WriteHeader(http.StatusOK)
	w.Write(b.Bytes())
}

// apiError is the body of a Stripe error, under "error".
type apiError struct {
	Type    string `json:"type"`
	Code    string `json:"code,omitempty"`
	Param   string `json:"param,omitempty"`
	Message string `json:"message"`
	DocURL  string `json:"doc_url,omitempty"`
}

func writeError(w http.ResponseWriter, status int, e apiError) {
	body, _ := json.Marshal(struct {
		Error apiError `json:"error"`
	}{e})
	w.WriteHeader(status)
	w.Write(body)
}
