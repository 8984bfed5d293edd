package stripefake_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/stripefake"
)

// A test puts the object a thin event points at, scripts one rate-limited
// answer, and sees what its client asked.
func Example() {
	fake := stripefake.New("rk_test_example")
	fake.Now = func() time.Time { return time.Date(2025, 3, 31, 12, 0, 0, 0, time.UTC) }
	if err := fake.PutObject("subscription", "sub_1", []byte(`{"id":"sub_1","object":"subscription","status":"active"}`)); err != nil {
		fmt.Println(err)
		return
	}
	fake.Script("/v1/subscriptions/", stripefake.RateLimited(2*time.Second))
	srv := httptest.NewServer(fake) // or http.ListenAndServe(addr, fake) for a local stack
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/subscriptions/sub_1", nil)
		req.Header.Set("Authorization", "Bearer rk_test_example")
		res, err := srv.Client().Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		fmt.Println(res.StatusCode, res.Header.Get("Retry-After"), res.Header.Get("Date"))
		fmt.Println(string(body))
	}
	fmt.Println(fake.Count("/v1/subscriptions/sub_1"), "requests")
	// Output:
	// 429 2 Mon, 31 Mar 2025 12:00:00 GMT
	// {"error":{"type":"invalid_request_error","code":"rate_limit","message":"Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits.","doc_url":"https://stripe.com/docs/error-codes/rate-limit"}}
	// 200  Mon, 31 Mar 2025 12:00:00 GMT
	// {"id":"sub_1","object":"subscription","status":"active"}
	// 2 requests
}
