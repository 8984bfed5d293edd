package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/projection"
)

func warehouseCall(t *testing.T, state map[string]any, version int64, maxState int) outbox.Call {
	t.Helper()
	w := projection.Write{Name: "orders/order", Subject: "ord/1 é", Version: version, State: state}
	in := warehouse.Intent(w, "shop", "evt_1", time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC), maxState)
	// The payload goes through the ledger as JSON-like values.
	b, _ := json.Marshal(in.Payload)
	var p map[string]any
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	// The record as the ledger recorded the intent (the dispatcher's part).
	rec := &warehouse.Record{Scope: "orders", Projection: "order", Subject: w.Subject, Version: json.Number(strconv.FormatInt(version, 10)),
		Source: "shop", EventID: "evt_1"}
	return outbox.Call{Key: in.OperationID, Kind: in.Kind, Subject: in.Subject, Payload: p, Scope: "orders", Source: "shop", Record: rec}
}

func TestWarehouseRecordKeyAndOperationID(t *testing.T) {
	k := warehouse.Key("wh/", "orders", "order", "ord/1", 12)
	if k != "wh/scope=orders/projection=order/subject=b3JkLzE/v=00000000000000000012.json" {
		t.Fatalf("key %s", k)
	}
	if warehouse.Key("", "", "order", "a", 1) != "scope=_/projection=order/subject=YQ/v=00000000000000000001.json" {
		t.Fatalf("unscoped key %s", warehouse.Key("", "", "order", "a", 1))
	}
	a := warehouse.OperationID("orders", "order", "ord_1", 12)
	if a != warehouse.OperationID("orders", "order", "ord_1", 12) || a == warehouse.OperationID("orders", "order", "ord_1", 11) ||
		a == warehouse.OperationID("other", "order", "ord_1", 12) {
		t.Fatal("operation id is not a function of (scope, projection, subject, version)")
	}
	in := warehouse.Intent(projection.Write{Name: "orders/order", Subject: "ord_1", Version: 12, State: map[string]any{"status": "paid"}}, "shop", "e", time.Now(), 0)
	if in.OperationID != a || in.Policy != projection.PolicyOnce || in.Kind != warehouse.Kind {
		t.Fatalf("intent %+v", in)
	}
}

// The conditional create: written once; the same call again (a retry, a
// redrive, a replay) is a success that writes nothing; other bytes at the
// key are a conflict, never overwritten.
func TestWarehouseEffectConditionalCreate(t *testing.T) {
	s := localaws.NewS3("wh-bucket")
	defer s.Close()
	e := &outbox.WarehouseEffect{Name: warehouse.Kind, Bucket: "wh-bucket", Prefix: "records", Client: s.Client(), Scopes: []string{"*"}}
	ctx := context.Background()
	c := warehouseCall(t, map[string]any{"status": "paid", "amount": 1200}, 1<<60+1, 0)

	res, err := e.Do(ctx, c)
	if err != nil || res.Replayed {
		t.Fatalf("first put: %+v %v", res, err)
	}
	keys := s.Keys("wh-bucket", "records/")
	if len(keys) != 1 || !strings.HasSuffix(keys[0], "/v=01152921504606846977.json") {
		t.Fatalf("keys %v", keys)
	}
	body, _ := s.Object("wh-bucket", keys[0])
	var rec map[string]any
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	if err := dec.Decode(&rec); err != nil {
		t.Fatal(err)
	}
	if rec["version"].(json.Number).String() != "1152921504606846977" || rec["subject"] != "ord/1 é" || rec["event_id"] != "evt_1" ||
		rec["applied_at"] != "2026-01-02T03:04:05.006Z" || rec["scope"] != "orders" || rec["projection"] != "order" {
		t.Fatalf("record %s", body)
	}

	res, err = e.Do(ctx, c)
	if err != nil || !res.Replayed {
		t.Fatalf("second put: %+v %v", res, err)
	}
	if got := s.Requests()["PutObject"]; got != 2 {
		t.Fatalf("PutObject requests %d", got)
	}

	if err := s.Put("wh-bucket", keys[0], []byte(`{"other":true}`)); err != nil {
		t.Fatal(err)
	}
	_, err = e.Do(ctx, c)
	var me *outbox.MisconfiguredError
	if !errors.As(err, &me) || me.Code != warehouse.CodeConflict {
		t.Fatalf("conflict: %v", err)
	}
	if b, _ := s.Object("wh-bucket", keys[0]); string(b) != `{"other":true}` {
		t.Fatalf("overwritten: %s", b)
	}
}

