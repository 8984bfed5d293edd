package capacity_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/internal/harness/capacity"
)

func TestMeasureIntakeSideTiny(t *testing.T) {
	// GIVEN both intakes on one minidyn and one goaws
	// WHEN a tiny interleaved run delivers new 1 KB and 4 KB events to each
	rows, err := capacity.MeasureIntakeSide(context.Background(), capacity.SideOptions{Reps: 2, PerBlock: 10, Warmup: -1})
	if err != nil {
		t.Fatal(err)
	}
	// THEN every delivery was accepted (MeasureIntakeSide fails otherwise)
	// and each size has percentiles and ratios for both contenders
	if len(rows) != 2 {
		t.Fatalf("rows: %d, want 2", len(rows))
	}
	for _, r := range rows {
		if r.Deliveries != 20 {
			t.Errorf("%d B: %d deliveries, want 20", r.PayloadBytes, r.Deliveries)
		}
		if r.OursP50 <= 0 || r.BareP50 <= 0 || r.OursP99 < r.OursP50 || r.BareP99 < r.BareP50 {
			t.Errorf("%d B: percentiles %+v", r.PayloadBytes, r)
		}
		if r.RatioP99.Min <= 0 || r.RatioP99.Min > r.RatioP99.Median || r.RatioP99.Median > r.RatioP99.Max {
			t.Errorf("%d B: p99 ratio spread %+v", r.PayloadBytes, r.RatioP99)
		}
	}
	if rows[0].PayloadBytes < 900 || rows[0].PayloadBytes > 1200 || rows[1].PayloadBytes < 3900 || rows[1].PayloadBytes > 4300 {
		t.Errorf("payload sizes %d and %d, want about 1 KB and 4 KB", rows[0].PayloadBytes, rows[1].PayloadBytes)
	}
	var md bytes.Buffer
	capacity.WriteSideTable(&md, rows)
	if n := strings.Count(md.String(), "\n"); n != 4 {
		t.Errorf("table has %d lines, want 4:\n%s", n, md.String())
	}
}
