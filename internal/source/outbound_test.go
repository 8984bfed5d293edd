package source_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/effectively-once/webhooks/internal/source"
)

// A redirect is returned, not followed: the target never sees the request
// (nor its Authorization header).
func TestNoRedirectsReturnsTheRedirect(t *testing.T) {
	var hits atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer target.Close()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/elsewhere", http.StatusTemporaryRedirect)
	}))
	defer origin.Close()
	req, _ := http.NewRequest(http.MethodPost, origin.URL, nil)
	req.Header.Set("Authorization", "Bearer tok_test_FAKE")
	resp, err := source.NoRedirects(nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var re *source.RedirectError
	if err := source.CheckRedirect(resp); !errors.As(err, &re) || re.Status != 307 || re.Location != target.URL+"/elsewhere" || hits.Load() != 0 {
		t.Fatalf("%v (target hit %d times)", err, hits.Load())
	}
	if source.NoRedirects(&http.Client{}).CheckRedirect == nil {
		t.Fatal("a given client kept following redirects")
	}
}
