package metrics_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
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

// Whatever the properties hold (quotes, control characters, non-ASCII,
// numbers of every kind, nested values), the record is one line of valid
// JSON with each property and metric value as given; a NaN drops it.
func TestEmitWritesValidJSONForAnyProperties(t *testing.T) {
	var buf bytes.Buffer
	e := metrics.New(&buf, `ns"\`, func() time.Time { return time.UnixMilli(1700000000123) })
	props := map[string]any{
		"plain": "stripe", "quote\"key": "a \"b\" \\ c", "ctl": "line\nbreak\x00", "utf8": "café ✓", "bad": "\xff",
		"int": -42, "int64": int64(1) << 40, "bool": true, "float": 0.25, "nil": nil, "list": []string{"x"},
		"Received": "shadowed by the metric",
	}
	e.Emit(props, metrics.N("Received", 3), metrics.Latency("L", 1234567*time.Nanosecond), metrics.Metric{Name: "Tiny", Value: 1e-9, Unit: "Count"})
	line := buf.String()
	if strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") {
		t.Fatalf("not one line: %q", line)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatalf("not JSON: %v: %s", err, line)
	}
	want := map[string]any{
		"plain": "stripe", "quote\"key": "a \"b\" \\ c", "ctl": "line\nbreak\x00", "utf8": "café ✓", "bad": "\ufffd",
		"int": -42.0, "int64": float64(int64(1) << 40), "bool": true, "float": 0.25, "nil": nil, "list": []any{"x"},
		"Received": 3.0, "L": 1.234, "Tiny": 1e-9,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || fmt.Sprint(g) != fmt.Sprint(v) {
			t.Errorf("%q: %#v, want %#v", k, g, v)
		}
	}
	aws := got["_aws"].(map[string]any)
	cw := aws["CloudWatchMetrics"].([]any)[0].(map[string]any)
	if aws["Timestamp"] != 1700000000123.0 || cw["Namespace"] != `ns"\` || len(cw["Metrics"].([]any)) != 3 {
		t.Fatalf("metadata %v", aws)
	}
	if len(got) != len(want)+1 {
		t.Fatalf("%d keys, want %d: %v", len(got), len(want)+1, got)
	}
	buf.Reset()
	e.Emit(nil, metrics.Metric{Name: "X", Value: math.NaN(), Unit: "Count"})
	if buf.Len() != 0 {
		t.Fatalf("a NaN record was written: %q", buf.String())
	}
}

func BenchmarkEmitIntakeRecord(b *testing.B) {
	e := metrics.New(io.Discard, "", nil)
	b.ReportAllocs()
	for b.Loop() {
		e.Emit(map[string]any{"function": "intake", "source": "stripe", "status": 202, "request_id": "req-1234567890"},
			metrics.N("Received", 1), metrics.N("Accepted", 1), metrics.N("Duplicates", 0), metrics.N("Conflicts", 0),
			metrics.N("SuspectedReplays", 0), metrics.N("ReplaysDisplaced", 0), metrics.N("ConnectRefused", 0),
			metrics.N("Rejected", 0), metrics.Latency("IntakeLatencyMs", 3*time.Millisecond))
	}
}
