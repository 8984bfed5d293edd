package downstream_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/downstream"
	"github.com/effectively-once/webhooks/internal/outbox"
)

// The fake is driven by the real HTTP effect, as the dispatcher drives it:
// the version travels in X-Subject-Version and the body's subject_version.

func serve(t *testing.T, f *downstream.Fake) *outbox.HTTPEffect {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return &outbox.HTTPEffect{Name: "entitlement.grant", URL: srv.URL, StatusURL: srv.URL + "/status"}
}

func call(key, kind, subject, version string, entitled bool) outbox.Call {
	return outbox.Call{Key: key, Kind: kind, Subject: subject, Version: version,
		Payload: map[string]any{"account_id": subject, "entitled": entitled}}
}

func versions(sv downstream.SubjectView) []string {
	out := make([]string, len(sv.History))
	for i, a := range sv.History {
		out[i] = a.Version
	}
	return out
}

func TestSubjectHistoryKeepsTheOrderOfApplies(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	down := &downstream.Fake{Now: func() time.Time { return now }}
	eff := serve(t, down)
	ctx := context.Background()
	steps := []outbox.Call{
		call("op-5", "entitlement.grant", "acct_1", "5", true),
		call("op-9", "entitlement.revoke", "acct_1", "9", false),
		call("op-5b", "entitlement.grant", "acct_1", "5", true), // an older state after a newer one: ordering broke
		call("op-x", "entitlement.grant", "acct_2", "3", true),
		{Key: "op-none", Kind: "refund", Subject: "O-42"}, // no version: not in the view
	}
	for _, c := range steps {
		if _, err := eff.Do(ctx, c); err != nil {
			t.Fatalf("%s: %v", c.Key, err)
		}
	}
	sv, ok := down.Subject("", "acct_1")
	if !ok {
		t.Fatal("acct_1 unknown")
	}
	if got := strings.Join(versions(sv), ","); got != "5,9,5" {
		t.Fatalf("history %s", got)
	}
	if sv.Last != "5" || sv.LastKind != "entitlement.grant" || sv.Regressions != 1 {
		t.Fatalf("last %s %s regressions %d", sv.Last, sv.LastKind, sv.Regressions)
	}
	if h := sv.History[1]; h.Key != "op-9" || h.Kind != "entitlement.revoke" || h.State["entitled"] != false || !h.At.Equal(now) {
		t.Fatalf("second apply %+v", h)
	}
	all := down.Subjects()
	if len(all) != 2 || all[downstream.SubjectKey{Subject: "acct_2"}].Last != "3" || all[downstream.SubjectKey{Subject: "acct_2"}].Regressions != 0 {
		t.Fatalf("subjects %+v", all)
	}
	if _, ok := down.Subject("", "O-42"); ok {
		t.Fatal("a call without a version entered the view")
	}
	// A copy: changing it does not change the fake.
	sv.History[0].Version = "999"
	if again, _ := down.Subject("", "acct_1"); again.History[0].Version != "5" {
		t.Fatal("Subject returned the fake's own slice")
	}
}