func TestWarehouseEffectClassification(t *testing.T) {
	s := localaws.NewS3("wh-bucket")
	defer s.Close()
	e := &outbox.WarehouseEffect{Name: warehouse.Kind, Bucket: "wh-bucket", Client: s.Client(), Scopes: []string{"*"}}
	ctx := context.Background()
	c := warehouseCall(t, map[string]any{"status": "paid"}, 3, 0)

	s.FailNext(409, "ConditionalRequestConflict")
	if cl, _ := outbox.Classify(second(e.Do(ctx, c))); cl != outbox.ClassRetryable {
		t.Fatalf("409: class %v", cl)
	}
	s.SetDown(true)
	if cl, _ := outbox.Classify(second(e.Do(ctx, c))); cl != outbox.ClassRetryable {
		t.Fatalf("503 SlowDown: class %v", cl)
	}
	s.SetDown(false)
	s.FailNext(500, "InternalError")
	if cl, _ := outbox.Classify(second(e.Do(ctx, c))); cl != outbox.ClassUncertain {
		t.Fatalf("500: class %v", cl)
	}
	s.FailNext(403, "AccessDenied")
	if cl, _ := outbox.Classify(second(e.Do(ctx, c))); cl != outbox.ClassMisconfigured {
		t.Fatalf("403: class %v", cl)
	}
	if _, err := e.Do(ctx, c); err != nil {
		t.Fatalf("back: %v", err)
	}
	if e.DedupWindow() < 50*365*24*time.Hour {
		t.Fatal("a record that may have been written must be written again with the same key")
	}

	big := warehouseCall(t, map[string]any{"blob": strings.Repeat("x", 2000)}, 4, 1000)
	_, err := e.Do(ctx, big)
	var me *outbox.MisconfiguredError
	if !errors.As(err, &me) || me.Code != warehouse.CodeStateTooLarge || !strings.Contains(err.Error(), "over the warehouse's limit of 1000") {
		t.Fatalf("oversize: %v", err)
	}
	if n := len(s.Keys("wh-bucket", "")); n != 1 {
		t.Fatalf("objects %d", n)
	}
}

func second(_ outbox.Result, err error) error { return err }

func TestWarehouseTargetConfig(t *testing.T) {
	doc := `{"effects":[{"kind":"warehouse.record","target":"arn:aws:s3:::wh-bucket/records/v1","scopes":["*"]}]}`
	cfgs, err := outbox.ParseEffectsIn([]byte(doc), "eu-west-1")
	if err != nil {
		t.Fatal(err)
	}
	b, p, err := warehouse.ParseTarget(cfgs[0].Target)
	if err != nil || b != "wh-bucket" || p != "records/v1" {
		t.Fatalf("%s %s %v", b, p, err)
	}
	bad := `{"effects":[{"kind":"refund","target":"arn:aws:s3:::wh-bucket","scopes":["*"]}]}`
	if _, err := outbox.ParseEffects([]byte(bad)); err == nil || !strings.Contains(err.Error(), "warehouse change records only") {
		t.Fatalf("an S3 target for another kind: %v", err)
	}
	if _, err := outbox.ParseEffects([]byte(`{"effects":[{"kind":"warehouse.record","target":"arn:aws:s3:::A_B","scopes":["*"]}]}`)); err == nil {
		t.Fatal("a bad bucket name was accepted")
	}
}

// Built from the environment as the dispatcher builds it, the sink writes
// to a local S3 named by host name (AWS_ENDPOINT_URL_S3=http://localhost:…):
// the endpoint override makes the client address the bucket by path, where
// the SDK's default would ask for the host <bucket>.localhost.
func TestWarehouseEffectPathStyleAgainstALocalEndpoint(t *testing.T) {
	s := localaws.NewS3("wh-local")
	defer s.Close()
	t.Setenv("AWS_ENDPOINT_URL_S3", strings.Replace(s.URL, "127.0.0.1", "localhost", 1))
	t.Setenv("AWS_REGION", localaws.Region)
	t.Setenv("AWS_ACCESS_KEY_ID", localaws.FakeAccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", localaws.FakeSecretKey)
	cfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	effects, err := outbox.Build([]outbox.EffectConfig{outbox.WarehouseEffectConfig(warehouse.Config{Bucket: "wh-local", Prefix: "records"})}, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := warehouseCall(t, map[string]any{"status": "paid"}, 3, 0)
	if _, err := effects[warehouse.Kind].Do(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	want := warehouse.Key("records", "orders", "order", "ord/1 é", 3)
	if keys := s.Keys("wh-local", ""); len(keys) != 1 || keys[0] != want {
		t.Fatalf("keys %v, want [%s]", keys, want)
	}
}
