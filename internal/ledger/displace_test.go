package ledger_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// The pre-emption: a delivery captured under id 100 is re-sent under the
// sender's next id, 101, before the sender uses it. Intake keeps it as a
// suspected replay (QUARANTINED, replay_of 100). These deliveries are what
// intake then hands the ledger.
var (
	replayBody  = `{"ref":"refs/heads/main","after":"aaa"}`
	genuineBody = `{"ref":"refs/heads/main","after":"bbb"}`
)

func replayOf100(id, body string) ledger.Delivery {
	return ledger.Delivery{Source: "github", EventID: id, EventType: "push", DeliveryID: "dlv-replay-" + id, Payload: []byte(body),
		Quarantine: ledger.CodeSuspectedReplay, Attributes: map[string]string{"replay_of": "100"}}
}

func genuine(id, body string) ledger.Delivery {
	return ledger.Delivery{Source: "github", EventID: id, EventType: "push", DeliveryID: "dlv-" + id, Subject: "octo/repo", Payload: []byte(body)}
}

// acceptReplay creates the suspected replay's row under id, delivered twice.
func acceptReplay(t *testing.T, f fixture, id, body string) {
	t.Helper()
	for range 2 {
		if res, err := f.L.Accept(context.Background(), replayOf100(id, body)); err != nil || res.Event.Status != ledger.StatusQuarantined || res.Displaced != nil {
			t.Fatalf("replay: %+v %v", res, err)
		}
	}
}

// The event's own bytes, arriving under an id a suspected replay holds,
// displace the replay: the row becomes the event, RECEIVED on its work
// shard with its payload, type, subject and delivery; the replay leaves
// the attention shards and stays in the audit with its reason. It costs
// one more UpdateItem than a new event: the refused upsert, then the
// conditioned displacement.
func TestASuspectedReplayYieldsItsIDToTheEventsOwnBytes(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	acceptReplay(t, f, "101", replayBody)
	f.Rec.Reset()

	res, err := f.L.Accept(ctx, genuine("101", genuineBody))
	if err != nil || res.Duplicate || res.Conflict || res.Displaced == nil || res.Event.Status != ledger.StatusReceived {
		t.Fatalf("genuine delivery: %+v %v", res, err)
	}
	if r := res.Displaced; r.Status != ledger.StatusQuarantined || r.ErrorCode != ledger.CodeSuspectedReplay || r.Attributes["replay_of"] != "100" || r.DeliveryCount != 2 {
		t.Fatalf("displaced replay as it was: %+v", r)
	}
	if n := f.Rec.Count("DynamoDB.UpdateItem"); n != 2 || f.Rec.Count("DynamoDB.PutItem") != 0 {
		t.Fatalf("displacement cost %s; want 2 UpdateItem", f.Rec)
	}

	ev, err := f.L.Get(ctx, "github", "101")
	if err != nil {
		t.Fatal(err)
	}
	if ev.Status != ledger.StatusReceived || ev.ErrorCode != "" || ev.Attributes["replay_of"] != "" || ev.Subject != "octo/repo" ||
		ev.DeliveryCount != 1 || ev.FirstDeliveryID != "dlv-101" || ev.LastDeliveryID != "dlv-101" || len(ev.RecentDeliveries) != 1 ||
		ev.PayloadHash != ledger.PayloadHash([]byte(genuineBody)) || ev.Conflicts != 0 {
		t.Fatalf("row after the displacement: %+v", ev)
	}
	if body, err := f.L.Payload(ctx, ev); err != nil || string(body) != genuineBody {
		t.Fatalf("payload %q %v", body, err)
	}
	requireDisplacedAudit(t, ev)
	if due, err := f.L.ListDue(ctx, t0, 10); err != nil || len(due) != 1 || due[0].EventID != "101" {
		t.Fatalf("due: %+v %v", due, err)
	}
	if open, err := f.L.ListOpen(ctx, "event", 10, ledger.StatusQuarantined); err != nil || len(open) != 0 {
		t.Fatalf("still on the attention shards: %+v %v", open, err)
	}

	// Its redelivery is a duplicate; the replay sent again is a conflict
	// with the event's bytes (as when the event came first), and another
	// replay displaces nothing.
	if res, err := f.L.Accept(ctx, genuine("101", genuineBody)); err != nil || !res.Duplicate || res.Displaced != nil || res.Event.Status != ledger.StatusReceived {
		t.Fatalf("redelivery: %+v %v", res, err)
	}
	if res, err := f.L.Accept(ctx, replayOf100("101", replayBody)); err != nil || !res.Conflict || res.Displaced != nil {
		t.Fatalf("replay after the event: %+v %v", res, err)
	}
	after, err := f.L.Get(ctx, "github", "101")
	if err != nil || after.Status != ledger.StatusReceived || after.PayloadHash != ev.PayloadHash || after.DeliveryCount != 2 {
		t.Fatalf("row after the replay came back: %+v %v", after, err)
	}
}

