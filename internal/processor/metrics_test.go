package processor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/metrics"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/pkg/builtin"
)

// Each processed message leaves one EMF record naming its outcome: a new
// subscription state is Applied, the older event after it Stale.
func TestOneMetricsRecordPerMessage(t *testing.T) {
	h := pt.New(t, pt.Options{})
	var buf bytes.Buffer
	p, err := processor.New(h.Ledger, h.Sources, builtin.Default(builtin.StripeOptions{}), processor.Options{
		Owner: "m", Lease: time.Minute, Now: h.Clock.Now, Log: slog.New(slog.DiscardHandler),
		Metrics: metrics.New(&buf, "EffectivelyOnce/test", h.Clock.Now)})
	if err != nil {
		t.Fatal(err)
	}
	newer := pt.SubscriptionEvent("evt_new", "customer.subscription.updated", "sub_1", "past_due", pt.Start.Unix()+10, "acct_1")
	older := pt.SubscriptionEvent("evt_old", "customer.subscription.updated", "sub_1", "active", pt.Start.Unix(), "acct_1")
	for _, b := range [][]byte{newer, older} {
		if r := h.Deliver(b, h.Sign(b, pt.SecretPrimary)); r.Status != 202 {
			t.Fatalf("deliver %d", r.Status)
		}
	}
	p.Process(context.Background(), []processor.Message{
		{ID: "1", Body: `{"v":1,"source":"stripe","event_id":"evt_new"}`},
		{ID: "2", Body: `{"v":1,"source":"stripe","event_id":"evt_old"}`},
	})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d records: %s", len(lines), buf.String())
	}
	for i, want := range []struct{ outcome, metric string }{{"applied", "Applied"}, {"stale", "Stale"}} {
		var rec map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &rec); err != nil {
			t.Fatal(err)
		}
		if rec["outcome"] != want.outcome || rec[want.metric] != 1.0 || rec["Processed"] != 1.0 || rec["Retries"] != 0.0 || rec["function"] != "processor" {
			t.Fatalf("record %d: %v", i, rec)
		}
	}
}
