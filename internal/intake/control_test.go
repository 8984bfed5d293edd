package intake_test

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
)

// Terminal sequences a sender can put in a header nobody signs (or in a
// signed body): set the window title, erase the screen and the line, move
// the cursor up, and a C1 CSI and a right-to-left override that work
// without ESC.
const (
	setTitle  = "\x1b]0;owned\x07"
	eraseLine = "\x1b[2K\r"
	cursorUp  = "\x1b[1A"
	c1Erase   = "\u009b2J"
	rtl       = "\u202e"
)

// Each unsigned header a verifier keeps (Shopify's topic, webhook id, shop
// domain, triggered-at and API version; GitHub's event; an hmac source's
// type and delivery headers) and each text field read from a signed body,
// sent with control and bidirectional characters through the Lambda JSON
// path: the delivery is accepted (it is verified, and no unsigned header
// costs its fact), and the ledger row holds none of those characters, only
// their escapes.
func TestControlCharactersInHeadersAreNotStoredRaw(t *testing.T) {
	const hmacSecret = "hmac_test_FAKE_controls"
	h := pt.New(t, pt.Options{
		SourcesDoc: `{"sources":[
  {"name":"shopify","kind":"shopify","secrets":["env:SHOPIFY_SECRET"]},
  {"name":"github","kind":"github","secrets":["env:GITHUB_SECRET"]},
  {"name":"partner","kind":"hmac","secrets":["env:PARTNER_SECRET"],"options":{"header":"x-partner-signature",
    "id_path":"event_id","type_header":"x-partner-kind","delivery_id_header":"x-partner-delivery","subject_path":"invoice.id"}}
]}`,
		Secrets: map[string]string{"SHOPIFY_SECRET": hfSecretShopify, "GITHUB_SECRET": hfSecretGitHub, "PARTNER_SECRET": hmacSecret},
	})
	ctx := context.Background()
	for _, c := range []struct {
		source, eventID string
		body            string
		headers         func(body []byte) map[string]string
		want            map[string]string // stored attribute → its escaped value
	}{
		{
			source: "shopify", eventID: "ev_test_FAKE_controls_1",
			body: `{"id":820982911946154508,"admin_graphql_api_id":"gid://shopify/Order/1` + "\u009b" + `2J","updated_at":"2026-11-30T06:59:58-05:00` + rtl + `"}`,
			headers: func(body []byte) map[string]string {
				return map[string]string{
					"x-shopify-hmac-sha256":  base64.StdEncoding.EncodeToString(hmacSHA256(hfSecretShopify, string(body))),
					"x-shopify-event-id":     "ev_test_FAKE_controls_1",
					"x-shopify-topic":        "orders/updated" + setTitle,
					"x-shopify-webhook-id":   "wh_test_FAKE" + eraseLine,
					"x-shopify-shop-domain":  "fixture-shop.myshopify.com" + cursorUp + c1Erase,
					"x-shopify-triggered-at": "2026-11-30T11:59:58Z" + rtl,
					"x-shopify-api-version":  "2025-01\x7f\u0085",
				}
			},
			want: map[string]string{
				"event_type":         `orders/updated\x1b]0;owned\x07`,
				"first_delivery_id":  `wh_test_FAKE\x1b[2K\r`,
				"subject":            `gid://shopify/Order/1\u009b2J`,
				"version_hint":       `2026-11-30T06:59:58-05:00\u202e`,
				"attrs.shop_domain":  `fixture-shop.myshopify.com\x1b[1A\u009b2J`,
				"attrs.topic":        `orders/updated\x1b]0;owned\x07`,
				"attrs.webhook_id":   `wh_test_FAKE\x1b[2K\r`,
				"attrs.api_version":  `2025-01\x7f\u0085`,
				"attrs.triggered_at": `2026-11-30T11:59:58Z\u202e`,
			},
		},
		{
			source: "github", eventID: "72d3162e-cc78-11e3-81ab-4c93controls",
			body: `{"action":"opened\u001b[2J","repository":{"full_name":"octo-org/` + rtl + `gnp.exe"}}`,
			headers: func(body []byte) map[string]string {
				return map[string]string{
					"x-hub-signature-256": "sha256=" + hex.EncodeToString(hmacSHA256(hfSecretGitHub, string(body))),
					"x-github-delivery":   "72d3162e-cc78-11e3-81ab-4c93controls",
					"x-github-event":      "issues" + setTitle,
				}
			},
			want: map[string]string{
				"event_type": `issues\x1b]0;owned\x07.opened\x1b[2J`,
				"subject":    `octo-org/\u202egnp.exe`,
			},
		},
		{
			source: "partner", eventID: "ev_test_FAKE_partner_controls",
			body: `{"event_id":"ev_test_FAKE_partner_controls","invoice":{"id":"inv_1\u001b[1A"}}`,
			headers: func(body []byte) map[string]string {
				return map[string]string{
					"x-partner-signature": hex.EncodeToString(hmacSHA256(hmacSecret, string(body))),
					"x-partner-kind":      "invoice.paid" + c1Erase,
					"x-partner-delivery":  "dlv_1" + eraseLine + "\n\tstatus PROCESSED",
				}
			},
			want: map[string]string{
				"event_type":        `invoice.paid\u009b2J`,
				"first_delivery_id": `dlv_1\x1b[2K\r\n\tstatus PROCESSED`,
				"subject":           `inv_1\x1b[1A`,
			},
		},
	} {
		t.Run(c.source, func(t *testing.T) {
			body := []byte(c.body)
			// (DeliverTo goes through the Lambda JSON path: the event is
			// marshalled as API Gateway sends it and decoded by the
			// runtime's handler, so "\u001b" in JSON arrives as ESC.)
			if r := h.DeliverTo(c.source, body, c.headers(body)); r.Status != 202 || !strings.Contains(string(r.Body), `"status":"accepted"`) {
				t.Fatalf("status %d (%s), want 202 accepted", r.Status, r.Body)
			}
			out, err := h.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(h.Table), ConsistentRead: aws.Bool(true),
				Key: map[string]dtypes.AttributeValue{
					"pk": &dtypes.AttributeValueMemberS{Value: "EV#" + c.source + "#" + c.eventID}, "sk": &dtypes.AttributeValueMemberS{Value: "EV"},
				}})
			if err != nil || out.Item == nil {
				t.Fatalf("row: %v", err)
			}
			strs := map[string]string{}
			collectStrings("", out.Item, strs)
			for path, s := range strs {
				if strings.HasPrefix(path, "audit[") {
					// An audit entry's fields are tab-separated: the tabs
					// are its own.
					s = strings.ReplaceAll(s, "\t", " ")
				}
				if r, bad := firstControl(s); bad {
					t.Errorf("%s stored raw, with U+%04X: %q", path, r, s)
				}
			}
			for path, want := range c.want {
				if got := strs[path]; got != want {
					t.Errorf("%s = %q, want %q", path, got, want)
				}
			}
		})
	}
}

