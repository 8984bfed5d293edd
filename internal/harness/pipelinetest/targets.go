package pipelinetest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sfn"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/warehouse"
)

// TargetAccount is the account of the harness's local AWS targets.
const TargetAccount = "123456789012"

// AWSTarget is an AWS target that performs some effect kinds instead of
// the fake downstream: a local Step Functions state machine (STANDARD) or
// EventBridge bus, behind a proxy that can hold an answer past the call's
// timeout. Every dispatcher gets its own client of it, carrying that
// dispatcher's recorder (and middleware), so a crash point can hit the
// target call itself: a crash right after it is the dispatcher dying
// with the call made and nothing recorded.
type AWSTarget struct {
	Kind outbox.TargetKind // outbox.TargetStepFunctions or outbox.TargetEventBridge
	// Name is the state machine's or the bus's name; ARN its ARN.
	Name, ARN     string
	StepFunctions *localaws.StepFunctions
	EventBridge   *localaws.EventBridge
	// Proxy stands between the dispatchers and the endpoint.
	Proxy *HangProxy

	o *Outbox
}

// UseTarget makes a local AWS target of kind perform the effect kinds
// named (default "refund"): their effects become the outbox's target
// effects (outbox.StepFunctionsEffect, outbox.EventBridgeEffect) with the
// harness's call timeout and scopes. Dispatchers started after it use it.
func (o *Outbox) UseTarget(kind outbox.TargetKind, kinds ...string) *AWSTarget {
	o.h.T.Helper()
	if len(kinds) == 0 {
		kinds = []string{"refund"}
	}
	t := &AWSTarget{Kind: kind, o: o}
	var endpoint string
	switch kind {
	case outbox.TargetStepFunctions:
		t.StepFunctions = localaws.NewStepFunctions(localaws.Region, TargetAccount)
		o.h.T.Cleanup(t.StepFunctions.Close)
		t.Name = "effects"
		t.ARN = t.StepFunctions.CreateStateMachine(t.Name, "STANDARD")
		endpoint = t.StepFunctions.URL
	case outbox.TargetEventBridge:
		t.EventBridge = localaws.NewEventBridge(localaws.Region, TargetAccount)
		o.h.T.Cleanup(t.EventBridge.Close)
		t.Name = "effects"
		t.ARN = t.EventBridge.CreateBus(t.Name)
		endpoint = t.EventBridge.URL
	default:
		o.h.T.Fatalf("UseTarget: no local target of kind %s here", kind)
	}
	t.Proxy = NewHangProxy(o.h.T, endpoint, 3*o.opts.CallTimeout)
	if o.targets == nil {
		o.targets = map[string]*AWSTarget{}
	}
	for _, k := range kinds {
		o.targets[k] = t
		o.Effects[k] = t.effect(k) // the outbox's own view (kinds, scopes); dispatchers get their own
	}
	return t
}

// PerformOnDownstream makes every execution the Step Functions target
// starts run a workflow of one task, before the start is answered: the
// call, made to the fake downstream as the HTTP effect of its kind makes
// it (the operation id as its idempotency key, the same headers and
// body), retried until the downstream answers, as a Task state with a
// Retry would. The downstream then sees exactly what the target started,
// in the order it started it: the chaos checker's arrivals and subject
// views hold for a target as for HTTP.
func (t *AWSTarget) PerformOnDownstream() {
	if t.Kind != outbox.TargetStepFunctions {
		t.o.h.T.Fatalf("PerformOnDownstream: a %s target runs no workflow", t.Kind)
	}
	o := t.o
	client := &http.Client{Timeout: 5 * time.Second}
	t.StepFunctions.OnStart = func(ex localaws.Execution) {
		var c outbox.TargetCall
		if err := json.Unmarshal([]byte(ex.Input), &c); err != nil {
			return
		}
		task := &outbox.HTTPEffect{Name: c.Kind, URL: o.URL + "/" + c.Kind, Secret: DownstreamToken, Window: o.opts.Window, Client: client, Clock: o.h.Clock}
		call := outbox.Call{Key: c.OperationID, Kind: c.Kind, Subject: c.Subject, Payload: c.Payload, Version: c.Version, Scope: c.Scope, Source: c.Source}
		for range 5 {
			if _, err := task.Do(context.Background(), call); err == nil {
				return
			}
		}
	}
}

