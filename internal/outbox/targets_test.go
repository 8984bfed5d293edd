package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/config"
	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
)

const (
	testRegion  = "eu-west-1"
	testAccount = "123456789012"
	// callTimeout bounds each call of the target effects in these tests.
	callTimeout = 400 * time.Millisecond
)

// fnBuild is the test function (testdata/effectfn) and the emulator,
// built once for the package's tests.
var fnBuild struct {
	once                sync.Once
	dir, bootstrap, rie string
	err                 error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fnBuild.dir != "" {
		_ = os.RemoveAll(fnBuild.dir)
	}
	os.Exit(code)
}

// record checks the intent's ledger status, code and last audit entry.
func (e env) record(t *testing.T, status ledger.IntentStatus, code string) ledger.IntentState {
	t.Helper()
	got, err := e.L.GetIntentState(context.Background(), op)
	if err != nil {
		t.Fatal(err)
	}
	last := got.Audit[len(got.Audit)-1]
	if got.Status != status || got.ErrorCode != code || string(last.To) != string(status) || !strings.HasPrefix(last.Reason, code+":") {
		t.Fatalf("ledger: %s %q (audit %+v), want %s %q", got.Status, got.ErrorCode, last, status, code)
	}
	return got
}

// due moves the clock to when the intent is due again.
func (e env) due(o outbox.Outcome) {
	if d := o.Next.Sub(e.Clock.Now()); d > 0 {
		e.Clock.Advance(d)
	}
}

// hangProxy forwards requests to an endpoint; an armed one is forwarded
// (the target acts on it) and its answer held past the caller's timeout:
// a timeout after the request was applied.
type hangProxy struct {
	target *url.URL
	op     atomic.Value // the X-Amz-Target suffix (".SendMessage") or path part ("/invocations") to hang once
	srv    *httptest.Server
}

// arm holds the answer of the next request of op.
func (p *hangProxy) arm(op string) { p.op.Store(op) }

func (p *hangProxy) take(r *http.Request) bool {
	op, _ := p.op.Load().(string)
	if op == "" || !(strings.HasSuffix(r.Header.Get("X-Amz-Target"), op) || strings.Contains(r.URL.Path, op)) {
		return false
	}
	return p.op.CompareAndSwap(op, "")
}

