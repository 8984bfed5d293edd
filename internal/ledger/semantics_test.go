package ledger_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// Rules AWS applies that the emulators may not.

// An empty payload is stored (as no attribute: DynamoDB accepts an
// empty Binary outside keys, minidyn refuses one) and read back empty; a
// duplicate finds the row.
func TestEmptyPayloadIsStored(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	d := ledger.Delivery{Source: "github", EventID: ledger.ContentID(nil), EventType: "unidentified", DeliveryID: "gh-1", Quarantine: "no_identity"}
	if _, err := f.L.Accept(ctx, d); err != nil {
		t.Fatalf("accept an empty payload: %v", err)
	}
	dup, err := f.L.Accept(ctx, d)
	if err != nil || !dup.Duplicate || dup.PayloadMismatch || dup.Event.PayloadSize != 0 || dup.Event.Status != ledger.StatusQuarantined {
		t.Fatalf("duplicate %+v: %v", dup, err)
	}
	raw, err := f.L.Payload(ctx, dup.Event)
	if err != nil || len(raw) != 0 {
		t.Fatalf("payload %q: %v", raw, err)
	}
}

// An event id is what every component accepts: a DynamoDB key, an SQS
// message body (SendMessage allows #x9 | #xA | #xD | #x20-#xD7FF |
// #xE000-#xFFFD | #x10000-#x10FFFF) and a log line. Accept refuses the
// rest with ErrInvalid, as CheckEventID says beforehand.
func TestEventIDsAreWhatSQSAndDynamoDBCarry(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	for _, c := range []struct {
		id string
		ok bool
	}{
		{"evt_1", true},
		{"evt_\ufffd", true},       // the replacement character itself is allowed
		{"evt_\U0001F600", true},   // supplementary planes are allowed
		{"evt_\ud7ff\ue000", true}, // the edges of the allowed ranges
		{"evt_\ufffe", false},
		{"evt_\uffff", false},
		{"evt_\x85", false},   // not UTF-8
		{"evt_\u0085", false}, // C1 control
		{"evt_\t", false},     // SQS allows a tab; a key and a log line should not have one
		{"evt_\x00", false},
		{"evt_\xed\xa0\x80", false}, // an encoded surrogate is not UTF-8
	} {
		err := ledger.CheckEventID(c.id)
		_, aerr := f.L.Accept(ctx, delivery(c.id, `{}`))
		if (err == nil) != c.ok || (aerr == nil) != c.ok || (!c.ok && (!errors.Is(err, ledger.ErrInvalid) || !errors.Is(aerr, ledger.ErrInvalid))) {
			t.Errorf("%q: CheckEventID %v, Accept %v; want usable=%v", c.id, err, aerr, c.ok)
		}
	}
}

