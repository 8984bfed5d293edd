package localaws

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
)

// EventBridge is a local endpoint of EventBridge's PutEvents, on its wire
// protocol (AWS JSON 1.1, X-Amz-Target AWSEvents.PutEvents), written from
// the API reference; no emulator of it is reachable here. It keeps the
// events it accepted, per bus, so a test can count what reached a bus.
//
// What it checks as EventBridge does: 1 to 10 entries per request; the
// total entry size (Source, DetailType, Detail and Resources in UTF-8,
// Time 14 bytes) under 1 MB (1,048,576 bytes), else the request fails; an
// entry without Source, DetailType or Detail fails (InvalidArgument), and
// the request fails when no entry has all three; a Detail that is not a
// JSON object fails (MalformedDetail); DetailType at most 128 characters;
// EventBusName (a name or a bus ARN of its region and account) must be a
// bus that exists, else the entry fails (ResourceNotFoundException, an
// answer the reference does not list); results come in request order
// with FailedEntryCount. Tests inject per-entry failures (FailEntries,
// by code) and request failures (FailNext).
//
// What only AWS shows: rules and their targets (nothing is delivered
// anywhere), permissions and resource policies, global endpoints
// (EndpointId is refused), archives, and throttling on its own.
type EventBridge struct {
	URL     string
	Region  string
	Account string
	srv     *httptest.Server
	api     *jsonAPI

	mu        sync.Mutex
	buses     map[string]bool
	events    []PutEvent
	failEntry []string
}

// PutEvent is an event the local EventBridge accepted.
type PutEvent struct {
	ID         string
	Bus        string // the bus's name
	Source     string
	DetailType string
	Detail     string
	Resources  []string
	Time       time.Time
}

// MaxEventBridgeEntries is the most entries one PutEvents takes.
const MaxEventBridgeEntries = 10

// maxEventBridgeEntrySize is EventBridge's limit on a request's entries:
// their total size must be less than 1 MB, here 1,048,576 bytes.
const maxEventBridgeEntrySize = 1048576

// NewEventBridge starts a local EventBridge for region and account with
// the default bus.
func NewEventBridge(region, account string) *EventBridge {
	e := &EventBridge{Region: region, Account: account, buses: map[string]bool{"default": true},
		api: &jsonAPI{prefix: "AWSEvents", contentType: "application/x-amz-json-1.1", maxBody: 16 << 20}}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { e.api.serve(w, r, e.handle) }))
	e.URL = e.srv.URL
	return e
}

// Close stops it.
func (e *EventBridge) Close() { e.srv.Close() }

// Client returns an EventBridge client for it; apiOptions are added to
// the client's middleware (for example an awstrace.Recorder).
func (e *EventBridge) Client(apiOptions ...func(*middlewareStack) error) *eventbridge.Client {
	cfg := Config()
	cfg.Region = e.Region
	return eventbridge.NewFromConfig(cfg, func(o *eventbridge.Options) {
		o.BaseEndpoint = aws.String(e.URL)
		o.APIOptions = append(o.APIOptions, apiOptions...)
	})
}

// CreateBus creates a bus and returns its ARN.
func (e *EventBridge) CreateBus(name string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.buses[name] = true
	return e.BusARN(name)
}

// BusARN is the ARN of a bus of this region and account.
func (e *EventBridge) BusARN(name string) string {
	return "arn:aws:events:" + e.Region + ":" + e.Account + ":event-bus/" + name
}

// FailEntries arms per-entry failures: the next entries put (one code
// each, in order) fail with these error codes and are not put.
func (e *EventBridge) FailEntries(codes ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.failEntry = append(e.failEntry, codes...)
}

// FailNext arms a request failure: the next PutEvents is answered status
// with error code and puts nothing.
func (e *EventBridge) FailNext(status int, code string) { e.api.failNext("PutEvents", status, code) }

// Events returns the events put on bus (every bus when "").
func (e *EventBridge) Events(bus string) []PutEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []PutEvent
	for _, ev := range e.events {
		if bus == "" || ev.Bus == bus {
			out = append(out, ev)
		}
	}
	return out
}

type putEventsEntry struct {
	Source       *string  `json:"Source"`
	DetailType   *string  `json:"DetailType"`
	Detail       *string  `json:"Detail"`
	EventBusName *string  `json:"EventBusName"`
	Resources    []string `json:"Resources"`
	Time         *float64 `json:"Time"`
	TraceHeader  *string  `json:"TraceHeader"`
}

