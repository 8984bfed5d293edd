package processor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/metrics"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
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

// An event whose payload was never stored (the intake died between its
// row and its chunks) waits for the provider's retry: the message is
// acknowledged, no attempt is spent, and its record counts
// AwaitingPayload. Past the source's retry_horizon_hours (1 here) it is
// quarantined payload_never_arrived, and its record counts
// PayloadNeverArrived and names the code.
func TestPayloadNeverStoredMetricsAndHorizon(t *testing.T) {
	h := pt.New(t, pt.Options{SourcesDoc: `{"sources":[{"name":"stripe","kind":"stripe","secrets":["env:STRIPE_PRIMARY"],"retry_horizon_hours":1}]}`})
	var buf bytes.Buffer
	p, err := processor.New(h.Ledger, h.Sources, builtin.Default(builtin.StripeOptions{}), processor.Options{
		Owner: "m", Lease: time.Minute, Now: h.Clock.Now, Log: slog.New(slog.DiscardHandler), PayloadRecheck: 40 * time.Minute,
		Metrics: metrics.New(&buf, "EffectivelyOnce/test", h.Clock.Now)})
	if err != nil {
		t.Fatal(err)
	}
	body := pt.SubscriptionEvent("evt_lost", "customer.subscription.created", "sub_1", "active", pt.Start.Unix(), "acct_1")
	body = []byte(strings.Replace(string(body), `"livemode":false`, `"livemode":false,"padding":"`+strings.Repeat("a1b2c3d4e5f6g7h8", 256)+`"`, 1))
	h.IntakeRec.Arm(awstrace.Crash{Op: "DynamoDB.PutItem", Nth: 1, When: awstrace.Before})
	if r := h.Deliver(body, h.Sign(body, pt.SecretPrimary)); r.Status < 500 {
		t.Fatalf("setup: intake answered %d, want 5xx after dying before the chunks", r.Status)
	}
	msg := processor.Message{ID: "1", Body: `{"v":1,"source":"stripe","event_id":"evt_lost"}`}
	record := func() map[string]any {
		t.Helper()
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		var rec map[string]any
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rec); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	for round := range 2 {
		if failed := p.Process(context.Background(), []processor.Message{msg}); len(failed) != 0 {
			t.Fatalf("round %d: message not acknowledged", round)
		}
		ev := h.Event("evt_lost")
		if rec := record(); ev.Status != ledger.StatusRetryWait || ev.ErrorCode != ledger.CodePayloadMissing || ev.Attempts != 0 ||
			rec["AwaitingPayload"] != 1.0 || rec["Retries"] != 0.0 || rec["Dead"] != 0.0 {
			t.Fatalf("round %d: event %s (%s), attempts %d, record %v; want RETRY_WAIT %s, no attempt, AwaitingPayload",
				round, ev.Status, ev.ErrorCode, ev.Attempts, rec, ledger.CodePayloadMissing)
		}
		if round == 1 && !ev.NextAttemptAt.Equal(pt.Start.Add(time.Hour)) {
			t.Fatalf("the second look is due %s; want the horizon, %s", ev.NextAttemptAt, pt.Start.Add(time.Hour))
		}
		h.Clock.Advance(40 * time.Minute)
	}
	if failed := p.Process(context.Background(), []processor.Message{msg}); len(failed) != 0 {
		t.Fatal("past the horizon: message not acknowledged")
	}
	ev, rec := h.Event("evt_lost"), record()
	if ev.Status != ledger.StatusQuarantined || ev.ErrorCode != ledger.CodePayloadNeverArrived ||
		rec["PayloadNeverArrived"] != 1.0 || rec["Quarantined"] != 1.0 || rec["code"] != ledger.CodePayloadNeverArrived || rec["ProjectionFaults"] != 0.0 {
		t.Fatalf("past the horizon: event %s (%s), record %v; want QUARANTINED %s, counted PayloadNeverArrived", ev.Status, ev.ErrorCode, rec, ledger.CodePayloadNeverArrived)
	}
}

// A latest intent that reuses another revision's operation id is a fault
// of the rules: the event is quarantined operation_id_reused, and its
// record counts OperationIDsReused (and ProjectionFaults), naming the
// projection, the kind and the operation id.
func TestAReusedOperationIDIsCountedNamingProjectionAndKind(t *testing.T) {
	reg := projection.NewRegistry()
	rule := pt.NewSeatsRule(true, false)
	rule.Register(reg)
	h := pt.NewOrders(t, pt.Options{Registry: reg}, pt.OutboxOptions{Kinds: []string{rule.Kind()}})
	var buf bytes.Buffer
	p, err := processor.New(h.Ledger, h.Sources, reg, processor.Options{
		Owner: "m", Lease: time.Minute, Now: h.Clock.Now, Log: slog.New(slog.DiscardHandler),
		Metrics: metrics.New(&buf, "EffectivelyOnce/test", h.Clock.Now)})
	if err != nil {
		t.Fatal(err)
	}
	for i, seats := range []int{5, 8} {
		id := fmt.Sprintf("msg_%d", i+1)
		if r := h.DeliverOrder(id, pt.SeatsEvent("O-7", i+1, seats)); r.Status != 202 {
			t.Fatalf("deliver %d %s", r.Status, r.Body)
		}
		p.Process(context.Background(), []processor.Message{{ID: id, Body: `{"v":1,"source":"orders","event_id":"` + id + `"}`}})
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d records: %s", len(lines), buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[1]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["outcome"] != "quarantined" || rec["OperationIDsReused"] != 1.0 || rec["ProjectionFaults"] != 1.0 || rec["code"] != projection.CodeOperationIDReused ||
		rec["projection"] != "orders/"+builtin.OrderProjection || rec["kind"] != "seats.set" || rec["operation_id"] != rule.OperationID("O-7", 1) {
		t.Fatalf("record of the reusing revision: %v", rec)
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || first["OperationIDsReused"] != 0.0 {
		t.Fatalf("record of the first revision: %v %v", first, err)
	}
}
