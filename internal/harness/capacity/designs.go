package capacity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/harness/chaos/naive"
	"github.com/effectively-once/webhooks/internal/harness/downstream"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/source"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// The designs compared by MeasureDesigns.
const (
	DesignOurs               = "ours"
	DesignPowertools         = "powertools-style"
	DesignDispatchEverything = "dispatch-everything"
)

// DesignNames lists the compared designs in table order.
var DesignNames = []string{DesignOurs, DesignPowertools, string(naive.CheckThenInsert), string(naive.SplitCommit), string(naive.NoLease), DesignDispatchEverything}

// ChaosRun names the chaos run the failure counts come from.
const ChaosRun = "`go run ./scripts/chaos -n 1000 -design all -seed 1 -shrink 0`, 2026-12-02 (BENCHMARKS.md, Chaos against a reference model; ours from its rerun after the seed-65 fix)"

// ChaosFailed is, per design, how many of that run's 1000 schedules
// violated at least one invariant (I1–I7). A design absent from the map
// is not in the chaos harness.
var ChaosFailed = map[string]int{
	DesignOurs:                    0,
	string(naive.CheckThenInsert): 535,
	DesignDispatchEverything:      523,
	string(naive.NoLease):         493,
	string(naive.SplitCommit):     589,
}

// DesignRow is what processing one event, and performing its effects,
// cost in one design.
type DesignRow struct {
	Design string
	// Process is the processing of the event. The naive and
	// powertools-style designs perform the effects inside it.
	Process      Totals
	ProcessCalls Calls
	// Effects is the dispatch of the event's intents (ours and
	// dispatch-everything, which perform effects from the outbox).
	Effects      Totals
	EffectsCalls Calls
	// Performed is how many effects were performed.
	Performed int
	// Skipped: the design cannot process this event.
	Skipped bool
}

// Requests is every AWS request the design made for the event after intake.
func (r DesignRow) Requests() int { return r.ProcessCalls.Total + r.EffectsCalls.Total }

// Units is the write units the design spent on the event after intake.
func (r DesignRow) Units() int { return r.Process.Units() + r.Effects.Units() }

// OrderCancelledEvent is an orders event (builtin.Orders, Standard Webhooks
// order.updated) that cancels order at revision 1, grown to about size
// bytes with invoice-like line items in its data (part of the order's
// state, as a real order's lines would be). Its cancellation creates two
// effects, a refund and a notice.
func OrderCancelledEvent(order string, size int) []byte {
	head := fmt.Sprintf(`{"type":"order.updated","timestamp":"2026-11-30T12:00:01Z","data":{"id":%q,"revision":1,"customer_id":"cus_test_42","currency":"eur","total_minor":12900,"status":"cancelled"`, order)
	r := rand.New(rand.NewPCG(uint64(size), 11))
	word := func(n int) string { return randomWord(r, n) }
	var lines []string
	total := len(head) + 16
	for n := 0; total < size; n++ {
		l := fmt.Sprintf(`{"id":"li_%s","sku":"sku_%s","quantity":%d,"unit_minor":%d,"description":"Pro plan seat %d"}`,
			word(14), word(8), 1+r.IntN(5), 100*r.IntN(500), n)
		lines = append(lines, l)
		total += len(l) + 1
	}
	if len(lines) > 0 {
		head += `,"lines":[` + strings.Join(lines, ",") + `]`
	}
	return []byte(head + "}}")
}

// designRig is one design's pipeline after intake: a ledger on minidyn
// with the event already accepted, every DynamoDB write metered and every
// AWS request recorded.
type designRig struct {
	meteredTable
	sources *source.Set
	down    *httptest.Server
	// s3, when set, is the warehouse sink's store: ours then commits a
	// record intent with the revision and dispatches it there.
	s3 *localaws.S3
}

func (r *designRig) close() {
	r.down.Close()
	r.d.Close()
}

