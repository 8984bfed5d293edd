package ledger_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// above2p53 is not a float64: through one it becomes 1152921511791461888.
const above2p53 = "1152921511791461867"

func numAttr(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
func strAttr(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

// requireJSON asserts v's JSON encoding: numbers as written, never
// through a float64.
func requireJSON(t *testing.T, what string, v any, want string) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil || string(b) != want {
		t.Fatalf("%s = %s (%v), want %s", what, b, err, want)
	}
}

// Every number the ledger reads back is the number written: a
// projection's state (GetProjection, TakeSnapshot), an intent's payload
// (GetIntentState, TakeSnapshot) and an event's result (Get,
// TakeSnapshot). The items are written by PutItem, as Commit's transaction
// puts them, so the test also runs on dynalite; minidyn rounds every
// number of an item it updates, which is minidyn's bug, not the decoder's.
func TestNumbersReadBackExactly(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	put := func(item map[string]types.AttributeValue) {
		t.Helper()
		if _, err := f.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.Table), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	order := &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
		"id": numAttr(above2p53), "lines": &types.AttributeValueMemberL{Value: []types.AttributeValue{numAttr(above2p53), numAttr("12.5")}},
	}}
	put(map[string]types.AttributeValue{
		"pk": strAttr("PJ#orders/order#O-1"), "sk": strAttr("PJ"), "item": strAttr("projection"),
		"name": strAttr("orders/order"), "subject": strAttr("O-1"), "version": numAttr(above2p53), "fingerprint": strAttr("f"),
		"terminal": &types.AttributeValueMemberBOOL{Value: false}, "updated_at": numAttr("1"), "last_event": strAttr("orders/m1"),
		"state": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"total": numAttr(above2p53), "order": order}},
	})
	put(map[string]types.AttributeValue{
		"pk": strAttr("OP#op-1"), "sk": strAttr("OP"), "item": strAttr("intent"), "operation_id": strAttr("op-1"), "kind": strAttr("refund"),
		"subject": strAttr("O-1"), "status": strAttr(ledger.IntentPending), "causation": strAttr("orders/m1"), "created_at": numAttr("1"),
		"version": numAttr(above2p53), "version_s": strAttr(above2p53),
		"payload": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"total": numAttr(above2p53), "order": order}},
	})
	put(map[string]types.AttributeValue{
		"pk": strAttr("EV#orders#m1"), "sk": strAttr("EV"), "source": strAttr("orders"), "event_id": strAttr("m1"), "event_type": strAttr("order.updated"),
		"status": strAttr(string(ledger.StatusProcessed)), "received_at": numAttr("1"),
		"result": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"Outcome": strAttr("applied"), "Projection": strAttr("orders/order"), "Subject": strAttr("O-1"), "Version": numAttr(above2p53),
		}},
	})
	const wantState = `{"order":{"id":1152921511791461867,"lines":[1152921511791461867,12.5]},"total":1152921511791461867}`

	p, err := f.L.GetProjection(ctx, "orders/order", "O-1")
	if err != nil {
		t.Fatal(err)
	}
	requireJSON(t, "GetProjection state", p.State, wantState)
	if p.Version != 1152921511791461867 {
		t.Fatalf("GetProjection version %d", p.Version)
	}
	in, err := f.L.GetIntentState(ctx, "op-1")
	if err != nil {
		t.Fatal(err)
	}
	requireJSON(t, "GetIntentState payload", in.Payload, wantState)
	ev, err := f.L.Get(ctx, "orders", "m1")
	if err != nil || ev.Result == nil || ev.Result.Version != 1152921511791461867 {
		t.Fatalf("Get result %+v %v", ev.Result, err)
	}
	var body map[string]json.RawMessage
	if b, err := json.Marshal(ev.Result); err != nil || json.Unmarshal(b, &body) != nil || string(body["version"]) != above2p53 {
		t.Fatalf("the result renders version %s (%v)", body["version"], err)
	}

	snap, err := ledger.TakeSnapshot(ctx, f.DB, f.Table)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Projections) != 1 || len(snap.Intents) != 1 || len(snap.Events) != 1 {
		t.Fatalf("snapshot: %d projections, %d intents, %d events", len(snap.Projections), len(snap.Intents), len(snap.Events))
	}
	requireJSON(t, "snapshot projection state", snap.Projections[0].State, wantState)
	requireJSON(t, "snapshot intent payload", snap.Intents[0].Payload, wantState)
	if snap.Events[0].Result.Version != 1152921511791461867 {
		t.Fatalf("snapshot result version %d", snap.Events[0].Result.Version)
	}
}

// The same through Commit, whose transaction puts the projection and the
// intent: what a projection computed is what every reader gets back.
func TestCommittedNumbersReadBackExactly(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	c := claimedEvent(t, f, "evt_exact")
	const big = int64(1152921511791461867)
	state := map[string]any{"total_minor": big, "lines": []any{map[string]any{"qty": big}}, "rate": 0.1}
	w := &ledger.ProjectionWrite{Name: "orders/order", Subject: "O-1", Version: 3, Fingerprint: "f3", State: state}
	in := ledger.Intent{OperationID: "op-x", Kind: "refund", Subject: "O-1", Payload: map[string]any{"state": state}}
	if _, err := f.L.Commit(ctx, c, w, []ledger.Intent{in}); err != nil {
		skipWithoutTransactions(t, err)
		t.Fatal(err)
	}
	const wantState = `{"lines":[{"qty":1152921511791461867}],"rate":0.1,"total_minor":1152921511791461867}`
	p, err := f.L.GetProjection(ctx, "orders/order", "O-1")
	if err != nil {
		t.Fatal(err)
	}
	requireJSON(t, "GetProjection state", p.State, wantState)
	snap, err := ledger.TakeSnapshot(ctx, f.DB, f.Table)
	if err != nil || len(snap.Projections) != 1 || len(snap.Intents) != 1 {
		t.Fatalf("snapshot %+v %v", snap, err)
	}
	requireJSON(t, "snapshot projection state", snap.Projections[0].State, wantState)
	requireJSON(t, "snapshot intent payload", snap.Intents[0].Payload, `{"state":`+wantState+`}`)
}
