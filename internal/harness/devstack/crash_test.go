package devstack

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
)

// crashStack is a Stack with only what the crash hook uses: a ledger table
// in minidyn and the logs.
func crashStack(t *testing.T) (*Stack, *ledger.Ledger, *strings.Builder) {
	t.Helper()
	dyn := localaws.NewDynamo()
	t.Cleanup(dyn.Close)
	var logs strings.Builder
	s := &Stack{cfg: Config{Table: "crash-test"}, logs: NewLogs(&logs), DB: dyn.Client()}
	s.cfg.defaults()
	if err := ledger.CreateTable(context.Background(), s.DB, s.cfg.Table); err != nil {
		t.Fatal(err)
	}
	l, err := ledger.New(s.DB, ledger.Options{Table: s.cfg.Table})
	if err != nil {
		t.Fatal(err)
	}
	return s, l, &logs
}

func pointers(ids ...string) []sqstypes.Message {
	var out []sqstypes.Message
	for _, id := range ids {
		out = append(out, sqstypes.Message{Body: aws.String(queue.Pointer{Source: "stripe", EventID: id}.Encode())})
	}
	return out
}

// TestCrashWaitsForClaimedWork: a requested crash is taken by the next
// batch, passes over a batch whose runtime claims nothing and is re-armed,
// and fires only once the batch's runtime has claimed one of its events.
func TestCrashWaitsForClaimedWork(t *testing.T) {
	ctx := context.Background()
	s, l, logs := crashStack(t)
	for _, id := range []string{"evt_done", "evt_new"} {
		if _, err := l.Accept(ctx, ledger.Delivery{Source: "stripe", EventID: id, EventType: "x", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	s.crashes = 1

	// A batch of duplicate pointers to an event nobody claims during it:
	// the crash passes over it and is re-armed.
	b := s.startBatch("esm-1", pointers("evt_done", "evt_done"))
	if !b.armed || s.crashes != 0 || len(b.refs) != 1 {
		t.Fatalf("the batch did not take the crash: armed %v, crashes %d, refs %v", b.armed, s.crashes, b.refs)
	}
	go b.during()(&instance{name: "processor-1"})
	time.Sleep(30 * time.Millisecond)
	b.end(ctx)
	st := s.CrashState()
	if st.Armed != 1 || len(st.Rearmed) != 1 || !strings.Contains(st.Rearmed[0].Why, "claimed none") || len(s.inflight) != 0 {
		t.Fatalf("want the crash re-armed, got %+v (in flight %d)", st, len(s.inflight))
	}

	// The next batch: its runtime claims evt_new. The hook sees the claim
	// and kills the runtime at once (here there is no process to kill, so
	// it says so and re-arms).
	b = s.startBatch("esm-2", pointers("evt_new"))
	go b.during()(&instance{name: "processor-2"})
	time.Sleep(20 * time.Millisecond)
	if _, err := l.Claim(ctx, "stripe", "evt_new", ledger.ClaimOptions{Owner: "$LATEST/deadbeef", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.done:
	case <-time.After(2 * time.Second):
		t.Fatal("the hook did not notice the claim")
	}
	b.end(ctx)
	st = s.CrashState()
	if st.Armed != 1 || len(st.Rearmed) != 2 || !strings.Contains(st.Rearmed[1].Why, "no processor-2 runtime process to kill") {
		t.Fatalf("want the claim seen and the missing runtime reported, got %+v\n%s", st, logs)
	}
}

// TestCrashIgnoresSharedEvents: an event another batch in flight points at
// may be claimed by that batch's runtime, so its claim does not fire the
// crash.
func TestCrashIgnoresSharedEvents(t *testing.T) {
	ctx := context.Background()
	s, l, _ := crashStack(t)
	if _, err := l.Accept(ctx, ledger.Delivery{Source: "stripe", EventID: "evt_both", EventType: "x", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	other := s.startBatch("esm-1", pointers("evt_both"))
	s.crashes = 1
	b := s.startBatch("esm-2", pointers("evt_both"))
	go b.during()(&instance{name: "processor-2"})
	if _, err := l.Claim(ctx, "stripe", "evt_both", ledger.ClaimOptions{Owner: "$LATEST/other", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	b.end(ctx)
	other.end(ctx)
	if st := s.CrashState(); st.Armed != 1 || len(st.Kills) != 0 || !strings.Contains(st.Rearmed[0].Why, "claimed none") {
		t.Fatalf("a claim another batch may have made fired the crash: %+v", st)
	}
}

// TestCrashAPI: GET /_dev/crash reports, DELETE disarms, and everything
// else (POST /_dev/crash, which arms) goes to the HTTP API behind it.
func TestCrashAPI(t *testing.T) {
	s := &Stack{logs: NewLogs(io.Discard)}
	s.cfg.defaults()
	s.kills = []CrashKill{{Instance: "processor-1", Owner: "$LATEST/x", Held: []string{"stripe/evt_1"}}}
	passed := ""
	h := s.crashAPI(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		passed = r.Method + " " + r.URL.Path
		s.crashes++
		w.WriteHeader(http.StatusAccepted)
	}))
	do := func(method string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, "/_dev/crash", nil))
		return rec
	}
	if rec := do(http.MethodPost); rec.Code != http.StatusAccepted || passed != "POST /_dev/crash" || s.crashes != 1 {
		t.Fatalf("POST: %d, passed %q", rec.Code, passed)
	}
	var st CrashState
	rec := do(http.MethodGet)
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Armed != 1 || len(st.Kills) != 1 || st.Timings.VisibilitySeconds != 180 || st.Timings.LeaseSeconds != 60 {
		t.Fatalf("GET: %s (%v)", rec.Body, err)
	}
	if rec := do(http.MethodDelete); rec.Code != http.StatusOK || s.crashes != 0 || !strings.Contains(rec.Body.String(), `"disarmed":1`) {
		t.Fatalf("DELETE: %d %s", rec.Code, rec.Body)
	}
}