const designsSources = `{"sources":[{"name":"orders","kind":"standard-webhooks","secrets":["env:ORDERS_SECRET"],` +
	`"options":{"subject_path":"data.id","version_path":"data.revision"}},{"name":"stripe","kind":"stripe","secrets":["env:CAP_SECRET"]}]}`

// DesignEvent is the event every design processes.
type DesignEvent struct {
	Name             string // for the table
	Source, ID, Type string
	Body             []byte
	Effects          int  // effects its processing creates
	OrdersProjection bool // the naive cores implement only the orders business write
}

// OrderCancellation is OrderCancelledEvent of about size bytes from the
// "orders" source (builtin.Orders): two effects (a refund and a notice).
func OrderCancellation(size int) DesignEvent {
	b := OrderCancelledEvent("ord_design_1", size)
	return DesignEvent{Name: fmt.Sprintf("order cancellation, %d B, 2 effects", len(b)), Source: "orders", ID: "msg_design_" + strconv.Itoa(size),
		Type: "order.updated", Body: b, Effects: 2, OrdersProjection: true}
}

// SubscriptionCreated is a realistic Stripe customer.subscription.created
// of about size bytes: one effect (an entitlement grant).
func SubscriptionCreated(size int) DesignEvent {
	id := "evt_design_" + strconv.Itoa(size)
	b := PaddedSubscriptionEvent(id, size, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), Realistic)
	return DesignEvent{Name: fmt.Sprintf("Stripe customer.subscription.created, %d B, 1 effect", len(b)), Source: "stripe", ID: id,
		Type: "customer.subscription.created", Body: b, Effects: 1}
}

func newDesignRig(ctx context.Context) (*designRig, error) {
	t, err := newMeteredTable(ctx)
	if err != nil {
		return nil, err
	}
	r := &designRig{meteredTable: t}
	if r.sources, err = source.Parse([]byte(designsSources)); err != nil {
		r.d.Close()
		return nil, err
	}
	r.down = httptest.NewServer(&downstream.Fake{})
	return r, nil
}

// accept records the delivery as the intake would (not metered: every
// design shares the intake).
func (r *designRig) accept(ctx context.Context, ev DesignEvent) error {
	_, err := r.led.Accept(ctx, ledger.Delivery{Source: ev.Source, EventID: ev.ID, EventType: ev.Type, DeliveryID: "d_" + ev.ID, Payload: ev.Body})
	return err
}

func (r *designRig) start() {
	r.m.Reset()
	r.rec.Reset()
}

func (r *designRig) take() (Totals, Calls) { return r.m.Totals(), calls(r.rec) }

// MeasureDesigns processes the same event (accepted by the ledger as the
// shared intake would) in each design of DesignNames, each on its own
// emulators, and meters what processing it and performing its effects
// cost. The naive designs are left out (Skipped) for an event the orders
// projection does not handle.
func MeasureDesigns(ctx context.Context, ev DesignEvent) ([]DesignRow, error) {
	var rows []DesignRow
	for _, name := range DesignNames {
		if !ev.OrdersProjection && naiveDesign(name) {
			rows = append(rows, DesignRow{Design: name, Skipped: true})
			continue
		}
		row, err := measureDesign(ctx, name, ev)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func naiveDesign(name string) bool {
	for _, k := range naive.Kinds {
		if string(k) == name {
			return true
		}
	}
	return false
}

func measureDesign(ctx context.Context, name string, ev DesignEvent) (DesignRow, error) {
	rg, err := newDesignRig(ctx)
	if err != nil {
		return DesignRow{}, err
	}
	defer rg.close()
	id := ev.ID
	if err := rg.accept(ctx, ev); err != nil {
		return DesignRow{}, err
	}
	row := DesignRow{Design: name}
	switch name {
	case DesignOurs, DesignDispatchEverything:
		if err := rg.ours(ctx, ev, name == DesignDispatchEverything, &row); err != nil {
			return row, err
		}
	case DesignPowertools:
		p := &Powertools{DB: rg.db, Ledger: rg.led, Sources: rg.sources, Registry: builtin.Default(builtin.StripeOptions{}), Table: "ledger", Now: rg.clock.Now}
		rg.start()
		if err := p.Handle(ctx, ev.Source, id); err != nil {
			return row, err
		}
		row.Process, row.ProcessCalls = rg.take()
		n, err := countItems(ctx, rg.d.Client(), "PTFX#")
		if err != nil {
			return row, err
		}
		row.Performed = n
	default:
		p := naive.New(naive.Kind(name), rg.db, rg.led, "ledger", "cap", rg.clock.Now)
		rg.start()
		resp, err := p.HandleSQS(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "1", Body: queue.Pointer{Source: ev.Source, EventID: id}.Encode()}}})
		if err != nil || len(resp.BatchItemFailures) != 0 {
			return row, fmt.Errorf("naive processing failed: %v", err)
		}
		row.Process, row.ProcessCalls = rg.take()
		fx, err := naive.Effects(ctx, rg.d.Client(), "ledger")
		if err != nil {
			return row, err
		}
		for _, n := range fx {
			row.Performed += n
		}
	}
	got, err := rg.led.Get(ctx, ev.Source, id)
	if err != nil {
		return row, err
	}
	if name != DesignPowertools && got.Status != ledger.StatusProcessed {
		return row, fmt.Errorf("event %s, not processed", got.Status)
	}
	return row, nil
}