type putEventsResult struct {
	EventID      string `json:"EventId,omitempty"`
	ErrorCode    string `json:"ErrorCode,omitempty"`
	ErrorMessage string `json:"ErrorMessage,omitempty"`
}

var busNameRE = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,256}$`)

func (e *EventBridge) handle(op string, body []byte) (any, *apiError) {
	if op != "PutEvents" {
		return nil, &apiError{Status: http.StatusBadRequest, Code: "UnknownOperationException", Message: "this local EventBridge has PutEvents only, not " + op}
	}
	var in struct {
		Entries    []putEventsEntry `json:"Entries"`
		EndpointID *string          `json:"EndpointId"`
	}
	if err := decodeStrict(body, &in); err != nil {
		return nil, err
	}
	if in.EndpointID != nil {
		return nil, validation("EndpointId: global endpoints are not available locally")
	}
	if n := len(in.Entries); n < 1 || n > MaxEventBridgeEntries {
		return nil, validation("1 validation error detected: Value at 'entries' failed to satisfy constraint: Member must have length between 1 and %d (it has %d)", MaxEventBridgeEntries, n)
	}
	total, complete := 0, 0
	for _, en := range in.Entries {
		total += len(str(en.Source)) + len(str(en.DetailType)) + len(str(en.Detail))
		for _, r := range en.Resources {
			total += len(r)
		}
		if en.Time != nil {
			total += 14
		}
		if en.Source != nil && en.DetailType != nil && en.Detail != nil {
			complete++
		}
	}
	if total >= maxEventBridgeEntrySize {
		return nil, validation("Total size of the entries in the request is over the limit (%d bytes, must be less than %d).", total, maxEventBridgeEntrySize)
	}
	if complete == 0 {
		return nil, validation("no entry has Source, DetailType and Detail")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	out := struct {
		Entries          []putEventsResult `json:"Entries"`
		FailedEntryCount int               `json:"FailedEntryCount"`
	}{Entries: []putEventsResult{}}
	for _, en := range in.Entries {
		res := e.put(en)
		if res.ErrorCode != "" {
			out.FailedEntryCount++
		}
		out.Entries = append(out.Entries, res)
	}
	return out, nil
}

// put puts one entry, the lock held.
func (e *EventBridge) put(en putEventsEntry) putEventsResult {
	failed := func(code, msg string) putEventsResult { return putEventsResult{ErrorCode: code, ErrorMessage: msg} }
	if len(e.failEntry) > 0 {
		code := e.failEntry[0]
		e.failEntry = e.failEntry[1:]
		return failed(code, "injected by the test")
	}
	if en.Source == nil || en.DetailType == nil || en.Detail == nil {
		return failed("InvalidArgument", "Parameters Source, DetailType and Detail are required.")
	}
	if len([]rune(*en.DetailType)) > 128 {
		return failed("InvalidArgument", "DetailType is longer than 128 characters.")
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(*en.Detail), &obj) != nil || obj == nil {
		return failed("MalformedDetail", "Detail is malformed.")
	}
	bus := "default"
	if en.EventBusName != nil {
		bus = *en.EventBusName
		if name, ok := strings.CutPrefix(bus, "arn:aws:events:"+e.Region+":"+e.Account+":event-bus/"); ok {
			bus = name
		} else if strings.HasPrefix(bus, "arn:") {
			return failed("ResourceNotFoundException", fmt.Sprintf("Event bus %s does not exist in this region and account.", bus))
		}
	}
	if !busNameRE.MatchString(bus) || !e.buses[bus] {
		return failed("ResourceNotFoundException", fmt.Sprintf("Event bus %s does not exist.", bus))
	}
	ev := PutEvent{ID: newID(), Bus: bus, Source: *en.Source, DetailType: *en.DetailType, Detail: *en.Detail,
		Resources: en.Resources, Time: time.Now().UTC()}
	if en.Time != nil {
		sec := int64(*en.Time)
		ev.Time = time.Unix(sec, int64((*en.Time-float64(sec))*1e9)).UTC()
	}
	e.events = append(e.events, ev)
	return putEventsResult{EventID: ev.ID}
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
