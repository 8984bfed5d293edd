package ledger_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// rawEvent reads the event item as stored, every attribute.
func rawEvent(t *testing.T, f fixture, id string) map[string]types.AttributeValue {
	t.Helper()
	out, err := f.DB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(f.Table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "EV#stripe#" + id}, "sk": &types.AttributeValueMemberS{Value: "EV"}}})
	if err != nil || len(out.Item) == 0 {
		t.Fatalf("read %s: %v", id, err)
	}
	return out.Item
}

// appliesRemove reports whether the store applies an UpdateItem's REMOVE
// (DynamoDB and dynalite do; minidyn v0.8.2 ignores it and keeps the
// attribute).
func appliesRemove(t *testing.T, f fixture) bool {
	t.Helper()
	ctx := context.Background()
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "probe"}, "sk": &types.AttributeValueMemberS{Value: "probe"}}
	if _, err := f.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(f.Table), Key: key, UpdateExpression: aws.String("SET x = :v"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": &types.AttributeValueMemberS{Value: "1"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(f.Table), Key: key, UpdateExpression: aws.String("REMOVE x")}); err != nil {
		t.Fatal(err)
	}
	out, err := f.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(f.Table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	_, kept := out.Item["x"]
	return !kept
}

// deliveryAttr: the attributes a duplicate may write (its count and its
// history slot).
func deliveryAttr(name string) bool {
	return name == "delivery_count" || strings.HasPrefix(name, "dh")
}