func newHangProxy(t *testing.T, target string) *hangProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &hangProxy{target: u}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, p.target.String()+r.URL.RequestURI(), strings.NewReader(string(body)))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if p.take(r) {
			time.Sleep(3 * callTimeout)
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(out)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// ---- Lambda ----

type lambdaEnv struct {
	env
	eff   *outbox.LambdaEffect
	front *localaws.Lambda
	state string
	rec   *awstrace.Recorder
}

// lambdaSetup runs the test function under aws-lambda-rie behind the
// local Lambda front, with a function timeout of 5 seconds, and makes it
// the intent's effect.
func lambdaSetup(t *testing.T) lambdaEnv {
	t.Helper()
	ctx := context.Background()
	fnBuild.once.Do(func() {
		if fnBuild.dir, fnBuild.err = os.MkdirTemp("", "outbox-effectfn-"); fnBuild.err == nil {
			fnBuild.bootstrap, fnBuild.rie, fnBuild.err = localaws.BuildFunction(ctx, fnBuild.dir,
				"github.com/effectively-once/webhooks/internal/harness/localaws/testdata/effectfn")
		}
	})
	if fnBuild.err != nil {
		t.Fatal(fnBuild.err)
	}
	state := t.TempDir()
	fn, err := localaws.StartFunction(ctx, fnBuild.rie, fnBuild.bootstrap, []string{"EFFECTFN_DIR=" + state}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fn.Stop)
	front := localaws.NewLambda(testRegion, testAccount)
	t.Cleanup(front.Close)
	target, err := outbox.ParseTarget(front.AddFunction("fulfil", fn), testRegion)
	if err != nil {
		t.Fatal(err)
	}
	e := setup(t)
	rec := &awstrace.Recorder{}
	eff := &outbox.LambdaEffect{Name: kind, Target: target, Client: front.Client(rec.APIOption), Timeout: callTimeout, Scopes: []string{outbox.AllScopes}}
	e.D.Effects[kind] = eff
	return lambdaEnv{env: e, eff: eff, front: front, state: state, rec: rec}
}

func (l lambdaEnv) script(t *testing.T, lines ...string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(l.state, "script"), []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
}

// facts are the function's own records: invocations and applications of
// the operation.
func (l lambdaEnv) facts(t *testing.T, invocations, applied int) {
	t.Helper()
	count := func(name string) int {
		b, _ := os.ReadFile(filepath.Join(l.state, name))
		n := 0
		for _, line := range strings.Fields(string(b)) {
			if line == op {
				n++
			}
		}
		return n
	}
	if i, a := count("invocations.log"), count("applied.log"); i != invocations || a != applied {
		t.Fatalf("function: %d invocations, %d applied, want %d and %d", i, a, invocations, applied)
	}
}

func TestLambdaTargetAppliesOnceWithTheCallAsItsEvent(t *testing.T) {
	l := lambdaSetup(t)
	o := l.dispatch(t, ledger.IntentStatusSucceeded)
	if !o.Called || o.Code != "ok_200" {
		t.Fatalf("outcome %+v", o)
	}
	l.record(t, ledger.IntentStatusSucceeded, "ok_200")
	l.notClaimable(t)
	l.facts(t, 1, 1)
	if n := l.rec.Count("Lambda.Invoke"); n != 1 {
		t.Fatalf("%d Invoke requests, want 1", n)
	}
}

// A function error (it threw) and a throttle are retried with the same
// call; the function's own "retry" answer sets the wait.
func TestLambdaTargetFunctionErrorThrottleAndRetryAnswerAreRetried(t *testing.T) {
	l := lambdaSetup(t)
	l.script(t, "error", "retry 90")
	o := l.dispatch(t, ledger.IntentStatusRetryWait)
	l.record(t, ledger.IntentStatusRetryWait, "retryable")
	l.due(o)
	l.front.Throttle(30)
	o = l.dispatch(t, ledger.IntentStatusRetryWait)
	if o.Next.Before(l.Clock.Now().Add(30 * time.Second)) {
		t.Fatalf("throttled: next %s is before its Retry-After", o.Next)
	}
	l.due(o)
	o = l.dispatch(t, ledger.IntentStatusRetryWait)
	if o.Next.Before(l.Clock.Now().Add(90 * time.Second)) {
		t.Fatalf("retry answer: next %s is before its retry_after_seconds", o.Next)
	}
	l.due(o)
	l.dispatch(t, ledger.IntentStatusSucceeded)
	l.facts(t, 3, 1) // the throttled attempt never reached the function
}

func TestLambdaTargetRejectionFailsAndAnAnswerOutsideTheContractIsQuarantined(t *testing.T) {
	l := lambdaSetup(t)
	l.script(t, "reject out-of-stock")
	l.dispatch(t, ledger.IntentStatusFailed)
	if got := l.record(t, ledger.IntentStatusFailed, "permanent"); !strings.Contains(got.Detail, "out-of-stock") {
		t.Fatalf("detail %q does not name the reason", got.Detail)
	}
	l.facts(t, 1, 0)

	g := lambdaSetup(t)
	g.script(t, "garbage")
	g.dispatch(t, ledger.IntentStatusQuarantined)
	g.record(t, ledger.IntentStatusQuarantined, "lambda_answer_invalid")
}

// The function applied and then outlived the call's timeout: the outcome
// is uncertain, and Lambda neither deduplicates nor can say what it did,
// so the intent is QUARANTINED at its next claim without a second call.
func TestLambdaTargetTimeoutAfterApplyIsQuarantinedNotRepeated(t *testing.T) {
	l := lambdaSetup(t)
	l.script(t, "apply-sleep 1500")
	o := l.dispatch(t, ledger.IntentStatusUncertain)
	if !errors.Is(o.Err, outbox.ErrUncertain) {
		t.Fatalf("err %v", o.Err)
	}
	l.due(o)
	o = l.dispatch(t, ledger.IntentStatusQuarantined)
	if o.Called {
		t.Fatalf("the function was called again: %+v", o)
	}
	if got := l.record(t, ledger.IntentStatusQuarantined, "idempotency_window_passed"); !strings.Contains(got.Detail, "does not deduplicate") {
		t.Fatalf("detail %q", got.Detail)
	}
	time.Sleep(1200 * time.Millisecond) // the invocation runs to its end
	l.facts(t, 1, 1)
}

func TestLambdaTargetLostAnswerIsQuarantinedNotRepeated(t *testing.T) {
	l := lambdaSetup(t)
	l.rec.Arm(awstrace.Crash{Op: "Lambda.Invoke", Nth: 1, When: awstrace.Lost})
	o := l.dispatch(t, ledger.IntentStatusUncertain)
	l.due(o)
	l.dispatch(t, ledger.IntentStatusQuarantined)
	l.record(t, ledger.IntentStatusQuarantined, "idempotency_window_passed")
	l.facts(t, 1, 1)
	if n := l.rec.Count("Lambda.Invoke"); n != 1 {
		t.Fatalf("%d Invoke requests, want 1 (the SDK must not retry a lost answer)", n)
	}
}

func TestLambdaTargetDuplicateClaimInvokesOnce(t *testing.T) {
	l := lambdaSetup(t)
	racingDispatchersSucceedOnce(t, l.env)
	l.facts(t, 1, 1)
}

func TestLambdaTargetPayloadOverTheLimitIsNeverSent(t *testing.T) {
	l := lambdaSetup(t)
	big := outbox.Call{Key: op, Kind: kind, Subject: "O-42", Payload: map[string]any{"blob": strings.Repeat("x", outbox.MaxLambdaSyncPayload)}}
	_, err := l.eff.Do(context.Background(), big)
	var me *outbox.MisconfiguredError
	if !errors.As(err, &me) || me.Code != outbox.CodePayloadTooLarge || !strings.Contains(err.Error(), "6291456") {
		t.Fatalf("err %v", err)
	}
	if n := l.front.Invocations("fulfil"); n != 0 {
		t.Fatalf("%d invocations", n)
	}
}

// racingDispatchersSucceedOnce runs two dispatchers on the intent at once:
// one claims and succeeds, the other finds it not claimable.
func racingDispatchersSucceedOnce(t *testing.T, e env) {
	t.Helper()
	b := *e.D
	b.Owner = "dispatcher-b"
	var wg sync.WaitGroup
	outs := make([]outbox.Outcome, 2)
	errs := make([]error, 2)
	for i, d := range []*outbox.Dispatcher{e.D, &b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = d.Dispatch(context.Background(), op)
		}()
	}
	wg.Wait()
	ok := 0
	for i := range errs {
		switch {
		case errs[i] == nil && outs[i].Status == ledger.IntentStatusSucceeded:
			ok++
		case errors.Is(errs[i], ledger.ErrNotClaimable):
		default:
			t.Fatalf("dispatcher %d: %+v %v", i, outs[i], errs[i])
		}
	}
	if ok != 1 {
		t.Fatalf("%d dispatchers succeeded, want 1", ok)
	}
	e.notClaimable(t)
}

