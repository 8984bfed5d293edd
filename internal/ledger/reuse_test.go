package ledger_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// commitRevision accepts, claims and commits one revision of subject
// sub_1 of projection "seats" with one intent under op.
func commitRevision(t *testing.T, f fixture, eventID string, version int64, in ledger.Intent) (ledger.Claim, ledger.Committed, error) {
	t.Helper()
	ctx := context.Background()
	if _, err := f.L.Accept(ctx, delivery(eventID, `{"id":"`+eventID+`"}`)); err != nil {
		t.Fatal(err)
	}
	c, err := f.L.Claim(ctx, "stripe", eventID, ledger.ClaimOptions{Owner: "proc", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	state := map[string]any{"seats": in.Payload["seats"]}
	w := &ledger.ProjectionWrite{Name: "seats", Subject: "sub_1", Version: version, Fingerprint: projection.Fingerprint(state), State: state}
	done, err := f.L.Commit(ctx, c, w, []ledger.Intent{in})
	skipWithoutTransactions(t, err)
	return c, done, err
}

func seatsIntent(op string, policy ledger.Policy, seats int) ledger.Intent {
	in := ledger.Intent{OperationID: op, Kind: "seats.set", Subject: "sub_1", Policy: policy, Payload: map[string]any{"seats": seats}}
	if policy == ledger.PolicyWhileCurrent {
		in.Condition = map[string]string{"seats": "5"}
	}
	return in
}

// A latest or while_current intent whose operation id another revision's
// intent holds is the rule's bug: the newer revision is quarantined
// operation_id_reused, naming the id and both payload hashes, and nothing
// of its commit is written.
func TestCommitRefusesAReusedOperationID(t *testing.T) {
	for _, policy := range []ledger.Policy{ledger.PolicyLatest, ledger.PolicyWhileCurrent} {
		t.Run(string(policy), func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t)
			if _, _, err := commitRevision(t, f, "evt_5", 5, seatsIntent("op-seats", policy, 5)); err != nil {
				t.Fatal(err)
			}
			_, done, err := commitRevision(t, f, "evt_8", 8, seatsIntent("op-seats", policy, 8))
			if err != nil {
				t.Fatal(err)
			}
			ev, err := f.L.Get(ctx, "stripe", "evt_8")
			if err != nil {
				t.Fatal(err)
			}
			if ev.Status != ledger.StatusQuarantined || ev.ErrorCode != projection.CodeOperationIDReused {
				t.Fatalf("the revision reusing op-seats is %s %q, want QUARANTINED %s", ev.Status, ev.ErrorCode, projection.CodeOperationIDReused)
			}
			oldHash, newHash := projection.Fingerprint(map[string]any{"seats": 5}), projection.Fingerprint(map[string]any{"seats": 8})
			for _, want := range []string{"op-seats", "seats.set", "seats", oldHash, newHash, "projection.OperationID"} {
				if !strings.Contains(ev.ErrorMessage, want) {
					t.Errorf("message %q does not name %q", ev.ErrorMessage, want)
				}
			}
			r := done.Reused
			if r == nil || r.OperationID != "op-seats" || r.Kind != "seats.set" || r.Projection != "seats" ||
				r.HeldPayloadHash != oldHash || r.PayloadHash != newHash || r.HeldBy != "stripe/evt_5" || r.HeldVersion != 5 || r.Version != 8 {
				t.Fatalf("Committed.Reused = %+v", r)
			}
			if len(done.Intents) != 0 {
				t.Fatalf("intents written: %v", done.Intents)
			}
			p, err := f.L.GetProjection(ctx, "seats", "sub_1")
			if err != nil || p.Version != 5 {
				t.Fatalf("projection %+v %v: the quarantined revision must write no state", p, err)
			}
			in, err := f.L.GetIntentState(ctx, "op-seats")
			if err != nil || in.Causation != "stripe/evt_5" || in.Version != 5 {
				t.Fatalf("intent %+v %v", in, err)
			}
		})
	}
}

