package outbox_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/downstream"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// A record intent is written under the key of what the ledger recorded
// for it (its scope, projection, subject and version), never where its
// payload points; an item under the record key shape that is not a
// record is never performed; a record kind outside that shape is never
// treated as a record. Each intent here is committed by the ledger as a
// revision of the vendor's own O-42 (scope "vendor", versions from 999),
// the only facts its scope owns.
func TestARecordIntentWritesOnlyUnderTheKeyTheLedgerRecorded(t *testing.T) {
	ctx := context.Background()
	l, clock, _ := scopedLedgerLater(t)
	s := localaws.NewS3("wh-bucket")
	t.Cleanup(s.Close)
	down := &downstream.Fake{Window: time.Hour, Now: clock.Now, Secret: "tok_test_FAKE_payments"}
	srv := httptest.NewServer(down)
	t.Cleanup(srv.Close)
	refund := &outbox.HTTPEffect{Name: "refund", URL: srv.URL, Secret: "tok_test_FAKE_payments", Scopes: []string{"*"},
		Client: &http.Client{Timeout: time.Second}}
	d := scopedDispatcher(l, clock, refund)
	d.Effects[warehouse.Kind] = &outbox.WarehouseEffect{Name: warehouse.Kind, Bucket: "wh-bucket", Prefix: "records", Client: s.Client(), Scopes: []string{"*"}}

	vendorRecord := func(v int64) string { return warehouse.OperationID("vendor", "order", "O-42", v) }
	forged := map[string]any{"scope": "orders", "projection": "order", "subject": "O-42", "version": "12",
		"state": map[string]any{"status": "refunded_in_full"}, "event_id": "msg_o42_12", "source": "orders", "applied_at": "2026-11-30T12:00:00.000Z"}
	for _, c := range []struct {
		name    string
		version int64
		in      ledger.Intent
		code    string
	}{
		{"a record whose payload names the operator's O-42 @ 12", 999,
			ledger.Intent{OperationID: vendorRecord(999), Kind: warehouse.Kind, Subject: "O-42", Payload: forged}, "record_mismatch"},
		{"a refund under the record key shape", 1000,
			ledger.Intent{OperationID: vendorRecord(1000), Kind: "refund", Subject: "O-42", Payload: map[string]any{"order_id": "O-42", "amount_minor": 12900}}, "not_a_record"},
		{"a record kind under a business intent's key", 1001,
			ledger.Intent{OperationID: "0f3a9c", Kind: warehouse.Kind, Subject: "O-42", Payload: forged}, "not_a_record"},
	} {
		t.Run(c.name, func(t *testing.T) {
			commitIntent(t, l, "vendor", c.version, c.in)
			if _, err := d.Dispatch(ctx, c.in.OperationID); err != nil {
				t.Fatal(err)
			}
			in, err := l.GetIntentState(ctx, c.in.OperationID)
			if err != nil {
				t.Fatal(err)
			}
			if in.Status != ledger.IntentStatusQuarantined || in.ErrorCode != c.code {
				t.Errorf("intent %s (%s): %s %s %q; want QUARANTINED %s", c.in.OperationID, c.in.Kind, in.Status, in.ErrorCode, in.Detail, c.code)
			}
			if keys := s.Keys("wh-bucket", ""); len(keys) != 0 {
				t.Errorf("the warehouse holds %v; want nothing written", keys)
			}
			if calls := down.Calls(); len(calls) != 0 {
				t.Errorf("the refund endpoint received %d calls", len(calls))
			}
		})
	}

	// The vendor's genuine record of its own revision is written, under
	// its own key.
	w := projection.Write{Name: "vendor/order", Subject: "O-42", Version: 1002, State: map[string]any{"status": "cancelled", "rev": 1002}}
	genuine := warehouse.Intent(w, "vendor", "msg_"+vendorRecord(1002)+"_"+warehouse.Kind, clock.Now(), 0)
	commitIntent(t, l, "vendor", 1002, genuine)
	if o, err := d.Dispatch(ctx, genuine.OperationID); err != nil || o.Status != ledger.IntentStatusSucceeded {
		t.Fatalf("the vendor's genuine record: %+v %v", o, err)
	}
	if keys := s.Keys("wh-bucket", ""); len(keys) != 1 || keys[0] != warehouse.Key("records", "vendor", "order", "O-42", 1002) {
		t.Fatalf("the warehouse holds %v; want the vendor's own record of O-42 @ 1002", keys)
	}
}

// commitIntent commits, as source's scope, revision version of O-42 with
// the one intent in (a fresh event per call).
func commitIntent(t *testing.T, l *ledger.Ledger, source string, version int64, in ledger.Intent) {
	t.Helper()
	ctx := context.Background()
	id := "msg_" + in.OperationID + "_" + in.Kind
	if _, err := l.Accept(ctx, ledger.Delivery{Source: source, EventID: id, EventType: "order.cancelled", DeliveryID: "d-" + id, Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	c, err := l.Claim(ctx, source, id, ledger.ClaimOptions{Owner: "proc", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	state := map[string]any{"status": "cancelled", "rev": version}
	w := &ledger.ProjectionWrite{Name: projection.ScopedName(source, "order"), Subject: "O-42", Version: version, Fingerprint: projection.Fingerprint(state), State: state}
	if _, err := l.Commit(ctx, c, w, []ledger.Intent{in}); err != nil {
		t.Fatal(err)
	}
}
