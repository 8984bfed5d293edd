package processor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/metrics"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// teamOrders is a team's projection of Stripe subscription events; mode
// picks the mistake it makes.
type teamOrders struct {
	name string
	mode string // "ok", "panic", "no_operation_id"
}

func (p teamOrders) Name() string { return p.name }

func (p teamOrders) Project(ev projection.Event) (projection.Result, error) {
	var e struct {
		Created int64
		Data    struct{ Object struct{ ID, Status string } }
	}
	if err := json.Unmarshal(ev.Payload, &e); err != nil {
		return projection.Result{}, projection.Permanent("malformed", err)
	}
	var lines []string
	if p.mode == "panic" {
		_ = lines[3] // the team's bug: an index out of range
	}
	state := map[string]any{"status": e.Data.Object.Status}
	res := projection.Result{Write: &projection.Write{
		Name: p.name, Subject: e.Data.Object.ID, Version: e.Created,
		Fingerprint: projection.Fingerprint(state), State: state,
	}}
	in := projection.Intent{OperationID: projection.OperationID(e.Data.Object.ID, "sync", e.Data.Object.Status), Kind: "order.sync",
		Subject: e.Data.Object.ID, Policy: projection.PolicyLatest, Payload: map[string]any{"status": e.Data.Object.Status}}
	if p.mode == "no_operation_id" {
		in.OperationID = "" // the team's bug: forgot the operation id
	}
	res.Intents = []projection.Intent{in}
	return res, nil
}

// A team's projection that panics, or returns a result the pipeline
// cannot apply (here an intent without an operation id), costs its own
// event and nothing else: that event is QUARANTINED at its first attempt
// with a code naming the rule and a message naming the projection, its
// message is settled (no batch item failure: nothing to retry), the rest
// of the batch is applied, and the metrics record counts the fault.
func TestATeamsFaultyProjectionQuarantinesItsEventOnly(t *testing.T) {
	reg := projection.NewRegistry()
	reg.Register("stripe", []string{"customer.subscription.created"}, teamOrders{name: "team_orders", mode: "ok"})
	reg.Register("stripe", []string{"customer.subscription.updated"}, teamOrders{name: "team_panicky", mode: "panic"})
	reg.Register("stripe", []string{"customer.subscription.paused"}, teamOrders{name: "team_forgetful", mode: "no_operation_id"})
	h := pt.New(t, pt.Options{Registry: reg})
	bodies := map[string][]byte{
		"evt_ok":     pt.SubscriptionEvent("evt_ok", "customer.subscription.created", "sub_ok", "active", pt.Start.Unix(), ""),
		"evt_panic":  pt.SubscriptionEvent("evt_panic", "customer.subscription.updated", "sub_panic", "active", pt.Start.Unix(), ""),
		"evt_no_ops": pt.SubscriptionEvent("evt_no_ops", "customer.subscription.paused", "sub_no_ops", "paused", pt.Start.Unix(), ""),
	}
	var batch events.SQSEvent
	for _, id := range []string{"evt_panic", "evt_no_ops", "evt_ok"} {
		if r := h.Deliver(bodies[id], h.Sign(bodies[id], pt.SecretPrimary)); r.Status != 202 {
			t.Fatalf("deliver %s: %d", id, r.Status)
		}
		ptr := queue.Pointer{V: 1, Source: "stripe", EventID: id}
		batch.Records = append(batch.Records, events.SQSMessage{MessageId: "m-" + id, Body: ptr.Encode(), Attributes: map[string]string{"ApproximateReceiveCount": "1"}})
	}
	var buf bytes.Buffer
	p, err := processor.New(h.Ledger, h.Sources, reg, processor.Options{
		Owner: "w", Now: h.Clock.Now, Log: slog.New(slog.DiscardHandler), Metrics: metrics.New(&buf, "EffectivelyOnce/test", h.Clock.Now),
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := p.HandleSQS(context.Background(), batch)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("batch item failures %+v (%v); want none: a quarantined event is settled", resp.BatchItemFailures, err)
	}

	for _, want := range []struct{ id, code, msg string }{
		{"evt_panic", "projection_panic", `projection "stripe/team_panicky" panicked: runtime error: index out of range [3] with length 0`},
		{"evt_no_ops", "projection_invalid_result", `projection "stripe/team_forgetful": intent 0 has no operation id`},
	} {
		ev := h.Event(want.id)
		if ev.Status != ledger.StatusQuarantined || ev.ErrorCode != want.code || !strings.Contains(ev.ErrorMessage, want.msg) {
			t.Errorf("%s: %s %s %q; want QUARANTINED %s with %q", want.id, ev.Status, ev.ErrorCode, ev.ErrorMessage, want.code, want.msg)
		}
		if ev.TotalAttempts != 1 {
			t.Errorf("%s: %d attempts; want the first to settle it", want.id, ev.TotalAttempts)
		}
	}
	if ev := h.Event("evt_ok"); ev.Status != ledger.StatusProcessed || ev.Result.Outcome != ledger.OutcomeApplied {
		t.Errorf("evt_ok: %s %+v; want applied", ev.Status, ev.Result)
	}
	if n := h.Projections(); n != 1 {
		t.Errorf("%d projections; want the good event's only", n)
	}
	if in := h.Intents(); len(in) != 1 || in[0].Causation != "stripe/evt_ok" {
		t.Errorf("intents %+v; want the good event's only", in)
	}

	faults := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("metrics record %q: %v", line, err)
		}
		if rec["ProjectionFaults"] == 1.0 {
			if rec["Quarantined"] != 1.0 {
				t.Errorf("a fault not counted as quarantined: %v", rec)
			}
			faults[rec["event_id"].(string)] = rec["code"].(string) + " " + rec["projection"].(string)
		}
	}
	if faults["evt_panic"] != "projection_panic stripe/team_panicky" || faults["evt_no_ops"] != "projection_invalid_result stripe/team_forgetful" || len(faults) != 2 {
		t.Errorf("faults counted %v; want the two events, with their codes and projections", faults)
	}
}

