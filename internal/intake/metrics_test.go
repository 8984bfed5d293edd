package intake_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/metrics"
)

// Every request leaves one EMF record: a new event counts as Accepted, a
// second delivery as a Duplicate, a forged one as Rejected.
func TestOneMetricsRecordPerRequest(t *testing.T) {
	h := pt.New(t, pt.Options{})
	var buf bytes.Buffer
	h.Intake.Metrics = metrics.New(&buf, "EffectivelyOnce/test", h.Clock.Now)
	body := fixture(t, "stripe/customer.subscription.updated.json")
	invoke(t, h.Intake, gatewayEvent(t, h, body, pt.SecretPrimary))
	invoke(t, h.Intake, gatewayEvent(t, h, body, pt.SecretPrimary))
	invoke(t, h.Intake, gatewayEvent(t, h, body, pt.SecretUnknown))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d records, want 3: %s", len(lines), buf.String())
	}
	want := []struct {
		status                                 float64
		received, accepted, duplicates, reject float64
	}{{202, 1, 1, 0, 0}, {202, 1, 0, 1, 0}, {401, 1, 0, 0, 1}}
	for i, w := range want {
		var rec map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &rec); err != nil {
			t.Fatal(err)
		}
		if rec["status"] != w.status || rec["Received"] != w.received || rec["Accepted"] != w.accepted ||
			rec["Duplicates"] != w.duplicates || rec["Rejected"] != w.reject || rec["source"] != "stripe" || rec["function"] != "intake" {
			t.Fatalf("record %d: %v", i, rec)
		}
		if _, ok := rec["IntakeLatencyMs"].(float64); !ok {
			t.Fatalf("record %d has no latency: %v", i, rec)
		}
		if strings.Contains(lines[i], "whsec_") || strings.Contains(lines[i], `"object"`) {
			t.Fatalf("record %d carries a secret or the payload: %s", i, lines[i])
		}
	}
}