func stringAttr(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// A duplicate of an event in any state records itself on the row (count,
// last delivery, the bounded history) in its one request, and changes
// nothing else: not the status, the result, the payload, the audit, and
// not the due index entry, except that a PROCESSED event, which left the
// index at completion, enters a "done" shard that no query reads. Nothing
// finished is ever listed as due, nor is a DEAD or QUARANTINED event moved
// off its attention shard.
func TestDuplicatesLeaveEvidenceAndChangeNothingElse(t *testing.T) {
	ctx := context.Background()
	far := t0.Add(365 * 24 * time.Hour)
	tests := []struct {
		name   string
		setup  func(t *testing.T, f fixture)
		status ledger.Status
	}{
		{"processed", func(t *testing.T, f fixture) {
			if _, err := f.L.Commit(ctx, claimed(t, f, "evt_1"), nil, nil); err != nil {
				t.Fatal(err)
			}
		}, ledger.StatusProcessed},
		{"dead", func(t *testing.T, f fixture) {
			if err := f.L.Dead(ctx, claimed(t, f, "evt_1"), "commit_failed", "boom"); err != nil {
				t.Fatal(err)
			}
		}, ledger.StatusDead},
		{"quarantined", func(t *testing.T, f fixture) {
			if err := f.L.Quarantine(ctx, claimed(t, f, "evt_1"), "unknown_subject", "no account"); err != nil {
				t.Fatal(err)
			}
		}, ledger.StatusQuarantined},
		{"received", func(t *testing.T, f fixture) { accepted(t, f, "evt_1") }, ledger.StatusReceived},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.setup(t, f)
			removes := appliesRemove(t, f)
			before := rawEvent(t, f, "evt_1")
			first, err := f.L.Get(ctx, "stripe", "evt_1")
			if err != nil || first.Status != tc.status || first.DeliveryCount != 1 {
				t.Fatalf("setup: %s, %d deliveries, %v", first.Status, first.DeliveryCount, err)
			}

			sent := map[string]time.Time{"d-evt_1": t0}
			for i, id := range []string{"d-dup-1", "d-dup-2"} {
				f.Clock.Advance(time.Minute)
				f.Rec.Reset()
				d := delivery("evt_1", `{"id":"evt_1"}`)
				d.DeliveryID = id
				got, err := f.L.Accept(ctx, d)
				if err != nil || !got.Duplicate || got.Event.Status != tc.status {
					t.Fatalf("duplicate %s: %+v %v", id, got, err)
				}
				if n := f.Rec.Total("DynamoDB"); n != 1 {
					t.Fatalf("duplicate %s cost %d requests (%s), want 1", id, n, f.Rec)
				}
				// The answer is the row with this delivery recorded.
				if got.Event.DeliveryCount != 2+i || got.Event.LastDeliveryID != id || !got.Event.LastDeliveryAt.Equal(f.Clock.Now()) ||
					len(got.Event.RecentDeliveries) == 0 || got.Event.RecentDeliveries[0] != (ledger.DeliveryRecord{At: f.Clock.Now(), ID: id}) {
					t.Fatalf("duplicate %s answered %d deliveries, last %q at %s, history %+v", id, got.Event.DeliveryCount,
						got.Event.LastDeliveryID, got.Event.LastDeliveryAt, got.Event.RecentDeliveries)
				}
				sent[id] = f.Clock.Now()
			}

			ev, err := f.L.Get(ctx, "stripe", "evt_1")
			if err != nil {
				t.Fatal(err)
			}
			if ev.DeliveryCount != 3 || ev.FirstDeliveryID != "d-evt_1" || ev.LastDeliveryID != "d-dup-2" || !ev.LastDeliveryAt.Equal(f.Clock.Now()) {
				t.Fatalf("evidence: %d deliveries, first %q, last %q at %s", ev.DeliveryCount, ev.FirstDeliveryID, ev.LastDeliveryID, ev.LastDeliveryAt)
			}
			hist := ev.RecentDeliveries
			if len(hist) == 0 || len(hist) > ledger.DeliveryHistorySlots || hist[0] != (ledger.DeliveryRecord{At: f.Clock.Now(), ID: "d-dup-2"}) {
				t.Fatalf("history %+v", hist)
			}
			for _, r := range hist {
				if at, ok := sent[r.ID]; !ok || !at.Equal(r.At) {
					t.Fatalf("history holds a delivery never made: %+v of %+v", r, hist)
				}
			}

			// Nothing but the delivery evidence changed, and for a
			// PROCESSED event its entry on a done shard.
			after := rawEvent(t, f, "evt_1")
			for name, v := range after {
				if deliveryAttr(name) {
					continue
				}
				if tc.status == ledger.StatusProcessed && (name == "due_shard" || name == "due_at") && removes {
					continue
				}
				if !reflect.DeepEqual(before[name], v) {
					t.Errorf("a duplicate changed %s: %v → %v", name, before[name], v)
				}
			}
			for name := range before {
				if _, ok := after[name]; !ok {
					t.Errorf("a duplicate removed %s", name)
				}
			}
			if !reflect.DeepEqual(first.Audit, ev.Audit) || !reflect.DeepEqual(first.Result, ev.Result) || ev.Status != tc.status {
				t.Fatalf("status, result or audit changed: %s %+v %+v", ev.Status, ev.Result, ev.Audit)
			}

			// The due index.
			due, err := f.L.ListDue(ctx, far, 100)
			if err != nil {
				t.Fatal(err)
			}
			if listed := slices.ContainsFunc(due, func(r ledger.DueRef) bool { return r.EventID == "evt_1" }); listed != (tc.status == ledger.StatusReceived) {
				t.Fatalf("%s event listed due: %v (%+v)", tc.status, listed, due)
			}
			open, err := f.L.ListOpen(ctx, "event", 100)
			if err != nil {
				t.Fatal(err)
			}
			if listed := slices.ContainsFunc(open, func(it ledger.OpenItem) bool { return it.EventID == "evt_1" }); listed == (tc.status == ledger.StatusProcessed) {
				t.Fatalf("%s event listed open: %v (%+v)", tc.status, listed, open)
			}
			shard := stringAttr(after, "due_shard")
			switch tc.status {
			case ledger.StatusProcessed:
				if !removes {
					t.Logf("this store ignores REMOVE (minidyn): the finished row kept its work shard %q, and only ListDue's status filter keeps it off the work list", shard)
					break
				}
				if !strings.HasPrefix(shard, "done#") || stringAttr(after, "done_shard") != shard {
					t.Fatalf("a duplicate of a PROCESSED event went to shard %q (done_shard %q), want its done shard", shard, stringAttr(after, "done_shard"))
				}
				out, err := f.DB.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(f.Table), IndexName: aws.String(ledger.DueIndex),
					KeyConditionExpression:    aws.String("due_shard = :s"),
					ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberS{Value: shard}}})
				if err != nil || len(out.Items) != 1 || stringAttr(out.Items[0], "event_id") != "evt_1" {
					t.Fatalf("the done shard %s of the index holds %v (%v)", shard, out.Items, err)
				}
			case ledger.StatusDead, ledger.StatusQuarantined:
				if !strings.HasPrefix(shard, "A") {
					t.Fatalf("a %s event left its attention shard: %q", tc.status, shard)
				}
			}
		})
	}
}

