// Package pipelinetest provides an in-process pipeline for tests: the intake
// and processor handlers, driven through their real Lambda JSON paths,
// against minidyn (DynamoDB) and goaws (SQS) over the wire, with an event
// source mapping that polls, invokes, deletes only the successes and leaves
// failures to the visibility timeout and the redrive policy. Every client has
// an awstrace.Recorder, so a test can count requests and crash any worker or
// the intake right before or after any call.
//
// EnableOutbox adds the effects stage: processors announce committed intents
// on an effects queue, dispatcher instances (the dispatcher Lambda's handler
// through the same JSON path, each with its own recorder) perform them
// against a downstream.Fake served over HTTP on the manual clock, and
// Outbox.Reconcile runs the reconciler's sweep for lost announcements.
// Every test that enables it adds its operation ids and their effective
// calls to a suite report (SuiteEffects), which TestMain prints.
package pipelinetest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/harness/stripefake"
	"github.com/effectively-once/webhooks/internal/intake"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/source"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Test secrets. They are visibly fake, exist only in tests, and are
// documented in docs/testing.md ("Test secrets").
const (
	SecretPrimary = "whsec_test_FAKE_primary_0000000000000000"
	SecretRotated = "whsec_test_FAKE_rotated_1111111111111111"
	SecretUnknown = "whsec_test_FAKE_unknown_2222222222222222"
)

// Options tune a Harness; zero values are sensible.
type Options struct {
	MaxReceiveCount int           // default 3; also the processor's MaxAttempts
	Lease           time.Duration // default 30 s (on the manual clock)
	RetryCap        time.Duration // default 1 s: a retry is due when its message reappears
	Registry        *projection.Registry
	// SourcesDoc replaces the default configuration: one "stripe" source
	// whose secrets are env:STRIPE_PRIMARY and env:STRIPE_ROTATED.
	SourcesDoc string
	// Secrets adds values for env: secret references (visibly fake ones).
	Secrets map[string]string
	// Resolvers are the resolver factories by provider kind; default
	// builtin.Resolvers() (Stripe thin events).
	Resolvers map[string]projection.ResolverFactory
}

// Harness is one isolated pipeline: its own table and queues.
type Harness struct {
	T      testing.TB
	Clock  *ledger.ManualClock
	Dynamo *localaws.Dynamo
	SQS    *sqs.Client // clean client: the event source mapping and assertions
	DB     *dynamodb.Client
	Queues queue.URLs
	Ledger *ledger.Ledger // clean ledger for assertions
	Table  string

	IntakeRec *awstrace.Recorder
	Intake    *intake.Handler
	Sources   *source.Set
	// BridgeSQS signs as the bridge function's role (BridgeRole): what
	// Lambda writes the bridge DLQ with. Intake's DLQSenders allow it.
	BridgeSQS *sqs.Client

	// Outbox is the effects stage, once EnableOutbox has added it; workers
	// started after that announce their intents on its queue.
	Outbox *Outbox
	// Warehouse is the warehouse sink, once EnableWarehouse has added it;
	// workers started after that write a record intent per applied revision.
	Warehouse *Warehouse
	// Stripe is the fake Stripe API, once EnableStripeAPI has added it;
	// workers started after that fetch thin events' objects from it.
	Stripe *stripefake.Server
	// ProcessorLedger, when set, wraps the ledger of each chaos worker
	// (NewChaosWorker): a naive design's processor told something else.
	ProcessorLedger func(processor.Ledger) processor.Ledger
	// stripeAPI is the "stripe" source's api while the fake serves it.
	stripeAPI *projection.SourceAPI

	opts    Options
	secrets *source.Secrets // the env: references of Options.Secrets and the Stripe webhook secrets
	tokens  tokenSeq
	sqsSrv  *localaws.SQS
	// strict validates every transaction's parts on dynalite (StrictEnv).
	strict      *dynamodb.Client
	strictTable string
}

type tokenSeq struct {
	mu sync.Mutex
	n  int
}

func (s *tokenSeq) next() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return "lease-" + strconv.Itoa(s.n)
}

// Start is the manual clock's start.
var Start = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// DefaultSources is the harness's source configuration.
const DefaultSources = `{"sources":[{"name":"stripe","kind":"stripe","secrets":["env:STRIPE_PRIMARY","env:STRIPE_ROTATED"]}]}`

