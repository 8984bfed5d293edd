package capacity_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/harness/capacity"
	"github.com/effectively-once/webhooks/internal/ledger"
)

func TestItemSizeRules(t *testing.T) {
	item := map[string]types.AttributeValue{
		"pk":     &types.AttributeValueMemberS{Value: "EV#stripe#evt_1"},                                                                  // 2 + 15
		"n":      &types.AttributeValueMemberN{Value: "1796040000000"},                                                                    // 1 + (13 digits → 8)
		"small":  &types.AttributeValueMemberN{Value: "0.50"},                                                                             // 5 + 2
		"ok":     &types.AttributeValueMemberBOOL{Value: true},                                                                            // 2 + 1
		"b":      &types.AttributeValueMemberB{Value: make([]byte, 100)},                                                                  // 1 + 100
		"list":   &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "ab"}}},                  // 4 + 3 + 1 + 2
		"nested": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"k": &types.AttributeValueMemberNULL{Value: true}}}, // 6 + 3 + 1 + 1 + 1
	}
	want := 17 + 5 + 7 + 3 + 101 + 10 + 12
	if got := capacity.ItemSize(item); got != want {
		t.Fatalf("size %d, want %d", got, want)
	}
	for size, units := range map[int]int{0: 1, 1: 1, 1024: 1, 1025: 2, 4096: 4, 4097: 5} {
		if got := capacity.Units(size); got != units {
			t.Fatalf("Units(%d) = %d, want %d", size, got, units)
		}
	}
}

// The write units of one event through the real handlers, by DynamoDB's
// rules, for the smallest event (its payload inline), 1, 4 and 64 KB
// payloads (realistic JSON, and the incompressible worst case), with the
// workers named as deployed functions name them (capacity.ProcessorOwner:
// a short owner was once measured here while a deployed one, the whole log
// stream name, pushed the item past 1 KB). The processed event item stays under 1 KB,
// so each of its writes is one unit. A duplicate of a processed event is
// one UpdateItem billed by that item (1 unit) that records the delivery;
// the first one also puts the event on its done shard of the due index (1
// unit), later ones write no index. The budget figures are reported
// (BENCHMARKS.md discusses them).
func TestWriteUnitsPerEvent(t *testing.T) {
	for _, p := range []capacity.Padding{capacity.Realistic, capacity.Incompressible} {
		checkWriteUnits(t, p)
	}
}

func checkWriteUnits(t *testing.T, p capacity.Padding) {
	rows, err := capacity.MeasurePipeline(context.Background(), []int{0, 1 << 10, 4 << 10, 64 << 10}, p)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	capacity.WriteTable(&buf, rows)
	t.Log("\n" + buf.String())
	for _, r := range rows {
		if r.Intake.Units() == 0 || r.Process.Units() == 0 || r.Effect.Units() == 0 {
			t.Fatalf("a phase measured nothing: %+v", r)
		}
		if r.EventItemBytes >= 1024 {
			t.Fatalf("the processed event item is %d bytes: every write of it costs 2 units", r.EventItemBytes)
		}
		first, later := r.Duplicate.ByOp["UpdateItem"], r.DuplicateAgain.ByOp["UpdateItem"]
		if r.Duplicate.Units() != 2 || first != (capacity.OpTotals{Requests: 1, TableUnits: 1, IndexUnits: 1}) {
			t.Fatalf("the first duplicate of a processed event: %s, want one UpdateItem of 1 unit and one index entry", r.Duplicate)
		}
		if r.DuplicateAgain.Units() != 1 || later != (capacity.OpTotals{Requests: 1, TableUnits: 1}) {
			t.Fatalf("a later duplicate of a processed event: %s, want one UpdateItem of 1 unit", r.DuplicateAgain)
		}
	}
	if rows[0].StoredChunks != 0 || rows[0].ProcessedUnits() != 12 {
		t.Fatalf("the smallest event (inline) costs %d WU delivery → processed (want 12: intake 2, processing 10) with %d chunks", rows[0].ProcessedUnits(), rows[0].StoredChunks)
	}
	if rows[3].ProcessedUnits() <= rows[2].ProcessedUnits() {
		t.Fatalf("a 64 KB event cannot cost less than a 4 KB one: %d vs %d", rows[3].ProcessedUnits(), rows[2].ProcessedUnits())
	}
}

