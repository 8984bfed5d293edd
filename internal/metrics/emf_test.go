package metrics_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/metrics"
)

func TestEmitWritesOneEMFRecord(t *testing.T) {
	var buf bytes.Buffer
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	e := metrics.New(&buf, "EffectivelyOnce/dev", func() time.Time { return at })
	e.Emit(map[string]any{"function": "intake", "source": "stripe", "_aws": "spoof"},
		metrics.N("Received", 1), metrics.N("Duplicates", 0), metrics.Latency("IntakeLatencyMs", 1500*time.Microsecond), metrics.N("Received", 9))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one line, got %d: %q", len(lines), buf.String())
	}
	var rec struct {
		AWS struct {
			Timestamp         int64
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name, Unit string }
			}
		} `json:"_aws"`
		Function        string  `json:"function"`
		Received        float64 `json:"Received"`
		Duplicates      float64 `json:"Duplicates"`
		IntakeLatencyMs float64 `json:"IntakeLatencyMs"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatalf("not JSON: %v: %s", err, lines[0])
	}
	d := rec.AWS.CloudWatchMetrics
	if rec.AWS.Timestamp != at.UnixMilli() || len(d) != 1 || d[0].Namespace != "EffectivelyOnce/dev" ||
		len(d[0].Dimensions) != 1 || len(d[0].Dimensions[0]) != 0 || len(d[0].Metrics) != 3 {
		t.Fatalf("metadata: %+v", rec.AWS)
	}
	if d[0].Metrics[2].Name != "IntakeLatencyMs" || d[0].Metrics[2].Unit != "Milliseconds" || d[0].Metrics[0].Unit != "Count" {
		t.Fatalf("definitions: %+v", d[0].Metrics)
	}
	if rec.Function != "intake" || rec.Received != 1 || rec.Duplicates != 0 || rec.IntakeLatencyMs != 1.5 {
		t.Fatalf("values: %+v", rec)
	}
}

func TestNilEmitterAndEmptyRecordsWriteNothing(t *testing.T) {
	var e *metrics.Emitter
	e.Emit(nil, metrics.N("Received", 1))
	var buf bytes.Buffer
	metrics.New(&buf, "", nil).Emit(map[string]any{"a": 1})
	if buf.Len() != 0 {
		t.Fatalf("a record without metrics was written: %q", buf.String())
	}
}
