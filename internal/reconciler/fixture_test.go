package reconciler_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/metrics"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/reconciler"
	"github.com/effectively-once/webhooks/internal/source"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

const sourcesDoc = `{"sources":[
 {"name":"stripe","kind":"stripe","secrets":["sm:whsec"]},
 {"name":"orders","kind":"standard-webhooks","secrets":["sm:orders"],"options":{"subject_path":"data.id","version_path":"data.revision"}}]}`

// fixture is a pipeline without intake: the ledger, the four queues, a
// processor, and a reconciler whose clients are the real SDK over minidyn
// and goaws.
type fixture struct {
	t       *testing.T
	Clock   *ledger.ManualClock
	L       *ledger.Ledger
	DB      *dynamodb.Client
	SQS     *sqs.Client
	Q       reconciler.Queues
	Sources *source.Set
	Reg     *projection.Registry
	P       *processor.Processor
	EMF     *bytes.Buffer
	emitter *metrics.Emitter // one per process, as in a function: it serialises writes to EMF
	tokens  int
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	d := localaws.NewDynamo()
	t.Cleanup(d.Close)
	if err := ledger.CreateTable(ctx, d.Client(), "ledger"); err != nil {
		t.Fatal(err)
	}
	sq, err := localaws.StartSQS("")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, Clock: ledger.NewManualClock(t0), SQS: sq.Client(), EMF: &bytes.Buffer{}, DB: d.Client()}
	f.emitter = metrics.New(f.EMF, "EffectivelyOnce/test", f.Clock.Now)
	f.L, err = ledger.New(d.Client(), ledger.Options{Table: "ledger", Clock: f.Clock, Actor: "test", Tokens: func() string {
		f.tokens++
		return "tok-" + strconv.Itoa(f.tokens)
	}})
	if err != nil {
		t.Fatal(err)
	}
	short := func(s queue.Spec) queue.Spec {
		s.Name, s.VisibilityTimeout, s.MaxReceiveCount = localaws.UniqueName(s.Name), time.Second, 3
		return s
	}
	ev, err := queue.Create(ctx, f.SQS, short(queue.Events("")))
	if err != nil {
		t.Fatal(err)
	}
	ef, err := queue.Create(ctx, f.SQS, short(queue.Effects("")))
	if err != nil {
		t.Fatal(err)
	}
	f.Q = reconciler.Queues{Events: ev.Queue, EventsDLQ: ev.DLQ, Effects: ef.Queue, EffectsDLQ: ef.DLQ}
	if f.Sources, err = source.Parse([]byte(sourcesDoc)); err != nil {
		t.Fatal(err)
	}
	f.Reg = builtin.Default(builtin.StripeOptions{})
	f.P, err = processor.New(f.L, f.Sources, f.Reg, processor.Options{Owner: "proc", Lease: 30 * time.Second, MaxAttempts: 3,
		Now: f.Clock.Now, Rand: func() float64 { return 0.5 }, Log: quiet(),
		Effects: queue.Sender{Client: f.SQS, URL: f.Q.Effects}})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) reconciler(truths map[string]reconciler.SourceOfTruth) *reconciler.Reconciler {
	return &reconciler.Reconciler{Ledger: f.L, SQS: f.SQS, Queues: f.Q, Sources: f.Sources, Registry: f.Reg, Truths: truths,
		// goaws's short poll sees every message: the DLQ sweeps need not
		// wait a second at each run's end here (TestDLQSweepsLongPoll does).
		Opts: reconciler.Options{StuckAfter: 5 * time.Minute, MaxItems: 100, Now: f.Clock.Now, Log: quiet(),
			Metrics: f.emitter, DLQWait: -1}}
}

func (f *fixture) run(r *reconciler.Reconciler) reconciler.Report {
	f.t.Helper()
	rep, err := r.Run(context.Background())
	if err != nil {
		f.t.Fatalf("run: %v (%+v)", err, rep)
	}
	return rep
}

// accept puts an event in the ledger the way intake does, without the send.
func (f *fixture) accept(src, id, typ string, body []byte) {
	f.t.Helper()
	if _, err := f.L.Accept(context.Background(), ledger.Delivery{Source: src, EventID: id, EventType: typ, DeliveryID: "d-" + id, Payload: body}); err != nil {
		f.t.Fatal(err)
	}
}

// receive takes every visible message from a queue (deleting them) and
// returns their bodies.
func (f *fixture) receive(url string) []string {
	f.t.Helper()
	msgs, err := localaws.Drain(context.Background(), f.SQS, url)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, m := range msgs {
		out = append(out, aws.ToString(m.Body))
	}
	return out
}

// process runs the processor over every visible events-queue message.
func (f *fixture) process() int {
	f.t.Helper()
	bodies := f.receive(f.Q.Events)
	msgs := make([]processor.Message, len(bodies))
	for i, b := range bodies {
		msgs[i] = processor.Message{ID: strconv.Itoa(i), Body: b}
	}
	f.P.Process(context.Background(), msgs)
	return len(bodies)
}

func (f *fixture) event(src, id string) ledger.Event {
	f.t.Helper()
	ev, err := f.L.Get(context.Background(), src, id)
	if err != nil {
		f.t.Fatalf("event %s/%s: %v", src, id, err)
	}
	return ev
}

func orderBody(typ, id string, rev int, status string) []byte {
	return fmt.Appendf(nil, `{"type":%q,"data":{"id":%q,"revision":%d,"status":%q,"amount":1200,"currency":"eur"}}`, typ, id, rev, status)
}
