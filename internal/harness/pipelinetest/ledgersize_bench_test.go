package pipelinetest_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// BenchmarkLedgerSize measures intake and processing latency on the
// in-process stack (the real intake core and processor core through their
// Lambda JSON paths, minidyn and goaws through internal/harness/localaws) with
// 1,000, 10,000 and 100,000 events already in the ledger: the emulators'
// cost per request must not grow with the ledger (target: at most 1.5×
// the 1,000-event figure at 100,000).
//
// The prefill, outside the timer, looks like processed traffic: ten
// template events go through the real pipeline first (eight of four
// subscriptions processed with their intents dispatched, SUCCEEDED or
// SUPERSEDED; one processed with its intent still PENDING; one accepted and
// not yet processed, both of those on the due index; every subject's
// projection row and cursor), then their
// items are copied with BatchWriteItem under new ids until the ledger
// holds the size's events (about four items per event).
//
// Each operation is one delivery, alternately of a new subscription and of
// a newer state of a prefilled one (past due, active again, in turn): intake (verify, Accept, SendMessage),
// then one event source mapping cycle of a processor worker on its message
// (receive, claim, project, commit with its intent, announce, delete),
// timed apart. Reported: intake-ms and process-ms (means), with p99.
//
// Run: go test -run '^$' -bench LedgerSize -benchtime 400x ./internal/harness/pipelinetest/
func BenchmarkLedgerSize(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			ctx := context.Background()
			h := pt.NewChaos(b, pt.Options{}, pt.OutboxOptions{})
			w := h.NewWorker("bench")
			copies, items := prefillLedger(b, h, w, n)
			h.Clock.Advance(time.Minute)
			var intake, process []time.Duration
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				var body []byte
				id := fmt.Sprintf("evt_bench_%08d", i)
				if i%2 == 0 {
					body = pt.SubscriptionEvent(id, "customer.subscription.created", fmt.Sprintf("sub_bench_%08d", i), "active", pt.Start.Unix()+3600+int64(i), fmt.Sprintf("acct_bench_%08d", i))
				} else {
					// A prefilled subscription past due becomes active again
					// (past due again on its next turn, and so on).
					slot, round := (i/2)%(2*(copies-1)), (i/2)/(2*(copies-1))
					c, s, status := fmt.Sprintf("F%06d", 1+slot/2), slot%2, "active"
					if round%2 == 1 {
						status = "past_due"
					}
					body = pt.SubscriptionEvent(id, "customer.subscription.updated", fmt.Sprintf("sub_%s_%d", c, s), status, pt.Start.Unix()+3600+int64(i), fmt.Sprintf("acct_%s_%d", c, s))
				}
				sig := h.Sign(body, pt.SecretPrimary)
				t0 := time.Now()
				if r := h.Deliver(body, sig); r.Status != http.StatusAccepted {
					b.Fatalf("delivery %d answered %d", i, r.Status)
				}
				t1 := time.Now()
				if got := w.PollOnce(ctx); got != 1 {
					b.Fatalf("delivery %d: the worker received %d messages", i, got)
				}
				t2 := time.Now()
				intake, process = append(intake, t1.Sub(t0)), append(process, t2.Sub(t1))
				h.Clock.Advance(100 * time.Millisecond)
			}
			b.StopTimer()
			mean, p99 := summarize(intake)
			b.ReportMetric(mean, "intake-ms")
			b.ReportMetric(p99, "intake-p99-ms")
			mean, p99 = summarize(process)
			b.ReportMetric(mean, "process-ms")
			b.ReportMetric(p99, "process-p99-ms")
			b.ReportMetric(float64(items), "prefill-items")
			// Every measured event was processed and applied.
			for i := range len(intake) {
				ev := h.Event(fmt.Sprintf("evt_bench_%08d", i))
				if ev.Status != ledger.StatusProcessed || ev.Result == nil || ev.Result.Outcome != ledger.OutcomeApplied {
					b.Fatalf("evt_bench_%08d: %s %+v", i, ev.Status, ev.Result)
				}
			}
		})
	}
}

