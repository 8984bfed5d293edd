package capacity

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/intake"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/source"
)

// SideOptions shape MeasureIntakeSide; the zero value is the bench's run.
type SideOptions struct {
	Sizes    []int // payload sizes in bytes; default 1 KB and 4 KB
	Reps     int   // repetitions; default 5
	PerBlock int   // deliveries per contender per repetition and size; default 400
	Warmup   int   // deliveries per contender and size before the first repetition, not measured; default 50
}

func (o SideOptions) withDefaults() SideOptions {
	blockDefaults(&o.Sizes, &o.Reps, &o.PerBlock, &o.Warmup)
	return o
}

// blockDefaults fills the defaults both intake comparisons share: 1 KB and
// 4 KB payloads, 5 repetitions of blocks of 400 deliveries, a warm-up of
// 50 (a negative warm-up is none).
func blockDefaults(sizes *[]int, reps, perBlock, warmup *int) {
	if len(*sizes) == 0 {
		*sizes = []int{1 << 10, 4 << 10}
	}
	if *reps <= 0 {
		*reps = 5
	}
	if *perBlock <= 0 {
		*perBlock = 400
	}
	if *warmup < 0 {
		*warmup = 0
	} else if *warmup == 0 {
		*warmup = 50
	}
}

// Spread is a ratio's median and range over the repetitions.
type Spread struct{ Median, Min, Max float64 }

func spreadOf(xs []float64) Spread {
	s := slices.Clone(xs)
	slices.Sort(s)
	return Spread{Median: s[len(s)/2], Min: s[0], Max: s[len(s)-1]}
}

// SideRow is one payload size of the intake comparison.
type SideRow struct {
	PayloadBytes int
	Deliveries   int // per contender, over all repetitions
	// Percentiles over all of a contender's measured deliveries.
	OursP50, OursP99, BareP50, BareP99 time.Duration
	// Ratios ours/bare, one per repetition, summarised.
	RatioP50, RatioP99 Spread
	// New events answered as duplicates (200): an SDK retry of a
	// conditional put whose first attempt succeeded. The bare handler
	// then sends nothing to its queue: those events are lost.
	OursDuplicates, BareDuplicates int
}

// MeasureIntakeSide compares the product's intake (intake.Handler with its
// ledger and queue sender, built as pipelinetest builds it) with a bare
// handler that verifies the same Stripe signature with stripe-go and does
// one conditional PutItem of the raw body and one SendMessage. Both run
// through the same Lambda JSON path (an API Gateway HTTP API v2 event
// through lambda.NewHandler(...).Invoke), on the same minidyn and goaws
// servers, with the same payloads (realistic Stripe events, every event id
// unique), in alternating blocks: each repetition runs one block of each
// contender per size, the order swapped every repetition, so the noise of
// a shared machine falls on both. The time of one delivery is Invoke
// alone: the request is built and signed before, as API Gateway would.
func MeasureIntakeSide(ctx context.Context, o SideOptions) ([]SideRow, error) {
	o = o.withDefaults()
	rg, err := newSideRig(ctx)
	if err != nil {
		return nil, err
	}
	defer rg.close()
	ours := lambda.NewHandler(rg.ours.HandleHTTPAPI)
	bare := lambda.NewHandler(rg.bare.HandleHTTPAPI)
	contenders := []struct {
		name string
		h    lambda.Handler
	}{{"ours", ours}, {"bare", bare}}

	type acc struct {
		all   [2][]time.Duration
		dups  [2]int
		ratio [2][]float64 // p50, p99 per repetition
	}
	accs := make([]acc, len(o.Sizes))
	if o.Warmup > 0 {
		for si, size := range o.Sizes {
			for ci, c := range contenders {
				var dups int
				if _, err := rg.block(ctx, c.h, c.name, "warm", size, o.Warmup, &dups); err != nil {
					return nil, fmt.Errorf("warm-up %s %d B: %w", contenders[ci].name, o.Sizes[si], err)
				}
			}
		}
	}
	for rep := range o.Reps {
		for si, size := range o.Sizes {
			order := []int{0, 1}
			if rep%2 == 1 {
				order = []int{1, 0}
			}
			var took [2][]time.Duration
			for _, ci := range order {
				c := contenders[ci]
				d, err := rg.block(ctx, c.h, c.name, "r"+strconv.Itoa(rep), size, o.PerBlock, &accs[si].dups[ci])
				if err != nil {
					return nil, fmt.Errorf("%s %d B repetition %d: %w", c.name, size, rep, err)
				}
				took[ci] = d
				accs[si].all[ci] = append(accs[si].all[ci], d...)
			}
			o50, o99 := percentiles(took[0])
			b50, b99 := percentiles(took[1])
			accs[si].ratio[0] = append(accs[si].ratio[0], float64(o50)/float64(b50))
			accs[si].ratio[1] = append(accs[si].ratio[1], float64(o99)/float64(b99))
		}
	}
	rows := make([]SideRow, len(o.Sizes))
	for si, size := range o.Sizes {
		a := accs[si]
		r := SideRow{PayloadBytes: len(sideEvent("evt_size", size, rg.clock.Now())), Deliveries: len(a.all[0])}
		r.OursP50, r.OursP99 = percentiles(a.all[0])
		r.BareP50, r.BareP99 = percentiles(a.all[1])
		r.RatioP50, r.RatioP99 = spreadOf(a.ratio[0]), spreadOf(a.ratio[1])
		r.OursDuplicates, r.BareDuplicates = a.dups[0], a.dups[1]
		rows[si] = r
	}
	return rows, nil
}

