package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/pkg/harness/awstrace"
	"github.com/effectively-once/webhooks/pkg/ledger"
)

// Every write the operators and the DLQ sweep make, applied and then its
// answer lost, so that the SDK sends it again (awstrace.Lost): the call
// succeeds, as it did, with one audit entry, instead of reporting that the
// item changed (Hold, ResolveIntent), is not replayable in RECEIVED
// (Replay) or is finished (GiveUp). The processor's and dispatcher's writes
// are covered end to end by the crash matrices.
func TestOperatorWritesSurviveALostAnswer(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		setup  func(t *testing.T, f fixture)
		op     string // the write whose answer is lost
		act    func(f fixture) (status string, audit []ledger.AuditEntry, err error)
		status string
		action string
	}{
		{"hold", func(t *testing.T, f fixture) { accepted(t, f, "evt_1") }, "DynamoDB.UpdateItem",
			func(f fixture) (string, []ledger.AuditEntry, error) {
				ev, err := f.L.Hold(ctx, "stripe", "evt_1", "ops:alice", "suspicious amount")
				return string(ev.Status), ev.Audit, err
			}, string(ledger.StatusQuarantined), "hold"},
		{"replay", func(t *testing.T, f fixture) {
			if err := f.L.Dead(ctx, claimed(t, f, "evt_1"), "commit_failed", "boom"); err != nil {
				t.Fatal(err)
			}
		}, "DynamoDB.UpdateItem",
			func(f fixture) (string, []ledger.AuditEntry, error) {
				ev, err := f.L.Replay(ctx, "stripe", "evt_1", "ops:alice", "projection fixed in v1.4")
				return string(ev.Status), ev.Audit, err
			}, string(ledger.StatusReceived), "replay"},
		{"give up", func(t *testing.T, f fixture) { accepted(t, f, "evt_1") }, "DynamoDB.UpdateItem",
			func(f fixture) (string, []ledger.AuditEntry, error) {
				ev, err := f.L.GiveUp(ctx, "stripe", "evt_1", "dlq-sweep", "message reached the DLQ", "ptr-1")
				return string(ev.Status), ev.Audit, err
			}, string(ledger.StatusDead), "give_up"},
		{"resolve intent", func(t *testing.T, f fixture) {
			newIntent(t, f, "op1")
			c, err := f.L.ClaimIntent(ctx, "op1", claimOpts)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.L.RecordIntent(ctx, c, ledger.IntentOutcome{Status: ledger.IntentStatusUncertain, Code: "timeout", Next: t0.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}, "DynamoDB.UpdateItem",
			func(f fixture) (string, []ledger.AuditEntry, error) {
				in, err := f.L.ResolveIntent(ctx, "op1", ledger.IntentStatusSucceeded, "ops:alice", "refund re_42 seen in the Stripe dashboard")
				return string(in.Status), in.Audit, err
			}, string(ledger.IntentStatusSucceeded), "resolve"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.setup(t, f)
			f.Rec.Reset()
			f.Rec.Arm(awstrace.Crash{Op: tc.op, Nth: 1, When: awstrace.Lost})
			status, audit, err := tc.act(f)
			if f.Rec.Lost() != 1 {
				t.Fatalf("no answer was lost (%s): the test does not test", f.Rec)
			}
			if err != nil || status != tc.status {
				t.Fatalf("after a lost answer: %s, %v; want %s and no error", status, err, tc.status)
			}
			n := 0
			for _, a := range audit {
				if a.Action == tc.action {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("%d %q audit entries, want 1: %+v", n, tc.action, audit)
			}
		})
	}
}