// requireDisplacedAudit: the replay's own entry stays, and one
// displace_replay entry (QUARANTINED to RECEIVED) says what it was; then
// the actions in later.
func requireDisplacedAudit(t *testing.T, ev ledger.Event, later ...string) {
	t.Helper()
	var acts []string
	for _, a := range ev.Audit {
		acts = append(acts, a.Action)
	}
	if want := append([]string{"quarantine_on_accept", "displace_replay"}, later...); strings.Join(acts, " ") != strings.Join(want, " ") {
		t.Fatalf("audit %v, want %v", acts, want)
	}
	a := ev.Audit[1]
	if a.From != ledger.StatusQuarantined || a.To != ledger.StatusReceived || !strings.Contains(a.Reason, ledger.CodeSuspectedReplay) ||
		!strings.Contains(a.Reason, `replay of "100"`) || !strings.Contains(a.Reason, ledger.PayloadHash([]byte(replayBody))) {
		t.Fatalf("displacement entry %+v", a)
	}
}

// The event through the other path (EventBridge: other bytes by design)
// displaces the replay too; it is no duplicate of a replay's bytes.
func TestTheEventInAnotherFormDisplacesAReplay(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	acceptReplay(t, f, "101", replayBody)
	bridged := genuine("101", genuineBody)
	bridged.Attributes = map[string]string{"via": "eventbridge"}
	res, err := f.L.Accept(ctx, bridged)
	if err != nil || res.Duplicate || res.Displaced == nil || res.Event.Status != ledger.StatusReceived {
		t.Fatalf("through EventBridge: %+v %v", res, err)
	}
	ev, err := f.L.Get(ctx, "github", "101")
	if err != nil || ev.Attributes["via"] != "eventbridge" || ev.Attributes["replay_of"] != "" {
		t.Fatalf("row %+v %v", ev, err)
	}
	requireDisplacedAudit(t, ev)
}

// Only an untouched replay yields: another suspected replay under the id
// is a conflict, and so is the event's delivery once an operator has
// replayed the row (it decided the row is the event).
func TestOnlyAnUntouchedReplayIsDisplaced(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	acceptReplay(t, f, "101", replayBody)
	other := replayOf100("101", `{"ref":"refs/heads/main","after":"ccc"}`)
	if res, err := f.L.Accept(ctx, other); err != nil || !res.Conflict || res.Displaced != nil {
		t.Fatalf("a second replay: %+v %v", res, err)
	}
	if _, err := f.L.Replay(ctx, "github", "101", "ops@example.test", "checked: it is genuine"); err != nil {
		t.Fatal(err)
	}
	if res, err := f.L.Accept(ctx, genuine("101", genuineBody)); err != nil || !res.Conflict || res.Displaced != nil {
		t.Fatalf("after an operator's replay: %+v %v", res, err)
	}
	ev, err := f.L.Get(ctx, "github", "101")
	if err != nil || ev.PayloadHash != ledger.PayloadHash([]byte(replayBody)) || ev.Status != ledger.StatusReceived {
		t.Fatalf("row %+v %v", ev, err)
	}
}