// A once intent carried again by a later revision is the declared
// deduplication: not written again, and recorded on the event that
// carried it (its result and an audit entry) in the commit itself.
func TestCommitRecordsADeduplicatedOnceIntent(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	dun := func(attempt int) ledger.Intent {
		return ledger.Intent{OperationID: "op-dunning", Kind: "dunning.email", Subject: "sub_1", Payload: map[string]any{"seats": attempt}}
	}
	if _, _, err := commitRevision(t, f, "evt_1", 1, dun(1)); err != nil {
		t.Fatal(err)
	}
	f.Rec.Reset()
	_, done, err := commitRevision(t, f, "evt_2", 2, dun(2))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := f.L.Get(ctx, "stripe", "evt_2")
	if err != nil {
		t.Fatal(err)
	}
	if ev.Status != ledger.StatusProcessed || len(done.Intents) != 0 {
		t.Fatalf("event %s, intents written %v", ev.Status, done.Intents)
	}
	var audited string
	for _, a := range ev.Audit {
		if a.Action == "intent_deduplicated" {
			audited = a.Reason
		}
	}
	if !strings.Contains(audited, "op-dunning") || !strings.Contains(audited, "stripe/evt_1") {
		t.Fatalf("no intent_deduplicated audit entry naming op-dunning and the event holding it: %+v", ev.Audit)
	}
	d := ev.Result.Deduplicated
	if len(d) != 1 || d[0] != (ledger.Deduplication{OperationID: "op-dunning", Kind: "dunning.email", HeldBy: "stripe/evt_1", HeldVersion: 1, SamePayload: false}) {
		t.Fatalf("result deduplicated = %+v", d)
	}
	p, err := f.L.GetProjection(ctx, "seats", "sub_1")
	if err != nil || p.Version != 2 {
		t.Fatalf("projection %+v %v", p, err)
	}
	in, err := f.L.GetIntentState(ctx, "op-dunning")
	if err != nil || in.Causation != "stripe/evt_1" || in.Payload["seats"] == nil {
		t.Fatalf("intent %+v %v", in, err)
	}
}

// A commit retried after its answer was lost (the SDK retries the
// transaction, or the processor retries the commit) is not a reuse: the
// event's own fencing answers it, and the event stays PROCESSED with its
// intent.
func TestARetriedCommitIsNotAReuse(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	in := seatsIntent("op-seats", ledger.PolicyLatest, 5)
	c, _, err := commitRevision(t, f, "evt_5", 5, in)
	if err != nil {
		t.Fatal(err)
	}
	state := map[string]any{"seats": 5}
	w := &ledger.ProjectionWrite{Name: "seats", Subject: "sub_1", Version: 5, Fingerprint: projection.Fingerprint(state), State: state}
	again, err := f.L.Commit(ctx, c, w, []ledger.Intent{in})
	if !errors.Is(err, ledger.ErrLeaseLost) || again.Reused != nil {
		t.Fatalf("retried commit: %+v, %v; want ErrLeaseLost and no reuse", again, err)
	}
	ev, err := f.L.Get(ctx, "stripe", "evt_5")
	if err != nil || ev.Status != ledger.StatusProcessed || ev.ErrorCode != "" {
		t.Fatalf("event %+v %v", ev, err)
	}
}

// A while_current intent carried again by a later revision with the same
// payload and condition (an order shipped once while it is paid, keyed by
// order) is the same action: deduplicated and recorded, not refused.
func TestCommitDeduplicatesTheSameWhileCurrentAction(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	ship := func() ledger.Intent {
		return ledger.Intent{OperationID: "op-ship", Kind: "ship_order", Subject: "sub_1", Policy: ledger.PolicyWhileCurrent,
			Condition: map[string]string{"paid": "true"}, Payload: map[string]any{"order": "O-1"}}
	}
	commit := func(id string, version int64, seats int) {
		t.Helper()
		if _, err := f.L.Accept(ctx, delivery(id, `{"id":"`+id+`"}`)); err != nil {
			t.Fatal(err)
		}
		c, err := f.L.Claim(ctx, "stripe", id, ledger.ClaimOptions{Owner: "proc", Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		state := map[string]any{"paid": true, "seats": seats}
		w := &ledger.ProjectionWrite{Name: "orders", Subject: "sub_1", Version: version, Fingerprint: projection.Fingerprint(state), State: state}
		if _, err := f.L.Commit(ctx, c, w, []ledger.Intent{ship()}); err != nil {
			skipWithoutTransactions(t, err)
			t.Fatal(err)
		}
	}
	commit("evt_paid", 1, 1)
	commit("evt_partial", 2, 2)
	ev, err := f.L.Get(ctx, "stripe", "evt_partial")
	if err != nil {
		t.Fatal(err)
	}
	if ev.Status != ledger.StatusProcessed || len(ev.Result.Deduplicated) != 1 || ev.Result.Deduplicated[0].HeldBy != "stripe/evt_paid" || !ev.Result.Deduplicated[0].SamePayload {
		t.Fatalf("event %s %q, result %+v", ev.Status, ev.ErrorCode, ev.Result)
	}
}