// ours runs the real processor core, then the real dispatcher on each
// intent (blind to the truth for dispatch-everything).
func (r *designRig) ours(ctx context.Context, ev DesignEvent, blind bool, row *DesignRow) error {
	id := ev.ID
	sq, err := localaws.StartSQS("")
	if err != nil {
		return err
	}
	efq, err := queue.Create(ctx, sq.Client(), queue.Spec{Name: localaws.UniqueName("cap-effects"), VisibilityTimeout: time.Minute, MaxReceiveCount: 3, DLQRetention: time.Hour})
	if err != nil {
		return err
	}
	po := processor.Options{Owner: ProcessorOwner, Now: r.clock.Now, Log: slog.New(slog.DiscardHandler), Effects: queue.Sender{Client: sq.Client(r.rec.APIOption), URL: efq.Queue}}
	if r.s3 != nil {
		po.Warehouse = &warehouse.Config{Bucket: warehouseBucket, Prefix: "changes"}
	}
	proc, err := processor.New(r.led, r.sources, builtin.Default(builtin.StripeOptions{}), po)
	if err != nil {
		return err
	}
	r.start()
	if failed := proc.Process(ctx, []processor.Message{{ID: "1", Body: queue.Pointer{Source: ev.Source, EventID: id}.Encode()}}); len(failed) != 0 {
		return fmt.Errorf("processing %s failed", id)
	}
	row.Process, row.ProcessCalls = r.take()
	snap, err := ledger.TakeSnapshot(ctx, r.d.Client(), "ledger")
	if err != nil {
		return err
	}
	var l outbox.Ledger = r.led
	if blind {
		l = naive.TruthBlind{Ledger: r.led}
	}
	disp := &outbox.Dispatcher{Ledger: l, Clock: r.clock, Owner: DispatcherOwner, Effects: map[string]outbox.Effect{}}
	for _, in := range snap.Intents {
		if in.Kind == warehouse.Kind && r.s3 != nil {
			disp.Effects[in.Kind] = &outbox.WarehouseEffect{Name: in.Kind, Bucket: warehouseBucket, Prefix: "changes",
				Client: r.s3.Client(r.rec.APIOption), Scopes: anyScope}
			continue
		}
		disp.Effects[in.Kind] = &outbox.HTTPEffect{Name: in.Kind, URL: r.down.URL, Client: &http.Client{Timeout: 5 * time.Second}, Scopes: anyScope}
	}
	r.start()
	for _, in := range snap.Intents {
		o, err := disp.Dispatch(ctx, in.OperationID)
		if err != nil || o.Status != ledger.IntentStatusSucceeded {
			return fmt.Errorf("dispatch %s: %+v %v", in.OperationID, o, err)
		}
		row.Performed++
	}
	row.Effects, row.EffectsCalls = r.take()
	return nil
}

