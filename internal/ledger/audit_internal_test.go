package ledger

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// An audit entry is stored as one string; entries stored as maps decode
// the same; a tab in the actor cannot shift the fields,
// one in the reason is kept; a malformed entry is an error, not a silent
// empty entry.
func TestAuditEntryEncodings(t *testing.T) {
	at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	want := auditItem{At: at.UnixMilli(), From: "PROCESSING", To: "PROCESSED", Actor: "alice@host (arn:aws:sts::000000000000:assumed-role/ops/alice)", Action: "resolve", Reason: "checked by hand\tticket 42"}
	text := auditValue(at, StatusProcessing, StatusProcessed, want.Actor, want.Action, want.Reason).(*types.AttributeValueMemberL).Value[0]
	old := &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
		"at": nv(at.UnixMilli()), "from": sv("PROCESSING"), "to": sv("PROCESSED"),
		"actor": sv(want.Actor), "action": sv("resolve"), "reason": sv(want.Reason)}}
	for name, av := range map[string]types.AttributeValue{"text": text, "map": old} {
		var got []auditItem
		if err := attributevalue.Unmarshal(&types.AttributeValueMemberL{Value: []types.AttributeValue{av}}, &got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != 1 || got[0] != want {
			t.Fatalf("%s: %+v, want %+v", name, got, want)
		}
	}
	var got auditItem
	if err := got.UnmarshalDynamoDBAttributeValue(sv(auditText(at, "", StatusReceived, "in\ttake", "accept", ""))); err != nil ||
		got != (auditItem{At: at.UnixMilli(), To: "RECEIVED", Actor: "in take", Action: "accept"}) {
		t.Fatalf("tab in the actor: %+v %v", got, err)
	}
	for _, bad := range []string{"", "1796212800000\tRECEIVED", "soon\t\tRECEIVED\taccept\tintake"} {
		if err := got.UnmarshalDynamoDBAttributeValue(sv(bad)); err == nil {
			t.Fatalf("%q decoded", bad)
		}
	}
	if n := len(text.(*types.AttributeValueMemberS).Value); n > 160 {
		t.Fatalf("entry is %d bytes", n)
	}
}
