package pipelinetest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Stripe Connect: a platform's endpoint receives its connected accounts'
// events, signed with the platform's own secret, naming the account in
// "account" (snapshot events) or "context" (thin events, and snapshot
// events from API version 2025-04-30.basil). A valid signature says Stripe
// sent it, not that the source expects that account's events: unless the
// source's option connect_accounts lists the account (or is "*"), the
// event is kept QUARANTINED (connect_account_not_allowed) with a message
// naming the account, and creates no queue message, projection or intent.

const (
	connectMine  = "acct_1TestFAKEMine"
	connectOther = "acct_1TestFAKEOther"
)

// connectSources is the "stripe" source, with connect_accounts when opt
// is set, and with eventbridge delivery too.
func connectSources(opt string) string {
	o := ""
	if opt != "" {
		o = `,"options":{"connect_accounts":"` + opt + `"}`
	}
	return `{"sources":[{"name":"stripe","kind":"stripe","secrets":["env:STRIPE_PRIMARY"],"delivery":"https+eventbridge","event_source":"` + ebStripe + `"` + o + `}]}`
}

// ofAccount makes a snapshot event body the event of a connected account,
// as Stripe renders it: a top-level "account".
func ofAccount(body []byte, acct string) []byte {
	return bytes.Replace(body, []byte(`{`), fmt.Appendf(nil, `{"account":%q,`, acct), 1)
}

// requireConnectQuarantined asserts the row of a refused event: kept,
// QUARANTINED with the code and a message naming acct, the account on the
// row's attributes (attr), and no projection of its subject or intent.
func requireConnectQuarantined(t *testing.T, h *pt.Harness, id, subject, acct, attr string) {
	t.Helper()
	ev := h.Event(id)
	if ev.Status != ledger.StatusQuarantined || ev.ErrorCode != "connect_account_not_allowed" || !strings.Contains(ev.ErrorMessage, acct) {
		t.Fatalf("event %s: %s %s %q; want QUARANTINED connect_account_not_allowed naming %s", id, ev.Status, ev.ErrorCode, ev.ErrorMessage, acct)
	}
	if !strings.Contains(ev.Attributes[attr], acct) {
		t.Fatalf("event %s attributes %v: want %s naming %s", id, ev.Attributes, attr, acct)
	}
	if _, err := h.Ledger.GetProjection(t.Context(), projection.ScopedName("stripe", builtin.StripeSubscriptionProjection), subject); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a quarantined event's subject %s has a projection (%v)", subject, err)
	}
	for _, in := range h.Intents() {
		if in.Causation == "stripe/"+id {
			t.Fatalf("a quarantined event caused intent %+v", in)
		}
	}
}