// effect is kind's target effect whose client carries opts.
func (t *AWSTarget) effect(kind string, opts ...APIOption) outbox.Effect {
	target, err := outbox.ParseTarget(t.ARN, localaws.Region)
	if err != nil {
		t.o.h.T.Fatal(err)
	}
	cfg := localaws.Config()
	switch t.Kind {
	case outbox.TargetStepFunctions:
		client := sfn.NewFromConfig(cfg, func(o *sfn.Options) {
			o.BaseEndpoint = aws.String(t.Proxy.URL)
			o.APIOptions = append(o.APIOptions, opts...)
		})
		return &outbox.StepFunctionsEffect{Name: kind, Target: target, Client: client, Timeout: t.o.opts.CallTimeout, Scopes: t.o.opts.scopes(kind)}
	default:
		client := eventbridge.NewFromConfig(cfg, func(o *eventbridge.Options) {
			o.BaseEndpoint = aws.String(t.Proxy.URL)
			o.APIOptions = append(o.APIOptions, opts...)
		})
		return &outbox.EventBridgeEffect{Name: kind, Target: target, Client: client, Timeout: t.o.opts.CallTimeout, Scopes: t.o.opts.scopes(kind)}
	}
}

// effectsFor is the effects of one dispatcher: the outbox's, with every
// target kind's effect on a client of its own that carries opts, and the
// warehouse sink's own when it asks for one (Warehouse.PerDispatcher,
// Warehouse.Wrap).
func (o *Outbox) effectsFor(opts ...APIOption) map[string]outbox.Effect {
	w := o.h.Warehouse
	own := w.own() && o.targets[warehouse.Kind] == nil
	if len(o.targets) == 0 && !own {
		return o.Effects
	}
	out := make(map[string]outbox.Effect, len(o.Effects))
	for k, e := range o.Effects {
		out[k] = e
		if t := o.targets[k]; t != nil {
			out[k] = t.effect(k, opts...)
		}
	}
	if own {
		out[warehouse.Kind] = w.effectFor(opts...)
	}
	return out
}

// Applied returns, per operation id, how many times the target acted on
// it, by its own record: executions started (an idempotent start that
// answered again is not a second one), or events put.
func (t *AWSTarget) Applied() map[string]int {
	out := map[string]int{}
	switch t.Kind {
	case outbox.TargetStepFunctions:
		for _, ex := range t.StepFunctions.Executions(t.Name) {
			var c outbox.TargetCall
			_ = json.Unmarshal([]byte(ex.Input), &c)
			if ex.Name == outbox.ExecutionName(c.OperationID) {
				out[c.OperationID]++
			} else {
				out["execution "+ex.Name]++ // not named after its operation: never expected
			}
		}
	case outbox.TargetEventBridge:
		for _, ev := range t.EventBridge.Events(t.Name) {
			var c outbox.TargetCall
			_ = json.Unmarshal([]byte(ev.Detail), &c)
			out[c.OperationID]++
		}
	}
	return out
}

// HangProxy forwards requests to an endpoint. Armed for an operation, it
// forwards the next request of that operation (the target acts on it) and
// holds the answer for Hold, past the caller's timeout: a timeout after
// the request was applied. Armed to drop, it holds the request for Hold
// and never forwards it: a timeout before anything was applied.
type HangProxy struct {
	URL    string
	Hold   time.Duration
	target *url.URL

	mu    sync.Mutex
	armed []hang
	held  int
}

type hang struct {
	op    string // the X-Amz-Target operation ("StartExecution", "PutEvents")
	apply bool
}

// NewHangProxy starts a proxy in front of endpoint.
func NewHangProxy(t interface {
	Fatal(...any)
	Cleanup(func())
}, endpoint string, hold time.Duration) *HangProxy {
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := &HangProxy{target: u, Hold: hold}
	srv := httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// HangAfterApply holds the answer of the next request of op.
func (p *HangProxy) HangAfterApply(op string) { p.arm(hang{op: op, apply: true}) }

// HangBeforeApply holds the next request of op and never forwards it.
func (p *HangProxy) HangBeforeApply(op string) { p.arm(hang{op: op}) }

func (p *HangProxy) arm(h hang) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = append(p.armed, h)
}

// Held is how many requests the proxy held.
func (p *HangProxy) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// take returns the hang armed for r's operation, if any.
func (p *HangProxy) take(r *http.Request) (hang, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, op, _ := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
	for i, h := range p.armed {
		if h.op == op {
			p.armed = append(p.armed[:i], p.armed[i+1:]...)
			p.held++
			return h, true
		}
	}
	return hang{}, false
}

func (p *HangProxy) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h, hung := p.take(r)
	if hung && !h.apply {
		time.Sleep(p.Hold)
		http.Error(w, "held and dropped by the test proxy", http.StatusGatewayTimeout)
		return
	}
	req, _ := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, p.target.String()+r.URL.RequestURI(), strings.NewReader(string(body)))
	req.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if hung {
		time.Sleep(p.Hold)
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(out)
}