// The cost model's arithmetic, checked by hand for one workload: 1 M
// events, no duplicates, no intents, batches of 10, 10 write units each.
func TestCostPerMillionArithmetic(t *testing.T) {
	lines := capacity.CostPerMillion(capacity.Workload{
		WriteUnitsEvent: 10, BatchSize: 10, IntakeMs: 20, ProcessorMs: 100, MemoryMB: 1024, LogBytesPerEvent: 1000,
	}, capacity.ListPrices)
	want := map[string]float64{
		"API Gateway HTTP API":    1.00,
		"Lambda requests":         1.1 * 0.20,                     // 1 M intake + 0.1 M processor invocations
		"Lambda duration (arm64)": (20000 + 10000) * 0.0000133334, // 1 M × 0.02 s + 0.1 M × 0.1 s, at 1 GB
		"SQS":                     1.2 * 0.40,                     // send + receive and delete per batch of 10
		"DynamoDB writes":         10 * 0.625,
		"DynamoDB reads":          0,
		"CloudWatch Logs":         0.5,
	}
	for _, l := range lines {
		if d := l.USD - want[l.Component]; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s: %.6f, want %.6f", l.Component, l.USD, want[l.Component])
		}
	}
	if len(lines) != len(want) {
		t.Fatalf("lines %+v", lines)
	}
}

func TestTableBillingComparesOnDemandWithProvisionedAtItsTarget(t *testing.T) {
	// GIVEN 100 events/s of 20 write units and 1 read unit each, and auto
	// scaling that keeps 70 % utilisation
	b := capacity.CompareTableBilling(100, 20, 1, 0.7, capacity.ListPrices)
	// THEN on demand bills every unit consumed in 30 days, and provisioned
	// every unit-hour of consumed / 0.7
	seconds := 30 * 24 * 3600.0
	onDemand := 2000*seconds/1e6*0.625 + 100*seconds/1e6*0.125
	provisioned := (2000/0.7*0.00065 + 100/0.7*0.00013) * 30 * 24
	if d := b.OnDemandUSD - onDemand; d > 1e-6 || d < -1e-6 {
		t.Errorf("on demand %.4f, want %.4f", b.OnDemandUSD, onDemand)
	}
	if d := b.ProvisionedUSD - provisioned; d > 1e-6 || d < -1e-6 {
		t.Errorf("provisioned %.4f, want %.4f", b.ProvisionedUSD, provisioned)
	}
	// AND provisioned writes break even with on demand at 28.9 % utilisation
	if u := capacity.BreakEvenUtilization(capacity.ListPrices); u < 0.288 || u > 0.29 {
		t.Errorf("break-even utilisation %.4f", u)
	}
}

// The request budget, counted by SDK middleware on the real handlers: a new
// event stored inline costs intake 2 requests (UpdateItem, SendMessage) and
// processing 2 DynamoDB requests (claim, transaction) plus the effects
// announcement; a duplicate of a processed event costs 1; an effect checked
// against its projection costs 3 (while_current) or 4 (latest: its subject
// cursor too).
func TestRequestBudget(t *testing.T) {
	rows, err := capacity.MeasurePipeline(context.Background(), []int{0, 4 << 10}, capacity.Realistic)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	capacity.WriteRequestTable(&buf, rows)
	t.Log("\n" + buf.String())
	small, big := rows[0], rows[1]
	if small.StoredChunks != 0 || small.IntakeCalls.Detail != "DynamoDB.UpdateItem=1 SQS.SendMessage=1" {
		t.Fatalf("inline event at intake: %+v", small.IntakeCalls)
	}
	if small.ProcessCalls.Detail != "DynamoDB.TransactWriteItems=1 DynamoDB.UpdateItem=1 SQS.SendMessageBatch=1" || small.ProcessCalls.Total != 3 {
		t.Fatalf("inline event in the processor: %+v", small.ProcessCalls)
	}
	if small.DuplicateCalls.Total != 1 || big.DuplicateCalls.Total != 1 {
		t.Fatalf("duplicates: %+v %+v", small.DuplicateCalls, big.DuplicateCalls)
	}
	if big.IntakeCalls.Total != 3 || big.ProcessCalls.Total != 4 {
		t.Fatalf("4 KB event (one chunk): intake %+v, processing %+v", big.IntakeCalls, big.ProcessCalls)
	}
	// The effect (an entitlement, policy latest) costs its claim and its
	// record, plus one consistent read of its projection and one write of
	// its subject cursor (the policies' budget: at most one extra read per
	// checked dispatch, one extra write per latest dispatch).
	if small.EffectCalls.Detail != "DynamoDB.GetItem=1 DynamoDB.UpdateItem=3" {
		t.Fatalf("effect: %+v", small.EffectCalls)
	}
}

