package outbox_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/internal/harness/downstream"
	"github.com/effectively-once/webhooks/internal/outbox"
)

// SubjectVersion asks the fake downstream's status endpoint, with the same
// bearer token as Lookup, and keeps the version exact.
func TestHTTPEffectSubjectVersion(t *testing.T) {
	ctx := context.Background()
	down := &downstream.Fake{Secret: "tok_test_FAKE"}
	srv := httptest.NewServer(down)
	defer srv.Close()
	eff := &outbox.HTTPEffect{Name: "entitlement.revoke", URL: srv.URL, StatusURL: srv.URL + "/status",
		Token: func(context.Context) (string, error) { return "tok_test_FAKE", nil }}

	if v, known, err := eff.SubjectVersion(ctx, "", "acct_1"); err != nil || known || v != "" {
		t.Fatalf("before any apply: %q %v %v", v, known, err)
	}
	if _, err := eff.Do(ctx, outbox.Call{Key: "op-d", Kind: "entitlement.revoke", Subject: "acct_1", Version: "1152921511791461867"}); err != nil {
		t.Fatal(err)
	}
	if v, known, err := eff.SubjectVersion(ctx, "", "acct_1"); err != nil || !known || v != "1152921511791461867" {
		t.Fatalf("after the apply: %q %v %v", v, known, err)
	}

	noStatus := &outbox.HTTPEffect{Name: "k", URL: srv.URL}
	if _, _, err := noStatus.SubjectVersion(ctx, "", "acct_1"); !errors.Is(err, outbox.ErrNoSubjectStatus) {
		t.Fatalf("without a status URL: %v", err)
	}
	wrongToken := &outbox.HTTPEffect{Name: "k", URL: srv.URL, StatusURL: srv.URL, Secret: "nope"}
	if _, _, err := wrongToken.SubjectVersion(ctx, "", "acct_1"); err == nil || !strings.Contains(err.Error(), "HTTP 401") || strings.Contains(err.Error(), "nope") {
		t.Fatalf("unauthorized: %v", err)
	}
}

// What a status endpoint may answer, and what SubjectVersion makes of it.
func TestHTTPEffectSubjectVersionAnswers(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		body    string
		version string
		known   bool
		errText string // "" : no error
	}{
		{"string version", 200, `{"subject":"s","version":"9","known":true}`, "9", true, ""},
		{"number kept exact", 200, `{"subject":"s","version":1152921511791461867,"known":true}`, "1152921511791461867", true, ""},
		{"not known", 200, `{"subject":"s","version":"","known":false}`, "", false, ""},
		{"404", 404, `not here`, "", false, ""},
		{"float", 200, `{"subject":"s","version":1.152921511791462e18,"known":true}`, "", false, "not a decimal integer"},
		{"text", 200, `{"subject":"s","version":"v9","known":true}`, "", false, "not a decimal integer"},
		{"known without version", 200, `{"subject":"s","known":true}`, "", false, "not a decimal integer"},
		{"other subject", 200, `{"subject":"t","version":"9","known":true}`, "", false, `about subject "t"`},
		{"same scope", 200, `{"subject":"s","scope":"sc","version":"9","known":true}`, "9", true, ""},
		{"other scope", 200, `{"subject":"s","scope":"vendor","version":"999","known":true}`, "", false, `about scope "vendor"`},
		{"bad json", 200, `{"subject":`, "", false, "bad answer"},
		{"500", 500, `oops`, "", false, "HTTP 500"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("subject") != "s" || r.URL.Query().Get("scope") != "sc" || r.Header.Get("Authorization") != "Bearer tok" {
					http.Error(w, "bad request", http.StatusBadRequest)
					return
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			eff := &outbox.HTTPEffect{Name: "k", URL: srv.URL, StatusURL: srv.URL + "/status", Secret: "tok"}
			v, known, err := eff.SubjectVersion(context.Background(), "sc", "s")
			if tc.errText == "" && err != nil || tc.errText != "" && (err == nil || !strings.Contains(err.Error(), tc.errText)) {
				t.Fatalf("err %v, want %q", err, tc.errText)
			}
			if v != tc.version || known != tc.known {
				t.Fatalf("got %q %v, want %q %v", v, known, tc.version, tc.known)
			}
		})
	}
}