// ---- SQS ----

type sqsEnv struct {
	env
	eff   *outbox.SQSEffect
	queue string
	url   string
	rec   *awstrace.Recorder
	proxy *hangProxy
	sent  *sentInputs
}

// sentInputs keeps every SendMessage input, for what goaws does not show.
type sentInputs struct {
	outbox.SQSSender
	mu  sync.Mutex
	ins []*sqs.SendMessageInput
}

func (s *sentInputs) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	s.mu.Lock()
	s.ins = append(s.ins, in)
	s.mu.Unlock()
	return s.SQSSender.SendMessage(ctx, in, opts...)
}

// sqsSetup creates a queue (a FIFO one when fifo) on the local SQS,
// reached through a hangProxy, as the intent's effect.
func sqsSetup(t *testing.T, fifo bool, attrs map[string]string, payload map[string]any) sqsEnv {
	t.Helper()
	ctx := context.Background()
	srv, err := localaws.StartSQS("")
	if err != nil {
		t.Fatal(err)
	}
	name := localaws.UniqueName("target")
	if fifo {
		name += ".fifo"
		attrs = map[string]string{"FifoQueue": "true"}
	}
	q, err := srv.Client().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
	proxy := newHangProxy(t, srv.URL)
	rec := &awstrace.Recorder{}
	client := sqs.NewFromConfig(localaws.Config(), func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(proxy.srv.URL)
		o.APIOptions = append(o.APIOptions, rec.APIOption)
	})
	target, err := outbox.ParseTarget("arn:aws:sqs:"+localaws.Region+":000000000000:"+name, localaws.Region)
	if err != nil {
		t.Fatal(err)
	}
	e := setupPayload(t, payload)
	sent := &sentInputs{SQSSender: client}
	eff := &outbox.SQSEffect{Name: kind, Target: target, Client: sent, Timeout: callTimeout, Scopes: []string{outbox.AllScopes}, Now: e.Clock.Now}
	e.D.Effects[kind] = eff
	return sqsEnv{env: e, eff: eff, queue: name, url: aws.ToString(q.QueueUrl), rec: rec, proxy: proxy, sent: sent}
}

// messages drains the queue and returns the operation ids its messages
// carry (the attribute), checking each body names the same one.
func (s sqsEnv) messages(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	srv, _ := localaws.StartSQS("")
	c := srv.Client()
	var ops []string
	for range 10 {
		// The queue was created without a visibility timeout (goaws's
		// default is 0 s): a message received without one becomes visible
		// again at the emulator's next tick, and its receipt handle stops
		// deleting it.
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(s.url), MaxNumberOfMessages: 10,
			MessageAttributeNames: []string{"All"}, VisibilityTimeout: 30})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			break
		}
		for _, m := range out.Messages {
			var body outbox.TargetCall
			if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &body); err != nil {
				t.Fatal(err)
			}
			attr := aws.ToString(m.MessageAttributes[outbox.SQSOperationAttribute].StringValue)
			if attr != body.OperationID || body.Kind != kind || body.Subject != "O-42" {
				t.Fatalf("message: attribute %q, body %+v", attr, body)
			}
			ops = append(ops, attr)
			if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(s.url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ops
}

func (s sqsEnv) delivered(t *testing.T, n int) {
	t.Helper()
	if ops := s.messages(t); len(ops) != n {
		t.Fatalf("%d messages at the queue (%v), want %d", len(ops), ops, n)
	}
}

var small = map[string]any{"amount": 1200}

func TestSQSTargetStandardQueueSendsOneMessageWithTheOperationID(t *testing.T) {
	s := sqsSetup(t, false, nil, small)
	s.dispatch(t, ledger.IntentStatusSucceeded)
	s.record(t, ledger.IntentStatusSucceeded, "ok_200")
	s.notClaimable(t)
	if ops := s.messages(t); len(ops) != 1 || ops[0] != op {
		t.Fatalf("messages %v", ops)
	}
	if in := s.sent.ins[0]; in.MessageDeduplicationId != nil || in.MessageGroupId != nil {
		t.Fatalf("a standard queue's message has FIFO ids: %+v", in)
	}
}

func TestSQSTargetRequestNotSentIsRetried(t *testing.T) {
	r := sqsSetup(t, false, nil, small)
	r.rec.Arm(awstrace.Crash{Op: "SQS.SendMessage", Nth: 1, When: awstrace.Before})
	o := r.dispatch(t, ledger.IntentStatusRetryWait)
	r.record(t, ledger.IntentStatusRetryWait, "retryable")
	r.rec.Reset()
	r.due(o)
	r.dispatch(t, ledger.IntentStatusSucceeded)
	r.delivered(t, 1)
}