// A thin event costs no more AWS requests or write units than a realistic
// 4 KB snapshot event, plus exactly one Stripe API request, made by the
// processor (never the intake).
func TestThinEventCost(t *testing.T) {
	rows, err := capacity.MeasureThin(t.Context(), 20)
	if err != nil {
		t.Fatal(err)
	}
	snap, thin := rows[0], rows[1]
	t.Logf("snapshot %+v", snap)
	t.Logf("thin     %+v", thin)
	if snap.StripeRequests != 0 || thin.StripeRequests != 1 {
		t.Fatalf("Stripe API requests per event: snapshot %.2f, thin %.2f; want 0 and 1", snap.StripeRequests, thin.StripeRequests)
	}
	if thin.IntakeCalls.Total > snap.IntakeCalls.Total || thin.ProcessCalls.Total > snap.ProcessCalls.Total {
		t.Fatalf("AWS requests differ: intake %v vs %v, processing %v vs %v", thin.IntakeCalls, snap.IntakeCalls, thin.ProcessCalls, snap.ProcessCalls)
	}
	if thin.WriteUnits > snap.WriteUnits {
		t.Fatalf("a thin event costs %d write units, a snapshot event %d", thin.WriteUnits, snap.WriteUnits)
	}
}

// The dispatch policies' budget: a once intent costs its claim and record;
// a while_current one whose subject has not moved one consistent read more;
// a latest one a read and one write (its subject cursor) more. A later
// revision costs nothing extra unless it contradicts a performed
// while_current intent.
func TestPolicyBudget(t *testing.T) {
	rows, err := capacity.MeasurePolicies(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	capacity.WritePolicyTable(&buf, rows)
	t.Log("\n" + buf.String())
	want := map[ledger.Policy]string{
		ledger.PolicyOnce:         "DynamoDB.UpdateItem=2",
		ledger.PolicyWhileCurrent: "DynamoDB.GetItem=1 DynamoDB.UpdateItem=2",
		ledger.PolicyLatest:       "DynamoDB.GetItem=1 DynamoDB.UpdateItem=3",
	}
	for _, r := range rows {
		if r.Calls.Detail != want[r.Policy] {
			t.Errorf("%s dispatch: %s, want %s", r.Policy, r.Calls.Detail, want[r.Policy])
		}
		// A subject that watches an intent pays, at every revision, to
		// learn its list: a cancelled transaction (and, on minidyn, a read
		// of the item DynamoDB would have returned with it).
		wantRev := "DynamoDB.TransactWriteItems=1"
		if r.Policy == ledger.PolicyWhileCurrent {
			wantRev = "DynamoDB.GetItem=1 DynamoDB.TransactWriteItems=2"
		}
		if r.RevisionCalls.Detail != wantRev {
			t.Errorf("%s: the next revision costs %s, want %s", r.Policy, r.RevisionCalls.Detail, wantRev)
		}
	}
	once, wc := rows[0], rows[1]
	if once.ContradictingCalls.Total != 1 || once.Contradicting.Units() != once.Revision.Units() {
		t.Errorf("a once subject pays for a watch list: %s, %d WU", once.ContradictingCalls.Detail, once.Contradicting.Units())
	}
	// Learning the list (a cancelled transaction, then reading the item
	// minidyn does not return with it), reading the watched intent, then
	// the transaction that contradicts it.
	if wc.ContradictingCalls.Detail != "DynamoDB.GetItem=2 DynamoDB.TransactWriteItems=2" {
		t.Errorf("contradicting revision: %s", wc.ContradictingCalls.Detail)
	}
}

// The due index caps the pipeline, and the shard count moves the cap. The
// index write units of one realistic 4 KB event with its effect are
// measured; the busiest shard's share comes from 100,000 generated ids
// hashed as the ledger hashes them.
func TestDueIndexCapMovesWithTheShards(t *testing.T) {
	rows, err := capacity.MeasurePipeline(t.Context(), []int{4 << 10}, capacity.Realistic)
	if err != nil {
		t.Fatal(err)
	}
	r := rows[0]
	perEvent := float64(r.Intake.IndexUnits() + r.Process.IndexUnits() + r.Effect.IndexUnits())
	var prev capacity.ShardLoad
	for _, shards := range []int{4, 8, 16, 32, 64} {
		l := capacity.DueIndexCap(shards, 100_000, perEvent, 1)
		t.Logf("%d index WU per event; %s", int(perEvent), l)
		if l.HottestShare > 1.1/float64(shards) {
			t.Fatalf("%d shards: the busiest holds %.3f of the events, want about %.3f", shards, l.HottestShare, 1/float64(shards))
		}
		if prev.Shards > 0 && l.CapEventsPerSecond < 1.8*prev.CapEventsPerSecond {
			t.Fatalf("doubling the shards from %d to %d moved the cap from %.0f to %.0f events/s only", prev.Shards, shards, prev.CapEventsPerSecond, l.CapEventsPerSecond)
		}
		prev = l
	}
	if four := capacity.DueIndexCap(4, 100_000, perEvent, 1); four.CapEventsPerSecond > 1000 {
		t.Fatalf("4 shards cap at %.0f events/s: the index write units per event (%v) look too low", four.CapEventsPerSecond, perEvent)
	}
}
