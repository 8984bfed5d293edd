package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// commitScoped commits revision v of order O-42 in projection name (a
// ledger name, "<scope>/order" or unscoped "order"), delivered by source,
// with one intent op of policy pol.
func commitScoped(t *testing.T, f fixture, source, name string, v int64, op string, pol ledger.Policy) {
	t.Helper()
	ctx := context.Background()
	id := fmt.Sprintf("evt_%s_%d", source, v)
	d := ledger.Delivery{Source: source, EventID: id, EventType: "order.updated", DeliveryID: "d-" + id, Payload: []byte(`{"id":"O-42"}`)}
	if _, err := f.L.Accept(ctx, d); err != nil {
		t.Fatal(err)
	}
	c, err := f.L.Claim(ctx, source, id, ledger.ClaimOptions{Owner: "proc", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	w := &ledger.ProjectionWrite{Name: name, Subject: "O-42", Version: v, Fingerprint: fmt.Sprint("f", v), State: map[string]any{"status": "cancelled"}}
	in := ledger.Intent{OperationID: op, Kind: "order.sync", Subject: "O-42", Policy: pol, Payload: map[string]any{"v": v}}
	if _, err := f.L.Commit(ctx, c, w, []ledger.Intent{in}); err != nil {
		skipWithoutTransactions(t, err)
		t.Fatal(err)
	}
}

// An intent names whose fact it acts on: the scope that owns its
// projection and the source that delivered its event, stored on the item.
// Compensation intents, written by the same commit path, carry the
// contradicting revision's.
func TestAnIntentRecordsItsScopeAndSource(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	commitScoped(t, f, "vendor", "vendor/order", 999, "op-vendor", ledger.PolicyOnce)
	commitScoped(t, f, "orders", "order", 12, "op-unscoped", ledger.PolicyOnce)

	in, err := f.L.GetIntentState(ctx, "op-vendor")
	if err != nil || in.Scope != "vendor" || in.Source != "vendor" {
		t.Fatalf("vendor's intent: scope %q source %q (%v)", in.Scope, in.Source, err)
	}
	item := rawIntent(t, f, "op-vendor")
	if stringAttr(item, "scope") != "vendor" || stringAttr(item, "source") != "vendor" {
		t.Fatalf("the item does not store scope and source: %v", item)
	}
	// An unscoped source's intent has no scope, and says so.
	if in, err := f.L.GetIntentState(ctx, "op-unscoped"); err != nil || in.Scope != "" || in.Source != "orders" {
		t.Fatalf("unscoped intent: scope %q source %q (%v)", in.Scope, in.Source, err)
	}
	if _, ok := rawIntent(t, f, "op-unscoped")["scope"]; ok {
		t.Fatal("an unscoped intent stored a scope")
	}
}

// An intent an older version wrote, without scope and source, is still
// read: its scope is its projection's ("<scope>/<name>"), its source the
// first part of its causation; without a scoped projection it has none.
func TestAnIntentWrittenWithoutScopeIsReadWithTheProjectionsScope(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	commitScoped(t, f, "orders", "orders/order", 12, "op-old", ledger.PolicyOnce)
	commitScoped(t, f, "orders", "order", 13, "op-older", ledger.PolicyOnce)
	for _, op := range []string{"op-old", "op-older"} {
		item := rawIntent(t, f, op)
		delete(item, "scope")
		delete(item, "source")
		if _, err := f.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.Table), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	in, err := f.L.GetIntentState(ctx, "op-old")
	if err != nil || in.Scope != "orders" || in.Source != "orders" || in.Causation != "orders/evt_orders_12" {
		t.Fatalf("older intent: scope %q source %q causation %q (%v)", in.Scope, in.Source, in.Causation, err)
	}
	if in, err := f.L.GetIntentState(ctx, "op-older"); err != nil || in.Scope != "" || in.Source != "orders" {
		t.Fatalf("intent from before ownership: scope %q source %q (%v)", in.Scope, in.Source, err)
	}
	// Claiming it works as for any intent.
	if c, err := f.L.ClaimIntent(ctx, "op-old", claimOpts); err != nil || c.Intent.Scope != "orders" {
		t.Fatalf("claim: %+v %v", c.Intent, err)
	}
}

// Subject cursors belong to a scope: the vendor's O-42 at version 999
// holds its own cursor, and the operator's O-42 at 12 is neither overtaken
// nor kept waiting by it.
func TestSubjectCursorsOfTwoScopesAreApart(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	commitScoped(t, f, "vendor", "vendor/order", 999, "op-vendor-999", ledger.PolicyLatest)
	commitScoped(t, f, "orders", "orders/order", 12, "op-orders-12", ledger.PolicyLatest)
	cv, err := f.L.ClaimIntent(ctx, "op-vendor-999", claimOpts)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.L.LockSubject(ctx, cv); err != nil {
		t.Fatalf("vendor's lock: %v", err)
	}
	co, err := f.L.ClaimIntent(ctx, "op-orders-12", ledger.ClaimOptions{Owner: "dispatcher-b", Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var busy *ledger.SubjectBusyError
	if err := f.L.LockSubject(ctx, co); errors.As(err, &busy) || err != nil {
		t.Fatalf("the operator's version 12 met the vendor's 999: %v", err)
	}
	for scope, v := range map[string]int64{"vendor": 999, "orders": 12} {
		c, err := f.L.GetCursor(ctx, scope+"/order", "O-42", "order")
		if err != nil || c.Scope != scope || c.HolderVersion != v {
			t.Fatalf("%s's cursor: %+v %v", scope, c, err)
		}
	}
}

func rawIntent(t *testing.T, f fixture, op string) map[string]types.AttributeValue {
	t.Helper()
	out, err := f.DB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(f.Table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "OP#" + op}, "sk": &types.AttributeValueMemberS{Value: "OP"}}})
	if err != nil || len(out.Item) == 0 {
		t.Fatalf("read intent %s: %v", op, err)
	}
	return out.Item
}
