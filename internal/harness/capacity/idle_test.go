package capacity_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/effectively-once/webhooks/internal/harness/capacity"
)

// An idle reconciler run at the default 4 due shards: 32 Query (8 per
// shard, see IdleRun), two queue depth gauges, one receive per DLQ, and
// nothing written. The count per shard is pinned here, so a reconciler
// that queries more shows up as a failure.
func TestReconcilerIdleRun(t *testing.T) {
	run, err := capacity.MeasureReconcilerIdle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("idle run: %s", run.Calls.Detail)
	if run.Queries != 32 || run.Calls.Total != 32+run.SQS || run.DLQReceives != 2 || run.SQS != 4 || run.Writes != 0 {
		t.Fatalf("idle run: %+v, want 32 Query, 2 GetQueueAttributes, 2 ReceiveMessage and no write", run)
	}
	m := capacity.IdleMonthly(run, capacity.ListPrices)
	var buf bytes.Buffer
	capacity.WriteIdleTable(&buf, m)
	t.Log("\n" + buf.String())
	if m.Runs != 8640 || capacity.Total(m.Lines) <= 0 || capacity.Total(m.Lines) > 2 {
		t.Fatalf("a month idle: %+v", m)
	}
}
