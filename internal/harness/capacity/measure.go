package capacity

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/effectively-once/webhooks/internal/config"
	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	"github.com/effectively-once/webhooks/internal/harness/downstream"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/intake"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/source"
	"github.com/effectively-once/webhooks/pkg/builtin"
)

// measureSecret signs the measured deliveries; visibly fake.
const measureSecret = "whsec_test_FAKE_capacity_000000000000"

// anyScope opens the measured effects to every scope: the measurements
// count requests, and the scope check makes none.
var anyScope = []string{outbox.AllScopes}

// LambdaLogStream has the shape of the log stream name Lambda gives an
// execution environment (AWS_LAMBDA_LOG_STREAM_NAME: the date, the
// version in brackets and 32 hex digits). The rigs name their workers as
// deployed functions do (config.OwnerName over such a stream), because
// the owner is written in leases and audit entries and so in the items
// whose sizes are billed (a three-letter owner can keep a commit under a
// write-unit boundary a deployed function's owner crosses).
const LambdaLogStream = "2026/12/02/[$LATEST]5f0c2b9e7d14a3c8b6e09f1d2a7c4e85"

// The workers' names in the rigs, as a deployed function derives them.
var (
	ProcessorOwner  = config.OwnerName("processor", LambdaLogStream, "3b9d0c7e1a2f")
	DispatcherOwner = config.OwnerName("dispatcher", LambdaLogStream, "3b9d0c7e1a2f")
)

// Row is what one event of a given payload size cost, by phase.
type Row struct {
	PayloadBytes   int
	StoredChunks   int    // out-of-line payload chunks
	Intake         Totals // accepting a new event
	Duplicate      Totals // the first duplicate delivery after it was processed
	DuplicateAgain Totals // a later one
	Process        Totals // claim and commit (with its intent)
	Effect         Totals // dispatching the intent
	// EventItemBytes is the size of the event item once processed, as
	// DynamoDB would store it (what every later write of it is billed by).
	EventItemBytes int
	// Requests per phase: every AWS request the function made (DynamoDB
	// and SQS), counted by SDK middleware, e.g. "DynamoDB.UpdateItem=1 SQS.SendMessage=1".
	IntakeCalls, ProcessCalls, EffectCalls, DuplicateCalls Calls
}

// Calls are one phase's AWS requests.
type Calls struct {
	Total  int
	Detail string
}

func calls(r *awstrace.Recorder) Calls { return Calls{Total: r.Total(""), Detail: r.String()} }

// ProcessedUnits is the write units of one event from delivery to
// processed (intake + processing), the figure the budget is about.
func (r Row) ProcessedUnits() int { return r.Intake.Units() + r.Process.Units() }

// Padding says how an event is grown to a payload size.
type Padding int

// The paddings.
const (
	// Realistic grows the event with invoice-like line items: repeated field
	// names, ids, amounts and timestamps, compressing like real provider
	// JSON (about 4:1 with gzip).
	Realistic Padding = iota
	// Incompressible grows it with one random alphanumeric string, the
	// worst case for the stored (gzip-compressed) payload.
	Incompressible
)

