package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

type fixture struct {
	L     *ledger.Ledger
	Clock *ledger.ManualClock
	Rec   *awstrace.Recorder
	DB    *dynamodb.Client
	Table string
}

// externalDynamoEnv names a DynamoDB API endpoint to run the fixture's
// tests against instead of the in-process minidyn, each test on its own
// table: for example dynalite (npm i dynalite; node
// node_modules/dynalite/cli.js --port 8411), which, unlike minidyn
// v0.8.2, applies REMOVE actions. dynalite 4.0 has no TransactWriteItems:
// the tests that commit a projection skip there.
//
//	LEDGER_TEST_DYNAMODB_URL=http://127.0.0.1:8411 go test ./internal/ledger/
const externalDynamoEnv = "LEDGER_TEST_DYNAMODB_URL"

// strictDynamoEnv names a dynalite that validates every transaction's
// parts while the tests run on minidyn (localaws.StrictTransactions):
//
//	go run ./scripts/dynalite -mode strict -- go test ./internal/ledger/
const strictDynamoEnv = "LEDGER_TEST_STRICT_URL"

func newFixture(t *testing.T) fixture {
	t.Helper()
	rec := &awstrace.Recorder{}
	var db *dynamodb.Client
	table := "ledger"
	if url := os.Getenv(externalDynamoEnv); url != "" {
		db = dynamodb.NewFromConfig(localaws.Config(), func(o *dynamodb.Options) {
			o.BaseEndpoint = aws.String(url)
			o.APIOptions = append(o.APIOptions, rec.APIOption)
		})
		table = localaws.UniqueName(fmt.Sprintf("ledger-%d", time.Now().UnixNano()))
	} else {
		d := localaws.NewDynamo()
		t.Cleanup(d.Close)
		db = d.Client(rec.APIOption)
	}
	if err := ledger.CreateTable(context.Background(), db, table); err != nil {
		t.Fatal(err)
	}
	if table != "ledger" {
		// A real API creates a table asynchronously.
		w := dynamodb.NewTableExistsWaiter(db, func(o *dynamodb.TableExistsWaiterOptions) { o.MinDelay = 50 * time.Millisecond })
		if err := w.Wait(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(table)}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	var ldb ledger.DynamoDB = db
	if table == "ledger" {
		strict, st, err := localaws.StrictFromEnv(context.Background(), strictDynamoEnv, func(ctx context.Context, db *dynamodb.Client, table string) error {
			return ledger.CreateTable(ctx, db, table)
		})
		if err != nil {
			t.Fatal(err)
		}
		if strict != nil {
			ldb = localaws.StrictTransactions{DB: db, Strict: strict, StrictTable: st}
		}
	}
	clock := ledger.NewManualClock(t0)
	n := 0
	var mu sync.Mutex
	l, err := ledger.New(ldb, ledger.Options{Table: table, Clock: clock, Tokens: func() string {
		mu.Lock()
		defer mu.Unlock()
		n++
		return fmt.Sprintf("tok-%d", n)
	}})
	if err != nil {
		t.Fatal(err)
	}
	rec.Reset()
	return fixture{L: l, Clock: clock, Rec: rec, DB: db, Table: table}
}

// skipWithoutTransactions skips a test whose store has no
// TransactWriteItems (dynalite 4.0, through LEDGER_TEST_DYNAMODB_URL).
func skipWithoutTransactions(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), "UnknownOperationException") {
		t.Skip("this store has no TransactWriteItems")
	}
}

func delivery(id string, payload string) ledger.Delivery {
	return ledger.Delivery{Source: "stripe", EventID: id, EventType: "customer.subscription.updated", DeliveryID: "d-" + id, Payload: []byte(payload)}
}

func TestAcceptIsOneRequestAndDuplicatesLearnTheRow(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	a, err := f.L.Accept(ctx, delivery("evt_1", `{"id":"evt_1"}`))
	if err != nil || a.Duplicate {
		t.Fatalf("first accept: %+v %v", a, err)
	}
	if got := f.Rec.Total("DynamoDB"); got != 1 {
		t.Fatalf("new event cost %d DynamoDB requests, want 1 (%s)", got, f.Rec)
	}
	f.Rec.Reset()
	d2 := delivery("evt_1", `{"id":"evt_1"}`)
	d2.DeliveryID = "d-second"
	b, err := f.L.Accept(ctx, d2)
	if err != nil || !b.Duplicate || b.Event.Status != ledger.StatusReceived {
		t.Fatalf("duplicate accept: %+v %v", b, err)
	}
	if got := f.Rec.Total("DynamoDB"); got != 1 {
		t.Fatalf("duplicate cost %d requests, want 1", got)
	}
	ev, err := f.L.Get(ctx, "stripe", "evt_1")
	if err != nil {
		t.Fatal(err)
	}
	if ev.DeliveryCount != 2 || ev.LastDeliveryID != "d-second" || ev.FirstDeliveryID != "d-evt_1" {
		t.Fatalf("delivery bookkeeping: count=%d last=%q first=%q", ev.DeliveryCount, ev.LastDeliveryID, ev.FirstDeliveryID)
	}
	if len(ev.Audit) != 1 || ev.Audit[0].Action != "accept" || ev.Audit[0].To != ledger.StatusReceived {
		t.Fatalf("audit: %+v", ev.Audit)
	}
	due, err := f.L.ListDue(ctx, t0, 10)
	if err != nil || len(due) != 1 || due[0].EventID != "evt_1" {
		t.Fatalf("due: %+v %v", due, err)
	}
}

func TestLargePayloadRoundTripsAndIsNotInTheStatusItem(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, size := range []int{10, 4 << 10, 64 << 10, ledger.MaxPayloadBytes} {
		// Incompressible enough to force chunking at the largest size.
		var b strings.Builder
		x := uint32(size)
		for b.Len() < size {
			x = x*1664525 + 1013904223
			b.WriteByte(byte('a' + x>>27))
		}
		id := fmt.Sprintf("evt_size_%d", size)
		if _, err := f.L.Accept(ctx, delivery(id, b.String())); err != nil {
			t.Fatalf("accept %d: %v", size, err)
		}
		c, err := f.L.Claim(ctx, "stripe", id, ledger.ClaimOptions{Owner: "w", Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := f.L.Payload(ctx, c.Event)
		if err != nil || string(raw) != b.String() {
			t.Fatalf("payload %d round trip: len %d err %v", size, len(raw), err)
		}
		if size > 1024 && c.Event.PayloadChunks == 0 {
			t.Fatalf("payload of %d bytes kept inline", size)
		}
	}
	if _, err := f.L.Accept(ctx, delivery("too_big", strings.Repeat("x", ledger.MaxPayloadBytes+1))); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("over-size payload: %v", err)
	}
}
