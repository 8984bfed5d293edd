package warehouse_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/projection"
)

type named string

func (n named) Name() string                                      { return string(n) }
func (named) Project(projection.Event) (projection.Result, error) { return projection.Result{}, nil }

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLoadIsOffWithoutABucketAndRecordsEveryProjectionByDefault(t *testing.T) {
	c, err := warehouse.Load(env(nil))
	if c != nil || err != nil {
		t.Fatalf("no bucket: %v, %v; want off", c, err)
	}
	if c.Includes("orders/order") {
		t.Error("an off sink includes a projection")
	}
	c, err = warehouse.Load(env(map[string]string{"WAREHOUSE_BUCKET": "acme-warehouse", "WAREHOUSE_PREFIX": "/changes/"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Prefix != "changes" || c.MaxState != warehouse.DefaultMaxState || c.Projections != nil || !c.Includes("orders/order") {
		t.Errorf("defaults: %+v", c)
	}
	if c.Target() != "arn:aws:s3:::acme-warehouse/changes" {
		t.Errorf("target %s", c.Target())
	}
}

func TestWarehouseProjectionsNamesWhatIsRecordedAndRefusesUnknownNames(t *testing.T) {
	c, err := warehouse.Load(env(map[string]string{"WAREHOUSE_BUCKET": "acme-warehouse", "WAREHOUSE_PROJECTIONS": "order, invoice"}))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"order": true, "orders/order": true, "vendor/invoice": true, "orders/subscription": false} {
		if got := c.Includes(name); got != want {
			t.Errorf("Includes(%q) = %v, want %v", name, got, want)
		}
	}
	reg := projection.NewRegistry()
	reg.Register("shop", []string{"order.paid", "order.cancelled"}, named("order"))
	err = c.Check(reg)
	if !errors.Is(err, warehouse.ErrConfig) || !strings.Contains(err.Error(), `"invoice"`) || !strings.Contains(err.Error(), "registered: order") {
		t.Errorf("unknown name: %v", err)
	}
	reg.Register("shop", []string{"invoice.paid"}, named("invoice"))
	if err := c.Check(reg); err != nil {
		t.Errorf("known names refused: %v", err)
	}
	for _, bad := range []string{"order,", "orders/order", "order,*"} {
		if _, err := warehouse.Load(env(map[string]string{"WAREHOUSE_BUCKET": "acme-warehouse", "WAREHOUSE_PROJECTIONS": bad})); !errors.Is(err, warehouse.ErrConfig) {
			t.Errorf("WAREHOUSE_PROJECTIONS=%q: %v, want a config error", bad, err)
		}
	}
}

func TestLoadRefusesABadBucketOrStateLimit(t *testing.T) {
	for _, e := range []map[string]string{
		{"WAREHOUSE_BUCKET": "Not_A_Bucket"},
		{"WAREHOUSE_BUCKET": "acme-warehouse", "WAREHOUSE_MAX_STATE_BYTES": "0"},
		{"WAREHOUSE_BUCKET": "acme-warehouse", "WAREHOUSE_MAX_STATE_BYTES": "999999999"},
	} {
		if _, err := warehouse.Load(env(e)); !errors.Is(err, warehouse.ErrConfig) {
			t.Errorf("%v: %v, want a config error", e, err)
		}
	}
}

func TestAnOversizeStateIsNotCarriedAndIsRefusedWithItsSize(t *testing.T) {
	w := projection.Write{Name: "orders/order", Subject: "O-42", Version: 12, State: map[string]any{"note": strings.Repeat("x", 100)}}
	in := warehouse.Intent(w, "shop", "evt_1", time.Unix(0, 0), 50)
	if _, ok := in.Payload["state"]; ok {
		t.Fatal("an oversize state is carried in the intent")
	}
	_, err := warehouse.FromPayload(in.Payload)
	var refused *warehouse.RefusedError
	if !errors.As(err, &refused) || refused.Code != warehouse.CodeStateTooLarge || !strings.Contains(err.Error(), "over the warehouse's limit of 50 bytes") {
		t.Fatalf("oversize: %v", err)
	}
	in = warehouse.Intent(w, "shop", "evt_1", time.Unix(0, 0), 0)
	r, err := warehouse.FromPayload(in.Payload)
	if err != nil || r.VersionInt() != 12 || r.Scope != "orders" || r.Projection != "order" || r.AppliedAt != "1970-01-01T00:00:00.000Z" {
		t.Fatalf("record %+v, %v", r, err)
	}
	if in.OperationID != warehouse.OperationID("orders", "order", "O-42", 12) || in.Policy != projection.PolicyOnce {
		t.Errorf("intent %s %s", in.OperationID, in.Policy)
	}
}