const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// randomWord is n letters and digits drawn from r.
func randomWord(r *rand.Rand, n int) string {
	w := make([]byte, n)
	for i := range w {
		w[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(w)
}

// PaddedSubscriptionEvent is a Stripe customer.subscription.created event
// grown to about size bytes.
//
// A size of 256 or less gives the smallest event the projection accepts
// (about 230 bytes), which the ledger stores inline in the event item.
func PaddedSubscriptionEvent(id string, size int, at time.Time, p Padding) []byte {
	if size <= 256 {
		return fmt.Appendf(nil, `{"id":%q,"object":"event","type":"customer.subscription.created","created":%d,`+
			`"data":{"object":{"id":"sub_%s","object":"subscription","status":"active","metadata":{"account_id":"acct_42"}}}}`, id, at.Unix(), id)
	}
	b := fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2025-03-31.basil","created":%d,"type":"customer.subscription.created","livemode":false,`+
		`"data":{"object":{"id":"sub_%s","object":"subscription","customer":"cus_test_1","status":"active","cancel_at_period_end":false,`+
		`"metadata":{"account_id":"acct_42"},"items":{"object":"list","data":[{"id":"si_1","current_period_end":%d,"price":{"id":"price_pro_monthly"}}]}}}}`,
		id, at.Unix(), id, at.Unix()+30*24*3600)
	if size <= len(b)+32 {
		return b
	}
	r := rand.New(rand.NewPCG(uint64(size), 7))
	word := func(n int) string { return randomWord(r, n) }
	var pad string
	switch p {
	case Incompressible:
		pad = `"padding":"` + word(size-len(b)-14) + `"`
	default:
		var lines []string
		total := len(b) + 12
		for n := 0; total < size; n++ {
			l := fmt.Sprintf(`{"id":"il_%s","object":"line_item","amount":%d,"currency":"eur","description":"Pro plan seat %d","period":{"start":%d,"end":%d},"price":{"id":"price_%s","unit_amount":%d}}`,
				word(14), 1000+r.IntN(90000), n, at.Unix()-int64(r.IntN(86400)), at.Unix()+30*24*3600, word(10), 100*r.IntN(500))
			lines = append(lines, l)
			total += len(l) + 1
		}
		pad = `"lines":[` + strings.Join(lines, ",") + `]`
	}
	return []byte(strings.Replace(string(b), `"livemode":false`, `"livemode":false,`+pad, 1))
}

// MeasurePipeline runs one Stripe event of each size through the real
// intake, processor and dispatcher against minidyn (in process) and
// returns the write units of each phase.
func MeasurePipeline(ctx context.Context, sizes []int, p Padding) ([]Row, error) {
	return MeasurePipelineInline(ctx, sizes, p, 0)
}

// MeasurePipelineInline is MeasurePipeline with the ledger keeping a
// payload inside the event item up to inlineMax stored bytes
// (ledger.Options.InlinePayloadMax; 0 is the ledger's default): the intake
// without a payload item, the design it is compared with.
func MeasurePipelineInline(ctx context.Context, sizes []int, p Padding, inlineMax int) ([]Row, error) {
	var rows []Row
	for _, size := range sizes {
		r, err := measureOne(ctx, size, p, inlineMax)
		if err != nil {
			return nil, fmt.Errorf("payload %d B: %w", size, err)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// rig is one measured pipeline: the real intake, processor and
// dispatcher cores over minidyn and goaws, every DynamoDB write metered
// and every AWS request recorded.
type rig struct {
	meteredTable
	in   *intake.Handler
	proc *processor.Processor
	down *httptest.Server
	disp *outbox.Dispatcher
}

func (r *rig) close() {
	r.down.Close()
	r.d.Close()
}

// newRig builds a rig whose "stripe" source fetches thin events' objects
// from the Stripe API at stripeURL with key stripeKey ("": no api).
func newRig(ctx context.Context, stripeURL, stripeKey string) (*rig, error) {
	return newRigInline(ctx, stripeURL, stripeKey, 0)
}

// newRigInline is newRig with the ledger's InlinePayloadMax.
func newRigInline(ctx context.Context, stripeURL, stripeKey string, inlineMax int) (*rig, error) {
	quiet := slog.New(slog.DiscardHandler)
	t, err := newMeteredTableInline(ctx, inlineMax)
	if err != nil {
		return nil, err
	}
	r := &rig{meteredTable: t}
	sq, err := localaws.StartSQS("")
	if err != nil {
		r.d.Close()
		return nil, err
	}
	evq, err := queue.Create(ctx, sq.Client(), queue.Spec{Name: localaws.UniqueName("cap-events"), VisibilityTimeout: time.Minute, MaxReceiveCount: 3, DLQRetention: time.Hour})
	if err != nil {
		r.d.Close()
		return nil, err
	}
	efq, err := queue.Create(ctx, sq.Client(), queue.Spec{Name: localaws.UniqueName("cap-effects"), VisibilityTimeout: time.Minute, MaxReceiveCount: 3, DLQRetention: time.Hour})
	if err != nil {
		r.d.Close()
		return nil, err
	}
	api := ""
	if stripeURL != "" {
		api = fmt.Sprintf(`,"api":{"secret":"env:CAP_STRIPE_API_KEY","url":%q,"timeout_seconds":5}`, stripeURL)
	}
	sources, err := source.Parse([]byte(`{"sources":[{"name":"stripe","kind":"stripe","secrets":["env:CAP_SECRET"]` + api + `}]}`))
	if err != nil {
		r.d.Close()
		return nil, err
	}
	reg := builtin.Default(builtin.StripeOptions{})
	resolvers, err := processor.BuildResolvers(sources, reg, builtin.Resolvers(), func(context.Context, string) (string, error) { return stripeKey, nil })
	if err != nil {
		r.d.Close()
		return nil, err
	}
	r.in = &intake.Handler{Sources: sources, Ledger: r.led, Now: r.clock.Now, Log: quiet,
		Secrets: &source.Secrets{Getenv: func(string) string { return measureSecret }},
		Queue:   queue.Sender{Client: sq.Client(r.rec.APIOption), URL: evq.Queue}}
	po := processor.Options{Owner: ProcessorOwner, Now: r.clock.Now, Log: quiet, Effects: queue.Sender{Client: sq.Client(r.rec.APIOption), URL: efq.Queue},
		Resolvers: resolvers}
	if r.proc, err = processor.New(r.led, sources, reg, po); err != nil {
		r.d.Close()
		return nil, err
	}
	r.down = httptest.NewServer(&downstream.Fake{})
	r.disp = &outbox.Dispatcher{Ledger: r.led, Clock: r.clock, Owner: DispatcherOwner, Effects: map[string]outbox.Effect{}}
	return r, nil
}

// deliver posts body, signed now, to the rig's intake.
func (r *rig) deliver(ctx context.Context, body []byte) int {
	sig := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: measureSecret, Timestamp: r.clock.Now()}).Header
	return r.in.Handle(ctx, intake.Request{Source: "stripe", Headers: map[string]string{"stripe-signature": sig}, Body: body}).Status
}

// process runs one pointer through the processor core.
func (r *rig) process(ctx context.Context, id string) error {
	if failed := r.proc.Process(ctx, []processor.Message{{ID: "1", Body: queue.Pointer{Source: "stripe", EventID: id}.Encode()}}); len(failed) != 0 {
		return fmt.Errorf("processing %s failed", id)
	}
	return nil
}

func measureOne(ctx context.Context, size int, p Padding, inlineMax int) (Row, error) {
	rg, err := newRigInline(ctx, "", "", inlineMax)
	if err != nil {
		return Row{}, err
	}
	defer rg.close()
	clock, m, rec, led, disp, down := rg.clock, rg.m, rg.rec, rg.led, rg.disp, rg.down

	row := Row{}
	id := fmt.Sprintf("evt_capacity_%d", size)
	body := PaddedSubscriptionEvent(id, size, clock.Now(), p)
	row.PayloadBytes = len(body)
	deliver := func() (int, error) { return rg.deliver(ctx, body), nil }

	m.Reset()
	rec.Reset()
	if st, _ := deliver(); st != http.StatusAccepted {
		return Row{}, fmt.Errorf("intake answered %d", st)
	}
	row.Intake, row.IntakeCalls = m.Totals(), calls(rec)

	m.Reset()
	rec.Reset()
	if err := rg.process(ctx, id); err != nil {
		return Row{}, err
	}
	row.Process, row.ProcessCalls = m.Totals(), calls(rec)
	ev, err := led.Get(ctx, "stripe", id)
	if err != nil || ev.Status != ledger.StatusProcessed {
		return Row{}, fmt.Errorf("event not processed: %v %v", ev.Status, err)
	}
	row.StoredChunks = ev.PayloadChunks
	row.EventItemBytes = m.ItemBytes(ctx, map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "EV#stripe#" + id}, "sk": &types.AttributeValueMemberS{Value: "EV"}})

	snap, err := ledger.TakeSnapshot(ctx, rg.d.Client(), "ledger")
	if err != nil || len(snap.Intents) != 1 {
		return Row{}, fmt.Errorf("want one intent, have %d (%v)", len(snap.Intents), err)
	}
	kind := snap.Intents[0].Kind
	disp.Effects[kind] = &outbox.HTTPEffect{Name: kind, URL: down.URL, Client: &http.Client{Timeout: 5 * time.Second}, Scopes: anyScope}
	m.Reset()
	rec.Reset()
	if o, err := disp.Dispatch(ctx, snap.Intents[0].OperationID); err != nil || o.Status != ledger.IntentStatusSucceeded {
		return Row{}, fmt.Errorf("dispatch: %+v %v", o, err)
	}
	row.Effect, row.EffectCalls = m.Totals(), calls(rec)

	m.Reset()
	rec.Reset()
	clock.Advance(time.Minute)
	if st, _ := deliver(); st != http.StatusOK {
		return Row{}, fmt.Errorf("duplicate answered %d", st)
	}
	row.Duplicate, row.DuplicateCalls = m.Totals(), calls(rec)
	m.Reset()
	clock.Advance(time.Minute)
	if st, _ := deliver(); st != http.StatusOK {
		return Row{}, fmt.Errorf("second duplicate answered %d", st)
	}
	row.DuplicateAgain = m.Totals()
	return row, nil
}