// projection.Validate and the ledger's commit refuse by the same limits
// and record a value DynamoDB cannot store with the same code.
func TestValidateAgreesWithTheLedger(t *testing.T) {
	if projection.CodeUnstorable != ledger.CodeUnstorable {
		t.Errorf("projection.CodeUnstorable %q, ledger.CodeUnstorable %q", projection.CodeUnstorable, ledger.CodeUnstorable)
	}
	if projection.MaxKindLength != ledger.MaxTypeLength || projection.MaxIDLength != ledger.MaxIDLength {
		t.Errorf("projection's MaxKindLength %d, MaxIDLength %d; the ledger's %d, %d", projection.MaxKindLength, projection.MaxIDLength, ledger.MaxTypeLength, ledger.MaxIDLength)
	}
}

// totals is a team's projection whose state carries a total that is NaN
// for a "past_due" subscription (a division by zero upstream).
type totals struct{}

func (totals) Name() string { return "totals" }

func (totals) Project(ev projection.Event) (projection.Result, error) {
	var e struct {
		Created int64
		Data    struct{ Object struct{ ID, Status string } }
	}
	if err := json.Unmarshal(ev.Payload, &e); err != nil {
		return projection.Result{}, projection.Permanent("malformed", err)
	}
	total := 1.0
	if e.Data.Object.Status == "past_due" {
		total = math.NaN()
	}
	state := map[string]any{"status": e.Data.Object.Status, "total": total}
	return projection.Result{Write: &projection.Write{Name: "totals", Subject: e.Data.Object.ID, Version: e.Created,
		Fingerprint: projection.Fingerprint(state), State: state}}, nil
}

// A result DynamoDB cannot store (projection.Validate's value_unstorable)
// is the commit's to judge: an older revision is stale whatever it
// carries; a newer one is QUARANTINED value_unstorable, naming the value,
// at its first attempt, and counted as the projection's fault.
func TestAnUnstorableResultIsTheCommitsToJudge(t *testing.T) {
	reg := projection.NewRegistry()
	reg.Register("stripe", []string{"customer.subscription.updated"}, totals{})
	h := pt.New(t, pt.Options{Registry: reg})
	for _, e := range []struct {
		id, status string
		at         int64
	}{{"evt_now", "active", 200}, {"evt_older", "past_due", 100}, {"evt_newer", "past_due", 300}} {
		b := pt.SubscriptionEvent(e.id, "customer.subscription.updated", "sub_t", e.status, pt.Start.Unix()+e.at, "")
		if r := h.Deliver(b, h.Sign(b, pt.SecretPrimary)); r.Status != 202 {
			t.Fatalf("deliver %s: %d", e.id, r.Status)
		}
	}
	var buf bytes.Buffer
	p, err := processor.New(h.Ledger, h.Sources, reg, processor.Options{
		Owner: "w", Now: h.Clock.Now, Log: slog.New(slog.DiscardHandler), Metrics: metrics.New(&buf, "EffectivelyOnce/test", h.Clock.Now),
	})
	if err != nil {
		t.Fatal(err)
	}
	failed := p.Process(context.Background(), []processor.Message{
		{ID: "1", Body: `{"v":1,"source":"stripe","event_id":"evt_now"}`, ReceiveCount: 1},
		{ID: "2", Body: `{"v":1,"source":"stripe","event_id":"evt_older"}`, ReceiveCount: 1},
		{ID: "3", Body: `{"v":1,"source":"stripe","event_id":"evt_newer"}`, ReceiveCount: 1},
	})
	if len(failed) != 0 {
		t.Fatalf("messages to retry %v; want none", failed)
	}
	if ev := h.Event("evt_older"); ev.Status != ledger.StatusProcessed || ev.Result.Outcome != ledger.OutcomeStale {
		t.Errorf("older revision: %s %+v; want stale", ev.Status, ev.Result)
	}
	ev := h.Event("evt_newer")
	if ev.Status != ledger.StatusQuarantined || ev.ErrorCode != projection.CodeUnstorable || !strings.Contains(ev.ErrorMessage, "projection stripe/totals/sub_t attribute state.total") {
		t.Errorf("newer revision: %s %s %q; want QUARANTINED value_unstorable naming state.total", ev.Status, ev.ErrorCode, ev.ErrorMessage)
	}
	var faults []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec["ProjectionFaults"] == 1.0 {
			faults = append(faults, fmt.Sprint(rec["event_id"], " ", rec["code"], " ", rec["projection"]))
		}
	}
	if len(faults) != 1 || faults[0] != "evt_newer value_unstorable stripe/totals" {
		t.Errorf("faults counted %v; want the newer revision's", faults)
	}
}
