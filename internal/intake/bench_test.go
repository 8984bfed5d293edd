package intake_test

import (
	"fmt"
	"testing"
	"time"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
)

// BenchmarkHandleNewEvent measures one signed delivery of a new event:
// verify, accept into the ledger, enqueue, reply (in-memory fakes).
func BenchmarkHandleNewEvent(b *testing.B) {
	h := pt.New(b, pt.Options{})
	created := pt.Start.Unix() - 60
	bodies := make([][]byte, b.N)
	sigs := make([]string, b.N)
	for i := range bodies {
		bodies[i] = pt.SubscriptionEvent(fmt.Sprintf("evt_bench_%d", i), "customer.subscription.created", "sub_bench", "active", created, "acct_test_42")
		sigs[i] = h.Sign(bodies[i], pt.SecretPrimary)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range bodies {
		if r := h.Deliver(bodies[i], sigs[i]); r.Status != 202 {
			b.Fatalf("status %d %s", r.Status, r.Body)
		}
	}
}

// BenchmarkHandleProcessedDuplicate measures the answer to a duplicate of
// a processed event: verify, the ledger's duplicate answer, reply.
func BenchmarkHandleProcessedDuplicate(b *testing.B) {
	h := pt.New(b, pt.Options{})
	created := pt.Start.Unix() - 60
	body := pt.SubscriptionEvent("evt_bench_dup", "customer.subscription.created", "sub_bench_dup", "active", created, "acct_test_42")
	if r := h.Deliver(body, h.Sign(body, pt.SecretPrimary)); r.Status != 202 {
		b.Fatalf("first delivery: %d %s", r.Status, r.Body)
	}
	h.Drain(10*time.Second, time.Second, h.NewWorker("w"))
	sig := h.Sign(body, pt.SecretPrimary)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if r := h.Deliver(body, sig); r.Status != 200 {
			b.Fatalf("status %d %s", r.Status, r.Body)
		}
	}
}