// percentiles returns the p50 and p99 of ds (nearest rank), sorting ds.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(ds)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(ds))+0.5) - 1
		return ds[max(0, min(i, len(ds)-1))]
	}
	return at(0.50), at(0.99)
}

// sideEvent is the measured payload: a realistic Stripe event of size bytes.
func sideEvent(id string, size int, at time.Time) []byte {
	return PaddedSubscriptionEvent(id, size, at, Realistic)
}

// sideRig holds both contenders on one minidyn and one goaws.
type sideRig struct {
	clock *ledger.ManualClock
	d     *localaws.Dynamo
	ours  *intake.Handler
	bare  *BareIntake
	seq   int
}

func (r *sideRig) close() { r.d.Close() }

// sideSecret signs the compared deliveries; visibly fake.
const sideSecret = "whsec_test_FAKE_side_by_side_000000000"

func newSideRig(ctx context.Context) (*sideRig, error) {
	r := &sideRig{clock: ledger.NewManualClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)), d: localaws.NewDynamo()}
	fail := func(err error) (*sideRig, error) { r.d.Close(); return nil, err }
	if err := ledger.CreateTable(ctx, r.d.Client(), "ledger"); err != nil {
		return fail(err)
	}
	if err := CreateBareTable(ctx, r.d.Client(), "bare"); err != nil {
		return fail(err)
	}
	sq, err := localaws.StartSQS("")
	if err != nil {
		return fail(err)
	}
	spec := func(name string) queue.Spec {
		return queue.Spec{Name: localaws.UniqueName(name), VisibilityTimeout: time.Minute, MaxReceiveCount: 3, DLQRetention: time.Hour}
	}
	oq, err := queue.Create(ctx, sq.Client(), spec("side-ours"))
	if err != nil {
		return fail(err)
	}
	bq, err := queue.Create(ctx, sq.Client(), spec("side-bare"))
	if err != nil {
		return fail(err)
	}
	led, err := ledger.New(r.d.Client(), ledger.Options{Table: "ledger", Clock: r.clock, Actor: "intake"})
	if err != nil {
		return fail(err)
	}
	sources, err := source.Parse([]byte(`{"sources":[{"name":"stripe","kind":"stripe","secrets":["env:SIDE_SECRET"]}]}`))
	if err != nil {
		return fail(err)
	}
	// As pipelinetest builds the intake, except for its SDK recorders
	// (test instrumentation) and its logger: the function's own JSON
	// logger, written to io.Discard, so the formatting the function pays
	// for in Lambda is counted.
	r.ours = &intake.Handler{Sources: sources, Ledger: led, Now: r.clock.Now,
		Log:     slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Secrets: &source.Secrets{Getenv: func(string) string { return sideSecret }},
		Queue:   queue.Sender{Client: sq.Client(), URL: oq.Queue}}
	r.bare = &BareIntake{DB: r.d.Client(), Table: "bare", SQS: sq.Client(), QueueURL: bq.Queue, Secret: sideSecret}
	return r, nil
}

// block delivers n new events of size bytes to h and returns each
// delivery's Invoke time.
func (r *sideRig) block(ctx context.Context, h lambda.Handler, who, tag string, size, n int, dups *int) ([]time.Duration, error) {
	payloads, err := r.prepare(who, tag, size, n)
	if err != nil {
		return nil, err
	}
	return deliverAll(ctx, h, payloads, dups)
}

// prepare builds n signed API Gateway events of new Stripe events.
func (r *sideRig) prepare(who, tag string, size, n int) ([][]byte, error) {
	payloads := make([][]byte, n)
	for i := range payloads {
		r.seq++
		id := fmt.Sprintf("evt_side_%s_%s_%d_%06d", who, tag, size, r.seq)
		body := sideEvent(id, size, r.clock.Now())
		sig := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: sideSecret, Timestamp: r.clock.Now()}).Header
		req := events.APIGatewayV2HTTPRequest{
			Version: "2.0", RawPath: "/webhooks/stripe", Body: string(body),
			Headers:        map[string]string{"content-type": "application/json", "stripe-signature": sig},
			PathParameters: map[string]string{"source": "stripe"},
			RequestContext: events.APIGatewayV2HTTPRequestContext{RequestID: "req-" + id,
				HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/webhooks/stripe"}},
		}
		p, err := json.Marshal(req)
		if err != nil {
			return nil, err
		}
		payloads[i] = p
	}
	return payloads, nil
}