// New builds a pipeline for t.
func New(t testing.TB, o Options) *Harness {
	t.Helper()
	if o.MaxReceiveCount == 0 {
		o.MaxReceiveCount = 3
	}
	if o.Lease == 0 {
		o.Lease = 30 * time.Second
	}
	if o.RetryCap == 0 {
		o.RetryCap = time.Second
	}
	if o.Registry == nil {
		o.Registry = builtin.Default(builtin.StripeOptions{})
	}
	if o.Resolvers == nil {
		o.Resolvers = builtin.Resolvers()
	}
	ctx := context.Background()
	h := &Harness{T: t, Clock: ledger.NewManualClock(Start), opts: o, Table: "ledger"}
	h.Dynamo = localaws.NewDynamo()
	t.Cleanup(h.Dynamo.Close)
	sq, err := localaws.StartSQS("")
	if err != nil {
		t.Fatal(err)
	}
	h.DB = h.Dynamo.Client()
	h.SQS = sq.Client()
	h.sqsSrv = sq
	if err := ledger.CreateTable(ctx, h.DB, h.Table); err != nil {
		t.Fatal(err)
	}
	// With a dynalite named (go run ./scripts/dynalite -mode strict), every
	// transaction's parts are validated there too.
	if h.strict, h.strictTable, err = localaws.StrictFromEnv(ctx, StrictEnv, func(ctx context.Context, db *dynamodb.Client, table string) error {
		return ledger.CreateTable(ctx, db, table)
	}); err != nil {
		t.Fatal(err)
	}
	spec := queue.Spec{Name: localaws.UniqueName("events"), VisibilityTimeout: time.Second, MaxReceiveCount: o.MaxReceiveCount, DLQRetention: time.Hour}
	if h.Queues, err = queue.Create(ctx, h.SQS, spec); err != nil {
		t.Fatal(err)
	}
	h.Ledger = h.newLedger(h.DB, "observer")
	if o.SourcesDoc == "" {
		o.SourcesDoc = DefaultSources
	}
	if h.Sources, err = source.Parse([]byte(o.SourcesDoc)); err != nil {
		t.Fatal(err)
	}
	h.IntakeRec = &awstrace.Recorder{}
	h.secrets = &source.Secrets{Getenv: func(k string) string {
		if v, ok := o.Secrets[k]; ok {
			return v
		}
		return map[string]string{"STRIPE_PRIMARY": SecretPrimary, "STRIPE_ROTATED": SecretRotated}[k]
	}}
	h.Intake = &intake.Handler{
		Sources: h.Sources,
		Secrets: h.secrets,
		Ledger:  h.newLedger(h.Dynamo.Client(h.IntakeRec.APIOption), "intake"),
		Queue:   queue.Sender{Client: sq.Client(h.IntakeRec.APIOption), URL: h.Queues.Queue},
		Now:     h.Clock.Now,
		Log:     quietLog(),
		// The bridge DLQ sweep redelivers what the bridge's role wrote.
		DLQSenders: queue.Senders{BridgeRole.ID},
	}
	h.BridgeSQS = sq.ClientAs(BridgeRole)
	return h
}

// BridgeRole is the bridge function's role in the harness.
var BridgeRole = localaws.FunctionRole("bridge", "pipelinetest-bridge")

// StrictEnv names the dynalite that validates every transaction's parts
// (localaws.StrictTransactions), when set.
const StrictEnv = "LEDGER_TEST_STRICT_URL"

func (h *Harness) newLedger(db ledger.DynamoDB, actor string) *ledger.Ledger {
	if h.strict != nil {
		db = localaws.StrictTransactions{DB: db, Strict: h.strict, StrictTable: h.strictTable}
	}
	l, err := ledger.New(db, ledger.Options{Table: h.Table, Clock: h.Clock, Tokens: h.tokens.next, Actor: actor})
	if err != nil {
		h.T.Fatal(err)
	}
	return l
}

// StripeAPIKey is the fake Stripe API's restricted key in tests (visibly fake).
const StripeAPIKey = "rk_test_FAKE_pipeline_stripe_api_0000"

// stripeAPIRef is the secret reference the "stripe" source's api names
// while the fake serves it.
const stripeAPIRef = "env:PIPELINETEST_STRIPE_API_KEY"

// EnableStripeAPI serves a fake Stripe API (Stripe's clock is the manual
// clock) over HTTP and gives the "stripe" source an api for it, with a
// per-request timeout: workers started after this call resolve thin
// events through its resolver, which fetches their objects from it.
func (h *Harness) EnableStripeAPI(timeout time.Duration) *stripefake.Server {
	h.T.Helper()
	h.Stripe = stripefake.New(StripeAPIKey)
	h.Stripe.Now = h.Clock.Now
	srv := httptest.NewServer(h.Stripe)
	h.T.Cleanup(srv.Close)
	h.T.Cleanup(h.Stripe.ReleaseHangs)
	h.stripeAPI = &projection.SourceAPI{Secret: stripeAPIRef, URL: srv.URL, Timeout: timeout}
	return h.Stripe
}