// A processed event's stored result names its intents' operation ids and
// kinds; a duplicate's one request reads them back (the intake tells the
// sender none of them) and leaves them as they were.
func TestResultNamesTheIntentsAndSurvivesDuplicates(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	c := claimed(t, f, "evt_1")
	w := &ledger.ProjectionWrite{Name: "sub", Subject: "sub_1", Version: 1, Fingerprint: "f1", State: map[string]any{"status": "active"}}
	ins := []ledger.Intent{
		{OperationID: "op-grant", Kind: "entitlement.grant", Subject: "sub_1", Payload: map[string]any{"plan": "pro"}},
		{OperationID: "op-mail", Kind: "notify_welcome", Subject: "sub_1", Payload: map[string]any{"to": "a@example.test"}},
	}
	done, err := f.L.Commit(ctx, c, w, ins)
	if err != nil {
		skipWithoutTransactions(t, err)
		t.Fatal(err)
	}
	want := ledger.Operations{{ID: "op-grant", Kind: "entitlement.grant"}, {ID: "op-mail", Kind: "notify_welcome"}}
	if !reflect.DeepEqual(done.Result.Operations, want) || done.Result.Intents != 2 {
		t.Fatalf("committed result %+v", done.Result)
	}
	f.Clock.Advance(time.Hour)
	dup, err := f.L.Accept(ctx, delivery("evt_1", `{"id":"evt_1"}`))
	if err != nil || !dup.Duplicate || dup.Event.Result == nil || !reflect.DeepEqual(dup.Event.Result.Operations, want) {
		t.Fatalf("duplicate: %+v %v", dup.Event.Result, err)
	}
	if dup.Event.DeliveryCount != 2 {
		t.Fatalf("the duplicate's answer counts %d deliveries, want 2", dup.Event.DeliveryCount)
	}
	// An ignored event stores no operations attribute at all.
	c2 := claimed(t, f, "evt_2")
	if _, err := f.L.Commit(ctx, c2, nil, nil); err != nil {
		t.Fatal(err)
	}
	res := rawEvent(t, f, "evt_2")["result"].(*types.AttributeValueMemberM).Value
	if _, ok := res["ops"]; ok {
		t.Fatalf("an ignored event's result stores ops: %v", res)
	}
}

// A delivery without identity is kept QUARANTINED on the attention shards,
// so operators list it; a duplicate records itself like any other.
func TestQuarantineOnAcceptIsListedForOperators(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	d := ledger.Delivery{Source: "stripe", EventID: "sha256:abc", EventType: "unidentified", Payload: []byte(`{}`), Quarantine: "no_identity"}
	if _, err := f.L.Accept(ctx, d); err != nil {
		t.Fatal(err)
	}
	f.Clock.Advance(time.Minute)
	dup, err := f.L.Accept(ctx, d)
	if err != nil || !dup.Duplicate || dup.Event.Status != ledger.StatusQuarantined || dup.Event.DeliveryCount != 2 {
		t.Fatalf("duplicate: %+v %v", dup, err)
	}
	open, err := f.L.ListOpen(ctx, "event", 10, ledger.StatusQuarantined)
	if err != nil || len(open) != 1 || open[0].EventID != "sha256:abc" || open[0].ErrorCode != "no_identity" || !open[0].Since.Equal(t0) {
		t.Fatalf("not listed for operators: %+v %v", open, err)
	}
	if due, err := f.L.ListDue(ctx, t0.Add(time.Hour), 10); err != nil || len(due) != 0 {
		t.Fatalf("listed as work: %+v %v", due, err)
	}
}

// A delivery quarantined on accept with a reason keeps the reason as the
// row's error message (the first one: a duplicate's never replaces it),
// and Accept's answer says both, for a new row as for a duplicate.
func TestQuarantineOnAcceptKeepsItsReason(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	d := ledger.Delivery{Source: "stripe", EventID: "evt_1", EventType: "customer.created", Payload: []byte(`{"id":"evt_1"}`),
		Quarantine: "connect_account_not_allowed", QuarantineReason: "event of connected account acct_1A"}
	first, err := f.L.Accept(ctx, d)
	if err != nil || first.Event.Status != ledger.StatusQuarantined || first.Event.ErrorCode != d.Quarantine || first.Event.ErrorMessage != d.QuarantineReason {
		t.Fatalf("first: %+v %v", first.Event, err)
	}
	d.QuarantineReason = "another reason"
	dup, err := f.L.Accept(ctx, d)
	if err != nil || !dup.Duplicate || dup.Event.ErrorMessage != "event of connected account acct_1A" {
		t.Fatalf("duplicate: %+v %v", dup.Event, err)
	}
	ev, err := f.L.Get(ctx, "stripe", "evt_1")
	if err != nil || ev.ErrorCode != "connect_account_not_allowed" || ev.ErrorMessage != "event of connected account acct_1A" || ev.DeliveryCount != 2 {
		t.Fatalf("row %+v %v", ev, err)
	}
}