// A large event's payload goes to chunks after the displacement, keyed by
// its own hash, beside the replay's.
func TestALargeEventDisplacesALargeReplay(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	big := func(seed uint32) string {
		var b strings.Builder
		x := seed
		for b.Len() < 600<<10 {
			x = x*1664525 + 1013904223
			b.WriteByte(byte('a' + x>>27))
		}
		return b.String()
	}
	replay, own := big(1), big(2)
	acceptReplay(t, f, "101", replay)
	res, err := f.L.Accept(ctx, genuine("101", own))
	if err != nil || res.Displaced == nil || res.Event.PayloadChunks == 0 {
		t.Fatalf("large event: %+v %v", res, err)
	}
	ev, err := f.L.Get(ctx, "github", "101")
	if err != nil {
		t.Fatal(err)
	}
	if body, err := f.L.Payload(ctx, ev); err != nil || string(body) != own {
		t.Fatalf("payload of %d bytes, %v", len(body), err)
	}
}

// A lost answer: the displacement was applied, the SDK sent it again, and
// the refusal is recognised as this very write.
func TestADisplacementWhoseAnswerWasLost(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	acceptReplay(t, f, "101", replayBody)
	f.Rec.Reset()
	f.Rec.Arm(awstrace.Crash{Op: "DynamoDB.UpdateItem", Nth: 2, When: awstrace.Lost})
	res, err := f.L.Accept(ctx, genuine("101", genuineBody))
	if err != nil || res.Displaced == nil || res.Event.Status != ledger.StatusReceived || f.Rec.Lost() != 1 {
		t.Fatalf("after a lost answer: %+v %v (lost %d)", res, err, f.Rec.Lost())
	}
	ev, err := f.L.Get(ctx, "github", "101")
	if err != nil {
		t.Fatal(err)
	}
	requireDisplacedAudit(t, ev)
}

// Two deliveries race to displace one replay: the other one's write lands
// between this one's read of the row and its own write. Exactly one
// displaces it; the other is judged against the winner's row: a duplicate
// of the same bytes, a conflict with other ones.
func TestTwoDeliveriesRacingToDisplaceAReplay(t *testing.T) {
	for _, tc := range []struct {
		name, rival string
		duplicate   bool
	}{
		{name: "the same bytes", rival: genuineBody, duplicate: true},
		{name: "other bytes", rival: `{"ref":"refs/heads/main","after":"ddd"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t)
			acceptReplay(t, f, "101", replayBody)
			var rival ledger.Accepted
			var rivalErr error
			db := &beforeDisplacing{DynamoDB: f.DB, run: func() {
				rival, rivalErr = f.L.Accept(ctx, genuine("101", tc.rival))
			}}
			l, err := ledger.New(db, ledger.Options{Table: f.Table, Clock: f.Clock, Actor: "intake-2"})
			if err != nil {
				t.Fatal(err)
			}
			res, err := l.Accept(ctx, genuine("101", genuineBody))
			if rivalErr != nil || rival.Displaced == nil || rival.Event.Status != ledger.StatusReceived {
				t.Fatalf("rival: %+v %v", rival, rivalErr)
			}
			if err != nil || res.Displaced != nil || res.Duplicate != tc.duplicate || res.Conflict == tc.duplicate {
				t.Fatalf("loser: %+v %v", res, err)
			}
			ev, err := f.L.Get(ctx, "github", "101")
			if err != nil || ev.PayloadHash != ledger.PayloadHash([]byte(tc.rival)) {
				t.Fatalf("row %+v %v", ev, err)
			}
			if tc.duplicate {
				requireDisplacedAudit(t, ev)
			} else {
				requireDisplacedAudit(t, ev, "conflict")
			}
		})
	}
}

// beforeDisplacing runs run once, right before the first displacement
// write (the UpdateItem conditioned on the replay's hash) is sent.
type beforeDisplacing struct {
	ledger.DynamoDB
	once sync.Once
	run  func()
}

func (b *beforeDisplacing) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if strings.Contains(aws.ToString(in.ConditionExpression), ":oldhash") {
		b.once.Do(b.run)
	}
	return b.DynamoDB.UpdateItem(ctx, in, opts...)
}