// deliverAll invokes h with each payload and returns each Invoke's time;
// every delivery must be accepted, as new or (counted in dups) as a
// duplicate.
func deliverAll(ctx context.Context, h lambda.Handler, payloads [][]byte, dups *int) ([]time.Duration, error) {
	took := make([]time.Duration, len(payloads))
	for i, p := range payloads {
		start := time.Now()
		out, err := h.Invoke(ctx, p)
		took[i] = time.Since(start)
		if err != nil {
			return nil, err
		}
		var resp events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(out, &resp); err != nil {
			return nil, err
		}
		switch resp.StatusCode {
		case http.StatusAccepted:
		case http.StatusOK:
			// A new event answered as a duplicate: the SDK retried a
			// conditional put whose first attempt had succeeded (the
			// emulators' loopback drops a response now and then).
			*dups++
		default:
			return nil, fmt.Errorf("delivery %d answered %d: %s", i, resp.StatusCode, resp.Body)
		}
	}
	return took, nil
}

// WriteSideTable renders the intake comparison as Markdown.
func WriteSideTable(w io.Writer, rows []SideRow) {
	fmt.Fprintln(w, "| payload | deliveries each | ours p50 | bare p50 | ours/bare p50 (median, range) | ours p99 | bare p99 | ours/bare p99 (median, range) | new events answered 200: ours, bare |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---|---:|---:|---|---|")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
	sp := func(s Spread) string { return fmt.Sprintf("**%.2f×** (%.2f–%.2f)", s.Median, s.Min, s.Max) }
	for _, r := range rows {
		fmt.Fprintf(w, "| %d B | %d | %s | %s | %s | %s | %s | %s | %d, %d |\n", r.PayloadBytes, r.Deliveries,
			ms(r.OursP50), ms(r.BareP50), sp(r.RatioP50), ms(r.OursP99), ms(r.BareP99), sp(r.RatioP99), r.OursDuplicates, r.BareDuplicates)
	}
}

// BareIntake is the baseline of the comparison: what a webhook endpoint
// that only wants "store once, then enqueue" would do. It verifies the
// Stripe signature with stripe-go, reads the event id, puts the raw body
// under it if absent and sends the id to a queue. It checks no timestamp
// tolerance (stripe-go's would use the wall clock, and the measurement
// runs on a manual one), keeps no status, and a delivery whose put
// succeeded and whose send failed is lost to the queue.
type BareIntake struct {
	DB       *dynamodb.Client
	Table    string
	SQS      *sqs.Client
	QueueURL string
	Secret   string
	// PayloadItem makes it write as our intake does for a body kept out of
	// line: the conditional put carries the id alone and the raw body goes
	// in a second item (pk "<id>#body") before the send; three requests.
	PayloadItem bool
}

// HandleHTTPAPI handles one API Gateway HTTP API (payload 2.0) event.
func (b *BareIntake) HandleHTTPAPI(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	answer := func(status int) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: status}, nil
	}
	body := []byte(ev.Body)
	if ev.IsBase64Encoded {
		dec, err := base64.StdEncoding.DecodeString(ev.Body)
		if err != nil {
			return answer(http.StatusBadRequest)
		}
		body = dec
	}
	if err := webhook.ValidatePayloadIgnoringTolerance(body, ev.Headers["stripe-signature"], b.Secret); err != nil {
		return answer(http.StatusBadRequest)
	}
	var id struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &id); err != nil || id.ID == "" {
		return answer(http.StatusBadRequest)
	}
	item := map[string]types.AttributeValue{
		"pk":   &types.AttributeValueMemberS{Value: id.ID},
		"body": &types.AttributeValueMemberB{Value: body},
	}
	if b.PayloadItem {
		delete(item, "body")
	}
	_, err := b.DB.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           aws.String(b.Table),
		Item:                item,
		ConditionExpression: aws.String("attribute_not_exists(pk)"),
	})
	var dup *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &dup):
		return answer(http.StatusOK)
	case err != nil:
		return answer(http.StatusInternalServerError)
	}
	if b.PayloadItem {
		if _, err := b.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(b.Table), Item: map[string]types.AttributeValue{
			"pk":   &types.AttributeValueMemberS{Value: id.ID + "#body"},
			"body": &types.AttributeValueMemberB{Value: body},
		}}); err != nil {
			return answer(http.StatusInternalServerError)
		}
	}
	if _, err := b.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(b.QueueURL), MessageBody: aws.String(id.ID)}); err != nil {
		return answer(http.StatusInternalServerError)
	}
	return answer(http.StatusAccepted)
}

// CreateBareTable creates the bare handler's table: one string hash key,
// on demand.
func CreateBareTable(ctx context.Context, db *dynamodb.Client, name string) error {
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		return fmt.Errorf("create table %s: %w", name, err)
	}
	return nil
}
