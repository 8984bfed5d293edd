package devstack_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/outbox"
)

// TestDownstreamScriptedTimeoutAfterApply drives the fake downstream the way
// the dispatcher does: a refund applied and then left hanging is uncertain
// for the caller, the status route says it was applied, a retry with the
// same key is replayed, and the effect happened once.
func TestDownstreamScriptedTimeoutAfterApply(t *testing.T) {
	cfgs, err := outbox.ParseEffects([]byte(`{"effects":[
		{"kind":"refund","url":"http://127.0.0.1:3002/refunds","status_url":"http://127.0.0.1:3002/refunds/status","secret":"env:TOKEN","timeout_seconds":2,"scopes":["orders"]},
		{"kind":"notify_cancellation","url":"http://127.0.0.1:3002/notifications","secret":"env:TOKEN","scopes":["orders"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	const token = "local_FAKE_downstream_test_token"
	d, err := devstack.NewDownstream("127.0.0.1:0", cfgs, func(ref string) string {
		if ref == "env:TOKEN" {
			return token
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	// The EFFECTS document the dispatcher gets points at the real address.
	var doc struct{ Effects []outbox.EffectConfig }
	if err := json.Unmarshal(d.Effects(), &doc); err != nil || len(doc.Effects) != 2 {
		t.Fatalf("effects %s: %v", d.Effects(), err)
	}
	refundCfg := doc.Effects[0]
	if want := "http://" + d.Addr() + "/refunds"; refundCfg.URL != want || refundCfg.StatusURL != want+"/status" {
		t.Fatalf("refund urls %q %q, want %q", refundCfg.URL, refundCfg.StatusURL, want)
	}
	if _, err := outbox.ParseEffects(d.Effects()); err != nil {
		t.Fatalf("rewritten document no longer valid: %v", err)
	}

	refund := &outbox.HTTPEffect{Name: "refund", URL: refundCfg.URL, StatusURL: refundCfg.StatusURL, Secret: token,
		Client: &http.Client{Timeout: 300 * time.Millisecond}}
	ctx := context.Background()
	call := outbox.Call{Key: "op-refund-1", Kind: "refund", Subject: "O-42"}

	if err := d.Script(devstack.Script{Kind: "refund", Then: []devstack.Behavior{{Mode: "hang_after_apply"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := refund.Do(ctx, call); !errors.Is(err, outbox.ErrUncertain) {
		t.Fatalf("hang after apply: %v, want uncertain", err)
	}
	if applied, known, err := refund.Lookup(ctx, call.Key); err != nil || !applied || !known {
		t.Fatalf("status lookup: applied=%v known=%v err=%v", applied, known, err)
	}
	res, err := refund.Do(ctx, call)
	if err != nil {
		t.Fatalf("retry with the same key: %v", err)
	}

	notify := &outbox.HTTPEffect{Name: "notify_cancellation", URL: doc.Effects[1].URL, Secret: token}
	if err := d.Script(devstack.Script{Kind: "notify_cancellation", Then: []devstack.Behavior{{Mode: "throttle_429", RetryAfterSeconds: 3}}}); err != nil {
		t.Fatal(err)
	}
	var re *outbox.RetryableError
	if _, err := notify.Do(ctx, outbox.Call{Key: "op-notify-1"}); !errors.As(err, &re) || re.RetryAfter != 3*time.Second {
		t.Fatalf("429: %v", err)
	}
	if _, err := notify.Do(ctx, outbox.Call{Key: "op-notify-1"}); err != nil {
		t.Fatal(err)
	}
	stranger := &outbox.HTTPEffect{Name: "refund", URL: refundCfg.URL, Secret: "local_FAKE_wrong"}
	if _, err := stranger.Do(ctx, outbox.Call{Key: "op-refund-2"}); !errors.Is(err, outbox.ErrPermanent) {
		t.Fatalf("wrong bearer token: %v, want a permanent refusal", err)
	}

	st := d.State("")
	if st.Keys != 2 || st.Effective != 2 || st.MaxPerKey != 1 {
		t.Fatalf("state %+v", st)
	}
	r := d.State("op-refund-1").Effects[0]
	if r.Effective["op-refund-1"] != 1 || r.NRequests != 2 || r.Requests[0].Mode != "hang_after_apply" || !r.Requests[1].Replayed || !strings.Contains(res.Detail, "op-refund-1") {
		t.Fatalf("refund %+v (detail %q)", r, res.Detail)
	}

	for _, bad := range []devstack.Script{{Kind: "teleport", Then: []devstack.Behavior{{Mode: "apply"}}}, {Kind: "refund", Then: []devstack.Behavior{{Mode: "explode"}}}, {Kind: "refund"}} {
		if err := d.Script(bad); !errors.Is(err, devstack.ErrDownstream) {
			t.Fatalf("%+v accepted: %v", bad, err)
		}
	}
}

// The fakes of one kind family share a per-subject view: the status route
// of either answers the version last applied by any of them, and
// GET /_dev/downstream's subjects shows the order, across kinds.
func TestDownstreamSubjectsPerFamily(t *testing.T) {
	cfgs, err := outbox.ParseEffects([]byte(`{"effects":[
		{"kind":"entitlement.grant","url":"http://127.0.0.1:3002/entitlements/grant","status_url":"http://127.0.0.1:3002/entitlements/status","secret":"env:TOKEN","scopes":["orders"]},
		{"kind":"entitlement.revoke","url":"http://127.0.0.1:3002/entitlements/revoke","secret":"env:TOKEN","scopes":["orders"]},
		{"kind":"refund","url":"http://127.0.0.1:3002/refunds","secret":"env:TOKEN","scopes":["orders"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	const token = "local_FAKE_downstream_test_token"
	d, err := devstack.NewDownstream("127.0.0.1:0", cfgs, func(string) string { return token })
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var doc struct{ Effects []outbox.EffectConfig }
	if err := json.Unmarshal(d.Effects(), &doc); err != nil {
		t.Fatal(err)
	}
	eff := map[string]*outbox.HTTPEffect{}
	for _, c := range doc.Effects {
		eff[c.Kind] = &outbox.HTTPEffect{Name: c.Kind, URL: c.URL, StatusURL: c.StatusURL, Secret: token}
	}
	ctx := context.Background()
	for _, c := range []outbox.Call{
		{Key: "op-5", Kind: "entitlement.grant", Subject: "acct_1", Version: "5", Payload: map[string]any{"entitled": true}},
		{Key: "op-9", Kind: "entitlement.revoke", Subject: "acct_1", Version: "1152921511791461867", Payload: map[string]any{"entitled": false}},
		{Key: "op-r", Kind: "refund", Subject: "acct_1", Version: "2"}, // another family: its own view
	} {
		if _, err := eff[c.Kind].Do(ctx, c); err != nil {
			t.Fatalf("%s: %v", c.Key, err)
		}
	}
	if v, known, err := eff["entitlement.grant"].SubjectVersion(ctx, "", "acct_1"); err != nil || !known || v != "1152921511791461867" {
		t.Fatalf("grant's status route: %q %v %v (the revoke applied last)", v, known, err)
	}
	st := d.State("")
	ent := st.Subjects["entitlement"]["acct_1"]
	if ent.Last != "1152921511791461867" || ent.LastKind != "entitlement.revoke" || len(ent.History) != 2 || ent.Regressions != 0 ||
		ent.History[0].State["entitled"] != true {
		t.Fatalf("entitlement view %+v", ent)
	}
	if r := st.Subjects["refund"]["acct_1"]; r.Last != "2" || len(r.History) != 1 {
		t.Fatalf("refund view %+v", r)
	}
	if only := d.State("op-r").Subjects; len(only) != 1 || len(only["refund"]) != 1 {
		t.Fatalf("?key=op-r subjects %+v", only)
	}
	// The JSON keeps the version exact.
	b, _ := json.Marshal(st)
	if !strings.Contains(string(b), `"last":"1152921511791461867"`) {
		t.Fatalf("json %s", b)
	}
}