// Versions above 2^53 (a Stripe deletion's) are compared exactly: as
// float64 both would be 1152921511791461888 and the regression invisible.
func TestSubjectBigVersionsAreExact(t *testing.T) {
	down := &downstream.Fake{}
	eff := serve(t, down)
	ctx := context.Background()
	for _, c := range []outbox.Call{
		call("op-hi", "entitlement.revoke", "acct_1", "1152921511791461867", false),
		call("op-lo", "entitlement.grant", "acct_1", "1152921511791461866", true),
	} {
		if _, err := eff.Do(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	sv, _ := down.Subject("", "acct_1")
	if sv.Last != "1152921511791461866" || sv.Regressions != 1 {
		t.Fatalf("last %s regressions %d", sv.Last, sv.Regressions)
	}
	if got, err := downstream.CompareVersions("1152921511791461867", "1152921511791461866"); err != nil || got != 1 {
		t.Fatalf("compare %d %v", got, err)
	}
	if got, err := downstream.CompareVersions("10", "9"); err != nil || got != 1 {
		t.Fatalf("compare by value, not text: %d %v", got, err)
	}
}

// Only effective applies enter the view: a replay (same key) and a failed
// call do not.
func TestSubjectReplayAndFailureDoNotAppend(t *testing.T) {
	down := &downstream.Fake{Conflict: true}
	eff := serve(t, down)
	ctx := context.Background()
	down.Then(downstream.Behavior{Mode: downstream.Unavailable503})
	c := call("op-5", "entitlement.grant", "acct_1", "5", true)
	if _, err := eff.Do(ctx, c); err == nil {
		t.Fatal("the scripted 503 did not answer")
	}
	if _, ok := down.Subject("", "acct_1"); ok {
		t.Fatal("a failed call entered the view")
	}
	for range 2 {
		if _, err := eff.Do(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	sv, _ := down.Subject("", "acct_1")
	if len(sv.History) != 1 || down.Effective("op-5") != 1 {
		t.Fatalf("history %+v effective %d", sv.History, down.Effective("op-5"))
	}
}

// RefuseOlder answers an older version 409 without the key echo: the
// effect reads it as permanent, nothing is applied, the refusal is kept.
func TestRefuseOlder(t *testing.T) {
	down := &downstream.Fake{RefuseOlder: true}
	eff := serve(t, down)
	ctx := context.Background()
	if _, err := eff.Do(ctx, call("op-9", "entitlement.revoke", "acct_1", "9", false)); err != nil {
		t.Fatal(err)
	}
	_, err := eff.Do(ctx, call("op-5", "entitlement.grant", "acct_1", "5", true))
	if class, _ := outbox.Classify(err); class != outbox.ClassPermanent {
		t.Fatalf("older version: class %v err %v", class, err)
	}
	// The same version again (another kind of the same revision) is not older.
	if _, err := eff.Do(ctx, call("op-9n", "entitlement.notice", "acct_1", "9", false)); err != nil {
		t.Fatal(err)
	}
	sv, _ := down.Subject("", "acct_1")
	if strings.Join(versions(sv), ",") != "9,9" || sv.Regressions != 0 || len(sv.Refused) != 1 || sv.Refused[0].Key != "op-5" {
		t.Fatalf("view %+v", sv)
	}
	if down.Effective("op-5") != 0 {
		t.Fatal("a refused call was applied")
	}
	calls := down.Calls()
	if !calls[1].Refused || calls[1].Version != "5" {
		t.Fatalf("calls %+v", calls)
	}
	// A refused key is not remembered: asking again is refused again.
	if _, err := eff.Do(ctx, call("op-5", "entitlement.grant", "acct_1", "5", true)); err == nil {
		t.Fatal("the retry of a refused call was applied")
	}
}

// Two fakes standing for one service (grant and revoke endpoints) share a
// Book, so the order is checked across them.
func TestSharedBookAcrossEndpoints(t *testing.T) {
	book := &downstream.Book{}
	grant, revoke := &downstream.Fake{Book: book}, &downstream.Fake{Book: book, RefuseOlder: true}
	g, r := serve(t, grant), serve(t, revoke)
	ctx := context.Background()
	if _, err := g.Do(ctx, call("op-5", "entitlement.grant", "acct_1", "5", true)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Do(ctx, call("op-9", "entitlement.revoke", "acct_1", "9", false)); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(ctx, call("op-4", "entitlement.grant", "acct_1", "4", true)); err != nil {
		t.Fatal(err) // the grant endpoint does not guard
	}
	sv, _ := revoke.Subject("", "acct_1")
	if strings.Join(versions(sv), ",") != "5,9,4" || sv.Regressions != 1 || sv.LastKind != "entitlement.grant" {
		t.Fatalf("shared view %+v", sv)
	}
}

func TestSubjectStatusEndpoint(t *testing.T) {
	down := &downstream.Fake{Secret: "tok_test_FAKE"}
	srv := httptest.NewServer(down)
	defer srv.Close()
	eff := &outbox.HTTPEffect{Name: "entitlement.revoke", URL: srv.URL, Secret: "tok_test_FAKE"}
	if _, err := eff.Do(context.Background(), call("op-d", "entitlement.revoke", "acct 1&x", "1152921511791461867", false)); err != nil {
		t.Fatal(err)
	}
	get := func(query string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/status?"+query, nil)
		req.Header.Set("Authorization", "Bearer tok_test_FAKE")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		dec := json.NewDecoder(resp.Body)
		dec.UseNumber()
		_ = dec.Decode(&m)
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(m)
		return resp.StatusCode, strings.TrimSpace(b.String())
	}
	tests := []struct {
		name, query string
		code        int
		want        string
	}{
		{"known, exact", "subject=acct+1%26x", 200, `{"kind":"entitlement.revoke","known":true,"subject":"acct 1&x","version":"1152921511791461867"}`},
		{"unknown", "subject=acct_2", 200, `{"known":false,"subject":"acct_2","version":""}`},
		{"empty", "subject=", 400, `null`},
		{"key lookup still works", "key=op-d", 200, `{"applied":true,"key":"op-d","known":true}`},
		{"another scope's subject of the same id", "subject=acct+1%26x&scope=vendor", 200, `{"known":false,"scope":"vendor","subject":"acct 1&x","version":""}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(tc.query)
			if code != tc.code || body != tc.want {
				t.Fatalf("%d %s, want %d %s", code, body, tc.code, tc.want)
			}
		})
	}
}

// A version that is not a decimal integer is refused before anything is
// applied, in the header or in the body.
func TestBadSubjectVersionIsRefused(t *testing.T) {
	down := &downstream.Fake{}
	srv := httptest.NewServer(down)
	defer srv.Close()
	for _, tc := range []struct{ name, header, body string }{
		{"header float", "1.152921511791462e+18", `{"subject":"a"}`},
		{"body text", "", `{"subject":"a","subject_version":"v5"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(tc.body))
			req.Header.Set("Idempotency-Key", "op-"+tc.name)
			if tc.header != "" {
				req.Header.Set("X-Subject-Version", tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || down.Effective("op-"+tc.name) != 0 {
				t.Fatalf("HTTP %d, effective %d", resp.StatusCode, down.Effective("op-"+tc.name))
			}
		})
	}
	// A body's numeric version is read exactly too.
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"subject":"a","subject_version":1152921511791461867}`))
	req.Header.Set("Idempotency-Key", "op-num")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if sv, _ := down.Subject("", "a"); sv.Last != "1152921511791461867" {
		t.Fatalf("numeric body version %q", sv.Last)
	}
}

// A subject is the scope's: the vendor's order O-42 at revision 999 and
// the operator's O-42 are two subjects, each with its own versions, so a
// fake that refuses older versions still applies the operator's 12 and 13
// after the vendor's 999. The scope comes from X-Effect-Scope (the body's
// "scope" otherwise), and the status endpoint answers per scope.
func TestSubjectsAreKeyedByScope(t *testing.T) {
	down := &downstream.Fake{RefuseOlder: true}
	eff := serve(t, down)
	ctx := context.Background()
	for _, c := range []outbox.Call{
		{Key: "op-v999", Kind: "order.sync", Subject: "O-42", Version: "999", Scope: "vendor", Source: "vendor"},
		{Key: "op-o12", Kind: "order.sync", Subject: "O-42", Version: "12", Scope: "orders", Source: "orders"},
		{Key: "op-o13", Kind: "order.sync", Subject: "O-42", Version: "13", Scope: "orders", Source: "orders"},
	} {
		if _, err := eff.Do(ctx, c); err != nil {
			t.Fatalf("%s: %v", c.Key, err)
		}
	}
	ops, _ := down.Subject("orders", "O-42")
	ven, _ := down.Subject("vendor", "O-42")
	if strings.Join(versions(ops), ",") != "12,13" || ops.Last != "13" || len(ops.Refused) != 0 || ven.Last != "999" || ops.Regressions+ven.Regressions != 0 {
		t.Fatalf("orders' O-42 %+v, vendor's %+v", ops, ven)
	}
	if _, ok := down.Subject("", "O-42"); ok {
		t.Fatal("a scoped call entered the unscoped view")
	}
	calls := down.Calls()
	if calls[0].Scope != "vendor" || calls[0].Source != "vendor" || calls[2].Scope != "orders" {
		t.Fatalf("calls %+v", calls)
	}
	// An older version in the same scope is still refused.
	if _, err := eff.Do(ctx, outbox.Call{Key: "op-o11", Kind: "order.sync", Subject: "O-42", Version: "11", Scope: "orders"}); err == nil {
		t.Fatal("the operator's revision 11 after 13 was applied")
	}
	for scope, want := range map[string]string{"orders": "13", "vendor": "999"} {
		if v, known, err := eff.SubjectVersion(ctx, scope, "O-42"); err != nil || !known || v != want {
			t.Fatalf("%s's O-42 at the status endpoint: %q %v %v, want %s", scope, v, known, err, want)
		}
	}
}
