package ledger_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// Benchmarks of the processor's two ledger steps: Claim (the conditional
// lease UpdateItem) and Commit (the fenced TransactWriteItems of event,
// projection and intent, or the single fenced UpdateItem of an ignored
// event).
//
// What they measure: our code (building the expressions, marshalling,
// decoding the returned item) PLUS the AWS SDK's request pipeline PLUS the
// in-process DynamoDB emulator (minidyn behind package localaws, which runs
// one request at a time and repairs its secondary index after each write)
// PLUS the loopback HTTP round trip between them. They are NOT DynamoDB
// latency: a real request crosses a network and DynamoDB's own storage
// path, typically a few milliseconds. Because the emulator runs in this
// process, B/op and allocs/op count the server's allocations as well as the
// client's. Read them as a regression signal for our code and a bound on
// its CPU cost, not as production numbers. The reported ddb-req/op is the
// number of DynamoDB requests per operation, counted by an SDK middleware
// (the budget: one claim, one transaction).
//
// Setup stays outside the timer: events are accepted (and, for Commit,
// claimed) in batches of benchBatch, each on a fresh emulator and table,
// with the timer stopped. The fresh table matters: minidyn deep-copies a
// whole table before every TransactWriteItems (its rollback snapshot), and
// localaws re-sorts the "due" index after every write, so on a table that
// kept growing the timed cost would grow with b.N (Commit "applied" went
// from ~2 ms to ~8 ms per op on a table of a few thousand events). With
// batches the table holds at most a few dozen items.
//
// Run: go test -run '^$' -bench 'Claim|Commit' -benchmem ./internal/ledger/

const benchBatch = 16

// benchLedger is a ledger over a fresh emulator, with a request counter.
type benchLedger struct {
	L   *ledger.Ledger
	Rec *awstrace.Recorder
	// payload is a realistic event body (the Stripe fixture, ~1.1 KB, so it
	// is stored out of line as the production path does for most events).
	payload []byte
	n       int // events created so far
	close   func()
}

func newBenchLedger(b *testing.B) *benchLedger {
	b.Helper()
	payload, err := os.ReadFile("../../events/stripe/customer.subscription.updated.json")
	if err != nil {
		b.Fatal(err)
	}
	bl := &benchLedger{payload: payload}
	b.Cleanup(func() { bl.close() })
	bl.reset(b)
	return bl
}

// reset replaces the emulator and table with fresh, empty ones.
func (bl *benchLedger) reset(b *testing.B) {
	b.Helper()
	if bl.close != nil {
		bl.close()
	}
	d := localaws.NewDynamo()
	bl.close = d.Close
	rec := &awstrace.Recorder{}
	db := d.Client(rec.APIOption)
	if err := ledger.CreateTable(context.Background(), db, "ledger"); err != nil {
		b.Fatal(err)
	}
	n := 0
	l, err := ledger.New(db, ledger.Options{Table: "ledger", Clock: ledger.NewManualClock(t0), Tokens: func() string {
		n++ // benchmarks call the ledger from one goroutine
		return fmt.Sprintf("tok-%d", n)
	}})
	if err != nil {
		b.Fatal(err)
	}
	bl.L, bl.Rec = l, rec
}

// accept creates k new RECEIVED events and returns their ids.
func (bl *benchLedger) accept(b *testing.B, k int) []string {
	b.Helper()
	ids := make([]string, k)
	for i := range ids {
		bl.n++
		ids[i] = fmt.Sprintf("evt_bench_%d", bl.n)
		d := ledger.Delivery{Source: "stripe", EventID: ids[i], EventType: "customer.subscription.updated",
			DeliveryID: "dlv_" + ids[i], Payload: bl.payload}
		if _, err := bl.L.Accept(context.Background(), d); err != nil {
			b.Fatal(err)
		}
	}
	return ids
}

