package loadgen_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/harness/loadgen"
)

// TestLoadAgainstLocalStack builds the real bootstraps, starts the local
// stack on free ports with the fast profile, offers 20 deliveries/s for 5 s
// with 20% duplicates, and asserts the business facts: nothing accepted is
// lost, every expected effect is applied exactly once, no subject regresses,
// every send is answered 200 or 202, and the percentiles are sane.
func TestLoadAgainstLocalStack(t *testing.T) {
	if testing.Short() {
		t.Skip("load against the local stack skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stack, file, log := devstack.StartForTest(t, ctx)
	stackLog := func() string { return log.Tail(60) }
	target := loadgen.Target{
		BaseURL: stack.HTTPURL(), DB: stack.DB, Table: stack.Table(),
		Secrets: loadgen.Secrets{
			Stripe: file.Secrets["LOCAL_STRIPE_WEBHOOK_SECRET"], StripeNext: file.Secrets["LOCAL_STRIPE_WEBHOOK_SECRET_NEXT"],
			Orders: file.Secrets["LOCAL_ORDERS_WEBHOOK_SECRET"],
		},
	}
	var progress bytes.Buffer
	start := time.Now()
	res, err := loadgen.Run(ctx, target, loadgen.Options{Rate: 20, Duration: 5 * time.Second, DuplicateRatio: 0.2, Seed: 3, Drain: 30 * time.Second, Progress: &progress})
	if err != nil {
		t.Fatalf("%v\n%s", err, stackLog())
	}
	var out bytes.Buffer
	res.Print(&out)
	t.Logf("run took %s\n%s%s", time.Since(start).Round(time.Millisecond), progress.String(), out.String())
	if !res.OK() {
		t.Fatalf("violations %v\nstack log tail:\n%s", res.Violations, stackLog())
	}
	// The run is what was offered: 100 sends, about a fifth duplicates,
	// none skipped, every one answered.
	if res.Sent != 100 || res.Skipped != 0 || res.Duplicates < 10 || res.Duplicates > 30 || res.StatusCodes["202"] == 0 {
		t.Fatalf("sent %d (skipped %d, duplicates %d), codes %v", res.Sent, res.Skipped, res.Duplicates, res.StatusCodes)
	}
	if res.Lost != 0 || res.Effects.Doubled != 0 || res.Effects.Missing != 0 || res.Accepted != res.NewEvents || res.Processed != res.Accepted {
		t.Fatalf("lost %d, doubled %d, missing %d; %d events, %d accepted, %d processed",
			res.Lost, res.Effects.Doubled, res.Effects.Missing, res.NewEvents, res.Accepted, res.Processed)
	}
	// Both sources and every kind of effect took part.
	for _, kind := range []string{"entitlement.grant", "refund", "notify_cancellation"} {
		if res.Effects.ByKind[kind] == 0 {
			t.Errorf("no %s effect applied: %v", kind, res.Effects.ByKind)
		}
	}
	if res.Effects.MaxPerKey != 1 || res.Effects.Applied+res.Effects.Suppressed != res.Effects.Expected || res.Effects.Missing != 0 {
		t.Fatalf("effects %+v", res.Effects)
	}
	// Sane percentiles: ordered, positive, and far below the client's 30 s
	// timeout; an event cannot be PROCESSED before it was sent.
	for name, p := range map[string]loadgen.Percentiles{"intake": res.Intake, "end to end": res.EndToEnd} {
		if p.N == 0 || p.P50 <= 0 || p.P50 > p.P95 || p.P95 > p.P99 || p.P99 > p.Max || p.Max > 20000 {
			t.Errorf("%s percentiles %+v", name, p)
		}
	}
	if res.EndToEnd.P50 < res.Intake.P50 {
		t.Errorf("time to PROCESSED p50 %.1f ms below intake p50 %.1f ms", res.EndToEnd.P50, res.Intake.P50)
	}
	if res.Throughput < 15 {
		t.Errorf("throughput %.1f accepted/s at 20 offered", res.Throughput)
	}
	if !strings.Contains(out.String(), "OK: nothing lost") {
		t.Errorf("report:\n%s", out.String())
	}
}
