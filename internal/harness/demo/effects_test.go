package demo

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
)

// TestCheckEffectsFailsTheRun: a key applied twice, a key never applied,
// an intent that did not succeed, and a story step that did not happen are
// each a violation.
func TestCheckEffectsFailsTheRun(t *testing.T) {
	succeeded := func(op, kind, code string, trail ...ledger.IntentStatus) ledger.IntentState {
		in := ledger.IntentState{OperationID: op, Kind: kind, Status: ledger.IntentStatusSucceeded, ErrorCode: code, Attempts: 1}
		if kind == "refund" || kind == "notify_cancellation" {
			in.Causation = "orders/msg_o42_12_ab12"
		}
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

	stories := map[string]string{"orders/msg_o42_12_ab12": StoryTimeout}
	var ok Report
	ok.checkEffects(good, goodDown, stories)
	if !ok.OK() || ok.MaxEffective != 1 || len(ok.Effects) != 3 || ok.Effects[0].Story != StoryTimeout {
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
			r.checkEffects(c.intents, c.down, stories)
			if r.OK() || !strings.Contains(strings.Join(r.Violations, "\n"), c.want) {
				t.Fatalf("violations %v, want one saying %q", r.Violations, c.want)
			}
		})
	}
}

// TestCheckEffectsMovedOnStories: the override's refund and notice and the
// race's grant must each meet one 503 and then end without a call
// (OBSOLETE, SUPERSEDED), the revoke be applied once; an effect that
// succeeded instead (the 503 answered another call, or the retry came
// before the newer revision) fails the run, and so does an OBSOLETE
// intent the downstream applied.
func TestCheckEffectsMovedOnStories(t *testing.T) {
	stories := map[string]string{"orders/o43_12": StoryOverride, "stripe/race_grant": StoryRace, "stripe/race_revoke": StoryRace}
	intent := func(op, kind, cause string, status ledger.IntentStatus, v int64) ledger.IntentState {
		return ledger.IntentState{OperationID: op, Kind: kind, Causation: cause, Status: status, Version: v, Projection: "p", ProjectionSubject: "s", Fingerprint: kind}
	}
	good := func() []ledger.IntentState {
		return []ledger.IntentState{
			intent("op-refund", "refund", "orders/o43_12", ledger.IntentStatusObsolete, 12),
			intent("op-notice", "notify_cancellation", "orders/o43_12", ledger.IntentStatusObsolete, 12),
			intent("op-grant", "entitlement.grant", "stripe/race_grant", ledger.IntentStatusSuperseded, 5),
			intent("op-revoke", "entitlement.revoke", "stripe/race_revoke", ledger.IntentStatusSucceeded, 9),
		}
	}
	down := func(effective map[string]int) devstack.DownstreamState {
		return devstack.DownstreamState{Effects: []devstack.DownstreamEffect{{Kind: "any", Effective: effective, Requests: []devstack.DownstreamRequest{
			{Key: "op-refund", Mode: "unavailable_503"}, {Key: "op-notice", Mode: "unavailable_503"},
			{Key: "op-grant", Mode: "unavailable_503"}, {Key: "op-revoke", Mode: "apply"}}}}}
	}
	var ok Report
	ok.checkEffects(good(), down(map[string]int{"op-revoke": 1}), stories)
	if !ok.OK() || ok.EffectsByStatus[ledger.IntentStatusObsolete] != 2 || ok.Effects[0].Story != StoryOverride || ok.Effects[3].Story != StoryRace {
		t.Fatalf("a good run reported %v (effects %+v)", ok.Violations, ok.Effects)
	}

	refundDone := good()
	refundDone[0].Status = ledger.IntentStatusSucceeded
	grantDone := good()
	grantDone[2].Status = ledger.IntentStatusSucceeded
	for _, c := range []struct {
		name      string
		intents   []ledger.IntentState
		effective map[string]int
		want      string
	}{
		{"the refund was performed after all", refundDone, map[string]int{"op-revoke": 1, "op-refund": 1}, "override: refund op-refund ended SUCCEEDED"},
		{"an obsolete notice was applied", good(), map[string]int{"op-revoke": 1, "op-notice": 1}, "the downstream applied the obsolete op-notice (notify_cancellation) 1 times, want 0"},
		{"the grant's retry was performed", grantDone, map[string]int{"op-revoke": 1, "op-grant": 1}, "race: the grant op-grant ended SUCCEEDED"},
		{"the revoke never reached the downstream", good(), map[string]int{}, "race: the revoke op-revoke ended SUCCEEDED"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var r Report
			r.checkEffects(c.intents, down(c.effective), stories)
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