// prefillLedger fills h's ledger with n events (n a multiple of ten) that
// look like processed traffic and returns the number of copies of the
// template (the template itself is copy 0, its ids carry "T000000"; copy c
// carries "F%06d") and of items in the table.
func prefillLedger(b *testing.B, h *pt.Harness, w *pt.Worker, n int) (copies, items int) {
	b.Helper()
	ctx := context.Background()
	deliver := func(id, typ string, s int, status string, created int64) {
		body := pt.SubscriptionEvent(id, typ, fmt.Sprintf("sub_T000000_%d", s), status, created, fmt.Sprintf("acct_T000000_%d", s))
		if r := h.Deliver(body, h.Sign(body, pt.SecretPrimary)); r.Status != http.StatusAccepted {
			b.Fatalf("template %s answered %d", id, r.Status)
		}
		h.Clock.Advance(time.Second)
	}
	// Subjects 0-3: created active, then past due (0, 1) or canceled (2,
	// 3); processed, their effects done.
	for s := range 4 {
		deliver(fmt.Sprintf("evt_T000000_%d_0", s), "customer.subscription.created", s, "active", pt.Start.Unix()+int64(s))
		if s < 2 {
			deliver(fmt.Sprintf("evt_T000000_%d_1", s), "customer.subscription.updated", s, "past_due", pt.Start.Unix()+100+int64(s))
		} else {
			deliver(fmt.Sprintf("evt_T000000_%d_1", s), "customer.subscription.deleted", s, "canceled", pt.Start.Unix()+100+int64(s))
		}
	}
	d := h.Outbox.NewDispatcher("prefill")
	h.DrainAll(30*time.Second, time.Second, []*pt.Worker{w}, d)
	// Subject 4: processed, its intent announced and not yet dispatched.
	deliver("evt_T000000_4_0", "customer.subscription.created", 4, "active", pt.Start.Unix()+4)
	if got := w.PollOnce(ctx); got != 1 {
		b.Fatalf("template subject 4: the worker received %d messages", got)
	}
	// Subject 5: accepted, not yet processed (its pointer taken off the queue).
	deliver("evt_T000000_5_0", "customer.subscription.created", 5, "active", pt.Start.Unix()+5)
	for _, m := range h.Receive(h.Queues.Queue) {
		if _, err := h.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(h.Queues.Queue), ReceiptHandle: m.ReceiptHandle}); err != nil {
			b.Fatal(err)
		}
	}
	if h.Depth(h.Queues.Queue) != 0 {
		b.Fatal("the events queue is not empty after the template")
	}
	out, err := h.DB.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(h.Table)})
	if err != nil || out.LastEvaluatedKey != nil {
		b.Fatalf("scan the template: %v (more pages: %v)", err, out.LastEvaluatedKey != nil)
	}
	events, ops := 0, []string{}
	for _, it := range out.Items {
		switch str(it["item"]) {
		case "event":
			events++
		case "intent":
			ops = append(ops, str(it["operation_id"]))
		}
	}
	if events != 10 || len(ops) == 0 {
		b.Fatalf("template: %d events and %d intents, want 10 events with intents", events, len(ops))
	}
	copies = n / events
	var batch []types.WriteRequest
	flush := func() {
		req := map[string][]types.WriteRequest{h.Table: batch}
		for len(req) > 0 {
			out, err := h.DB.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: req})
			if err != nil {
				b.Fatalf("prefill: %v", err)
			}
			req = out.UnprocessedItems
		}
		batch = batch[:0]
	}
	for c := 1; c < copies; c++ {
		pairs := []string{"T000000", fmt.Sprintf("F%06d", c)}
		for _, op := range ops {
			sum := md5.Sum([]byte(fmt.Sprintf("%s/%d", op, c)))
			pairs = append(pairs, op, hex.EncodeToString(sum[:]))
		}
		r := strings.NewReplacer(pairs...)
		for _, it := range out.Items {
			batch = append(batch, types.WriteRequest{PutRequest: &types.PutRequest{Item: renameItem(it, r)}})
			if len(batch) == 25 {
				flush()
			}
		}
	}
	if len(batch) > 0 {
		flush()
	}
	return copies, copies * len(out.Items)
}

// renameItem copies an item with every string in it renamed by r.
func renameItem(it map[string]types.AttributeValue, r *strings.Replacer) map[string]types.AttributeValue {
	m := make(map[string]types.AttributeValue, len(it))
	for k, v := range it {
		m[k] = rename(v, r)
	}
	return m
}

func rename(v types.AttributeValue, r *strings.Replacer) types.AttributeValue {
	switch v := v.(type) {
	case *types.AttributeValueMemberM:
		return &types.AttributeValueMemberM{Value: renameItem(v.Value, r)}
	case *types.AttributeValueMemberL:
		l := make([]types.AttributeValue, len(v.Value))
		for i, x := range v.Value {
			l[i] = rename(x, r)
		}
		return &types.AttributeValueMemberL{Value: l}
	case *types.AttributeValueMemberS:
		return &types.AttributeValueMemberS{Value: r.Replace(v.Value)}
	case *types.AttributeValueMemberSS:
		ss := make([]string, len(v.Value))
		for i, x := range v.Value {
			ss[i] = r.Replace(x)
		}
		return &types.AttributeValueMemberSS{Value: ss}
	default: // numbers, binary (the stored payload chunks), booleans
		return v
	}
}

func str(v types.AttributeValue) string {
	if x, ok := v.(*types.AttributeValueMemberS); ok {
		return x.Value
	}
	return ""
}

// summarize returns the mean and the nearest-rank p99 in milliseconds.
func summarize(ds []time.Duration) (mean, p99 float64) {
	if len(ds) == 0 {
		return 0, 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	sorted := slices.Sorted(slices.Values(ds))
	i := min(max(int(math.Ceil(0.99*float64(len(sorted))))-1, 0), len(sorted)-1)
	return float64(sum) / float64(len(ds)) / 1e6, float64(sorted[i]) / 1e6
}