// A message over the queue's MaximumMessageSize, and a queue that refuses
// the message, end QUARANTINED for the effect's owner: nothing is stored.
func TestSQSTargetOversizedMessageIsQuarantinedWithTheLimitNamed(t *testing.T) {
	s := sqsSetup(t, false, map[string]string{"MaximumMessageSize": "1024"}, map[string]any{"blob": strings.Repeat("x", 1100)})
	s.dispatch(t, ledger.IntentStatusQuarantined)
	if got := s.record(t, ledger.IntentStatusQuarantined, outbox.CodePayloadTooLarge); !strings.Contains(got.Detail, "1024") {
		t.Fatalf("detail %q does not name the limit", got.Detail)
	}
	s.delivered(t, 0)
	if n := s.rec.Count("SQS.SendMessage"); n != 0 {
		t.Fatalf("%d SendMessage requests", n)
	}
}

func TestSQSTargetStandardQueueTimeoutAfterApplyIsQuarantinedNotRepeated(t *testing.T) {
	u := sqsSetup(t, false, nil, small)
	u.proxy.arm(".SendMessage")
	o := u.dispatch(t, ledger.IntentStatusUncertain)
	u.due(o)
	o = u.dispatch(t, ledger.IntentStatusQuarantined)
	if o.Called {
		t.Fatal("called again")
	}
	u.record(t, ledger.IntentStatusQuarantined, "idempotency_window_passed")
	u.delivered(t, 1)
}

func TestSQSTargetStandardQueueLostAnswerIsQuarantinedNotRepeated(t *testing.T) {
	s := sqsSetup(t, false, nil, small)
	s.rec.Arm(awstrace.Crash{Op: "SQS.SendMessage", Nth: 1, When: awstrace.Lost})
	o := s.dispatch(t, ledger.IntentStatusUncertain)
	s.due(o)
	s.dispatch(t, ledger.IntentStatusQuarantined)
	s.record(t, ledger.IntentStatusQuarantined, "idempotency_window_passed")
	s.delivered(t, 1)
	if n := s.rec.Count("SQS.SendMessage"); n != 1 {
		t.Fatalf("%d SendMessage requests, want 1", n)
	}
}

// On a FIFO queue the same MessageDeduplicationId makes a retry after a
// lost answer safe for 5 minutes: the retry is sent, and the queue holds
// one message. Past the 5 minutes the intent is QUARANTINED instead.
func TestSQSTargetFIFOQueueRetriesAnUncertainSendWithinFiveMinutes(t *testing.T) {
	s := sqsSetup(t, true, nil, small)
	s.rec.Arm(awstrace.Crash{Op: "SQS.SendMessage", Nth: 1, When: awstrace.Lost})
	o := s.dispatch(t, ledger.IntentStatusUncertain)
	s.due(o)
	s.dispatch(t, ledger.IntentStatusSucceeded)
	s.delivered(t, 1)
	if len(s.sent.ins) != 2 {
		t.Fatalf("%d sends, want 2", len(s.sent.ins))
	}
	for _, in := range s.sent.ins {
		if aws.ToString(in.MessageDeduplicationId) != op || aws.ToString(in.MessageGroupId) != "/O-42" {
			t.Fatalf("dedup id %q group %q, want %q and %q", aws.ToString(in.MessageDeduplicationId), aws.ToString(in.MessageGroupId), op, "/O-42")
		}
	}

	late := sqsSetup(t, true, nil, small)
	late.rec.Arm(awstrace.Crash{Op: "SQS.SendMessage", Nth: 1, When: awstrace.Lost})
	late.dispatch(t, ledger.IntentStatusUncertain)
	late.Clock.Advance(outbox.SQSFIFODedupWindow)
	late.dispatch(t, ledger.IntentStatusQuarantined)
	late.record(t, ledger.IntentStatusQuarantined, "idempotency_window_passed")
	late.delivered(t, 1)
}

func TestSQSTargetDuplicateClaimSendsOnce(t *testing.T) {
	s := sqsSetup(t, false, nil, small)
	racingDispatchersSucceedOnce(t, s.env)
	s.delivered(t, 1)
}

// ---- EventBridge ----

type ebEnv struct {
	env
	eb    *localaws.EventBridge
	rec   *awstrace.Recorder
	proxy *hangProxy
}

func ebSetup(t *testing.T) ebEnv {
	t.Helper()
	eb := localaws.NewEventBridge(testRegion, testAccount)
	t.Cleanup(eb.Close)
	target, err := outbox.ParseTarget(eb.CreateBus("orders"), testRegion)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newHangProxy(t, eb.URL)
	rec := &awstrace.Recorder{}
	cfg := localaws.Config()
	cfg.Region = testRegion
	client := eventbridge.NewFromConfig(cfg, func(o *eventbridge.Options) {
		o.BaseEndpoint = aws.String(proxy.srv.URL)
		o.APIOptions = append(o.APIOptions, rec.APIOption)
	})
	e := setup(t)
	e.D.Effects[kind] = &outbox.EventBridgeEffect{Name: kind, Target: target, Client: client, Timeout: callTimeout, Scopes: []string{outbox.AllScopes}}
	return ebEnv{env: e, eb: eb, rec: rec, proxy: proxy}
}

// events counts the events on the bus for the operation.
func (b ebEnv) events(t *testing.T, n int) {
	t.Helper()
	got := 0
	for _, ev := range b.eb.Events("orders") {
		var d outbox.TargetCall
		if err := json.Unmarshal([]byte(ev.Detail), &d); err != nil {
			t.Fatal(err)
		}
		if ev.Source != outbox.EventBridgeSource || ev.DetailType != kind || d.Subject != "O-42" {
			t.Fatalf("event %+v", ev)
		}
		if d.OperationID == op {
			got++
		}
	}
	if got != n {
		t.Fatalf("%d events for %s on the bus, want %d", got, op, n)
	}
}

