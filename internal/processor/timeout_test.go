package processor_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// stalling is a team's projection that does not return until release is
// closed (a call that waits forever on a lock or a network peer), and
// then returns a valid result.
type stalling struct {
	teamOrders
	release  chan struct{}
	returned chan struct{}
}

func (p stalling) Project(ev projection.Event) (projection.Result, error) {
	<-p.release
	defer close(p.returned)
	return p.teamOrders.Project(ev)
}

// slow is a team's projection that takes its time, but returns within
// the budget.
type slow struct {
	teamOrders
	d time.Duration
}

func (p slow) Project(ev projection.Event) (projection.Result, error) {
	time.Sleep(p.d)
	return p.teamOrders.Project(ev)
}

// A projection that never returns costs its own event and nothing else:
// in a batch of three whose middle event's projection blocks, the other
// two (one of them slow, but within its budget) are applied with their
// versions and acknowledged, the stalled one is QUARANTINED
// projection_timeout naming the projection at its first attempt, and the
// handler answers well inside the invocation's deadline. The processor
// then reports that a projection may still be running (the instance must
// end), and when the stalled call finally returns its result has no
// effect: no state, no intent.
func TestAStalledProjectionCostsItsEventOnly(t *testing.T) {
	stall := stalling{teamOrders: teamOrders{name: "team_stuck", mode: "ok"}, release: make(chan struct{}), returned: make(chan struct{})}
	released := false
	t.Cleanup(func() {
		if !released {
			close(stall.release)
		}
	})
	reg := projection.NewRegistry()
	reg.Register("stripe", []string{"customer.subscription.created"}, teamOrders{name: "team_orders", mode: "ok"})
	reg.Register("stripe", []string{"customer.subscription.updated"}, stall)
	reg.Register("stripe", []string{"customer.subscription.paused"}, slow{teamOrders: teamOrders{name: "team_slow", mode: "ok"}, d: 50 * time.Millisecond})
	h := pt.New(t, pt.Options{Registry: reg})
	bodies := map[string][]byte{
		"evt_first": pt.SubscriptionEvent("evt_first", "customer.subscription.created", "sub_first", "active", pt.Start.Unix()+1, ""),
		"evt_stuck": pt.SubscriptionEvent("evt_stuck", "customer.subscription.updated", "sub_stuck", "active", pt.Start.Unix()+2, ""),
		"evt_last":  pt.SubscriptionEvent("evt_last", "customer.subscription.paused", "sub_last", "paused", pt.Start.Unix()+3, ""),
	}
	var batch events.SQSEvent
	for _, id := range []string{"evt_first", "evt_stuck", "evt_last"} {
		if r := h.Deliver(bodies[id], h.Sign(bodies[id], pt.SecretPrimary)); r.Status != 202 {
			t.Fatalf("deliver %s: %d", id, r.Status)
		}
		ptr := queue.Pointer{V: 1, Source: "stripe", EventID: id}
		batch.Records = append(batch.Records, events.SQSMessage{MessageId: "m-" + id, Body: ptr.Encode(), Attributes: map[string]string{"ApproximateReceiveCount": "1"}})
	}
	p, err := processor.New(h.Ledger, h.Sources, reg, processor.Options{
		Owner: "w", Now: h.Clock.Now, Log: slog.New(slog.DiscardHandler),
		ProjectionTimeout: 400 * time.Millisecond, Reserve: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}

	// The function's timeout, as the Lambda runtime sets it on the context.
	const timeout = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	type answer struct {
		resp events.SQSEventResponse
		err  error
	}
	done := make(chan answer, 1)
	start := time.Now()
	go func() {
		resp, err := p.HandleSQS(ctx, batch)
		done <- answer{resp, err}
	}()
	var a answer
	select {
	case a = <-done:
	case <-time.After(timeout):
		t.Fatalf("no answer within the function's %s timeout: the invocation times out and the whole batch comes back", timeout)
	}
	if took := time.Since(start); took > timeout/2 {
		t.Errorf("answered after %s; want well inside the %s timeout", took, timeout)
	}
	if a.err != nil || len(a.resp.BatchItemFailures) != 0 {
		t.Fatalf("batch item failures %+v (%v); want none: the stalled event is settled, the others applied", a.resp.BatchItemFailures, a.err)
	}

	for _, want := range []struct {
		id, projection, subject string
		version                 int64
	}{{"evt_first", "stripe/team_orders", "sub_first", pt.Start.Unix() + 1}, {"evt_last", "stripe/team_slow", "sub_last", pt.Start.Unix() + 3}} {
		ev := h.Event(want.id)
		if ev.Status != ledger.StatusProcessed || ev.Result.Outcome != ledger.OutcomeApplied || ev.Result.Version != want.version {
			t.Errorf("%s: %s %+v; want applied at version %d", want.id, ev.Status, ev.Result, want.version)
		}
		if pr, err := h.Ledger.GetProjection(context.Background(), want.projection, want.subject); err != nil || pr.Version != want.version {
			t.Errorf("%s %s: version %d (%v); want %d", want.projection, want.subject, pr.Version, err, want.version)
		}
	}
	ev := h.Event("evt_stuck")
	if ev.Status != ledger.StatusQuarantined || ev.ErrorCode != projection.CodeTimeout || !strings.Contains(ev.ErrorMessage, `projection "stripe/team_stuck" did not return within 400ms`) {
		t.Errorf("evt_stuck: %s %s %q; want QUARANTINED projection_timeout naming stripe/team_stuck", ev.Status, ev.ErrorCode, ev.ErrorMessage)
	}
	if ev.TotalAttempts != 1 {
		t.Errorf("evt_stuck: %d attempts; want the first to settle it", ev.TotalAttempts)
	}
	if last := ev.Audit[len(ev.Audit)-1]; last.To != ledger.StatusQuarantined || !strings.HasPrefix(last.Reason, "projection_timeout: ") {
		t.Errorf("evt_stuck's last audit entry %+v; want the quarantine with its code", last)
	}
	if !p.Stalled() {
		t.Error("Stalled() = false; want true: the stalled call may still be running, the instance must end")
	}

	// The stalled call returns at last, with a valid result: it is
	// discarded, nothing it returned reaches the table.
	close(stall.release)
	released = true
	<-stall.returned
	time.Sleep(100 * time.Millisecond)
	if ev := h.Event("evt_stuck"); ev.Status != ledger.StatusQuarantined {
		t.Errorf("evt_stuck after its projection returned: %s; want still QUARANTINED", ev.Status)
	}
	if _, err := h.Ledger.GetProjection(context.Background(), "stripe/team_stuck", "sub_stuck"); err == nil {
		t.Error("the late result of the stalled projection was written")
	}
	for _, in := range h.Intents() {
		if in.Causation == "stripe/evt_stuck" {
			t.Errorf("the late result of the stalled projection wrote intent %+v", in)
		}
	}
	if n := h.Projections(); n != 2 {
		t.Errorf("%d projections; want the two applied events'", n)
	}
}