// WriteRequestTable renders the AWS requests per phase as Markdown.
func WriteRequestTable(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| payload | intake, new event | processing | effect (dispatcher) | duplicate of a processed event |")
	fmt.Fprintln(w, "|---:|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %d B | %d (%s) | %d (%s) | %d (%s) | %d (%s) |\n", r.PayloadBytes,
			r.IntakeCalls.Total, r.IntakeCalls.Detail, r.ProcessCalls.Total, r.ProcessCalls.Detail,
			r.EffectCalls.Total, r.EffectCalls.Detail, r.DuplicateCalls.Total, r.DuplicateCalls.Detail)
	}
}

// WriteTable renders rows as a Markdown table.
func WriteTable(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| payload | stored | event item | intake (new) | processing | effect | duplicate of the processed event: first, later | delivery → processed |")
	fmt.Fprintln(w, "|---:|---|---:|---|---|---|---|---:|")
	for _, r := range rows {
		stored := "inline"
		if r.StoredChunks > 0 {
			stored = fmt.Sprintf("%d chunk(s)", r.StoredChunks)
		}
		fmt.Fprintf(w, "| %d B | %s | %d B | %d WU (%s) | %d WU (%s) | %d WU (%s) | %d WU (%s), %d WU (%s) | **%d WU** |\n",
			r.PayloadBytes, stored, r.EventItemBytes, r.Intake.Units(), r.Intake, r.Process.Units(), r.Process, r.Effect.Units(), r.Effect,
			r.Duplicate.Units(), r.Duplicate, r.DuplicateAgain.Units(), r.DuplicateAgain, r.ProcessedUnits())
	}
}