// resolvers builds a worker's resolvers from the configuration, as the
// processor function does (processor.BuildResolvers), with the fake
// Stripe API as the "stripe" source's api once EnableStripeAPI has added
// it (its sub-second timeouts are not a configuration's).
func (h *Harness) resolvers() map[string]projection.Resolver {
	h.T.Helper()
	factories := maps.Clone(h.opts.Resolvers)
	if api, stripe := h.stripeAPI, factories["stripe"]; api != nil && stripe != nil {
		factories["stripe"] = func(src projection.ResolverSource) (projection.Resolver, error) {
			if src.Name == "stripe" {
				src.API = api
			}
			return stripe(src)
		}
	}
	secret := func(ctx context.Context, ref string) (string, error) {
		if ref == stripeAPIRef {
			return StripeAPIKey, nil
		}
		return h.secrets.Value(ctx, ref)
	}
	rs, err := processor.BuildResolvers(h.Sources, h.opts.Registry, factories, secret)
	if err != nil {
		h.T.Fatal(err)
	}
	return rs
}

// Sign returns a Stripe-Signature header for body, signed now with secret,
// by stripe-go's own test signer.
func (h *Harness) Sign(body []byte, secret string) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: h.Clock.Now()}).Header
}

// Deliver posts body to /webhooks/stripe with a header, through the intake's
// Lambda JSON path (API Gateway HTTP API payload 2.0).
func (h *Harness) Deliver(body []byte, signature string) intake.Response {
	return h.DeliverTo("stripe", body, map[string]string{"stripe-signature": signature})
}

// DeliverTo posts to any source with any headers.
func (h *Harness) DeliverTo(src string, body []byte, headers map[string]string) intake.Response {
	h.T.Helper()
	req := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RawPath: "/webhooks/" + src, Headers: headers, Body: string(body),
		PathParameters: map[string]string{"source": src},
		RequestContext: events.APIGatewayV2HTTPRequestContext{RequestID: "req-" + h.tokens.next(), HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/webhooks/" + src}},
	}
	payload, _ := json.Marshal(req)
	out, err := lambda.NewHandler(h.Intake.HandleHTTPAPI).Invoke(context.Background(), payload)
	if err != nil {
		h.T.Fatalf("intake invoke: %v", err)
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		h.T.Fatalf("intake response: %v", err)
	}
	return intake.Response{Status: resp.StatusCode, Body: []byte(resp.Body)}
}

// Worker is one processor instance with its own clients, so it can crash
// alone. A crashed worker is discarded; start a new one to "restart".
type Worker struct {
	h    *Harness
	Name string
	Rec  *awstrace.Recorder
	P    *processor.Processor
}

// NewWorker starts a processor instance.
func (h *Harness) NewWorker(name string) *Worker {
	rec := &awstrace.Recorder{}
	opts := processor.Options{
		Owner: name, Lease: h.opts.Lease, MaxAttempts: h.opts.MaxReceiveCount, RetryBase: 100 * time.Millisecond,
		RetryCap: h.opts.RetryCap, Now: h.Clock.Now, Rand: func() float64 { return 0.5 }, Log: quietLog(),
	}
	opts.Resolvers = h.resolvers()
	if h.Warehouse != nil {
		opts.Warehouse = &warehouse.Config{MaxState: h.Warehouse.MaxState}
	}
	if h.Outbox != nil {
		// Through the worker's own recorder, so a crash between the commit
		// and the announcement can be injected.
		opts.Effects = queue.Sender{Client: h.sqsSrv.Client(rec.APIOption), URL: h.Outbox.Queues.Queue}
	}
	p, err := processor.New(h.newLedger(h.Dynamo.Client(rec.APIOption), name), h.Sources, h.opts.Registry, opts)
	if err != nil {
		h.T.Fatal(err)
	}
	return &Worker{h: h, Name: name, Rec: rec, P: p}
}

// PollOnce is one event source mapping cycle: receive up to 10 messages,
// invoke the processor through its Lambda JSON path, delete the successes
// in one batch. If the worker crashed during the invocation, nothing is
// deleted (the invocation failed). It returns the number of messages received.
func (w *Worker) PollOnce(ctx context.Context) int {
	return len(w.h.esm(ctx, esmCycle{url: w.h.Queues.Queue, arn: "events", batch: 10, rec: w.Rec, handler: w.P.HandleSQS}))
}