func countItems(ctx context.Context, db naive.DynamoDB, prefix string) (int, error) {
	out, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String("ledger"), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, it := range out.Items {
		if pk, ok := it["pk"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(pk.Value, prefix) {
			n++
		}
	}
	return n, nil
}

// PowertoolsWriter is what the powertools-style processor writes with.
type PowertoolsWriter interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

var _ PowertoolsWriter = (*dynamodb.Client)(nil)

// Powertools is an idempotent processor in the style of AWS Lambda
// Powertools' idempotency utility, over the same ledger table: a
// conditional PutItem of an INPROGRESS record with an expiry (refused
// when a record exists that has not expired, or is in progress within
// its in-progress window), the handler's writes as plain writes (the
// projection, then one record per effect), then an UpdateItem to
// COMPLETED with the handler's response. It reads the accepted event and
// its payload from the ledger, as the naive designs do, and leaves the
// ledger's event status alone (its idempotency record is its status).
//
// It is a cost model, not a contender for the chaos harness: a crash
// after the projection write and before COMPLETED leaves an INPROGRESS
// record, and the retry after its window writes the projection and the
// effects again.
type Powertools struct {
	DB       PowertoolsWriter
	Ledger   *ledger.Ledger
	Sources  *source.Set
	Registry *projection.Registry
	Table    string
	Now      func() time.Time
	// Expiry of a COMPLETED record (Powertools' default: one hour) and the
	// in-progress window (the Lambda's remaining time; default 1 minute).
	Expiry, InProgress time.Duration
}

// The powertools-style processor's errors.
var (
	// ErrInProgress is returned for an event another invocation is
	// processing (or has completed, within the record's expiry).
	ErrInProgress = errors.New("powertools-style: event in progress or done")
	// ErrUnknownSource is returned for an event of a source not configured.
	ErrUnknownSource = errors.New("unknown source")
)

// Handle processes the accepted event source/id once.
func (p *Powertools) Handle(ctx context.Context, src, id string) error {
	expiry, window := p.Expiry, p.InProgress
	if expiry == 0 {
		expiry = time.Hour
	}
	if window == 0 {
		window = time.Minute
	}
	ev, err := p.Ledger.Get(ctx, src, id)
	if err != nil {
		return fmt.Errorf("powertools-style get %s/%s: %w", src, id, err)
	}
	payload, err := p.Ledger.Payload(ctx, ev)
	if err != nil {
		return fmt.Errorf("powertools-style payload %s/%s: %w", src, id, err)
	}
	now := p.Now()
	key := map[string]types.AttributeValue{"pk": sv("IDEMPOTENCY#" + src + "#" + id), "sk": sv("ID")}
	record := map[string]types.AttributeValue{"pk": key["pk"], "sk": key["sk"], "status": sv("INPROGRESS"),
		"expiration": nv(now.Add(expiry).Unix()), "in_progress_expiration": nv(now.Add(window).UnixMilli())}
	_, err = p.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: &p.Table, Item: record,
		ConditionExpression:       aws.String("attribute_not_exists(pk) OR expiration < :now OR (#status = :inprogress AND in_progress_expiration < :nowms)"),
		ExpressionAttributeNames:  map[string]string{"#status": "status"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": nv(now.Unix()), ":nowms": nv(now.UnixMilli()), ":inprogress": sv("INPROGRESS")}})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ErrInProgress
	}
	if err != nil {
		return fmt.Errorf("powertools-style record %s/%s: %w", src, id, err)
	}
	s, ok := p.Sources.Lookup(src)
	if !ok {
		return fmt.Errorf("powertools-style: %w: %s", ErrUnknownSource, src)
	}
	var res projection.Result
	if proj, ok := p.Registry.Lookup(s.Kind, ev.EventType); ok {
		if res, err = proj.Project(projection.Event{Source: ev.Source, Kind: s.Kind, EventID: ev.EventID, Type: ev.EventType, Payload: payload, ReceivedAt: ev.ReceivedAt}); err != nil {
			return fmt.Errorf("powertools-style project %s/%s: %w", src, id, err)
		}
	}
	res = projection.Scoped(s.Scope(), res)
	if w := res.Write; w != nil {
		state, err := attributevalue.MarshalMap(w.State)
		if err != nil {
			return err
		}
		item := map[string]types.AttributeValue{"pk": sv("PJ#" + w.Name + "#" + w.Subject), "sk": sv("PJ"), "item": sv("projection"), "name": sv(w.Name), "subject": sv(w.Subject),
			"version": nv(w.Version), "fingerprint": sv(w.Fingerprint), "terminal": &types.AttributeValueMemberBOOL{Value: w.Terminal},
			"state": &types.AttributeValueMemberM{Value: state}, "updated_at": nv(now.UnixMilli())}
		if _, err := p.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: &p.Table, Item: item}); err != nil {
			return fmt.Errorf("powertools-style projection %s/%s: %w", src, id, err)
		}
	}
	for _, in := range res.Intents {
		pl, err := attributevalue.MarshalMap(in.Payload)
		if err != nil {
			return err
		}
		fx := map[string]types.AttributeValue{"pk": sv("PTFX#" + in.OperationID), "sk": sv("FX"), "kind": sv(in.Kind), "subject": sv(in.Subject),
			"payload": &types.AttributeValueMemberM{Value: pl}, "at": nv(now.UnixMilli())}
		if _, err := p.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: &p.Table, Item: fx}); err != nil {
			return fmt.Errorf("powertools-style effect %s: %w", in.OperationID, err)
		}
	}
	response := fmt.Sprintf(`{"intents":%d}`, len(res.Intents))
	if _, err := p.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &p.Table, Key: key,
		UpdateExpression:          aws.String("SET #status = :done, #data = :data"),
		ExpressionAttributeNames:  map[string]string{"#status": "status", "#data": "data"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":done": sv("COMPLETED"), ":data": sv(response)}}); err != nil {
		return fmt.Errorf("powertools-style complete %s/%s: %w", src, id, err)
	}
	return nil
}