func TestEventBridgeTargetPutsOneEventWithTheOperationID(t *testing.T) {
	b := ebSetup(t)
	b.dispatch(t, ledger.IntentStatusSucceeded)
	b.record(t, ledger.IntentStatusSucceeded, "ok_200")
	b.notClaimable(t)
	b.events(t, 1)
}

// A failed entry was not put: it is retried or ends by its error code.
func TestEventBridgeTargetFailedEntryIsRetriedOrEndedByItsCode(t *testing.T) {
	b := ebSetup(t)
	b.eb.FailEntries("ThrottlingException", "InternalFailure")
	o := b.dispatch(t, ledger.IntentStatusRetryWait)
	b.due(o)
	o = b.dispatch(t, ledger.IntentStatusRetryWait)
	b.due(o)
	b.dispatch(t, ledger.IntentStatusSucceeded)
	b.events(t, 1)

	for code, want := range map[string]struct {
		status ledger.IntentStatus
		code   string
	}{
		"InvalidArgument":                 {ledger.IntentStatusFailed, "permanent"},
		"MalformedDetail":                 {ledger.IntentStatusFailed, "permanent"},
		"AccessDeniedException":           {ledger.IntentStatusQuarantined, outbox.CodeTargetRefused},
		"NotAuthorizedForSourceException": {ledger.IntentStatusQuarantined, outbox.CodeTargetRefused},
	} {
		f := ebSetup(t)
		f.eb.FailEntries(code)
		f.dispatch(t, want.status)
		if got := f.record(t, want.status, want.code); !strings.Contains(got.Detail, code) {
			t.Fatalf("%s: detail %q", code, got.Detail)
		}
		f.events(t, 0)
	}
}

func TestEventBridgeTargetTimeoutAfterApplyIsQuarantinedNotRepeated(t *testing.T) {
	b := ebSetup(t)
	b.proxy.arm(".PutEvents")
	o := b.dispatch(t, ledger.IntentStatusUncertain)
	b.due(o)
	if o = b.dispatch(t, ledger.IntentStatusQuarantined); o.Called {
		t.Fatal("called again")
	}
	b.record(t, ledger.IntentStatusQuarantined, "idempotency_window_passed")
	b.events(t, 1)
}

// A lost answer, and a 500 for the whole request, are uncertain: the
// event may have been put, and it is not put a second time.
func TestEventBridgeTargetLostAnswerIsQuarantinedNotRepeated(t *testing.T) {
	b := ebSetup(t)
	b.rec.Arm(awstrace.Crash{Op: "EventBridge.PutEvents", Nth: 1, When: awstrace.Lost})
	o := b.dispatch(t, ledger.IntentStatusUncertain)
	b.due(o)
	b.dispatch(t, ledger.IntentStatusQuarantined)
	b.events(t, 1)

	f := ebSetup(t)
	f.eb.FailNext(500, "InternalException")
	o = f.dispatch(t, ledger.IntentStatusUncertain)
	f.due(o)
	f.dispatch(t, ledger.IntentStatusQuarantined)
	f.record(t, ledger.IntentStatusQuarantined, "idempotency_window_passed")
}

func TestEventBridgeTargetDuplicateClaimPutsOnce(t *testing.T) {
	b := ebSetup(t)
	racingDispatchersSucceedOnce(t, b.env)
	b.events(t, 1)
}

// ---- Step Functions ----

type sfnEnv struct {
	env
	sf    *localaws.StepFunctions
	eff   *outbox.StepFunctionsEffect
	rec   *awstrace.Recorder
	proxy *hangProxy
}

func sfnSetup(t *testing.T, typ string) sfnEnv {
	t.Helper()
	sf := localaws.NewStepFunctions(testRegion, testAccount)
	t.Cleanup(sf.Close)
	target, err := outbox.ParseTarget(sf.CreateStateMachine("fulfil", typ), testRegion)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newHangProxy(t, sf.URL)
	rec := &awstrace.Recorder{}
	cfg := localaws.Config()
	cfg.Region = testRegion
	client := sfn.NewFromConfig(cfg, func(o *sfn.Options) {
		o.BaseEndpoint = aws.String(proxy.srv.URL)
		o.APIOptions = append(o.APIOptions, rec.APIOption)
	})
	e := setup(t)
	eff := &outbox.StepFunctionsEffect{Name: kind, Target: target, Client: client, Timeout: callTimeout, Scopes: []string{outbox.AllScopes}}
	e.D.Effects[kind] = eff
	return sfnEnv{env: e, sf: sf, eff: eff, rec: rec, proxy: proxy}
}

func (s sfnEnv) executions(t *testing.T, n int) []localaws.Execution {
	t.Helper()
	exs := s.sf.Executions("fulfil")
	if len(exs) != n {
		t.Fatalf("%d executions started, want %d", len(exs), n)
	}
	for _, ex := range exs {
		var in outbox.TargetCall
		if err := json.Unmarshal([]byte(ex.Input), &in); err != nil || in.OperationID != op || ex.Name != outbox.ExecutionName(op) {
			t.Fatalf("execution %+v (%v)", ex, err)
		}
	}
	return exs
}