// Handle invokes the worker's processor through its Lambda JSON path with
// pointers that did not come from the queue (another copy of a message, a
// worker that happened to receive it first) and returns the batch item
// failures' ids.
func (w *Worker) Handle(ctx context.Context, ptrs ...queue.Pointer) []string {
	w.h.T.Helper()
	var ev events.SQSEvent
	for i, p := range ptrs {
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: "direct-" + strconv.Itoa(i), Body: p.Encode(), EventSource: "aws:sqs"})
	}
	payload, _ := json.Marshal(ev)
	raw, err := lambda.NewHandler(w.P.HandleSQS).Invoke(ctx, payload)
	if err != nil {
		w.h.T.Fatalf("processor invoke: %v", err)
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(raw, &resp); err != nil {
		w.h.T.Fatalf("processor response: %v", err)
	}
	var failed []string
	for _, f := range resp.BatchItemFailures {
		failed = append(failed, f.ItemIdentifier)
	}
	return failed
}

// esmCycle describes one event source mapping cycle on a queue.
type esmCycle struct {
	url, arn string
	batch    int32
	rec      *awstrace.Recorder // the function instance's recorder: crashed means the invocation failed
	handler  any                // a Lambda handler taking events.SQSEvent and returning events.SQSEventResponse
	received func([]sqstypes.Message)
}

// esm runs one cycle: receive, invoke the handler through the Lambda JSON
// path, delete the messages not reported as batch item failures, unless the
// invocation failed or its instance crashed. It returns what it received.
func (h *Harness) esm(ctx context.Context, c esmCycle) []sqstypes.Message {
	out, err := h.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(c.url), MaxNumberOfMessages: c.batch,
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
	})
	if err != nil {
		h.T.Fatalf("receive: %v", err)
	}
	if len(out.Messages) == 0 {
		return nil
	}
	if c.received != nil {
		c.received(out.Messages)
	}
	acked, crashed := h.invokeBatch(ctx, c.handler, c.arn, c.rec, out.Messages)
	if crashed {
		return out.Messages
	}
	h.deleteBatch(ctx, c.url, acked)
	return out.Messages
}

// invokeBatch gives msgs to handler as one SQS event through the Lambda
// JSON path, as an event source mapping does, and returns the messages it
// acknowledged (those not in its batch item failures). crashed is true
// when the invocation failed or its recorder crashed: nothing is
// acknowledged then.
func (h *Harness) invokeBatch(ctx context.Context, handler any, arn string, rec *awstrace.Recorder, msgs []sqstypes.Message) (acked []sqstypes.Message, crashed bool) {
	var ev events.SQSEvent
	for _, m := range msgs {
		ev.Records = append(ev.Records, events.SQSMessage{
			MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body),
			Attributes: m.Attributes, EventSource: "aws:sqs", EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:" + arn,
		})
	}
	payload, _ := json.Marshal(ev)
	raw, err := lambda.NewHandler(handler).Invoke(ctx, payload)
	if err != nil || rec.Crashed() {
		return nil, true
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(raw, &resp); err != nil {
		h.T.Fatalf("%s handler response: %v", arn, err)
	}
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	for _, m := range msgs {
		if !failed[aws.ToString(m.MessageId)] {
			acked = append(acked, m)
		}
	}
	return acked, false
}

// deleteBatch deletes messages from a queue in one request.
func (h *Harness) deleteBatch(ctx context.Context, url string, msgs []sqstypes.Message) {
	if len(msgs) == 0 {
		return
	}
	del := make([]sqstypes.DeleteMessageBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		del[i] = sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
	}
	if _, err := h.SQS.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: del}); err != nil {
		h.T.Fatalf("delete batch: %v", err)
	}
}

// Depth returns the number of messages in a queue, visible or in flight.
func (h *Harness) Depth(url string) int {
	out, err := h.SQS.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil {
		h.T.Fatalf("queue depth: %v", err)
	}
	n, _ := strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
	return n
}

