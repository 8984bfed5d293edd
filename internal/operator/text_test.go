package operator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// Raw terminal sequences, as a row written before the ledger escaped them
// holds them (or one anyone with write access to the table wrote): set the
// window title, erase the screen, move up and erase the line, a C1 CSI
// that needs no ESC, a right-to-left override, and a line break that
// would forge a line of the output.
const (
	rawType    = "orders/updated\x1b]0;pwned\x07"
	rawSubject = "gid://shopify/Order/1\u009b2J"
	rawDeliv   = "wh_1\x1b[1A\x1b[2K\nstatus        PROCESSED"
	rawShop    = "shop.example\u202eexe.tsil"
	rawMessage = "subject \x1b[31mfake\x1b[0m has no account\x7f"
	rawReason  = "looked fine\u0085\x1b]2;title\x07"
	rawEventID = "ev_\u202ettam"
	rawKey     = "\x1b[5m"
)

// storeRaw accepts an event and then writes its free-text fields raw,
// past Accept's escaping, as an old row or a direct table write has them.
func (f *fixture) storeRaw(source, id string) {
	f.t.Helper()
	ctx := context.Background()
	// The key is rawKey once decoded; the note holds a raw C1 CSI, which
	// JSON allows in a string.
	payload := `{"id":1,"\u001b[5m":"blink","note":"` + "\u009b" + `2J"}`
	if _, err := f.L.Accept(ctx, ledger.Delivery{Source: source, EventID: id, EventType: "orders/updated", DeliveryID: "wh_1", Payload: []byte(payload)}); err != nil {
		f.t.Fatal(err)
	}
	if err := f.L.Quarantine(ctx, f.claim(source, id), "unknown_subject", "placeholder"); err != nil {
		f.t.Fatal(err)
	}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	audit := fmt.Sprintf("%d\tQUARANTINED\tQUARANTINED\tnote\tmallory\x1b[8m\t%s", t0.UnixMilli(), rawReason)
	_, err := f.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String("ledger"),
		Key:       map[string]types.AttributeValue{"pk": s("EV#" + source + "#" + id), "sk": s("EV")},
		UpdateExpression: aws.String("SET event_type = :t, subject = :s, version_hint = :v, first_delivery_id = :d, dh0 = :h, attrs = :a, " +
			"error_code = :c, error_message = :m, audit = list_append(audit, :au)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":t": s(rawType), ":s": s(rawSubject), ":v": s("7\u2028"), ":d": s(rawDeliv),
			":h": s(fmt.Sprintf("%d %s", t0.UnixMilli()+1, rawDeliv)),
			":a": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"shop_domain": s(rawShop), "topic\x1b[2J": s(rawType)}},
			":c": s("unknown\x1b[Asubject"), ":m": s(rawMessage),
			":au": &types.AttributeValueMemberL{Value: []types.AttributeValue{s(audit)}},
		},
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

// terminalControls lists what in out could act on a terminal: a byte
// below 0x20 other than a line break or a tab, DEL, a C1 control, a
// bidirectional formatting character, a line separator, or bytes that are
// not UTF-8.
func terminalControls(out string) []string {
	var bad []string
	if !utf8.ValidString(out) {
		bad = append(bad, "bytes that are not UTF-8")
	}
	for _, r := range out {
		switch {
		case r == '\n' || r == '\t':
		case r < 0x20, r >= 0x7f && r <= 0x9f, r == 0x061c, r == 0x200e, r == 0x200f,
			r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x2028, r == 0x2029:
			bad = append(bad, fmt.Sprintf("U+%04X", r))
		}
	}
	return bad
}

