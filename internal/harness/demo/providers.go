package demo

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// ProviderSecrets are the (fake) secrets of the local stack's other sources,
// keyed by source name. Sources without a secret here are skipped.
type ProviderSecrets map[string]string

// otherDelivery is one signed request to a non-Stripe source.
type otherDelivery struct {
	source  string
	events  []string // the event ids this delivery carries
	body    []byte
	headers func(secret string, now time.Time) map[string]string
	// means is what each of its events says about its subject, in the
	// sender's terms (one per event, in events' order).
	means []meant
}

// meant is what one event means for its subject, as its sender wrote it:
// the business state it carries and its revision. The demo's expectation
// for a subject is the meaning of its newest revision (see expectations),
// derived from what was sent, never from the ledger.
type meant struct {
	event      string
	kind       string // what the subject is, for people: "order", …
	projection string // the projection that holds it; "" when none does (the event is recorded and ignored)
	subject    string
	// version is the subject's revision the event carries; 0 when the
	// sender does not know it (a Quiltt event without "at" is versioned by
	// its receipt time).
	version int64
	state   map[string]string // the business fields the projection must hold
	// intents are the effect kinds this state calls for. None of the
	// story's earlier states calls for any, so the final state's are all a
	// subject should get.
	intents []string
}

// otherStory: for every other provider, a few deliveries with duplicates (a
// redelivery under a new delivery id, a partly duplicate Quiltt batch) and
// one forged request. Each event must end PROCESSED exactly once (the O-42
// cancellation at revision 12 wins over the older revisions and creates its
// refund and notification intents once).
func otherStory(run string) []otherDelivery {
	var out []otherDelivery
	// Standard Webhooks: the order O-42 (builtin.Orders), three revisions out of order, once with svix-* headers.
	for _, rev := range []struct {
		id     string
		rev    int
		status string
		svix   bool
	}{{"msg_o42_12_" + run, 12, "cancelled", false}, {"msg_o42_10_" + run, 10, "created", false}, {"msg_o42_11_" + run, 11, "confirmed", true}, {"msg_o42_12_" + run, 12, "cancelled", true}} {
		body := fmt.Appendf(nil, `{"type":"order.updated","timestamp":"2026-11-30T12:00:%02dZ","data":{"id":"O-42-%s","revision":%d,"status":%q}}`, rev.rev, run, rev.rev, rev.status)
		m := meant{event: rev.id, kind: "order", projection: "order", subject: "O-42-" + run, version: int64(rev.rev), state: map[string]string{"status": rev.status}}
		if rev.status == "cancelled" {
			m.intents = []string{"notify_cancellation", "refund"} // a cancellation refunds and notifies
		}
		out = append(out, orderDelivery(rev.id, body, rev.svix, m))
	}
	// Shopify: one orders/updated event delivered twice under two webhook ids.
	const shopUpdatedAt = "2026-11-30T12:00:00-05:00" // Shopify's version of the order: updated_at
	shopOrder := "820982911946154508" + digits(run)
	shopBody := fmt.Appendf(nil, `{"id":%s,"admin_graphql_api_id":"gid://shopify/Order/82098291194615%s","updated_at":%q,"financial_status":"paid","total_price":"199.00"}`, shopOrder, digits(run), shopUpdatedAt)
	updated, _ := time.Parse(time.RFC3339, shopUpdatedAt)
	shopMeant := meant{event: "shop_evt_" + run, kind: "shopify order", projection: "shopify_order", subject: shopOrder, version: updated.UnixMilli(),
		state: map[string]string{"financial_status": "paid", "total_price": "199.00", "cancelled_at": ""}}
	for _, wid := range []string{"wh-a-" + run, "wh-b-" + run} {
		out = append(out, otherDelivery{source: "shopify", events: []string{"shop_evt_" + run}, body: shopBody, means: []meant{shopMeant}, headers: func(secret string, now time.Time) map[string]string {
			return map[string]string{"x-shopify-hmac-sha256": b64HMAC(secret, shopBody), "x-shopify-event-id": "shop_evt_" + run, "x-shopify-webhook-id": wid,
				"x-shopify-topic": "orders/updated", "x-shopify-shop-domain": "demo-shop.myshopify.com", "x-shopify-triggered-at": now.UTC().Format(time.RFC3339), "content-type": "application/json"}
		}})
	}
	// GitHub: a push and its manual redelivery (same X-GitHub-Delivery).
	ghBody := fmt.Appendf(nil, `{"ref":"refs/heads/main","before":"0000000","after":"%s","repository":{"full_name":"acme/webhooks"},"pusher":{"name":"octocat"}}`, run)
	// No projection handles a push: it is recorded and processed as ignored.
	ghMeant := meant{event: "gh-delivery-" + run, kind: "github push", subject: "acme/webhooks refs/heads/main@" + run}
	for range 2 {
		out = append(out, otherDelivery{source: "github", events: []string{"gh-delivery-" + run}, body: ghBody, means: []meant{ghMeant}, headers: func(secret string, _ time.Time) map[string]string {
			m := hmac.New(sha256.New, []byte(secret))
			m.Write(ghBody)
			return map[string]string{"x-hub-signature-256": "sha256=" + hex.EncodeToString(m.Sum(nil)), "x-github-delivery": "gh-delivery-" + run, "x-github-event": "push", "content-type": "application/json"}
		}})
	}
	// Quiltt: two events, then a partly duplicate delivery (one old, one new).
	q := func(ids ...string) []byte {
		var b bytes.Buffer
		b.WriteString(`{"eventTypes":["connection.synced.successful"],"events":[`)
		for i, id := range ids {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"id":%q,"type":"connection.synced.successful","record":{"id":"conn_%s","profileId":"p_demo"}}`, id, id)
		}
		b.WriteString(`]}`)
		return b.Bytes()
	}
	for _, ids := range [][]string{{"qevt_1_" + run, "qevt_2_" + run}, {"qevt_2_" + run, "qevt_3_" + run}} {
		body := q(ids...)
		var ms []meant
		for _, id := range ids {
			ms = append(ms, meant{event: id, kind: "quiltt connection", projection: "quiltt_connection", subject: "conn_" + id, state: map[string]string{"health": "healthy", "error_kind": ""}})
		}
		out = append(out, otherDelivery{source: "quiltt", events: ids, body: body, means: ms, headers: func(secret string, now time.Time) map[string]string {
			ts := strconv.FormatInt(now.Unix(), 10)
			m := hmac.New(sha256.New, []byte(secret))
			m.Write([]byte("1" + ts))
			m.Write(body)
			return map[string]string{"quiltt-signature": base64.StdEncoding.EncodeToString(m.Sum(nil)), "quiltt-timestamp": ts, "content-type": "application/json"}
		}})
	}
	return out
}

// orderDelivery is one Standard Webhooks delivery of the orders source,
// with webhook-* headers (svix-* when svix is set).
func orderDelivery(id string, body []byte, svix bool, m meant) otherDelivery {
	return otherDelivery{source: "orders", events: []string{id}, body: body, means: []meant{m}, headers: func(secret string, now time.Time) map[string]string {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			return nil
		}
		sig, _ := wh.Sign(id, now, body)
		prefix := "webhook-"
		if svix {
			prefix = "svix-"
		}
		return map[string]string{prefix + "id": id, prefix + "timestamp": strconv.FormatInt(now.Unix(), 10), prefix + "signature": sig, "content-type": "application/json"}
	}}
}

func b64HMAC(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// digits keeps the run tag numeric for Shopify's numeric ids.
func digits(run string) string {
	n, _ := strconv.ParseInt(run, 36, 64)
	return strconv.FormatInt(n%10000, 10)
}

// sendOther posts one delivery signed with secret.
func sendOther(ctx context.Context, base string, d otherDelivery, secret string) int {
	return post(ctx, base+"/webhooks/"+d.source, d.body, func(now time.Time) map[string]string { return d.headers(secret, now) })
}