// Drain polls with the workers until the events queue is empty (every
// message deleted or moved to the DLQ), advancing the manual clock by
// `advance` whenever a poll finds nothing (so leases and retries come due as
// the visibility timeouts pass). It fails the test after timeout.
func (h *Harness) Drain(timeout, advance time.Duration, workers ...*Worker) {
	h.T.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	for h.Depth(h.Queues.Queue) > 0 {
		if time.Now().After(deadline) {
			h.T.Fatalf("queue not drained after %s (depth %d)", timeout, h.Depth(h.Queues.Queue))
		}
		got := 0
		for _, w := range workers {
			got += w.PollOnce(ctx)
		}
		if got == 0 {
			h.Clock.Advance(advance)
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// Receive takes up to 10 messages from a queue (for DLQ assertions and
// console-style redrives) without invoking anything.
func (h *Harness) Receive(url string) []sqstypes.Message {
	out, err := localaws.Receive(context.Background(), h.SQS, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, VisibilityTimeout: 1})
	if err != nil {
		h.T.Fatalf("receive %s: %v", url, err)
	}
	return out.Messages
}

// Redrive moves every message from the DLQ back to the events queue, as the
// console's "start DLQ redrive" does.
func (h *Harness) Redrive() int {
	ctx := context.Background()
	n := 0
	for _, m := range h.Receive(h.Queues.DLQ) {
		if _, err := h.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(h.Queues.Queue), MessageBody: m.Body}); err != nil {
			h.T.Fatal(err)
		}
		if _, err := h.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(h.Queues.DLQ), ReceiptHandle: m.ReceiptHandle}); err != nil {
			h.T.Fatal(err)
		}
		n++
	}
	return n
}

// Intents returns every outbox intent in the table.
func (h *Harness) Intents() []ledger.StoredIntent { return h.snapshot().Intents }

// Projections returns how many projection items exist.
func (h *Harness) Projections() int { return len(h.snapshot().Projections) }

func (h *Harness) snapshot() ledger.Snapshot {
	h.T.Helper()
	snap, err := ledger.TakeSnapshot(context.Background(), h.DB, h.Table)
	if err != nil {
		h.T.Fatalf("snapshot: %v", err)
	}
	return snap
}

// Event reads one event of the "stripe" source or fails the test.
func (h *Harness) Event(id string) ledger.Event {
	h.T.Helper()
	return h.EventOf("stripe", id)
}

// EventOf reads one event of any source or fails the test.
func (h *Harness) EventOf(src, id string) ledger.Event {
	h.T.Helper()
	ev, err := h.Ledger.Get(context.Background(), src, id)
	if err != nil {
		h.T.Fatalf("event %s/%s: %v", src, id, err)
	}
	return ev
}

// Actions lists an event's audit actions in order.
func Actions(ev ledger.Event) []string { return auditActions(ev.Audit) }

func auditActions(audit []ledger.AuditEntry) []string {
	out := make([]string, 0, len(audit))
	for _, a := range audit {
		out = append(out, a.Action)
	}
	return out
}

// SubscriptionEvent renders a Stripe customer.subscription.* event body;
// the period end is fixed, so two events with one status have one state.
func SubscriptionEvent(eventID, eventType, subID, status string, created int64, account string) []byte {
	meta := "{}"
	if account != "" {
		meta = fmt.Sprintf(`{"account_id":%q}`, account)
	}
	return fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2025-03-31.basil","created":%d,"type":%q,"livemode":false,`+
		`"data":{"object":{"id":%q,"object":"subscription","customer":"cus_test_1","status":%q,"cancel_at_period_end":false,`+
		`"metadata":%s,"items":{"object":"list","data":[{"id":"si_1","current_period_end":%d,"price":{"id":"price_pro_monthly"}}]}}}}`,
		eventID, created, eventType, subID, status, meta, Start.Unix()+30*24*3600)
}

// ThinEvent renders a Stripe thin event body (object v2.core.event) for
// the object objType/objID; snapshot, when set, names its snapshot twin.
func ThinEvent(eventID, eventType, objType, objID, snapshot string, created time.Time) []byte {
	twin := ""
	if snapshot != "" {
		twin = fmt.Sprintf(`,"snapshot_event":%q`, snapshot)
	}
	return fmt.Appendf(nil, `{"id":%q,"object":"v2.core.event","type":%q,"livemode":false,"created":%q,`+
		`"related_object":{"id":%q,"type":%q,"url":"/v1/%ss/%s"},"reason":null,"context":null%s}`,
		eventID, eventType, created.UTC().Format("2006-01-02T15:04:05.000Z"), objID, objType, objType, objID, twin)
}

// SubscriptionObject renders the subscription object the Stripe API
// answers, in the same shape SubscriptionEvent carries.
func SubscriptionObject(subID, status, account string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"subscription","customer":"cus_test_1","status":%q,"cancel_at_period_end":false,`+
		`"metadata":{"account_id":%q},"items":{"object":"list","data":[{"id":"si_1","current_period_end":%d,"price":{"id":"price_pro_monthly"}}]}}`,
		subID, status, account, Start.Unix()+30*24*3600)
}
