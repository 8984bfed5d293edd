package pipelinetest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
)

// paddedEvent returns a subscription event padded with pseudo-random text
// to about size bytes (roughly as compressible as real JSON ids and hashes).
func paddedEvent(id string, size int) []byte {
	b := subEvent(id, "customer.subscription.created", "active", created)
	if size <= len(b) {
		return b
	}
	r := rand.New(rand.NewPCG(uint64(size), 7))
	pad := make([]byte, size-len(b)-16)
	for i := range pad {
		pad[i] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[r.IntN(62)]
	}
	return []byte(strings.Replace(string(b), `"livemode":false`, `"livemode":false,"padding":"`+string(pad)+`"`, 1))
}

// TestRequestBudgetPerEvent counts the AWS requests the intake and the
// processor make per event, by operation, through the SDK middleware. The
// small-event numbers are the request budget and are asserted; the
// larger payloads (stored out of line) are reported.
func TestRequestBudgetPerEvent(t *testing.T) {
	for _, size := range []int{0, 700, 4 << 10, 64 << 10} {
		t.Run(fmt.Sprintf("%dB", size), func(t *testing.T) {
			h := pt.New(t, pt.Options{})
			id := fmt.Sprintf("evt_budget_%d", size)
			body := paddedEvent(id, size)
			if size == 0 { // the smallest event the projection accepts: stored inline
				body = fmt.Appendf(nil, `{"id":%q,"object":"event","type":"customer.subscription.created","created":%d,`+
					`"data":{"object":{"id":%q,"object":"subscription","status":"active","metadata":{"account_id":"acct_42"}}}}`, id, created, sub)
			}

			h.IntakeRec.Reset()
			if r := h.Deliver(body, h.Sign(body, pt.SecretPrimary)); r.Status != 202 {
				t.Fatalf("new: %d", r.Status)
			}
			newEvent := h.IntakeRec.String()
			newTotal := h.IntakeRec.Total("")

			w := h.NewWorker("w")
			if n := w.PollOnce(context.Background()); n != 1 {
				t.Fatalf("polled %d", n)
			}
			processed := w.Rec.String()
			procTotal := w.Rec.Total("DynamoDB")
			if h.Depth(h.Queues.Queue) != 0 {
				t.Fatal("not processed in one poll")
			}

			h.IntakeRec.Reset()
			if r := h.Deliver(body, h.Sign(body, pt.SecretPrimary)); r.Status != 200 {
				t.Fatalf("duplicate: %d", r.Status)
			}
			dupTotal := h.IntakeRec.Total("")

			ev := h.Event(id)
			t.Logf("payload %d B (stored %s): intake new event %d requests [%s]; processor %d DynamoDB requests [%s]; duplicate of processed %d request",
				len(body), map[bool]string{true: "inline", false: fmt.Sprintf("in %d chunk(s)", ev.PayloadChunks)}[ev.PayloadChunks == 0],
				newTotal, newEvent, procTotal, processed, dupTotal)

			if size == 0 && ev.PayloadChunks != 0 {
				t.Fatalf("a %d-byte payload was stored out of line", len(body))
			}
			if dupTotal != 1 {
				t.Fatalf("duplicate of a processed event cost %d requests, want 1", dupTotal)
			}
			extra := 0
			if ev.PayloadChunks > 0 {
				extra = ev.PayloadChunks // one PutItem at intake and one GetItem in the processor per chunk
			}
			if newTotal != 2+extra || h.IntakeRec.Count("SQS.SendMessage") != 0 {
				t.Fatalf("intake new event cost %d requests (%s), want %d", newTotal, newEvent, 2+extra)
			}
			if procTotal != 2+extra || w.Rec.Count("DynamoDB.UpdateItem") != 1 || w.Rec.Count("DynamoDB.TransactWriteItems") != 1 {
				t.Fatalf("processing cost %d DynamoDB requests (%s), want claim + transaction (+%d payload reads)", procTotal, processed, extra)
			}
		})
	}
}
