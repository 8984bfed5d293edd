package builtin_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
)

func thinBody(id, typ, objType, objID, snapshot string) []byte {
	twin := ""
	if snapshot != "" {
		twin = fmt.Sprintf(`,"snapshot_event":%q`, snapshot)
	}
	return fmt.Appendf(nil, `{"id":%q,"object":"v2.core.event","type":%q,"livemode":false,"created":"2026-10-01T12:00:00.000Z",`+
		`"related_object":{"id":%q,"type":%q,"url":"/v1/%ss/%s"}%s}`, id, typ, objID, objType, objType, objID, twin)
}

func TestParseStripeThin(t *testing.T) {
	th, ok, err := builtin.ParseStripeThin(thinBody("evt_thin_1", "v1.customer.subscription.updated", "subscription", "sub_1", "evt_snap_1"))
	if !ok || err != nil {
		t.Fatalf("ok %v err %v", ok, err)
	}
	want := builtin.StripeThin{EventID: "evt_thin_1", Type: "v1.customer.subscription.updated", BaseType: "customer.subscription.updated",
		ObjectType: "subscription", ObjectID: "sub_1", SnapshotEvent: "evt_snap_1"}
	want.Created = time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	if th != want || th.ExpectedObjectType() != "subscription" {
		t.Fatalf("thin %+v", th)
	}
	// A connected account's thin event names the context its object is
	// fetched in.
	inContext := []byte(`{"id":"evt_t","object":"v2.core.event","type":"v1.invoice.paid","context":"acct_1A/acct_1R","related_object":{"id":"in_1","type":"invoice"}}`)
	if th, ok, err := builtin.ParseStripeThin(inContext); !ok || err != nil || th.Context != "acct_1A/acct_1R" {
		t.Fatalf("thin event in a context: %+v %v %v", th, ok, err)
	}
	// A snapshot event is not thin, whatever it contains.
	if _, ok, err := builtin.ParseStripeThin(event("customer.subscription.updated", "active", `"cus_1"`, `{"account_id":"a"}`, 1000).Payload); ok || err != nil {
		t.Fatalf("snapshot read as thin: %v %v", ok, err)
	}
	for name, body := range map[string][]byte{
		"no related object": []byte(`{"id":"evt_t","object":"v2.core.event","type":"v1.invoice.paid"}`),
		"not a v1 type":     thinBody("evt_t", "v2.core.account.updated", "account", "acct_1", ""),
		"control chars":     []byte(`{"id":"evt_t","object":"v2.core.event","type":"v1.invoice.paid","related_object":{"id":"in_\u0001","type":"invoice"}}`),
		"bad related":       []byte(`{"id":"evt_t","object":"v2.core.event","type":"v1.invoice.paid","related_object":"in_1"}`),
	} {
		_, ok, err := builtin.ParseStripeThin(body)
		if code, perm := projection.AsPermanent(err); !ok || !perm || code != "malformed" {
			t.Errorf("%s: ok %v err %v", name, ok, err)
		}
	}
}