// Only a message back from the dead-letter queue reopens a DEAD event.
// Dead records the claim's pointer id as a dead letter and its message id;
// a console redrive sends the letter's body back under a new message id.
// The same message received again before SQS moved it, a second pointer
// (an intake duplicate, a reconciler re-enqueue) or a pointer without an
// id is refused and changes nothing; a redrive reopens the event, audited
// as a redrive that names the letter; GiveUp records the letter of a
// message that reached the DLQ on its own.
func TestOnlyADeadLetterReopensADeadEvent(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	accepted(t, f, "evt_d")
	claim := func(msg, letter string) (ledger.Claim, error) {
		return f.L.Claim(ctx, "stripe", "evt_d", ledger.ClaimOptions{Owner: "proc", Lease: time.Minute, Message: msg, Letter: letter})
	}
	c, err := claim("m1", "p1")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.L.Dead(ctx, c, "commit_failed", "boom"); err != nil {
		t.Fatal(err)
	}
	dead, _ := f.L.Get(ctx, "stripe", "evt_d")
	refused := func(msg, letter string, inFlight bool) {
		t.Helper()
		_, err := claim(msg, letter)
		var nc *ledger.NotClaimableError
		if !errors.As(err, &nc) || nc.InFlightToDLQ != inFlight || nc.Event.Status != ledger.StatusDead {
			t.Fatalf("claim by message %q pointer %q: %v (in flight to the DLQ: %v), want refused, in flight %v", msg, letter, err, nc != nil && nc.InFlightToDLQ, inFlight)
		}
		ev, _ := f.L.Get(ctx, "stripe", "evt_d")
		if ev.Status != ledger.StatusDead || !reflect.DeepEqual(ev.Audit, dead.Audit) || ev.Attempts != dead.Attempts {
			t.Fatalf("a refused claim changed the event: %s %v", ev.Status, ev.Audit)
		}
	}
	refused("m1", "p1", true)  // its own message, before SQS moved it to the DLQ
	refused("m2", "p2", false) // a second pointer
	refused("m2", "", false)   // a pointer without an id
	open, err := f.L.ListOpen(ctx, "event", 10, ledger.StatusDead)
	if err != nil || len(open) != 1 {
		t.Fatalf("a DEAD event must stay listed: %+v %v", open, err)
	}

	// The console redrive: p1's body under a new message id.
	r, err := claim("m3", "p1")
	if err != nil || !r.Redrive || r.Event.Attempts != 1 {
		t.Fatalf("redrive: %+v %v", r, err)
	}
	last := r.Event.Audit[len(r.Event.Audit)-1]
	if last.Action != "redrive" || last.From != ledger.StatusDead || !strings.Contains(last.Reason, "dead letter p1") || !strings.Contains(last.Reason, "m3") {
		t.Fatalf("redrive audit %+v", last)
	}
	// The redriven message's own round ends DEAD: it is on its way to the
	// DLQ, and a redrive of it (under yet another message id) reopens.
	if err := f.L.Dead(ctx, r, "commit_failed", "again"); err != nil {
		t.Fatal(err)
	}
	dead, _ = f.L.Get(ctx, "stripe", "evt_d")
	refused("m3", "p1", true)
	r2, err := claim("m4", "p1")
	if err != nil || !r2.Redrive {
		t.Fatalf("a redrive of the redriven message: %+v %v", r2, err)
	}
	if err := f.L.Dead(ctx, r2, "commit_failed", "again"); err != nil {
		t.Fatal(err)
	}
	dead, _ = f.L.Get(ctx, "stripe", "evt_d")
	refused("m5", "p9", false)

	// A message that reached the DLQ on its own: the sweep's GiveUp
	// records its letter on the DEAD event, and its redrive reopens it.
	if _, err := f.L.GiveUp(ctx, "stripe", "evt_d", "dlq-sweep", "message reached the dead-letter queue", "p9"); !errors.As(err, new(*ledger.NotClaimableError)) {
		t.Fatalf("give up on a DEAD event: %v", err)
	}
	if ev, _ := f.L.Get(ctx, "stripe", "evt_d"); ev.Status != ledger.StatusDead || !reflect.DeepEqual(ev.Audit, dead.Audit) {
		t.Fatalf("recording a letter changed the event: %s %v", ev.Status, ev.Audit)
	}
	if r3, err := claim("m6", "p9"); err != nil || !r3.Redrive {
		t.Fatalf("redrive of a letter GiveUp recorded: %+v %v", r3, err)
	}
}

// With GiveUp first: an unfinished event whose message reached the DLQ
// is marked DEAD with that message's pointer id as its dead letter.
func TestGiveUpRecordsTheDeadLetter(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	accepted(t, f, "evt_g")
	if _, err := f.L.GiveUp(ctx, "stripe", "evt_g", "dlq-sweep", "message reached the dead-letter queue", "p1"); err != nil {
		t.Fatal(err)
	}
	claim := func(msg, letter string) (ledger.Claim, error) {
		return f.L.Claim(ctx, "stripe", "evt_g", ledger.ClaimOptions{Owner: "proc", Lease: time.Minute, Message: msg, Letter: letter})
	}
	if _, err := claim("m2", "p2"); !errors.As(err, new(*ledger.NotClaimableError)) {
		t.Fatalf("a second pointer reopened it: %v", err)
	}
	if c, err := claim("m3", "p1"); err != nil || !c.Redrive {
		t.Fatalf("redrive: %+v %v", c, err)
	}
}

