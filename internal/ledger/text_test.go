package ledger_test

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/ledger"
)

func TestPrintableEscapesWhatCanActOnATerminal(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"orders/updated", "orders/updated"},
		{"café ☕ 注文", "café ☕ 注文"},
		{`a\x1b stays as typed`, `a\x1b stays as typed`},
		{"\x1b]0;owned\x07", `\x1b]0;owned\x07`},
		{"line\nbreak\rtab\t", `line\nbreak\rtab\t`},
		{"nul\x00 del\x7f", `nul\x00 del\x7f`},
		{"csi\u009b2J nel\u0085", `csi\u009b2J nel\u0085`},
		{"abc\u202edcba\u202c", `abc\u202edcba\u202c`},
		{"\u2066iso\u2069 \u200eltr\u200f \u061c", `\u2066iso\u2069 \u200eltr\u200f \u061c`},
		{"ls\u2028ps\u2029", `ls\u2028ps\u2029`},
		{"bad\xffutf8\xc2", `bad\xffutf8\xc2`},
	} {
		got := ledger.Printable(c.in)
		if got != c.want {
			t.Errorf("Printable(%q) = %q, want %q", c.in, got, c.want)
		}
		if again := ledger.Printable(got); again != got {
			t.Errorf("Printable is not idempotent on %q: %q", got, again)
		}
		if !clean(got) {
			t.Errorf("Printable(%q) = %q still holds a control or bidirectional character", c.in, got)
		}
	}
}

// clean: valid UTF-8 without C0, DEL, C1, bidirectional formatting
// characters or line separators.
func clean(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		switch {
		case r < 0x20, r >= 0x7f && r <= 0x9f, r == 0x061c, r == 0x200e, r == 0x200f,
			r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x2028, r == 0x2029:
			return false
		}
	}
	return true
}

// The free-text fields of a verified delivery come from the sender, most
// from headers nobody signed: Accept stores them escaped, within their
// bounds, and never refuses the delivery for them.
func TestAcceptStoresTheSendersTextEscaped(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	d := ledger.Delivery{
		Source: "shopify", EventID: "ev_1", Payload: []byte(`{"id":1}`),
		EventType:   "orders/updated\x1b]0;owned\x07",
		DeliveryID:  "wh_1\x1b[2K\r",
		Subject:     "gid://shopify/Order/1\u009b2J",
		VersionHint: "2026-11-30\u202e",
		Attributes: map[string]string{
			"shop_domain":  "shop.example\x1b[1A",
			"k\x1bey":      "v",
			"triggered_at": strings.Repeat("\x1b", 300),
		},
	}
	res, err := f.L.Accept(ctx, d)
	if err != nil || res.Duplicate {
		t.Fatalf("accept: %v %+v", err, res)
	}
	out, err := f.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(f.Table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "EV#shopify#ev_1"}, "sk": &types.AttributeValueMemberS{Value: "EV"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range itemStrings(out.Item) {
		// (An audit entry is tab-separated fields: the tabs are its own.)
		for _, field := range strings.Split(s, "\t") {
			if !clean(field) {
				t.Errorf("stored raw: %q", s)
			}
		}
	}
	ev, err := f.L.Get(ctx, "shopify", "ev_1")
	if err != nil {
		t.Fatal(err)
	}
	if ev.EventType != `orders/updated\x1b]0;owned\x07` || ev.FirstDeliveryID != `wh_1\x1b[2K\r` || ev.Subject != `gid://shopify/Order/1\u009b2J` ||
		ev.VersionHint != `2026-11-30\u202e` || ev.Attributes["shop_domain"] != `shop.example\x1b[1A` || ev.Attributes[`k\x1bey`] != "v" {
		t.Fatalf("row %+v", ev)
	}
	// Cut within the bound on an escape's edge: 256 bytes of 64 escapes.
	if v := ev.Attributes["triggered_at"]; v != strings.Repeat(`\x1b`, 64) {
		t.Fatalf("long attribute %q (%d bytes)", v, len(v))
	}
	if got := ev.Audit[0].Reason; got != `delivery wh_1\x1b[2K\r` {
		t.Fatalf("audit reason %q", got)
	}
	// The answer Accept gave is the row it stored.
	if res.Event.EventType != ev.EventType || res.Event.FirstDeliveryID != ev.FirstDeliveryID || res.Event.VersionHint != ev.VersionHint {
		t.Fatalf("accepted %+v, stored %+v", res.Event, ev)
	}
	// A redelivery under the same (escaped) delivery id is a duplicate in
	// the same history slot.
	res, err = f.L.Accept(ctx, d)
	if err != nil || !res.Duplicate || res.Event.DeliveryCount != 2 || len(res.Event.RecentDeliveries) != 1 {
		t.Fatalf("duplicate: %v %+v", err, res)
	}
}

// itemStrings lists every string value of an item, nested ones included.
func itemStrings(item map[string]types.AttributeValue) []string {
	var out []string
	var walk func(v types.AttributeValue)
	walk = func(v types.AttributeValue) {
		switch x := v.(type) {
		case *types.AttributeValueMemberS:
			out = append(out, x.Value)
		case *types.AttributeValueMemberSS:
			out = append(out, x.Value...)
		case *types.AttributeValueMemberL:
			for _, e := range x.Value {
				walk(e)
			}
		case *types.AttributeValueMemberM:
			for k, e := range x.Value {
				out = append(out, k)
				walk(e)
			}
		}
	}
	for k, v := range item {
		out = append(out, k)
		walk(v)
	}
	return out
}