// The fetched object's current state decides the event type, not the thin
// event's own type: the object may have moved on since.
func TestStripeFetchedTypeFollowsCurrentState(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	cases := []struct {
		thinType, objType, obj, want string
	}{
		{"v1.customer.subscription.updated", "subscription", `{"id":"x","object":"subscription","status":"active"}`, "customer.subscription.updated"},
		{"v1.customer.subscription.created", "subscription", `{"id":"x","object":"subscription","status":"canceled"}`, "customer.subscription.deleted"},
		{"v1.invoice.payment_failed", "invoice", `{"id":"x","object":"invoice","status":"open"}`, "invoice.payment_failed"},
		{"v1.invoice.payment_failed", "invoice", `{"id":"x","object":"invoice","status":"paid"}`, "invoice.paid"},
		{"v1.invoice.paid", "invoice", `{"id":"x","object":"invoice","status":"void"}`, "invoice.voided"},
		{"v1.invoice.paid", "invoice", `{"id":"x","object":"invoice","status":"open"}`, ""},
		{"v1.payment_intent.processing", "payment_intent", `{"id":"x","object":"payment_intent","status":"succeeded"}`, "payment_intent.succeeded"},
		{"v1.payment_intent.payment_failed", "payment_intent", `{"id":"x","object":"payment_intent","status":"requires_payment_method","last_payment_error":{"code":"card_declined"}}`, "payment_intent.payment_failed"},
		{"v1.payment_intent.payment_failed", "payment_intent", `{"id":"x","object":"payment_intent","status":"requires_payment_method","last_payment_error":null}`, ""},
		{"v1.payment_intent.succeeded", "payment_intent", `{"id":"x","object":"payment_intent","status":"canceled"}`, "payment_intent.canceled"},
		{"v1.payment_intent.processing", "payment_intent", `{"id":"x","object":"payment_intent","status":"requires_action"}`, ""},
	}
	for _, c := range cases {
		t.Run(c.thinType+"/"+c.obj, func(t *testing.T) {
			th, _, err := builtin.ParseStripeThin(thinBody("evt_t", c.thinType, c.objType, "x", ""))
			if err != nil {
				t.Fatal(err)
			}
			typ, payload, err := builtin.StripeFetched(th, []byte(c.obj), at)
			if err != nil || typ != c.want {
				t.Fatalf("type %q err %v, want %q", typ, err, c.want)
			}
			if typ == "" {
				return
			}
			var ev struct {
				Type    string `json:"type"`
				Created int64  `json:"created"`
				Data    struct {
					Object json.RawMessage `json:"object"`
				} `json:"data"`
			}
			if err := json.Unmarshal(payload, &ev); err != nil || ev.Type != typ || ev.Created != at.Unix() || string(ev.Data.Object) != c.obj {
				t.Fatalf("payload %s (%v)", payload, err)
			}
		})
	}
}

// A fetched object must be the one the event names: a Stripe answer for
// another object (a proxy's mix-up, a wrong id mapping) is never projected.
func TestStripeFetchedRefusesAnotherObject(t *testing.T) {
	th, _, _ := builtin.ParseStripeThin(thinBody("evt_t", "v1.customer.subscription.updated", "subscription", "sub_1", ""))
	for _, obj := range []string{
		`{"id":"sub_2","object":"subscription","status":"active"}`,
		`{"id":"sub_1","object":"invoice","status":"paid"}`,
		`[1,2]`,
	} {
		if _, _, err := builtin.StripeFetched(th, []byte(obj), time.Unix(1_800_000_000, 0)); err == nil {
			t.Errorf("%s accepted", obj)
		}
	}
}

// Fetched state is truth at fetch time: projected through the same
// subscription projection, it outranks every snapshot event created
// before the fetch, and a deletion seen by a fetch is final.
func TestStripeFetchedVersionRule(t *testing.T) {
	p := builtin.NewStripeSubscriptions(builtin.StripeOptions{})
	sub := func(status string) []byte {
		return fmt.Appendf(nil, `{"id":"sub_1","object":"subscription","customer":"cus_1","status":%q,"metadata":{"account_id":"acct_1"},"items":{"data":[]}}`, status)
	}
	project := func(thinType, status string, at int64) projection.Result {
		t.Helper()
		th, _, _ := builtin.ParseStripeThin(thinBody("evt_t", thinType, "subscription", "sub_1", ""))
		typ, payload, err := builtin.StripeFetched(th, sub(status), time.Unix(at, 0))
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Project(projection.Event{Source: "stripe", Kind: "stripe", EventID: "evt_t", Type: typ, Payload: payload})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	snapshot, err := p.Project(event("customer.subscription.updated", "past_due", `"cus_1"`, `{"account_id":"acct_1"}`, 1999))
	if err != nil {
		t.Fatal(err)
	}
	fetched := project("v1.customer.subscription.created", "active", 2000)
	if fetched.Write.Version != 2000*4+2 || fetched.Write.Version <= snapshot.Write.Version || fetched.Write.State["entitled"] != true {
		t.Fatalf("fetched %+v, snapshot version %d", fetched.Write, snapshot.Write.Version)
	}
	deleted := project("v1.customer.subscription.updated", "canceled", 2001)
	if !deleted.Write.Terminal || deleted.Write.Version <= builtin.DeletedVersionBase || deleted.Write.State["entitled"] != false ||
		deleted.Intents[0].Kind != "entitlement.revoke" {
		t.Fatalf("deleted %+v %+v", deleted.Write, deleted.Intents)
	}
}
