package capacity

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// The meter reads which attributes an update expression assigns and
// removes, to apply the REMOVE that minidyn ignores.
func TestUpdateTargets(t *testing.T) {
	names := map[string]string{"#status": "status", "#result": "result"}
	for _, tc := range []struct {
		expr        string
		set, remove []string
	}{
		{"SET #status = :done, processed_at = :now, #result = :res, audit = list_append(audit, :audit) REMOVE lease_owner, due_shard, due_at",
			[]string{"status", "processed_at", "result", "audit"}, []string{"lease_owner", "due_shard", "due_at"}},
		{"SET due_shard = if_not_exists(due_shard, if_not_exists(done_shard, :shard)), dh1 = :h ADD delivery_count :one",
			[]string{"due_shard", "dh1", "delivery_count"}, nil},
		{"remove a, m.b, l[0] set address = :a, additions = :b",
			[]string{"address", "additions"}, []string{"a"}},
	} {
		set, remove := updateTargets(tc.expr, names)
		if !slices.Equal(set, tc.set) || !slices.Equal(remove, tc.remove) {
			t.Errorf("%q: set %q remove %q, want %q %q", tc.expr, set, remove, tc.set, tc.remove)
		}
	}
}

// A write refused by its condition is billed as DynamoDB documents: by the
// size of the existing item, one unit when there is none; it writes no
// index.
func TestRefusedWritesAreBilled(t *testing.T) {
	ctx := context.Background()
	d := localaws.NewDynamo()
	defer d.Close()
	if err := ledger.CreateTable(ctx, d.Client(), "t"); err != nil {
		t.Fatal(err)
	}
	m := &Meter{Reader: d.Client(), Table: "t", TableKeys: []string{"pk", "sk"},
		Indexes: []Index{{Name: ledger.DueIndex, HashKey: "due_shard", RangeKey: "due_at"}}}
	db := d.Client(m.APIOption)
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	big := map[string]types.AttributeValue{"pk": s("a"), "sk": s("b"), "pad": s(strings.Repeat("x", 1500))}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"), Item: big}); err != nil {
		t.Fatal(err)
	}
	m.Reset()
	for _, key := range []string{"a", "missing"} {
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"), ConditionExpression: aws.String("attribute_exists(nope)"),
			Item: map[string]types.AttributeValue{"pk": s(key), "sk": s("b"), "due_shard": s("0"), "due_at": &types.AttributeValueMemberN{Value: "1"}}})
		if err == nil {
			t.Fatal("the condition held")
		}
	}
	got := m.Totals()
	if got.ByOp["PutItem"] != (OpTotals{Requests: 2, Refused: 2, TableUnits: 2 + 1}) || got.ConditionFailures != 2 || got.Units() != 3 {
		t.Fatalf("refused writes: %+v (%s)", got, got)
	}
}
