package intake_test

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// A duplicate of a processed event is answered 200 with its status, its
// event id and its outcome, and nothing else: whoever replays a captured
// delivery learns neither the operation ids of the intents it caused (the
// downstream's idempotency keys) nor the subject's projected state, its
// version or the row's delivery count. One event, and a batch (Quiltt)
// whose every event is a processed duplicate, through the Lambda JSON path.
func TestADuplicateLearnsOnlyItsStatus(t *testing.T) {
	h := pt.New(t, pt.Options{
		SourcesDoc: `{"sources":[{"name":"stripe","kind":"stripe","secrets":["env:STRIPE_PRIMARY"]},` +
			`{"name":"quiltt","kind":"quiltt","secrets":["env:QUILTT_SECRET"]}]}`,
		Secrets: map[string]string{"QUILTT_SECRET": hfSecretQuiltt},
	})
	created := pt.Start.Unix() - 60
	body := pt.SubscriptionEvent("evt_test_dup_1", "customer.subscription.created", "sub_test_dup_1", "active", created, "acct_test_42")
	if r := h.Deliver(body, h.Sign(body, pt.SecretPrimary)); r.Status != 202 {
		t.Fatalf("first delivery: %d %s", r.Status, r.Body)
	}
	batch := fixture(t, "quiltt/connection-events.json")
	if r := h.DeliverTo("quiltt", batch, quilttSign(t, h.Clock.Now(), batch, hfSecretQuiltt)); r.Status != 202 {
		t.Fatalf("first batch: %d %s", r.Status, r.Body)
	}
	h.Drain(10*time.Second, time.Second, h.NewWorker("w"))
	intents := h.Intents()
	if len(intents) != 1 {
		t.Fatalf("%d intents, want the subscription's one", len(intents))
	}
	ev := h.Event("evt_test_dup_1")
	if ev.Status != ledger.StatusProcessed || ev.Result == nil || len(ev.Result.Operations) != 1 {
		t.Fatalf("event %s, result %+v", ev.Status, ev.Result)
	}
	// What the answer must not contain: the intent's operation id, kind
	// and subject, and the projection's name, state and version.
	secrets := []string{intents[0].OperationID, intents[0].Kind, intents[0].Subject, ev.Result.Projection,
		strconv.FormatInt(ev.Result.Version, 10), "entitled", "operation", "delivery_count", "processed_at", "result"}

	requireOnly := func(what string, got map[string]any, id string) {
		t.Helper()
		if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, []string{"event_id", "outcome", "status"}) {
			t.Fatalf("%s: the answer has the fields %v, want event_id, outcome and status only: %v", what, keys, got)
		}
		if got["status"] != "duplicate" || got["event_id"] != id || got["outcome"] != string(ledger.OutcomeApplied) {
			t.Fatalf("%s: answer %v", what, got)
		}
	}
	h.Clock.Advance(time.Minute)
	r := h.Deliver(body, h.Sign(body, pt.SecretPrimary))
	var one map[string]any
	if err := json.Unmarshal(r.Body, &one); err != nil || r.Status != 200 {
		t.Fatalf("duplicate: %d %s (%v)", r.Status, r.Body, err)
	}
	requireOnly("one event", one, "evt_test_dup_1")
	for _, s := range secrets {
		if s != "" && strings.Contains(string(r.Body), s) {
			t.Fatalf("the duplicate's answer %s tells %q", r.Body, s)
		}
	}

	r = h.DeliverTo("quiltt", batch, quilttSign(t, h.Clock.Now(), batch, hfSecretQuiltt))
	var many struct {
		Events []map[string]any `json:"events"`
	}
	if err := json.Unmarshal(r.Body, &many); err != nil || r.Status != 200 || len(many.Events) != 2 {
		t.Fatalf("duplicate batch: %d %s (%v)", r.Status, r.Body, err)
	}
	for i, id := range []string{"evt_1QfixtureQuilttSync01", "evt_1QfixtureQuilttSync02"} {
		if ev := h.EventOf("quiltt", id); ev.Status != ledger.StatusProcessed || ev.Result == nil {
			t.Fatalf("quiltt %s: %s %+v", id, ev.Status, ev.Result)
		}
		requireOnly("batch event "+id, many.Events[i], id)
	}
	for _, s := range []string{"conn_1QfixtureConn0001", "quiltt_connection", "delivery_count", "result"} {
		if strings.Contains(string(r.Body), s) {
			t.Fatalf("the duplicate batch's answer %s tells %q", r.Body, s)
		}
	}
	// The row still counts every delivery, for operators.
	if ev := h.Event("evt_test_dup_1"); ev.DeliveryCount != 2 || ev.Result == nil || len(ev.Result.Operations) != 1 {
		t.Fatalf("row after the duplicate: %d deliveries, result %+v", ev.DeliveryCount, ev.Result)
	}
}
