package operator_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
)

func TestQuarantineAndReleaseRoundTrip(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.accept("stripe", "evt_1", "invoice.paid", `{"id":"evt_1"}`)
	if err := f.L.RetryLater(ctx, f.claim("stripe", "evt_1"), "http_503", "down", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	f.Clock.Advance(10 * time.Minute)

	out := f.mustRun("quarantine", "stripe", "evt_1", "--reason", "customer disputes the invoice (CS-88)")
	requireEqual(t, "quarantine", out, "held stripe/evt_1: RETRY_WAIT -> QUARANTINED (audit: hold by "+aliceActor+": customer disputes the invoice (CS-88))\n"+
		"release it with: webhookctl release stripe evt_1 --reason ...\n")
	ev := f.event("stripe", "evt_1")
	hold := ev.Audit[len(ev.Audit)-1]
	if ev.Status != ledger.StatusQuarantined || ev.ErrorCode != ledger.HoldErrorCode ||
		hold != (ledger.AuditEntry{At: t0.Add(10 * time.Minute), From: ledger.StatusRetryWait, To: ledger.StatusQuarantined, Actor: aliceActor, Action: "hold", Reason: "customer disputes the invoice (CS-88)"}) {
		t.Fatalf("held: %s %q %+v", ev.Status, ev.ErrorCode, hold)
	}
	requireEqual(t, "listed", f.mustRun("events", "list", "--status", "QUARANTINED"), `SOURCE  EVENT_ID  TYPE          STATUS       SINCE                 AGE  ATTEMPTS  ERROR
stripe  evt_1     invoice.paid  QUARANTINED  2026-11-30T12:10:00Z  0s   1         operator_hold
1 events from the due index
`)
	if due, err := f.L.ListDue(ctx, f.Clock.Now().Add(time.Hour), 10); err != nil || len(due) != 0 {
		t.Fatalf("a held event is still work: %+v %v", due, err)
	}
	if p := f.pointers(f.Events.Queue); len(p) != 0 {
		t.Fatalf("quarantine enqueued %v", p)
	}

	f.Clock.Advance(time.Hour)
	var rel map[string]any
	if err := json.Unmarshal([]byte(f.mustRun("release", "stripe", "evt_1", "--reason", "dispute withdrawn", "--actor", "ops:bob", "--json")), &rel); err != nil {
		t.Fatal(err)
	}
	// --actor names whoever the operator says; the credentials' ARN beside
	// it says who really did it.
	if rel["status"] != "RECEIVED" || rel["enqueued"] != true || rel["actor"] != "ops:bob ("+callerARN+")" {
		t.Fatalf("release: %v", rel)
	}
	ev = f.event("stripe", "evt_1")
	if ev.Status != ledger.StatusReceived || ev.EventID != "evt_1" ||
		ev.Audit[len(ev.Audit)-1] != (ledger.AuditEntry{At: t0.Add(70 * time.Minute), From: ledger.StatusQuarantined, To: ledger.StatusReceived, Actor: "ops:bob (" + callerARN + ")", Action: "release", Reason: "dispute withdrawn"}) {
		t.Fatalf("released: %s %+v", ev.Status, ev.Audit[len(ev.Audit)-1])
	}
	if got := actions(ev.Audit); !slices.Equal(got, []string{"accept", "claim", "retry_later", "hold", "release"}) {
		t.Fatalf("audit %v", got)
	}
	if p := f.pointers(f.Events.Queue); len(p) != 1 || p[0].ID == "" || p[0] != (queue.Pointer{V: 1, Source: "stripe", EventID: "evt_1", Reason: "replay", ID: p[0].ID}) {
		t.Fatalf("queue %+v", p)
	}

	// Release is for QUARANTINED events only.
	_, errOut, code := f.run("release", "stripe", "evt_1", "--reason", "again")
	if code != 1 || errOut != "webhookctl: refused: stripe/evt_1 is RECEIVED; only a QUARANTINED event can be released\n" {
		t.Fatalf("release of a RECEIVED event: exit %d %q", code, errOut)
	}
	f.dead("stripe", "evt_dead", "invoice.paid")
	if _, errOut, code := f.run("release", "stripe", "evt_dead", "--reason", "x"); code != 1 || !strings.Contains(errOut, "(a DEAD event is replayed: webhookctl replay)") {
		t.Fatalf("release of a DEAD event: exit %d %q", code, errOut)
	}
}

func TestQuarantineRefusesLiveLeasesAndFinishedEvents(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.accept("stripe", "evt_live", "invoice.paid", `{}`)
	f.claim("stripe", "evt_live")
	f.accept("stripe", "evt_done", "invoice.paid", `{}`)
	if _, err := f.L.Commit(ctx, f.claim("stripe", "evt_done"), nil, nil); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{
		"evt_live": "webhookctl: hold stripe/evt_live refused: it is PROCESSING (leased by worker-1 until 2026-11-30T12:01:00Z; wait for the worker to finish or the lease to expire)\n",
		"evt_done": "webhookctl: hold stripe/evt_done refused: it is PROCESSED (finished; nothing to hold)\n",
	} {
		out, errOut, code := f.run("quarantine", "stripe", id, "--reason", "x")
		if code != 1 || out != "" || errOut != want {
			t.Fatalf("%s: exit %d %q %q", id, code, out, errOut)
		}
	}
	// Once the lease has expired, nobody is working on it: it can be held.
	f.Clock.Advance(2 * time.Minute)
	f.mustRun("quarantine", "stripe", "evt_live", "--reason", "worker crashed mid-way; inspect first")
	if ev := f.event("stripe", "evt_live"); ev.Status != ledger.StatusQuarantined || ev.Audit[len(ev.Audit)-1].From != ledger.StatusProcessing {
		t.Fatalf("expired lease: %s %+v", ev.Status, ev.Audit[len(ev.Audit)-1])
	}
}

// seedIntents leaves intents in each state. Each comes from a committed
// event, as in production.
func seedIntents(t *testing.T, f *fixture) {
	t.Helper()
	ctx := context.Background()
	mk := func(op string) {
		f.accept("stripe", "evt_"+op, "order.cancelled", `{}`)
		w := &ledger.ProjectionWrite{Name: "orders", Subject: "O-" + op, Version: 1, Fingerprint: "c", State: map[string]any{"status": "CANCELLED"}}
		in := ledger.Intent{OperationID: op, Kind: "refund", Subject: "O-" + op, Payload: map[string]any{"amount": 1200, "customer": "cus_1"}}
		if _, err := f.L.Commit(ctx, f.claim("stripe", "evt_"+op), w, []ledger.Intent{in}); err != nil {
			t.Fatal(err)
		}
	}
	lease := ledger.ClaimOptions{Owner: "dispatcher-1", Lease: 30 * time.Second}
	record := func(op string, out ledger.IntentOutcome) {
		mk(op)
		c, err := f.L.ClaimIntent(ctx, op, lease)
		if err != nil {
			t.Fatal(err)
		}
		if out.Status != "" {
			if err := f.L.RecordIntent(ctx, c, out); err != nil {
				t.Fatal(err)
			}
		}
	}
	record("op-uncertain", ledger.IntentOutcome{Status: ledger.IntentStatusUncertain, Code: "timeout", Detail: "no answer in 10s", Next: t0.Add(time.Hour)})
	f.Clock.Advance(time.Minute)
	record("op-expired", ledger.IntentOutcome{})
	f.Clock.Advance(time.Minute)
	record("op-done", ledger.IntentOutcome{Status: ledger.IntentStatusSucceeded, Code: "http_200"})
	mk("op-pending")
	f.Clock.Advance(time.Minute)
	record("op-live", ledger.IntentOutcome{})
}

func TestIntentsListShowAndResolve(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	seedIntents(t, f)
	f.Clock.Advance(10 * time.Second) // op-expired's lease has run out, op-live's has not

	// (Where a leased intent sits on the due index is the ledger's business:
	// its SINCE is not asserted here.)
	var all struct {
		Intents []struct {
			OperationID string `json:"operation_id"`
			Status      string
		}
		Count int
	}
	if err := json.Unmarshal([]byte(f.mustRun("intents", "list", "--json")), &all); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, in := range all.Intents {
		got[in.OperationID] = in.Status
	}
	if all.Count != 4 || len(got) != 4 || got["op-expired"] != "DISPATCHING" || got["op-live"] != "DISPATCHING" || got["op-pending"] != "PENDING" || got["op-uncertain"] != "UNCERTAIN" {
		t.Fatalf("open intents: %+v", all)
	}
	requireEqual(t, "intents list", f.mustRun("intents", "list", "--status", "pending,UNCERTAIN"), `OPERATION_ID  KIND    STATUS     SINCE                 AGE        ATTEMPTS  ERROR
op-pending    refund  PENDING    2026-11-30T12:02:00Z  1m10s      0         -
op-uncertain  refund  UNCERTAIN  2026-11-30T13:00:00Z  in 56m50s  1         timeout
2 open intents
`)
	requireEqual(t, "intents show", f.mustRun("intents", "show", "op-uncertain"), `intent        op-uncertain
kind          refund
subject       O-op-uncertain
caused by     stripe/evt_op-uncertain
scope         -
from          orders/O-op-uncertain@1
policy        once
status        UNCERTAIN
attempts      1
created       2026-11-30T12:00:00Z
first attempt 2026-11-30T12:00:00Z
next check    2026-11-30T13:00:00Z
last outcome  timeout: no answer in 10s
payload       keys amount, customer (values not shown: --payload)
audit:
AT                    FROM         TO           ACTOR         ACTION  REASON
2026-11-30T12:00:00Z  PENDING      DISPATCHING  dispatcher-1  claim   -
2026-11-30T12:00:00Z  DISPATCHING  UNCERTAIN    dispatcher-1  record  timeout: no answer in 10s
`)
	if out := f.mustRun("intents", "show", "op-uncertain", "--payload"); !strings.Contains(out, `payload       {"amount":1200,"customer":"cus_1"}`) {
		t.Fatalf("--payload:\n%s", out)
	}

	out := f.mustRun("intents", "resolve", "op-uncertain", "--outcome", "succeeded", "--reason", "refund re_9 found in the Stripe dashboard")
	requireEqual(t, "resolve", out, "resolved intent op-uncertain: UNCERTAIN -> SUCCEEDED (audit: resolve by "+aliceActor+": refund re_9 found in the Stripe dashboard); it expires 2026-12-30T12:03:10Z\n")
	in, err := f.L.GetIntentState(context.Background(), "op-uncertain")
	if err != nil {
		t.Fatal(err)
	}
	last := in.Audit[len(in.Audit)-1]
	if in.Status != ledger.IntentStatusSucceeded || !in.ExpiresAt.Equal(t0.Add(30*24*time.Hour+3*time.Minute+10*time.Second)) ||
		last != (ledger.AuditEntry{At: f.Clock.Now(), From: ledger.Status(ledger.IntentStatusUncertain), To: ledger.Status(ledger.IntentStatusSucceeded), Actor: aliceActor, Action: "resolve", Reason: "refund re_9 found in the Stripe dashboard"}) {
		t.Fatalf("resolved: %s %v %+v", in.Status, in.ExpiresAt, last)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(f.mustRun("intents", "resolve", "op-expired", "--outcome", "FAILED", "--reason", "downstream has no record of key op-expired", "--json")), &res); err != nil {
		t.Fatal(err)
	}
	if res["from"] != "DISPATCHING" || res["status"] != "FAILED" || res["actor"] != aliceActor {
		t.Fatalf("json: %v", res)
	}
	requireEqual(t, "after", f.mustRun("intents", "list", "--status", "PENDING,UNCERTAIN"), `OPERATION_ID  KIND    STATUS   SINCE                 AGE    ATTEMPTS  ERROR
op-pending    refund  PENDING  2026-11-30T12:02:00Z  1m10s  0         -
1 open intents
`)
	if out := f.mustRun("intents", "list", "--status", "DISPATCHING"); !strings.Contains(out, "op-live") || strings.Contains(out, "op-expired") {
		t.Fatalf("after resolving op-expired:\n%s", out)
	}

	for _, tc := range []struct {
		op, want string
	}{
		{"op-done", "webhookctl: resolve intent op-done refused: it is SUCCEEDED (finished)\n"},
		{"op-uncertain", "webhookctl: resolve intent op-uncertain refused: it is SUCCEEDED (finished)\n"},
		{"op-live", "webhookctl: resolve intent op-live refused: it is DISPATCHING (leased by dispatcher-1 until 2026-11-30T12:03:30Z; a dispatcher is working on it)\n"},
		{"op-pending", "webhookctl: resolve intent op-pending refused: it is PENDING (not attempted yet; the dispatcher will send it)\n"},
	} {
		before, _ := f.L.GetIntentState(context.Background(), tc.op)
		out, errOut, code := f.run("intents", "resolve", tc.op, "--outcome", "failed", "--reason", "x")
		if code != 1 || out != "" || errOut != tc.want {
			t.Fatalf("%s: exit %d %q %q", tc.op, code, out, errOut)
		}
		if after, _ := f.L.GetIntentState(context.Background(), tc.op); after.Status != before.Status || len(after.Audit) != len(before.Audit) {
			t.Fatalf("%s changed by a refused resolve", tc.op)
		}
	}
	if _, errOut, code := f.run("intents", "resolve", "op-live", "--outcome", "maybe", "--reason", "x"); code != 2 || errOut != "webhookctl: usage: --outcome must be succeeded or failed, got \"maybe\"\n" {
		t.Fatalf("bad outcome: exit %d %q", code, errOut)
	}
}