var _ Reader = (*dynamodb.Client)(nil)

// meteredTable is a minidyn with the ledger's table, a write-unit meter and
// a request recorder on one client, and a ledger over that client on a
// manual clock: what every measuring rig starts from.
type meteredTable struct {
	clock *ledger.ManualClock
	d     *localaws.Dynamo
	m     *Meter
	rec   *awstrace.Recorder
	db    *dynamodb.Client // metered and recorded
	led   *ledger.Ledger
}

func newMeteredTable(ctx context.Context) (meteredTable, error) {
	return newMeteredTableInline(ctx, 0)
}

func newMeteredTableInline(ctx context.Context, inlineMax int) (meteredTable, error) {
	// Not a round time: a number's stored size is its significant
	// digits, and a real clock's milliseconds have all of them (a round
	// one measured items up to 9 bytes smaller than the running stack's).
	t := meteredTable{clock: ledger.NewManualClock(time.Date(2026, 11, 30, 12, 34, 56, 789_123_456, time.UTC)), d: localaws.NewDynamo()}
	if err := ledger.CreateTable(ctx, t.d.Client(), "ledger"); err != nil {
		t.d.Close()
		return t, err
	}
	t.m = &Meter{Reader: t.d.Client(), Table: "ledger", TableKeys: []string{"pk", "sk"},
		Indexes: []Index{{Name: ledger.DueIndex, HashKey: "due_shard", RangeKey: "due_at", Projected: ledger.DueIndexAttributes}}}
	t.rec = &awstrace.Recorder{}
	t.db = t.d.Client(t.m.APIOption, t.rec.APIOption)
	var err error
	if t.led, err = ledger.New(t.db, ledger.Options{Table: "ledger", Clock: t.clock, Actor: "intake", InlinePayloadMax: inlineMax}); err != nil {
		t.d.Close()
		return t, err
	}
	return t, nil
}