// Every DEAD and QUARANTINED row is on the attention shards of the due
// index, however it got there, so ListOpen (webhookctl stats, events list
// --status, replay --status, the reconciler's gauges) finds it without a
// scan and the work queries never do. One case per path that sets either
// status; and a row an older version left QUARANTINED or DEAD on its work
// shard (accept put a delivery without identity there before the
// attention shards) moves to its attention shard with the next delivery
// of it.
func TestEveryDeadOrQuarantinedRowIsOnTheAttentionShards(t *testing.T) {
	ctx := context.Background()
	claimOf := func(t *testing.T, f fixture, id string) ledger.Claim {
		t.Helper()
		accepted(t, f, id)
		c, err := f.L.Claim(ctx, "stripe", id, ledger.ClaimOptions{Owner: "proc", Lease: time.Minute, Message: "m-" + id, Letter: "p-" + id})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// legacy leaves id in status on its work shard, as an older version
	// of the ledger did, and delivers it again.
	legacy := func(t *testing.T, f fixture, id string, status ledger.Status) {
		t.Helper()
		accepted(t, f, id)
		if _, err := f.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(f.Table),
			Key:                       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "EV#stripe#" + id}, "sk": &types.AttributeValueMemberS{Value: "EV"}},
			UpdateExpression:          aws.String("SET #s = :s, error_code = :c"),
			ExpressionAttributeNames:  map[string]string{"#s": "status"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberS{Value: string(status)}, ":c": &types.AttributeValueMemberS{Value: "no_identity"}},
		}); err != nil {
			t.Fatal(err)
		}
		if open, _ := f.L.ListOpen(ctx, "event", 10, status); len(open) != 0 {
			t.Fatalf("setup: the legacy row is listed already: %+v", open)
		}
		f.Clock.Advance(time.Minute)
		if dup, err := f.L.Accept(ctx, delivery(id, `{"id":"`+id+`"}`)); err != nil || !dup.Duplicate {
			t.Fatalf("delivered again: %+v %v", dup, err)
		}
	}
	cases := []struct {
		name   string
		status ledger.Status
		run    func(t *testing.T, f fixture, id string)
	}{
		{"accept without identity", ledger.StatusQuarantined, func(t *testing.T, f fixture, id string) {
			d := delivery(id, `not json`)
			d.Quarantine = "no_identity"
			if _, err := f.L.Accept(ctx, d); err != nil {
				t.Fatal(err)
			}
		}},
		{"accept of a suspected replay", ledger.StatusQuarantined, func(t *testing.T, f fixture, id string) {
			d := delivery(id, `{"id":"x"}`)
			d.Quarantine, d.Attributes = "suspected_replay", map[string]string{"replay_of": "evt_first"}
			if _, err := f.L.Accept(ctx, d); err != nil {
				t.Fatal(err)
			}
		}},
		{"processor quarantine", ledger.StatusQuarantined, func(t *testing.T, f fixture, id string) {
			if err := f.L.Quarantine(ctx, claimOf(t, f, id), "malformed", "bad json"); err != nil {
				t.Fatal(err)
			}
		}},
		{"same version, other state", ledger.StatusQuarantined, func(t *testing.T, f fixture, id string) {
			w := func(fp string) *ledger.ProjectionWrite {
				return &ledger.ProjectionWrite{Name: "sub", Subject: "sub_" + id, Version: 1, Fingerprint: fp, State: map[string]any{"s": fp}}
			}
			_, err := f.L.Commit(ctx, claimOf(t, f, id+"_first"), w("a"), nil)
			skipWithoutTransactions(t, err)
			if err != nil {
				t.Fatal(err)
			}
			if done, err := f.L.Commit(ctx, claimOf(t, f, id), w("b"), nil); err != nil || !done.Conflict {
				t.Fatalf("conflict: %+v %v", done, err)
			}
		}},
		{"DEAD on exhausted attempts", ledger.StatusDead, func(t *testing.T, f fixture, id string) {
			if err := f.L.Dead(ctx, claimOf(t, f, id), "commit_failed", "boom"); err != nil {
				t.Fatal(err)
			}
		}},
		{"DEAD again after a redrive", ledger.StatusDead, func(t *testing.T, f fixture, id string) {
			if err := f.L.Dead(ctx, claimOf(t, f, id), "commit_failed", "boom"); err != nil {
				t.Fatal(err)
			}
			c, err := f.L.Claim(ctx, "stripe", id, ledger.ClaimOptions{Owner: "proc", Lease: time.Minute, Message: "m2-" + id, Letter: "p-" + id})
			if err != nil || !c.Redrive {
				t.Fatalf("redrive: %v", err)
			}
			if err := f.L.Dead(ctx, c, "commit_failed", "again"); err != nil {
				t.Fatal(err)
			}
		}},
		{"DLQ sweep gives up on a RECEIVED row", ledger.StatusDead, func(t *testing.T, f fixture, id string) {
			accepted(t, f, id)
			if _, err := f.L.GiveUp(ctx, "stripe", id, "dlq-sweep", "message reached the dead-letter queue", "p-"+id); err != nil {
				t.Fatal(err)
			}
		}},
		{"DLQ sweep gives up on a RETRY_WAIT row", ledger.StatusDead, func(t *testing.T, f fixture, id string) {
			if err := f.L.RetryLater(ctx, claimOf(t, f, id), "x", "y", f.Clock.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if _, err := f.L.GiveUp(ctx, "stripe", id, "dlq-sweep", "message reached the dead-letter queue", ""); err != nil {
				t.Fatal(err)
			}
		}},
		{"operator hold of a RECEIVED row", ledger.StatusQuarantined, func(t *testing.T, f fixture, id string) {
			accepted(t, f, id)
			if _, err := f.L.Hold(ctx, "stripe", id, "ops:alice", "dispute"); err != nil {
				t.Fatal(err)
			}
		}},
		{"operator hold of a DEAD row", ledger.StatusQuarantined, func(t *testing.T, f fixture, id string) {
			if err := f.L.Dead(ctx, claimOf(t, f, id), "commit_failed", "boom"); err != nil {
				t.Fatal(err)
			}
			if _, err := f.L.Hold(ctx, "stripe", id, "ops:alice", "dispute"); err != nil {
				t.Fatal(err)
			}
		}},
		{"older version: QUARANTINED on its work shard, delivered again", ledger.StatusQuarantined, func(t *testing.T, f fixture, id string) {
			legacy(t, f, id, ledger.StatusQuarantined)
		}},
		{"older version: DEAD on its work shard, delivered again", ledger.StatusDead, func(t *testing.T, f fixture, id string) {
			legacy(t, f, id, ledger.StatusDead)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			id := "evt_" + strings.NewReplacer(" ", "_", ",", "", ":", "").Replace(c.name)
			c.run(t, f, id)
			ev, err := f.L.Get(ctx, "stripe", id)
			if err != nil || ev.Status != c.status {
				t.Fatalf("row %s %v, want %s", ev.Status, err, c.status)
			}
			for _, sts := range [][]ledger.Status{{c.status}, nil} {
				open, err := f.L.ListOpen(ctx, "event", 100, sts...)
				if err != nil {
					t.Fatal(err)
				}
				listed := false
				for _, it := range open {
					listed = listed || (it.EventID == id && it.Status == string(c.status))
				}
				if !listed {
					t.Fatalf("a %s row is not listed by ListOpen(%v): %+v", c.status, sts, open)
				}
			}
			if shard := stringAttr(rawEvent(t, f, id), "due_shard"); !strings.HasPrefix(shard, "A") {
				t.Fatalf("on shard %q, want an attention shard", shard)
			}
			due, err := f.L.ListDue(ctx, f.Clock.Now().Add(48*time.Hour), 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range due {
				if d.EventID == id {
					t.Fatalf("a %s row is listed as work", c.status)
				}
			}
		})
	}
}
