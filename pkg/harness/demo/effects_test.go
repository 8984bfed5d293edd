package demo

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/pkg/harness/devstack"
	"github.com/effectively-once/webhooks/pkg/ledger"
	"github.com/effectively-once/webhooks/pkg/queue"
)

// TestCheckEffectsFailsTheRun: a key applied twice, a key never applied,
// an intent that did not succeed, and a story step that did not happen are
// each a violation.
func TestCheckEffectsFailsTheRun(t *testing.T) {
	succeeded := func(op, kind, code string, trail ...ledger.IntentStatus) ledger.IntentState {
		in := ledger.IntentState{OperationID: op, Kind: kind, Status: ledger.IntentStatusSucceeded, ErrorCode: code, Attempts: 1}
		for _, to := range trail {
			in.Audit = append(in.Audit, ledger.AuditEntry{To: ledger.Status(to), Actor: "dispatcher", Action: "record"})
		}
		return in
	}
	down := func(effective map[string]int, reqs ...devstack.DownstreamRequest) devstack.DownstreamState {
		return devstack.DownstreamState{Effects: []devstack.DownstreamEffect{{Kind: "any", Effective: effective, Requests: reqs}}}
	}
	good := []ledger.IntentState{
		succeeded("op-refund", "refund", "lookup_applied", ledger.IntentStatusUncertain, ledger.IntentStatusSucceeded),
		succeeded("op-notify", "notify_cancellation", "ok_200", ledger.IntentStatusRetryWait, ledger.IntentStatusUncertain, ledger.IntentStatusSucceeded),
		succeeded("op-grant", "entitlement.grant", "ok_200", ledger.IntentStatusSucceeded),
	}
	goodDown := down(map[string]int{"op-refund": 1, "op-notify": 1, "op-grant": 1},
		devstack.DownstreamRequest{Key: "op-refund", Mode: "hang_after_apply"},
		devstack.DownstreamRequest{Key: "op-notify", Mode: "throttle_429"},
		devstack.DownstreamRequest{Key: "op-notify", Mode: "hang_after_apply"},
		devstack.DownstreamRequest{Key: "op-notify", Mode: "apply", Replayed: true},
		devstack.DownstreamRequest{Key: "op-grant", Mode: "apply"})

	var ok Report
	ok.checkEffects(good, goodDown, true)
	if !ok.OK() || ok.MaxEffective != 1 || len(ok.Effects) != 3 || !ok.Effects[0].Story {
		t.Fatalf("a good run reported %v (effects %+v)", ok.Violations, ok.Effects)
	}

	twice := down(map[string]int{"op-refund": 1, "op-notify": 1, "op-grant": 2}, goodDown.Effects[0].Requests...)
	never := down(map[string]int{"op-refund": 1, "op-notify": 1}, goodDown.Effects[0].Requests...)
	failed := append([]ledger.IntentState{}, good...)
	failed[2].Status, failed[2].ErrorCode = ledger.IntentStatusQuarantined, "no_effect"
	noTimeout := append([]ledger.IntentState{}, good...)
	noTimeout[0] = succeeded("op-refund", "refund", "ok_200", ledger.IntentStatusSucceeded)
	for _, c := range []struct {
		name    string
		intents []ledger.IntentState
		down    devstack.DownstreamState
		want    string
	}{
		{"a key applied twice", good, twice, "op-grant (entitlement.grant) 2 times"},
		{"a key never applied", good, never, "op-grant (entitlement.grant) 0 times"},
		{"an intent not SUCCEEDED", failed, goodDown, "ended QUARANTINED"},
		{"the timeout after success skipped", noTimeout, goodDown, "timeout after success did not happen"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var r Report
			r.checkEffects(c.intents, c.down, true)
			if r.OK() || !strings.Contains(strings.Join(r.Violations, "\n"), c.want) {
				t.Fatalf("violations %v, want one saying %q", r.Violations, c.want)
			}
		})
	}
}

type sentIntents struct{ bodies []string }

func (s *sentIntents) SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return &sqs.SendMessageOutput{}, nil
}

func (s *sentIntents) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	for _, e := range in.Entries {
		s.bodies = append(s.bodies, *e.MessageBody)
	}
	return &sqs.SendMessageBatchOutput{}, nil
}

// TestAnnouncerSweep: only an intent left PENDING past the delay is
// announced, and only once.
func TestAnnouncerSweep(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	sent := &sentIntents{}
	a := &announcer{sender: queue.Sender{Client: sent, URL: "http://sqs.local/effects"}, after: 5 * time.Second, done: map[string]bool{}}
	intents := []ledger.StoredIntent{
		{OperationID: "op-stuck", Status: ledger.IntentPending, CreatedAt: now.Add(-6 * time.Second).UnixMilli()},
		{OperationID: "op-young", Status: ledger.IntentPending, CreatedAt: now.Add(-time.Second).UnixMilli()},
		{OperationID: "op-done", Status: string(ledger.IntentStatusSucceeded), CreatedAt: now.Add(-time.Minute).UnixMilli()},
	}
	a.sweep(context.Background(), intents, now)
	a.sweep(context.Background(), intents, now.Add(time.Second))
	if len(sent.bodies) != 1 || !strings.Contains(sent.bodies[0], `"operation_id":"op-stuck"`) || !a.done["op-stuck"] {
		t.Fatalf("announced %v", sent.bodies)
	}
}
