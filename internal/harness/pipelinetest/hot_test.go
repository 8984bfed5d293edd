package pipelinetest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Hot subjects: 50 events of one subject arrive at once and
// three workers process them concurrently. Version-guard failures and
// write conflicts must converge to the newest state and version, with no
// event DEAD and a bounded number of retries (reported in the log).
func TestHotSubjectConverges(t *testing.T) {
	const n, workers = 50, 3
	for _, tc := range []struct {
		name    string
		harness func(t *testing.T) *pt.Harness
		deliver func(h *pt.Harness, i int) (source, id string)
		proj    string
		subject string
		want    func(p ledger.Projection) error
	}{
		{
			name:    "subscription",
			harness: func(t *testing.T) *pt.Harness { return pt.New(t, pt.Options{}) },
			deliver: func(h *pt.Harness, i int) (string, string) {
				id := fmt.Sprintf("evt_hot_%02d", i)
				status := []string{"active", "past_due", "trialing", "unpaid"}[i%4]
				b := pt.SubscriptionEvent(id, "customer.subscription.updated", "sub_hot", status, created+int64(i), "acct_hot")
				if r := h.Deliver(b, h.Sign(b, pt.SecretPrimary)); r.Status != 202 {
					h.T.Fatalf("%s: %d", id, r.Status)
				}
				return "stripe", id
			},
			proj: projection.ScopedName("stripe", builtin.StripeSubscriptionProjection), subject: "sub_hot",
			want: func(p ledger.Projection) error {
				// The newest event (i = 49, created+49, updated rank 2) wins.
				if p.Version != (created+n-1)*4+2 || p.State["status"] != []string{"active", "past_due", "trialing", "unpaid"}[(n-1)%4] {
					return fmt.Errorf("at v%d %v", p.Version, p.State["status"])
				}
				return nil
			},
		},
		{
			name:    "order",
			harness: func(t *testing.T) *pt.Harness { return pt.NewOrders(t, pt.Options{}, pt.OutboxOptions{}) },
			deliver: func(h *pt.Harness, i int) (string, string) {
				id := fmt.Sprintf("msg_hot_%02d", i)
				status := []string{"created", "confirmed", "cancelled"}[i%3]
				if r := h.DeliverOrder(id, pt.OrderEvent("order.updated", "O-HOT", i+1, status, "")); r.Status != 202 {
					h.T.Fatalf("%s: %d", id, r.Status)
				}
				return "orders", id
			},
			proj: projection.ScopedName("orders", builtin.OrderProjection), subject: "O-HOT",
			want: func(p ledger.Projection) error {
				if p.Version != n || p.State["status"] != []string{"created", "confirmed", "cancelled"}[(n-1)%3] {
					return fmt.Errorf("at r%d %v", p.Version, p.State["status"])
				}
				return nil
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.harness(t)
			ids := make([][2]string, n)
			for i := range n {
				src, id := tc.deliver(h, i)
				ids[i] = [2]string{src, id}
			}
			ws := make([]*pt.Worker, workers)
			for i := range ws {
				ws[i] = h.NewWorker(fmt.Sprintf("proc-%d", i))
			}
			ctx := context.Background()
			deadline := time.Now().Add(60 * time.Second)
			for h.Depth(h.Queues.Queue) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("not drained: depth %d", h.Depth(h.Queues.Queue))
				}
				var wg sync.WaitGroup
				for _, w := range ws {
					wg.Add(1)
					go func() { defer wg.Done(); w.PollOnce(ctx) }()
				}
				wg.Wait()
				h.Clock.Advance(time.Second) // retries come due on the manual clock
			}
			p, err := h.Ledger.GetProjection(ctx, tc.proj, tc.subject)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.want(p); err != nil {
				t.Fatalf("final projection %v: %+v", err, p)
			}
			attempts, maxAttempts := 0, 0
			outcomes := map[ledger.Outcome]int{}
			for _, id := range ids {
				ev := h.EventOf(id[0], id[1])
				if ev.Status != ledger.StatusProcessed {
					t.Fatalf("%s ended %s (%s)", id[1], ev.Status, ev.ErrorCode)
				}
				outcomes[ev.Result.Outcome]++
				attempts += ev.TotalAttempts
				maxAttempts = max(maxAttempts, ev.TotalAttempts)
			}
			t.Logf("%d events, %d workers: %d attempts in all (%.2f per event, at most %d for one); outcomes %v", n, workers, attempts, float64(attempts)/n, maxAttempts, outcomes)
			if maxAttempts > 3 {
				t.Fatalf("an event took %d attempts", maxAttempts)
			}
		})
	}
}
