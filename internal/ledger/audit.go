package ledger

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// AuditEntry is one transition: when, from what to what, by whom and why.
type AuditEntry struct {
	At     time.Time `json:"at"`
	From   Status    `json:"from,omitempty"`
	To     Status    `json:"to"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Reason string    `json:"reason,omitempty"`
}

// auditItem is one stored audit entry. It is written as one string,
// "<unix ms>\t<from>\t<to>\t<action>\t<actor>[\t<reason>]" (auditText):
// every later write of an item pays again for its audit's bytes, and a map
// per entry costs about 35 bytes more (six attribute names and the map's
// overhead) than the same fields in one string. An entry stored as a map
// of the same fields decodes too: the stored format admits both.
type auditItem struct {
	At     int64  `dynamodbav:"at"`
	From   string `dynamodbav:"from,omitempty"`
	To     string `dynamodbav:"to"`
	Actor  string `dynamodbav:"actor"`
	Action string `dynamodbav:"action"`
	Reason string `dynamodbav:"reason,omitempty"`
}

// UnmarshalDynamoDBAttributeValue reads an entry in either encoding.
func (a *auditItem) UnmarshalDynamoDBAttributeValue(av types.AttributeValue) error {
	switch v := av.(type) {
	case *types.AttributeValueMemberS:
		f := strings.SplitN(v.Value, "\t", 6)
		if len(f) < 5 {
			return fmt.Errorf("audit entry %q: want at least 5 tab-separated fields, have %d", truncate(v.Value, 80), len(f))
		}
		at, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return fmt.Errorf("audit entry %q: time: %v", truncate(v.Value, 80), err)
		}
		*a = auditItem{At: at, From: f[1], To: f[2], Action: f[3], Actor: f[4]}
		if len(f) == 6 {
			a.Reason = f[5]
		}
		return nil
	case *types.AttributeValueMemberM:
		type plain auditItem // without this method
		var p plain
		if err := attributevalue.UnmarshalMap(v.Value, &p); err != nil {
			return err
		}
		*a = auditItem(p)
		return nil
	}
	return fmt.Errorf("audit entry: unexpected %T", av)
}

// auditText encodes one entry (see auditItem). A tab or line break in the
// actor or the action would shift the fields, so they become spaces; the
// reason is the last field and is kept as it is.
func auditText(at time.Time, from, to Status, actor, action, reason string) string {
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '\t' || r == '\n' || r == '\r' {
				return ' '
			}
			return r
		}, s)
	}
	s := strconv.FormatInt(ms(at), 10) + "\t" + string(from) + "\t" + string(to) + "\t" + clean(action) + "\t" + clean(truncate(actor, MaxIDLength))
	if reason != "" {
		s += "\t" + truncate(reason, MaxReasonLen)
	}
	return s
}

// auditValue encodes one audit entry as a one-element list for list_append.
func auditValue(at time.Time, from, to Status, actor, action, reason string) types.AttributeValue {
	return &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: auditText(at, from, to, actor, action, reason)}}}
}

// appliedBefore reports whether a refused write is this very request,
// applied by an earlier attempt whose answer was lost and sent again by the
// SDK (it retries a reset connection or a 500, and the write may have been
// applied before either): the item's last audit entry is the one sent (an
// auditValue: time to the millisecond, actor, transition, reason). It
// returns the item: the one the refusal returned, or read when the store
// returned none (see the package doc).
func (l *Ledger) appliedBefore(ctx context.Context, ccf *types.ConditionalCheckFailedException, key map[string]types.AttributeValue, sent types.AttributeValue) (map[string]types.AttributeValue, bool) {
	item := ccf.Item
	if len(item) == 0 {
		got, err := l.getItem(ctx, key, "refused item")
		if err != nil {
			return nil, false
		}
		item = got
	}
	return item, lastAuditIs(item, sent)
}

// lastAuditIs reports whether an item's last audit entry is the one entry
// of sent (an auditValue).
func lastAuditIs(item map[string]types.AttributeValue, sent types.AttributeValue) bool {
	have, ok := item["audit"].(*types.AttributeValueMemberL)
	want, ok2 := sent.(*types.AttributeValueMemberL)
	if !ok || !ok2 || len(have.Value) == 0 || len(want.Value) != 1 {
		return false
	}
	a, ok := have.Value[len(have.Value)-1].(*types.AttributeValueMemberS)
	b, ok2 := want.Value[0].(*types.AttributeValueMemberS)
	return ok && ok2 && a.Value == b.Value
}

// auditEntries is a stored audit trail, read.
func auditEntries(items []auditItem) []AuditEntry {
	var out []AuditEntry
	for _, a := range items {
		out = append(out, AuditEntry{At: fromMS(a.At), From: Status(a.From), To: Status(a.To), Actor: a.Actor, Action: a.Action, Reason: a.Reason})
	}
	return out
}
