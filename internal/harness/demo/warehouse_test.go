package demo

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/warehouse"
)

// The demo's warehouse comparison against a local S3: a subject whose
// current row is the canonical projection is in step; one whose newest
// record is older, one whose record holds another state and one without
// a record are each a violation saying what differs, once the wait is
// over; a projection another run changed last is not compared.
func TestWarehouseComparedWithTheCanonicalProjections(t *testing.T) {
	const bucket, prefix = "demo-wh", "records"
	s3 := localaws.NewS3(bucket)
	defer s3.Close()
	put := func(scope, proj, subject string, version int64, state map[string]any, event string) {
		t.Helper()
		b, err := warehouse.Record{Scope: scope, Projection: proj, Subject: subject, Version: json.Number(strconv.FormatInt(version, 10)), State: state,
			EventID: event, Source: scope, AppliedAt: "2026-12-01T10:00:00.000Z"}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := s3.Put(bucket, warehouse.Key(prefix, scope, proj, subject, version), b); err != nil {
			t.Fatal(err)
		}
	}
	put("orders", "order", "O-1", 1, map[string]any{"status": "created"}, "m1")
	put("orders", "order", "O-1", 2, map[string]any{"status": "confirmed", "total_minor": 4200}, "m2")
	put("orders", "order", "O-2", 1, map[string]any{"status": "created"}, "m3") // canonical is v2
	put("orders", "order", "O-3", 5, map[string]any{"status": "paid"}, "m5")    // canonical says shipped
	projections := []ledger.Projection{
		{Name: "orders/order", Subject: "O-1", Version: 2, State: map[string]any{"total_minor": json.Number("4200"), "status": "confirmed"}, LastEvent: "orders/m2"},
		{Name: "orders/order", Subject: "O-2", Version: 2, State: map[string]any{"status": "confirmed"}, LastEvent: "orders/m4"},
		{Name: "orders/order", Subject: "O-3", Version: 5, State: map[string]any{"status": "shipped"}, LastEvent: "orders/m5"},
		{Name: "orders/order", Subject: "O-4", Version: 1, State: map[string]any{"status": "created"}, LastEvent: "orders/m6"},
		{Name: "orders/order", Subject: "O-9", Version: 1, State: map[string]any{}, LastEvent: "orders/another-run"},
	}
	causes := map[string]bool{"orders/m2": true, "orders/m4": true, "orders/m5": true, "orders/m6": true}
	target := Target{S3: s3.Client(), WarehouseBucket: bucket, WarehousePrefix: prefix}
	var rep Report
	var progress strings.Builder
	start := time.Now()
	if err := rep.checkWarehouse(context.Background(), target, projections, causes, 3*time.Second, &progress); err != nil {
		t.Fatal(err)
	}
	w := rep.Warehouse
	if w == nil || w.InStep || w.Records != 4 || w.CurrentRows != 3 || len(w.Subjects) != 4 || time.Since(start) < 3*time.Second {
		t.Fatalf("outcome %+v after %s", w, time.Since(start))
	}
	got := map[string]WarehouseSubject{}
	for _, s := range w.Subjects {
		got[s.Subject] = s
	}
	if s := got["O-1"]; !s.OK || s.Warehouse != 2 || s.Row["status"] != "confirmed" || s.RowEvent != "orders/m2" {
		t.Fatalf("O-1 %+v", s)
	}
	if s := got["O-2"]; s.OK || s.Warehouse != 1 || s.Why != "the current row is v1" {
		t.Fatalf("O-2 %+v", s)
	}
	if s := got["O-3"]; s.OK || s.Warehouse != 5 || !strings.Contains(s.Why, `{"status":"paid"} differs from the canonical {"status":"shipped"}`) {
		t.Fatalf("O-3 %+v", s)
	}
	if s := got["O-4"]; s.OK || s.Warehouse != 0 || s.Why != "no record of this subject" {
		t.Fatalf("O-4 %+v", s)
	}
	if len(rep.Violations) != 3 || !strings.HasPrefix(rep.Violations[0], "warehouse: order O-2: canonical v2, warehouse v1: the current row is v1") {
		t.Fatalf("violations %q", rep.Violations)
	}
	var out strings.Builder
	rep.printWarehouse(&out)
	for _, want := range []string{"4 records, 3 current rows", "NOT in step", "MISMATCH orders/order O-4: no record of this subject\n",
		"MISMATCH orders/order O-2: the current row is v1\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	rows := map[string]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) >= 5 && f[0] == "orders/order" {
			rows[f[1]] = strings.Join(f[2:], " ")
		}
	}
	if rows["O-1"] != `v2 v2 ok {"status":"confirmed","total_minor":4200} from orders/m2` || rows["O-4"] != "v1 no row MISMATCH -" {
		t.Errorf("rows %q", rows)
	}
	if !strings.Contains(progress.String(), "warehouse: 3 of 4 subjects not in step yet") {
		t.Errorf("progress:\n%s", progress.String())
	}
}