// requireProcessed asserts an accepted event was applied: its subject's
// projection and one intent it caused.
func requireProcessed(t *testing.T, h *pt.Harness, id, subject string) {
	t.Helper()
	ev := h.Event(id)
	if ev.Status != ledger.StatusProcessed || ev.Result == nil || ev.Result.Outcome != ledger.OutcomeApplied {
		t.Fatalf("event %s: %s (%s: %s) %+v; want PROCESSED, applied", id, ev.Status, ev.ErrorCode, ev.ErrorMessage, ev.Result)
	}
	if _, err := h.Ledger.GetProjection(t.Context(), projection.ScopedName("stripe", builtin.StripeSubscriptionProjection), subject); err != nil {
		t.Fatalf("projection of %s: %v", subject, err)
	}
	n := 0
	for _, in := range h.Intents() {
		if in.Causation == "stripe/"+id {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("event %s caused %d intents, want 1", id, n)
	}
}

// Snapshot events over HTTPS, through the intake's Lambda JSON path. By
// default a connected account's event is quarantined and the platform's
// own is processed as before; a listed account's event is processed and
// another's still quarantined; "*" accepts any account.
func TestAConnectedAccountsEventIsQuarantinedUnlessTheSourceAcceptsIt(t *testing.T) {
	for _, c := range []struct {
		name, option string
		accepted     []string // accounts whose event is processed
		refused      []string // accounts whose event is quarantined
		accepts      string   // what the message says the source accepts
	}{
		{"no option", "", nil, []string{connectOther, connectMine}, "no connected account"},
		{"one account listed", connectMine, []string{connectMine}, []string{connectOther}, "connected accounts " + connectMine + " only"},
		{"two accounts listed", connectMine + ", acct_1TestFAKEThird", []string{connectMine}, []string{connectOther}, "acct_1TestFAKEThird"},
		{"any account", "*", []string{connectOther, connectMine}, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := pt.New(t, pt.Options{SourcesDoc: connectSources(c.option)})
			own := pt.SubscriptionEvent("evt_test_own", "customer.subscription.created", "sub_test_own", "active", created, "acct_42")
			deliverStripe(t, h, own, 202)
			subject := func(acct string) string { return "sub_test_of_" + acct }
			id := func(acct string) string { return "evt_test_of_" + acct }
			for _, acct := range c.refused {
				body := ofAccount(pt.SubscriptionEvent(id(acct), "customer.subscription.created", subject(acct), "active", created, "acct_42"), acct)
				queued := h.Depth(h.Queues.Queue)
				r := h.Deliver(body, h.Sign(body, pt.SecretPrimary))
				if r.Status != 202 || !strings.Contains(string(r.Body), `"QUARANTINED"`) {
					t.Fatalf("event of %s: %d %s; want 202, QUARANTINED", acct, r.Status, r.Body)
				}
				if got := h.Depth(h.Queues.Queue); got != queued {
					t.Fatalf("a refused event was enqueued: depth %d, was %d", got, queued)
				}
				// Stripe's retry, or a replay, is a duplicate of the held row.
				if r := h.Deliver(body, h.Sign(body, pt.SecretPrimary)); r.Status != 202 || h.Depth(h.Queues.Queue) != queued {
					t.Fatalf("redelivery of a refused event: %d %s, depth %d", r.Status, r.Body, h.Depth(h.Queues.Queue))
				}
			}
			for _, acct := range c.accepted {
				body := ofAccount(pt.SubscriptionEvent(id(acct), "customer.subscription.created", subject(acct), "active", created, "acct_42"), acct)
				deliverStripe(t, h, body, 202)
			}
			h.Drain(10*time.Second, time.Second, h.NewWorker("w"))

			requireProcessed(t, h, "evt_test_own", "sub_test_own")
			if a := h.Event("evt_test_own").Attributes; a["connect_account"] != "" || a["context"] != "" {
				t.Fatalf("the platform's own event names an account: %v", a)
			}
			for _, acct := range c.refused {
				requireConnectQuarantined(t, h, id(acct), subject(acct), acct, "connect_account")
				if msg := h.Event(id(acct)).ErrorMessage; !strings.Contains(msg, c.accepts) || !strings.Contains(msg, "connect_accounts") {
					t.Fatalf("message %q: want what the source accepts (%s) and the option's name", msg, c.accepts)
				}
			}
			for _, acct := range c.accepted {
				requireProcessed(t, h, id(acct), subject(acct))
				if a := h.Event(id(acct)).Attributes; a["connect_account"] != acct {
					t.Fatalf("an accepted event of %s does not name it: %v", acct, a)
				}
			}
		})
	}
}