func TestStepFunctionsTargetStartsOneExecutionNamedAfterTheOperation(t *testing.T) {
	s := sfnSetup(t, "STANDARD")
	s.dispatch(t, ledger.IntentStatusSucceeded)
	s.record(t, ledger.IntentStatusSucceeded, "ok_200")
	s.notClaimable(t)
	s.executions(t, 1)
}

func TestStepFunctionsTargetExecutionLimitIsRetried(t *testing.T) {
	s := sfnSetup(t, "STANDARD")
	s.sf.FailNext("StartExecution", 400, "ExecutionLimitExceeded")
	o := s.dispatch(t, ledger.IntentStatusRetryWait)
	s.due(o)
	s.dispatch(t, ledger.IntentStatusSucceeded)
	s.executions(t, 1)
}

// An EXPRESS workflow does not deduplicate by name: refused before any
// start. A state machine that does not exist: refused by Step Functions.
func TestStepFunctionsTargetExpressWorkflowAndMissingMachineAreQuarantined(t *testing.T) {
	x := sfnSetup(t, "EXPRESS")
	x.dispatch(t, ledger.IntentStatusQuarantined)
	x.record(t, ledger.IntentStatusQuarantined, "express_workflow_refused")
	x.executions(t, 0)
	if n := x.rec.Count("SFN.StartExecution"); n != 0 {
		t.Fatalf("%d StartExecution requests", n)
	}

	m := sfnSetup(t, "STANDARD")
	target := m.eff.Target
	target.ARN, target.Name = strings.Replace(target.ARN, "fulfil", "gone", 1), "gone"
	m.D.Effects[kind] = &outbox.StepFunctionsEffect{Name: kind, Target: target, Client: m.eff.Client, Timeout: callTimeout, Scopes: []string{outbox.AllScopes}}
	m.dispatch(t, ledger.IntentStatusQuarantined)
	m.record(t, ledger.IntentStatusQuarantined, outbox.CodeTargetRefused)
}

// A timeout after the start, and a lost answer, are resolved by the
// status lookup (DescribeExecution) without a second start.
func TestStepFunctionsTargetUncertainStartIsResolvedByTheLookup(t *testing.T) {
	for name, arm := range map[string]func(s sfnEnv){
		"timeout after apply": func(s sfnEnv) { s.proxy.arm(".StartExecution") },
		"lost answer": func(s sfnEnv) {
			s.rec.Arm(awstrace.Crash{Op: "SFN.StartExecution", Nth: 1, When: awstrace.Lost})
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := sfnSetup(t, "STANDARD")
			arm(s)
			o := s.dispatch(t, ledger.IntentStatusUncertain)
			s.due(o)
			o = s.dispatch(t, ledger.IntentStatusSucceeded)
			if o.Called || o.Code != "lookup_applied" {
				t.Fatalf("outcome %+v", o)
			}
			s.executions(t, 1)
		})
	}
}

// A 500 before anything started: the lookup finds no execution, and the
// retry under the same name starts it once.
func TestStepFunctionsTargetLookupNotAppliedRetriesUnderTheSameName(t *testing.T) {
	s := sfnSetup(t, "STANDARD")
	s.sf.FailNext("StartExecution", 500, "InternalFailure")
	o := s.dispatch(t, ledger.IntentStatusUncertain)
	s.due(o)
	if o = s.dispatch(t, ledger.IntentStatusSucceeded); !o.Called {
		t.Fatalf("outcome %+v", o)
	}
	s.executions(t, 1)
}