// collectStrings records every string value of an item by its path
// ("attrs.shop_domain", "audit[0]").
func collectStrings(path string, item map[string]dtypes.AttributeValue, out map[string]string) {
	var walk func(p string, v dtypes.AttributeValue)
	walk = func(p string, v dtypes.AttributeValue) {
		switch x := v.(type) {
		case *dtypes.AttributeValueMemberS:
			out[p] = x.Value
		case *dtypes.AttributeValueMemberL:
			for i, e := range x.Value {
				walk(fmt.Sprintf("%s[%d]", p, i), e)
			}
		case *dtypes.AttributeValueMemberM:
			for k, e := range x.Value {
				out[p+"."+k+" (name)"] = k
				walk(p+"."+k, e)
			}
		}
	}
	for k, v := range item {
		p := k
		if path != "" {
			p = path + "." + k
		}
		walk(p, v)
	}
}

// firstControl returns the first character of s that can act on a
// terminal or reorder text: C0, DEL, C1, a bidirectional formatting
// character or a line separator.
func firstControl(s string) (rune, bool) {
	for _, r := range s {
		switch {
		case r < 0x20, r >= 0x7f && r <= 0x9f, r == 0x061c, r == 0x200e, r == 0x200f,
			r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x2028, r == 0x2029:
			return r, true
		}
	}
	return 0, false
}
