package pipelinetest_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	pt "github.com/effectively-once/webhooks/pkg/harness/pipelinetest"
	"github.com/effectively-once/webhooks/pkg/ledger"
)

// Trust boundaries (issue 13), attacked where they enter: the intake over
// its Lambda JSON path, on the emulators.

const (
	ghSecret  = "ghsecret_test_FAKE_trust"
	ghSources = `{"sources":[{"name":"github","kind":"github","secrets":["env:GH_SECRET"]}]}`
)

func ghHarness(t *testing.T) *pt.Harness {
	return pt.New(t, pt.Options{SourcesDoc: ghSources, Secrets: map[string]string{"GH_SECRET": ghSecret}})
}

// ghDeliver sends body as GitHub would, signed, under delivery id id.
func ghDeliver(h *pt.Harness, id string, body []byte) (int, string) {
	mac := hmac.New(sha256.New, []byte(ghSecret))
	mac.Write(body)
	r := h.DeliverTo("github", body, map[string]string{
		"x-github-delivery": id, "x-github-event": "push", "x-hub-signature-256": "sha256=" + hex.EncodeToString(mac.Sum(nil)),
	})
	return r.Status, string(r.Body)
}

// §4: GitHub's delivery id is not signed and no time is. Two captured
// deliveries re-sent under made-up ids become suspected replays: kept,
// quarantined for an operator, with no queue message and no business
// work; the genuine events are untouched.
func TestReplayUnderNewIDIsASuspectedReplay(t *testing.T) {
	h := ghHarness(t)
	ctx := context.Background()
	bodies := [][]byte{[]byte(`{"ref":"refs/heads/main","after":"aaa"}`), []byte(`{"ref":"refs/heads/main","after":"bbb"}`)}
	for i, b := range bodies {
		if st, body := ghDeliver(h, "gh-genuine-"+string(rune('a'+i)), b); st != 202 {
			t.Fatalf("genuine delivery %d: %d %s", i, st, body)
		}
	}
	queued := h.Depth(h.Queues.Queue)
	for i, b := range bodies {
		for j := range 3 {
			id := "gh-forged-" + string(rune('a'+i)) + string(rune('0'+j))
			if st, body := ghDeliver(h, id, b); st != 202 || !strings.Contains(body, "QUARANTINED") {
				t.Fatalf("replay %s: %d %s", id, st, body)
			}
			ev, err := h.Ledger.Get(ctx, "github", id)
			if err != nil || ev.Status != ledger.StatusQuarantined || ev.ErrorCode != "suspected_replay" || ev.Attributes["replay_of"] != "gh-genuine-"+string(rune('a'+i)) {
				t.Fatalf("replay row %s: %+v %v", id, ev, err)
			}
		}
	}
	if got := h.Depth(h.Queues.Queue); got != queued {
		t.Fatalf("replays enqueued work: queue depth %d, was %d", got, queued)
	}
	// A genuine redelivery of the same event is still a duplicate.
	if st, body := ghDeliver(h, "gh-genuine-a", bodies[0]); st != 202 || !strings.Contains(body, `"duplicate"`) {
		t.Fatalf("redelivery: %d %s", st, body)
	}
}

// §4: a captured body sent under a victim's event id is not merged as its
// duplicate: it is a conflict, recorded on the row, and nothing else on
// the row changes (delivery count, last delivery, payload).
func TestOtherBytesUnderAKnownIDAreAConflict(t *testing.T) {
	h := ghHarness(t)
	ctx := context.Background()
	if st, body := ghDeliver(h, "gh-victim", []byte(`{"ref":"refs/heads/main"}`)); st != 202 {
		t.Fatalf("victim: %d %s", st, body)
	}
	before, _ := h.Ledger.Get(ctx, "github", "gh-victim")
	st, body := ghDeliver(h, "gh-victim", []byte(`{"ref":"refs/heads/attacker"}`))
	if st != 202 || !strings.Contains(body, `"conflict"`) {
		t.Fatalf("conflicting delivery: %d %s", st, body)
	}
	after, err := h.Ledger.Get(ctx, "github", "gh-victim")
	if err != nil || after.Conflicts != 1 || after.DeliveryCount != before.DeliveryCount || after.LastDeliveryID != before.LastDeliveryID || after.PayloadHash != before.PayloadHash {
		t.Fatalf("row before %+v\nafter %+v (%v)", before, after, err)
	}
}