// ExecutionAlreadyExists for a closed execution of the same name and
// input is the earlier start's success; with another input the name is
// taken by something else.
func TestStepFunctionsTargetExecutionAlreadyExistsIsDecidedByTheInput(t *testing.T) {
	ctx := context.Background()
	s := sfnSetup(t, "STANDARD")
	input, _ := json.Marshal(outbox.TargetCall{OperationID: op, Kind: kind, Source: "stripe", Subject: "O-42", Version: "12", Payload: map[string]any{"amount": 1200, "currency": "eur"}})
	c := s.sf.Client()
	started, err := c.StartExecution(ctx, &sfn.StartExecutionInput{StateMachineArn: aws.String(s.eff.Target.ARN), Name: aws.String(outbox.ExecutionName(op)), Input: aws.String(string(input))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.sf.Finish(aws.ToString(started.ExecutionArn), "FAILED"); err != nil {
		t.Fatal(err)
	}
	o := s.dispatch(t, ledger.IntentStatusSucceeded)
	if o.Code != "replayed" {
		t.Fatalf("outcome %+v", o)
	}
	s.executions(t, 1)

	x := sfnSetup(t, "STANDARD")
	if _, err := x.sf.Client().StartExecution(ctx, &sfn.StartExecutionInput{StateMachineArn: aws.String(x.eff.Target.ARN),
		Name: aws.String(outbox.ExecutionName(op)), Input: aws.String(`{"someone":"else"}`)}); err != nil {
		t.Fatal(err)
	}
	x.dispatch(t, ledger.IntentStatusQuarantined)
	x.record(t, ledger.IntentStatusQuarantined, "execution_name_taken")
}

func TestStepFunctionsTargetDuplicateClaimStartsOnce(t *testing.T) {
	s := sfnSetup(t, "STANDARD")
	racingDispatchersSucceedOnce(t, s.env)
	s.executions(t, 1)
}

// ---- requests per dispatch ----

// The AWS requests one dispatch makes, per target, as BENCHMARKS.md
// states them: the first dispatch of a process also reads what the
// effect caches (an SQS queue's URL and size, a state machine's type).
func TestAWSTargetRequestsPerDispatch(t *testing.T) {
	l := lambdaSetup(t)
	l.dispatch(t, ledger.IntentStatusSucceeded)
	s := sqsSetup(t, true, nil, small)
	s.dispatch(t, ledger.IntentStatusSucceeded)
	b := ebSetup(t)
	b.dispatch(t, ledger.IntentStatusSucceeded)
	f := sfnSetup(t, "STANDARD")
	f.dispatch(t, ledger.IntentStatusSucceeded)
	for _, tc := range []struct {
		rec  *awstrace.Recorder
		want string
	}{
		{l.rec, "Lambda.Invoke=1"},
		{s.rec, "SQS.GetQueueAttributes=1 SQS.GetQueueUrl=1 SQS.SendMessage=1"},
		{b.rec, "EventBridge.PutEvents=1"},
		{f.rec, "SFN.DescribeStateMachine=1 SFN.StartExecution=1"},
	} {
		if got := tc.rec.String(); got != tc.want {
			t.Errorf("first dispatch: %s, want %s", got, tc.want)
		}
		tc.rec.Reset()
	}
	// A later dispatch in the same process: one request.
	if _, err := s.eff.Do(context.Background(), outbox.Call{Key: "op-2", Kind: kind, Subject: "O-43"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.eff.Do(context.Background(), outbox.Call{Key: "op-2", Kind: kind, Subject: "O-43"}); err != nil {
		t.Fatal(err)
	}
	if got := s.rec.String() + " " + f.rec.String(); got != "SQS.SendMessage=1 SFN.StartExecution=1" {
		t.Errorf("later dispatch: %s", got)
	}
	// Resolving an uncertain start: one DescribeExecution, no start.
	f.rec.Reset()
	if applied, known, err := f.eff.Lookup(context.Background(), "op-2"); err != nil || !applied || !known {
		t.Fatalf("lookup: %v %v %v", applied, known, err)
	}
	if got := f.rec.String(); got != "SFN.DescribeExecution=1" {
		t.Errorf("lookup: %s", got)
	}
}

// ---- configuration ----

func TestParseEffectsTargetsAreCheckedAtStartWithTheKeyNamed(t *testing.T) {
	doc := func(effect string) string { return `{"effects":[{"kind":"k",` + effect + `,"scopes":["shop"]}]}` }
	for _, good := range []string{
		`"target":"arn:aws:lambda:eu-west-1:123456789012:function:fulfil"`,
		`"target":"arn:aws:lambda:eu-west-1:123456789012:function:fulfil:live","timeout_seconds":15`,
		`"target":"arn:aws:sqs:eu-west-1:123456789012:orders"`,
		`"target":"arn:aws:sqs:eu-west-1:123456789012:orders.fifo"`,
		`"target":"arn:aws:events:eu-west-1:123456789012:event-bus/orders"`,
		`"target":"arn:aws:states:eu-west-1:123456789012:stateMachine:fulfilment"`,
	} {
		if _, err := outbox.ParseEffectsIn([]byte(doc(good)), testRegion); err != nil {
			t.Errorf("%s: %v", good, err)
		}
	}
	for effect, want := range map[string]string{
		`"url":"https://x.example","target":"arn:aws:sqs:eu-west-1:123456789012:q"`:                           "url and target",
		`"target":"arn:aws:sqs:us-east-1:123456789012:q"`:                                                     "target: \"arn:aws:sqs:us-east-1:123456789012:q\" is in region us-east-1, the dispatcher runs in eu-west-1",
		`"target":"arn:aws:sns:eu-west-1:123456789012:topic"`:                                                 `target: "arn:aws:sns:eu-west-1:123456789012:topic" is an ARN of service "sns"`,
		`"target":"arn:aws:s3:::bucket"`:                                                                      `an ARN of service "s3"`,
		`"target":"arn:aws:states:eu-west-1:123456789012:stateMachine:fulfilment:prod"`:                       "a version or alias ARN is refused",
		`"target":"arn:aws:events:eu-west-1:123456789012:event-bus/aws.partner/x"`:                            "not an EventBridge event bus ARN",
		`"target":"arn:aws:events:eu-west-1:123456789012:event-bus/aws.partner"`:                              "partner event bus",
		`"target":"arn:aws:sqs:eu-west-1:123456789012:bad.name"`:                                              "not an SQS queue ARN",
		`"target":"arn:aws:lambda:eu-west-1:123456789012:function:fulfil","status_url":"https://x.example/s"`: "status_url: an AWS target has no status endpoint",
		`"target":"arn:aws:lambda:eu-west-1:123456789012:function:fulfil","secret":"env:TOKEN"`:               "secret: an AWS target is called with the dispatcher's role",
		`"target":"arn:aws:sqs:eu-west-1:123456789012:q.fifo","idempotency_window_hours":1`:                   "idempotency_window_hours: an AWS target's deduplication window is its service's",
		`"target":"arn:aws:lambda:eu-west-1:123456789012:function:fulfil","timeout_seconds":60`:               "timeout_seconds must be between 1 and 20",
		`"target":"arn:aws:lambda:eu-west-1:12345:function:fulfil"`:                                           "12-digit account",
	} {
		_, err := outbox.ParseEffectsIn([]byte(doc(effect)), testRegion)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `effect 0 ("k")`) {
			t.Errorf("%s: %v, want an error naming the effect and containing %q", effect, err, want)
		}
	}
	// Without a region the ARN is checked in every other way; the
	// dispatcher's start (LoadEffects) needs its region.
	sqsDoc := doc(`"target":"arn:aws:sqs:us-east-1:123456789012:q"`)
	if _, err := outbox.ParseEffects([]byte(sqsDoc)); err != nil {
		t.Fatalf("ParseEffects: %v", err)
	}
	env := map[string]string{"EFFECTS": sqsDoc}
	if _, err := outbox.LoadEffects(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "AWS_REGION") {
		t.Fatalf("LoadEffects without a region: %v", err)
	}
	env["AWS_REGION"] = testRegion
	if _, err := outbox.LoadEffects(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "the dispatcher runs in eu-west-1") {
		t.Fatalf("LoadEffects in another region: %v", err)
	}
	env["AWS_REGION"] = "us-east-1"
	cfgs, err := outbox.LoadEffects(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	effs, err := outbox.Build(cfgs, nil, aws.Config{Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := effs["k"].(*outbox.SQSEffect); !ok || e.DedupWindow() != 0 || !e.AllowsScope("shop") || e.Timeout != 10*time.Second {
		t.Fatalf("built %#v", effs["k"])
	}
}

func TestTargetNamesAreStableAndWithinTheServicesRules(t *testing.T) {
	hex32 := "0123456789abcdef0123456789abcdef"
	if got := outbox.ExecutionName(hex32); got != hex32 {
		t.Fatalf("execution name of an operation id: %q", got)
	}
	for _, op := range []string{"a:b", strings.Repeat("n", 81), "h-abc", "ünïcode", ""} {
		name := outbox.ExecutionName(op)
		if name != outbox.ExecutionName(op) || len(name) > 80 || !strings.HasPrefix(name, "h-") || strings.ContainsAny(name, ":/ ") {
			t.Errorf("ExecutionName(%q) = %q", op, name)
		}
	}
	if got := outbox.DeduplicationID("op:1/x"); got != "op:1/x" {
		t.Fatalf("dedup id %q", got)
	}
	if got := outbox.DeduplicationID(strings.Repeat("d", 129)); len(got) != 66 || !strings.HasPrefix(got, "h-") {
		t.Fatalf("dedup id of 129 characters: %q", got)
	}
	if got := outbox.MessageGroupID("shop", "O-42"); got != "shop/O-42" {
		t.Fatalf("group %q", got)
	}
	for _, subject := range []string{"order 42", strings.Repeat("s", 124), "ümlaut"} {
		if g := outbox.MessageGroupID("shop", subject); len(g) > 128 || !strings.HasPrefix(g, "h-") || g == outbox.MessageGroupID("other", subject) {
			t.Errorf("group of %q: %q", subject, g)
		}
	}
}

// Each pipeline and stage names itself as the source of the events it
// puts (OUTBOX_EVENT_SOURCE), so a rule on a shared bus tells dev from
// prod by source; without it the source is the historical default.
func TestEventBridgeEventsCarryThePipelinesSource(t *testing.T) {
	for _, c := range []struct{ set, want string }{
		{"effectively-once.webhooks-prod", "effectively-once.webhooks-prod"},
		{"", config.DefaultEventSource},
	} {
		// GIVEN the dispatcher's configuration, read as at cold start, with
		// an effect on an EventBridge bus
		eb := localaws.NewEventBridge(testRegion, testAccount)
		t.Cleanup(eb.Close)
		bus := eb.CreateBus("orders")
		vars := map[string]string{"TABLE_NAME": "ledger", "EFFECTS_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/effects",
			"EFFECTS": `{"effects":[{"kind":"` + kind + `","target":"` + bus + `","scopes":["*"]}]}`, "OUTBOX_EVENT_SOURCE": c.set, "AWS_REGION": testRegion}
		cfg, err := outbox.LoadDispatcherConfig(func(k string) string { return vars[k] })
		if err != nil {
			t.Fatal(err)
		}
		awsCfg := localaws.Config()
		awsCfg.Region, awsCfg.BaseEndpoint = testRegion, aws.String(eb.URL)
		effects, err := outbox.Build(cfg.Effects, nil, awsCfg)
		if err != nil {
			t.Fatal(err)
		}
		// WHEN it performs an intent
		e := setup(t)
		e.D.Effects[kind] = effects[kind]
		e.dispatch(t, ledger.IntentStatusSucceeded)
		// THEN the one event on the bus has the pipeline's source
		evs := eb.Events("orders")
		if len(evs) != 1 || evs[0].Source != c.want {
			t.Fatalf("OUTBOX_EVENT_SOURCE=%q: events %+v, want one with source %q", c.set, evs, c.want)
		}
	}
}

func TestAnEventSourceEventBridgeRefusesFailsTheDispatchersStart(t *testing.T) {
	for _, s := range []string{"aws.orders", "orders events", strings.Repeat("x", 257)} {
		vars := map[string]string{"TABLE_NAME": "ledger", "EFFECTS_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/effects",
			"EFFECTS": `{"effects":[{"kind":"k","url":"https://x.example/k","scopes":["*"]}]}`, "OUTBOX_EVENT_SOURCE": s}
		if _, err := outbox.LoadDispatcherConfig(func(k string) string { return vars[k] }); !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), "OUTBOX_EVENT_SOURCE") {
			t.Errorf("OUTBOX_EVENT_SOURCE=%q: %v, want a configuration error naming it", s, err)
		}
	}
}