// WriteDesignTable renders the side-by-side table as Markdown: per
// design, requests and write units for each event (rows of each slice in
// DesignNames order), and the chaos count.
func WriteDesignTable(w io.Writer, events []DesignEvent, rows [][]DesignRow) {
	fmt.Fprint(w, "| design |")
	for _, ev := range events {
		fmt.Fprintf(w, " %s: requests | %s: write units |", ev.Name, ev.Name)
	}
	fmt.Fprintln(w, " chaos schedules failed of 1000 (I1–I7) |")
	fmt.Fprint(w, "|---|")
	for range events {
		fmt.Fprint(w, "---|---|")
	}
	fmt.Fprintln(w, "---:|")
	for i, name := range DesignNames {
		fmt.Fprintf(w, "| %s |", name)
		for e := range events {
			r := rows[e][i]
			switch {
			case r.Skipped:
				fmt.Fprint(w, " — (the naive cores implement only the orders business write) | — |")
			case r.EffectsCalls.Total > 0:
				fmt.Fprintf(w, " **%d**: processing %d (%s), dispatch %d (%s) | **%d**: processing %d (%s), dispatch %d (%s) |",
					r.Requests(), r.ProcessCalls.Total, r.ProcessCalls.Detail, r.EffectsCalls.Total, r.EffectsCalls.Detail,
					r.Units(), r.Process.Units(), r.Process, r.Effects.Units(), r.Effects)
			default:
				fmt.Fprintf(w, " **%d** (%s) | **%d** (%s) |", r.ProcessCalls.Total, r.ProcessCalls.Detail, r.Process.Units(), r.Process)
			}
		}
		chaos := "not in the chaos harness"
		if n, ok := ChaosFailed[name]; ok {
			chaos = strconv.Itoa(n)
		}
		fmt.Fprintf(w, " %s |\n", chaos)
	}
}

func sv(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func nv(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
