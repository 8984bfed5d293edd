package localwarehouse_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/harness/localwarehouse"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/builtin"
)

// TestWarehouseRecordsAnOrdersRevisions runs one order through the local
// stack, revision after revision, and reads the local warehouse back with
// DuckDB: every applied revision is one record in the local S3, written by
// the real dispatcher under aws-lambda-rie, and the warehouse's current row
// is the ledger's canonical projection: same version, same state, same
// last event.
func TestWarehouseRecordsAnOrdersRevisions(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end stack test skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stack, file, log := devstack.StartForTest(t, ctx)
	bucket, prefix := stack.Warehouse()
	if stack.S3 == nil || bucket != devstack.DefaultWarehouseBucket || prefix != devstack.DefaultWarehousePrefix {
		t.Fatalf("warehouse sink not on: s3 %v, bucket %q, prefix %q", stack.S3, bucket, prefix)
	}
	// /_dev/health says where the records are.
	var health struct {
		Warehouse struct{ S3, Bucket, Prefix string }
	}
	resp, err := http.Get(stack.HTTPURL() + "/_dev/health")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&health)
	resp.Body.Close()
	if err != nil || health.Warehouse.S3 != stack.S3.URL || health.Warehouse.Bucket != bucket || health.Warehouse.Prefix != prefix {
		t.Fatalf("health %+v: %v", health, err)
	}

	l, err := ledger.New(stack.DB, ledger.Options{Table: stack.Table()})
	if err != nil {
		t.Fatal(err)
	}
	order := fmt.Sprintf("O-WH-%d", time.Now().UnixNano()%1e6)
	statuses := []string{"created", "confirmed", "shipped"}
	for i, status := range statuses {
		rev := i + 1
		id := fmt.Sprintf("msg_%s_r%d", order, rev)
		body := fmt.Appendf(nil, `{"type":"order.updated","timestamp":"2026-11-30T12:00:%02dZ","data":{"id":%q,"revision":%d,"status":%q,"customer_id":"cus_wh","currency":"eur","total_minor":%d}}`,
			rev, order, rev, status, 4200+rev)
		sendOrder(t, stack.HTTPURL(), file.Secrets["LOCAL_ORDERS_WEBHOOK_SECRET"], id, body)
		// One at a time: each revision is applied, none is stale.
		waitFor(t, ctx, 30*time.Second, "orders/"+id+" PROCESSED", log, func() bool {
			ev, err := l.Get(ctx, "orders", id)
			return err == nil && ev.Status == ledger.StatusProcessed
		})
	}

	name := "orders/" + builtin.OrderProjection
	canon, err := l.GetProjection(ctx, name, order)
	if err != nil {
		t.Fatal(err)
	}
	if canon.Version != 3 || canon.State["status"] != "shipped" {
		t.Fatalf("canonical projection %+v", canon)
	}
	// The dispatcher writes the three records; each record's intent ends
	// SUCCEEDED (the store answered it exists).
	waitFor(t, ctx, 60*time.Second, "three records in the local S3", log, func() bool {
		return len(stack.S3.Keys(bucket, prefix+"/scope=orders/")) >= 3
	})
	for v := int64(1); v <= 3; v++ {
		op := warehouse.OperationID("orders", builtin.OrderProjection, order, v)
		waitFor(t, ctx, 30*time.Second, "record intent of version "+strconv.FormatInt(v, 10)+" SUCCEEDED", log, func() bool {
			in, err := l.GetIntentState(ctx, op)
			return err == nil && in.Status == ledger.IntentStatusSucceeded
		})
	}
	var want []string
	for v := int64(1); v <= 3; v++ {
		want = append(want, warehouse.Key(prefix, "orders", builtin.OrderProjection, order, v))
	}
	if got := stack.S3.Keys(bucket, prefix+"/scope=orders/"); !reflect.DeepEqual(got, want) {
		t.Fatalf("keys %v, want %v", got, want)
	}

	// DuckDB over the bucket: the change log has the three revisions in
	// order, and the current row is the canonical projection.
	s3c := stack.S3.Client()
	changes, err := localwarehouse.ChangeLog(ctx, s3c, bucket, prefix)
	if err != nil {
		t.Fatal(err)
	}
	var versions []int64
	for _, r := range changes {
		if r.Subject == order {
			versions = append(versions, r.Version)
		}
	}
	if !reflect.DeepEqual(versions, []int64{1, 2, 3}) {
		t.Fatalf("change log versions %v", versions)
	}
	rows, err := localwarehouse.CurrentState(ctx, s3c, bucket, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("current_state has %d rows, want 1 (one order): %+v", len(rows), rows)
	}
	cur := rows[0]
	if cur.Scope != "orders" || cur.Projection != builtin.OrderProjection || cur.Subject != order || cur.Version != canon.Version ||
		cur.Source+"/"+cur.EventID != canon.LastEvent || !closeInTime(cur.AppliedAt, time.UnixMilli(canon.UpdatedAt)) {
		t.Fatalf("current row %+v, canonical %s v%d last event %s at %d", cur, canon.Name, canon.Version, canon.LastEvent, canon.UpdatedAt)
	}
	if got, want := canonicalJSON(t, cur.State), canonicalJSON(t, canon.State); got != want {
		t.Fatalf("current row's state\n%s\nwant the canonical state\n%s", got, want)
	}
}

// sendOrder posts one Standard Webhooks delivery of the orders source.
func sendOrder(t *testing.T, base, secret, id string, body []byte) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sig, err := wh.Sign(id, now, body)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/webhooks/orders", strings.NewReader(string(body)))
	req.Header.Set("content-type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /webhooks/orders %s: HTTP %d", id, resp.StatusCode)
	}
}

// waitFor polls cond until it holds, or fails the test with the stack's
// log tail after timeout.
func waitFor(t *testing.T, ctx context.Context, timeout time.Duration, what string, log *devstack.TestLog, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("no %s after %s\nstack log tail:\n%s", what, timeout, log.Tail(60))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// canonicalJSON is a state as JSON with sorted keys, its numbers as
// written: the ledger's exact numbers and DuckDB's decoded ones compare
// by their text.
func canonicalJSON(t *testing.T, state map[string]any) string {
	t.Helper()
	b, err := json.Marshal(state)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// closeInTime: a record's applied_at is the processor's clock when it built
// the commit and the projection's updated_at the ledger's when it wrote
// it, two reads of the clock around one transaction: the same instant
// within the commit's duration, not necessarily the same millisecond.
func closeInTime(a, b time.Time) bool {
	d := a.Sub(b)
	return d > -2*time.Second && d < 2*time.Second
}