// Thin events name the account in "context" (the Stripe-Context path of
// the account that owns the related object). A refused one is quarantined
// at the intake, so the processor never asks Stripe for the object; an
// account path is accepted only when every account on it is listed; an
// accepted one's object is fetched in its context, where it lives.
func TestAConnectedAccountsThinEventIsQuarantinedUnlessTheSourceAcceptsIt(t *testing.T) {
	inContext := func(body []byte, ctx string) []byte {
		return bytes.Replace(body, []byte(`"context":null`), fmt.Appendf(nil, `"context":%q`, ctx), 1)
	}
	thin := func(id, subject, ctx string) []byte {
		return inContext(pt.ThinEvent(id, "v1.customer.subscription.updated", "subscription", subject, "", pt.Start.Add(-30*time.Second)), ctx)
	}
	const recipient = "acct_1TestFAKERecipient"

	t.Run("no option", func(t *testing.T) {
		h := pt.New(t, pt.Options{SourcesDoc: connectSources("")})
		h.EnableStripeAPI(time.Second)
		if err := h.Stripe.PutObject("subscription", "sub_test_other", pt.SubscriptionObject("sub_test_other", "active", "acct_42")); err != nil {
			t.Fatal(err)
		}
		r := h.Deliver(thin("evt_test_thin_other", "sub_test_other", connectOther), h.Sign(thin("evt_test_thin_other", "sub_test_other", connectOther), pt.SecretPrimary))
		if r.Status != 202 || !strings.Contains(string(r.Body), `"QUARANTINED"`) {
			t.Fatalf("thin event of %s: %d %s", connectOther, r.Status, r.Body)
		}
		h.Drain(10*time.Second, time.Second, h.NewWorker("w"))
		requireConnectQuarantined(t, h, "evt_test_thin_other", "sub_test_other", connectOther, "context")
		if n := len(h.Stripe.Requests()); n != 0 {
			t.Fatalf("the Stripe API was asked %d times for a refused event's object", n)
		}
	})
	t.Run("account listed", func(t *testing.T) {
		h := pt.New(t, pt.Options{SourcesDoc: connectSources(connectMine)})
		h.EnableStripeAPI(time.Second)
		for _, s := range []string{"sub_test_mine", "sub_test_recipient"} {
			if err := h.Stripe.PutObject("subscription", s, pt.SubscriptionObject(s, "active", "acct_42")); err != nil {
				t.Fatal(err)
			}
		}
		deliverStripe(t, h, thin("evt_test_thin_mine", "sub_test_mine", connectMine), 202)
		// The listed account's own related account is another account.
		path := connectMine + "/" + recipient
		deliverStripe(t, h, thin("evt_test_thin_recipient", "sub_test_recipient", path), 202)
		h.Drain(10*time.Second, time.Second, h.NewWorker("w"))
		requireProcessed(t, h, "evt_test_thin_mine", "sub_test_mine")
		if reqs := h.Stripe.Requests(); len(reqs) != 1 || reqs[0].Path != "/v1/subscriptions/sub_test_mine" || reqs[0].Context != connectMine {
			t.Fatalf("fetches %+v: want one of sub_test_mine with Stripe-Context %s", reqs, connectMine)
		}
		requireConnectQuarantined(t, h, "evt_test_thin_recipient", "sub_test_recipient", recipient, "context")
		if got := h.Stripe.Count("/v1/subscriptions/sub_test_recipient"); got != 0 {
			t.Fatalf("the refused event's object was fetched %d times", got)
		}
	})
}

// The same rule on the EventBridge path: the Stripe event in the detail
// names the connected account (the envelope's "account" is the AWS
// account, not Stripe's).
func TestAConnectedAccountsEventThroughEventBridgeIsQuarantinedUnlessTheSourceAcceptsIt(t *testing.T) {
	_, fixture := ebFixture(t, "stripe-customer.subscription.updated.json")
	var detail map[string]any
	if err := json.Unmarshal(fixture.Detail, &detail); err != nil {
		t.Fatal(err)
	}
	id := detail["id"].(string)
	subject := detail["data"].(map[string]any)["object"].(map[string]any)["id"].(string)
	for _, c := range []struct {
		name, option string
		accepted     bool
	}{
		{"no option", "", false},
		{"account listed", connectOther, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := pt.New(t, pt.Options{SourcesDoc: connectSources(c.option)})
			ev := fixture
			ev.Detail = ofAccount(fixture.Detail, connectOther)
			raw, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			if err := bridge(t, h, raw); err != nil {
				t.Fatalf("bridge: %v", err)
			}
			if !c.accepted {
				if d := h.Depth(h.Queues.Queue); d != 0 {
					t.Fatalf("a refused event was enqueued: depth %d", d)
				}
				h.Drain(10*time.Second, time.Second, h.NewWorker("w"))
				requireConnectQuarantined(t, h, id, subject, connectOther, "connect_account")
				if via := h.Event(id).Attributes["via"]; via != "eventbridge" {
					t.Fatalf("row attributes %v", h.Event(id).Attributes)
				}
				return
			}
			if d := h.Depth(h.Queues.Queue); d != 1 {
				t.Fatalf("queue depth %d, want 1", d)
			}
			h.Drain(10*time.Second, time.Second, h.NewWorker("w"))
			if ev := h.Event(id); ev.Status != ledger.StatusProcessed || ev.Attributes["connect_account"] != connectOther {
				t.Fatalf("event %s: %s (%s) %v", id, ev.Status, ev.ErrorCode, ev.Attributes)
			}
		})
	}
}