// Whatever a row holds, the text webhookctl prints has no character that
// could act on the operator's terminal, and no line a value forged; --json
// is valid JSON that decodes to the exact stored values.
func TestTheCLINeverPrintsControlCharacters(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.storeRaw("shopify", rawEventID)
	for _, args := range [][]string{
		{"events", "show", "shopify", rawEventID},
		{"events", "show", "shopify", rawEventID, "--payload"},
		{"events", "list"},
		{"events", "list", "--status", "QUARANTINED", "--scan"},
		{"stats"},
		{"replay", "--status", "QUARANTINED", "--reason", "check", "--dry-run"},
	} {
		out, errOut, code := f.run(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
		if bad := terminalControls(out + errOut); len(bad) > 0 {
			t.Errorf("webhookctl %s printed %v:\n%q", strings.Join(args, " "), bad, out)
		}
		if len(args) > 1 && args[1] == "show" && strings.Count(out, "\nstatus ") != 1 {
			t.Errorf("a delivery id forged a line of events show:\n%s", out)
		}
	}
	show := f.mustRun("events", "show", "shopify", rawEventID)
	for _, want := range []string{
		`event         shopify/ev_\u202ettam`,
		`type          orders/updated\x1b]0;pwned\x07`,
		`subject       gid://shopify/Order/1\u009b2J`,
		`first wh_1\x1b[1A\x1b[2K\nstatus        PROCESSED, last`,
		`attributes    shop_domain=shop.example\u202eexe.tsil topic\x1b[2J=orders/updated\x1b]0;pwned\x07`,
		`error         unknown\x1b[Asubject: subject \x1b[31mfake\x1b[0m has no account\x7f`,
		`keys \x1b[5m, id, note`,
		`mallory\x1b[8m`,
		`looked fine\u0085\x1b]2;title\x07`,
	} {
		if !strings.Contains(show, want) {
			t.Errorf("events show lacks %s:\n%s", want, show)
		}
	}

	// --json: the exact stored values.
	out := f.mustRun("events", "show", "shopify", rawEventID, "--json")
	if bad := terminalControls(out); len(bad) > 0 || !json.Valid([]byte(out)) {
		t.Fatalf("events show --json printed %v (valid JSON: %v):\n%s", bad, json.Valid([]byte(out)), out)
	}
	var d struct {
		EventID    string            `json:"event_id"`
		Type       string            `json:"type"`
		Subject    string            `json:"subject"`
		Version    string            `json:"version_hint"`
		Attributes map[string]string `json:"attributes"`
		ErrorCode  string            `json:"error_code"`
		ErrorMsg   string            `json:"error_message"`
		First      string            `json:"first_delivery_id"`
		Recent     []struct {
			ID string `json:"delivery_id"`
		} `json:"recent_deliveries"`
		Payload struct {
			Keys []string `json:"keys"`
		} `json:"payload"`
		Audit []struct {
			Actor  string `json:"actor"`
			Reason string `json:"reason"`
		} `json:"audit"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	last := d.Audit[len(d.Audit)-1]
	if d.EventID != rawEventID || d.Type != rawType || d.Subject != rawSubject || d.Version != "7\u2028" || d.First != rawDeliv ||
		d.Attributes["shop_domain"] != rawShop || d.Attributes["topic\x1b[2J"] != rawType || d.ErrorCode != "unknown\x1b[Asubject" ||
		d.ErrorMsg != rawMessage || len(d.Recent) == 0 || d.Recent[0].ID != rawDeliv || d.Payload.Keys[0] != rawKey ||
		last.Actor != "mallory\x1b[8m" || last.Reason != rawReason {
		t.Fatalf("--json does not give the stored values: %+v", d)
	}
	out = f.mustRun("events", "list", "--json")
	var l struct {
		Events []struct {
			EventID string `json:"event_id"`
			Type    string `json:"type"`
		} `json:"events"`
	}
	if bad := terminalControls(out); len(bad) > 0 {
		t.Fatalf("events list --json printed %v:\n%s", bad, out)
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil || len(l.Events) != 1 || l.Events[0].EventID != rawEventID || l.Events[0].Type != rawType {
		t.Fatalf("events list --json: %v %+v", err, l)
	}
}