// benchClaimOpts is the processor's claim: one owner, a lease well beyond the
// (manual, never advancing) clock.
var benchClaimOpts = ledger.ClaimOptions{Owner: "bench-worker", Lease: 5 * time.Minute}

func (bl *benchLedger) claim(b *testing.B, ids []string) []ledger.Claim {
	b.Helper()
	out := make([]ledger.Claim, len(ids))
	for i, id := range ids {
		c, err := bl.L.Claim(context.Background(), "stripe", id, benchClaimOpts)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = c
	}
	return out
}

// subscriptionWrite is a projection write shaped like the Stripe
// subscription projection's, with one intent; each event gets its own
// subject so every commit applies (no version-guard fallback).
func subscriptionWrite(c ledger.Claim) (*ledger.ProjectionWrite, []ledger.Intent) {
	subject := "sub_bench_" + c.Event.EventID
	w := &ledger.ProjectionWrite{
		Name: "stripe_subscription", Subject: subject, Version: 1740830000000, Fingerprint: "3f2a9c0d1e4b5a6978877665544332211",
		State: map[string]any{
			"status": "active", "customer": "cus_test_FAKE_1", "price_ids": []any{"price_a", "price_b"},
			"current_period_end": int64(1800000000), "account_id": "acct_test_FAKE_1",
		},
	}
	intents := []ledger.Intent{{
		OperationID: "op_bench_" + c.Event.EventID, Kind: "entitlement.grant", Subject: subject,
		Payload: map[string]any{"subscription": subject, "customer": "cus_test_FAKE_1", "price_ids": []any{"price_a", "price_b"}},
	}}
	return w, intents
}

// timeBatches times op over b.N items made by prepare, benchBatch at a
// time on a fresh table, with prepare outside the timer, and reports the
// DynamoDB requests the timed calls made.
func timeBatches[T any](b *testing.B, bl *benchLedger, prepare func(k int) []T, op func(T)) {
	requests := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; {
		b.StopTimer()
		bl.reset(b)
		items := prepare(min(benchBatch, b.N-i))
		bl.Rec.Reset()
		b.StartTimer()
		for _, it := range items {
			op(it)
		}
		b.StopTimer()
		requests += bl.Rec.Total("DynamoDB")
		i += len(items)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(requests)/float64(b.N), "ddb-req/op")
}

// BenchmarkClaim times Claim of a RECEIVED event (the common case: one
// conditional UpdateItem returning the new row).
func BenchmarkClaim(b *testing.B) {
	bl := newBenchLedger(b)
	ctx := context.Background()
	timeBatches(b, bl, func(k int) []string { return bl.accept(b, k) }, func(id string) {
		if _, err := bl.L.Claim(ctx, "stripe", id, benchClaimOpts); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkCommit times Commit of a claimed event: "applied" is the happy
// path (one TransactWriteItems: event PROCESSED under the lease token, the
// projection under its version guard, one intent under
// attribute_not_exists); "ignored" is an event no projection handles (one
// fenced UpdateItem).
func BenchmarkCommit(b *testing.B) {
	for _, tc := range []struct {
		name    string
		applied bool
	}{{"applied", true}, {"ignored", false}} {
		b.Run(tc.name, func(b *testing.B) {
			bl := newBenchLedger(b)
			ctx := context.Background()
			prepare := func(k int) []ledger.Claim { return bl.claim(b, bl.accept(b, k)) }
			timeBatches(b, bl, prepare, func(c ledger.Claim) {
				var w *ledger.ProjectionWrite
				var intents []ledger.Intent
				if tc.applied {
					w, intents = subscriptionWrite(c)
				}
				done, err := bl.L.Commit(ctx, c, w, intents)
				if err != nil {
					b.Fatal(err)
				}
				if tc.applied && (done.Result.Outcome != ledger.OutcomeApplied || len(done.Intents) != 1) {
					b.Fatalf("commit: %+v, want applied with one intent", done)
				}
			})
		})
	}
}
