package processor

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	inprocessor "github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// runtimeHelperEnv makes the test binary a processor runtime (see
// TestRuntimeHelperProcess): its value names the projection the
// instance runs, "stall" or "ok".
const runtimeHelperEnv = "PROCESSOR_RUNTIME_HELPER"

// team is a team's projection of Stripe subscription events; when stall
// is set it never returns.
type team struct{ stall bool }

func (team) Name() string { return "team_orders" }

func (p team) Project(ev projection.Event) (projection.Result, error) {
	if p.stall {
		select {}
	}
	var e struct {
		Created int64
		Data    struct{ Object struct{ ID, Status string } }
	}
	if err := json.Unmarshal(ev.Payload, &e); err != nil {
		return projection.Result{}, projection.Permanent("malformed", err)
	}
	state := map[string]any{"status": e.Data.Object.Status}
	return projection.Result{Write: &projection.Write{Name: "team_orders", Subject: e.Data.Object.ID, Version: e.Created,
		Fingerprint: projection.Fingerprint(state), State: state}}, nil
}

// TestRuntimeHelperProcess is not a test: run by
// TestAStalledInstanceEndsOnceItsAnswerIsDelivered as a subprocess, it is
// a processor instance under the real aws-lambda-go runtime loop, talking
// to the runtime API at AWS_LAMBDA_RUNTIME_API, with two events in its
// ledger (evt_1, evt_2) whose projection stalls or not.
func TestRuntimeHelperProcess(t *testing.T) {
	mode := os.Getenv(runtimeHelperEnv)
	if mode == "" {
		t.Skip("the runtime helper process of TestAStalledInstanceEndsOnceItsAnswerIsDelivered")
	}
	reg := projection.NewRegistry()
	reg.Register("stripe", []string{"customer.subscription.updated"}, team{stall: mode == "stall"})
	h := pt.New(t, pt.Options{Registry: reg})
	for _, id := range []string{"evt_1", "evt_2"} {
		b := pt.SubscriptionEvent(id, "customer.subscription.updated", "sub_"+id, "active", pt.Start.Unix(), "")
		if r := h.Deliver(b, h.Sign(b, pt.SecretPrimary)); r.Status != 202 {
			t.Fatalf("deliver %s: %d", id, r.Status)
		}
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	p, err := inprocessor.New(h.Ledger, h.Sources, reg, inprocessor.Options{
		Owner: "helper", Now: h.Clock.Now, Log: log,
		ProjectionTimeout: 200 * time.Millisecond, Reserve: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	lambda.Start(handler(p, func() { endInstance(log) }))
}

// runtimeAPI is the Lambda runtime API as a function instance sees it:
// GET next hands out one invocation (an SQS batch of the two events),
// POST response records its answer; a second GET next means the
// instance is ready for more work, which is held open.
type runtimeAPI struct {
	mu       sync.Mutex
	calls    int       // GET next
	answer   []byte    // the batch's response
	answered time.Time // when the response was received
	nextOpen chan struct{}
}

func (a *runtimeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/2018-06-01/runtime/invocation/next":
		a.mu.Lock()
		a.calls++
		n := a.calls
		a.mu.Unlock()
		if n > 1 {
			close(a.nextOpen)
			<-r.Context().Done()
			return
		}
		var ev events.SQSEvent
		for _, id := range []string{"evt_1", "evt_2"} {
			ptr := queue.Pointer{V: 1, Source: "stripe", EventID: id}
			ev.Records = append(ev.Records, events.SQSMessage{MessageId: "m-" + id, Body: ptr.Encode(), Attributes: map[string]string{"ApproximateReceiveCount": "1"}})
		}
		b, _ := json.Marshal(ev)
		w.Header().Set("Lambda-Runtime-Aws-Request-Id", "req-1")
		w.Header().Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(time.Now().Add(5*time.Second).UnixMilli(), 10))
		w.Header().Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:eu-west-1:123456789012:function:processor")
		_, _ = w.Write(b)
	case r.Method == http.MethodPost && r.URL.Path == "/2018-06-01/runtime/invocation/req-1/response":
		b, _ := io.ReadAll(r.Body)
		a.mu.Lock()
		a.answer, a.answered = b, time.Now()
		a.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	default:
		b, _ := io.ReadAll(r.Body)
		a.mu.Lock()
		a.answer = []byte(r.Method + " " + r.URL.Path + " " + string(b))
		a.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}
}

// An instance whose projection call outlived its budget answers its
// batch (the stalled event settled, nothing to retry), and its process
// then exits, after the runtime API received the answer and before it
// asks for more work: the abandoned goroutine never runs beside another
// batch. An instance with no stalled call asks for its next invocation.
func TestAStalledInstanceEndsOnceItsAnswerIsDelivered(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the test binary as a runtime")
	}
	for _, c := range []struct {
		mode    string
		endsNow bool
	}{{"stall", true}, {"ok", false}} {
		t.Run(c.mode, func(t *testing.T) {
			api := &runtimeAPI{nextOpen: make(chan struct{})}
			srv := httptest.NewServer(api)
			defer srv.Close()
			cmd := exec.Command(os.Args[0], "-test.run=^TestRuntimeHelperProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), runtimeHelperEnv+"="+c.mode, "AWS_LAMBDA_RUNTIME_API="+strings.TrimPrefix(srv.URL, "http://"))
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			var (
				exitErr  error
				exitedAt time.Time
				nextOpen bool
			)
			select {
			case exitErr = <-exited:
				exitedAt = time.Now()
			case <-api.nextOpen:
				nextOpen = true
				_ = cmd.Process.Kill()
				<-exited
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
				t.Fatalf("the instance neither exited nor asked for more work within 30 s; its log:\n%s", stderr.String())
			}
			api.mu.Lock()
			answer, answered := string(api.answer), api.answered
			api.mu.Unlock()
			var resp events.SQSEventResponse
			if err := json.Unmarshal([]byte(answer), &resp); err != nil || answered.IsZero() || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("the runtime API received %q (%v); want the batch's response with no failures; its log:\n%s", answer, err, stderr.String())
			}
			if !c.endsNow {
				if !nextOpen {
					t.Fatalf("exited (%v) instead of asking for its next invocation; its log:\n%s", exitErr, stderr.String())
				}
				return
			}
			if nextOpen {
				t.Fatalf("after a stalled projection the instance asked for its next invocation; want it to exit once its answer is delivered; its log:\n%s", stderr.String())
			}
			var ee *exec.ExitError
			if !errors.As(exitErr, &ee) || ee.ExitCode() != ExitStalled {
				t.Fatalf("exit %v; want status %d; its log:\n%s", exitErr, ExitStalled, stderr.String())
			}
			if exitedAt.Before(answered) {
				t.Errorf("exited at %s, before its answer was received at %s", exitedAt, answered)
			}
			if !strings.Contains(stderr.String(), `"projection":"stripe/team_orders"`) {
				t.Errorf("the instance's log does not name the stalled projection:\n%s", stderr.String())
			}
		})
	}
}
