package operator_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/operator"
)

// TestAProjectionsUnscopedNameResolvesToItsOnlyScope runs two sources whose
// events the same order projection applies, so the ledger holds orders/order
// and shop-orders/order: O-7 in the first scope only, O-8 in the second
// only, O-9 in both. `projections show order <subject>` shows the one
// scope's projection when only one has the subject, and refuses with each
// scoped name when several do; `warehouse backfill --projection order`,
// which concerns every subject, refuses because two scopes have an order
// projection, and writes nothing.
func TestAProjectionsUnscopedNameResolvesToItsOnlyScope(t *testing.T) {
	t.Parallel()
	h := pt.NewOrders(t, pt.Options{SourcesDoc: `{"sources":[` +
		`{"name":"orders","kind":"standard-webhooks","secrets":["env:ORDERS_SECRET"],"options":{"subject_path":"data.id","version_path":"data.revision"}},` +
		`{"name":"shop-orders","kind":"standard-webhooks","secrets":["env:ORDERS_SECRET"],"options":{"subject_path":"data.id","version_path":"data.revision"}}]}`},
		pt.OutboxOptions{})
	w := h.NewWorker("w1")
	for _, d := range []struct{ src, id, order string }{
		{"orders", "msg-o7", "O-7"}, {"shop-orders", "msg-o8", "O-8"}, {"orders", "msg-o9-a", "O-9"}, {"shop-orders", "msg-o9-b", "O-9"},
	} {
		if r := h.DeliverStandardWebhook(d.src, pt.SecretOrders, d.id, pt.OrderEvent("order.created", d.order, 3, "", "")); r.Status != 202 {
			t.Fatalf("%s/%s: %d %s", d.src, d.id, r.Status, r.Body)
		}
	}
	h.DrainAll(20*time.Second, 2*time.Second, []*pt.Worker{w})
	wh := h.EnableWarehouse(0)
	for _, p := range []struct{ name, subject string }{{"orders/order", "O-7"}, {"shop-orders/order", "O-8"}, {"orders/order", "O-9"}, {"shop-orders/order", "O-9"}} {
		if got, err := h.Ledger.GetProjection(context.Background(), p.name, p.subject); err != nil || got.Version != 3 {
			t.Fatalf("%s %s: version %d, %v", p.name, p.subject, got.Version, err)
		}
	}
	run := func(args ...string) (string, string, int) {
		t.Helper()
		var out, errOut bytes.Buffer
		e := operator.Env{
			Getenv:   func(k string) string { return map[string]string{"USER": "alice"}[k] },
			Hostname: func() (string, error) { return "ops-box", nil },
			Stdout:   &out, Stderr: &errOut, Clock: h.Clock,
			Connect: func(context.Context, operator.Settings, func(string) string) (operator.Clients, error) {
				return operator.Clients{DynamoDB: h.DB, SQS: h.SQS, STS: &fakeSTS{ARN: callerARN}, S3: wh.S3.Client()}, nil
			},
		}
		base := []string{"--table", h.Table, "--events-queue-url", h.Queues.Queue, "--events-dlq-url", h.Queues.DLQ,
			"--effects-queue-url", h.Outbox.Queues.Queue, "--effects-dlq-url", h.Outbox.Queues.DLQ,
			"--warehouse-bucket", wh.Bucket, "--warehouse-prefix", wh.Prefix}
		code := operator.Run(context.Background(), append(base, args...), e)
		return out.String(), errOut.String(), code
	}

	for subject, want := range map[string]string{"O-7": "orders/order", "O-8": "shop-orders/order"} {
		out, errOut, code := run("projections", "show", "order", subject)
		if code != 0 || !strings.Contains(out, "projection    "+want+"\n") || !strings.Contains(out, "subject       "+subject+"\n") ||
			!strings.Contains(out, "version       3 (canonical)") {
			t.Fatalf("projections show order %s: exit %d\n%s%s", subject, code, out, errOut)
		}
	}
	out, errOut, code := run("projections", "show", "order", "O-9")
	if code != 2 || out != "" || !strings.Contains(errOut, "is in 2 scopes: orders/order, shop-orders/order") {
		t.Fatalf("projections show order O-9 (two scopes): exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := run("projections", "show", "order", "O-404"); code != 1 || !strings.Contains(errOut, "not found in any scope") {
		t.Fatalf("projections show order O-404: exit %d\n%s", code, errOut)
	}
	// A scoped name is read as it is, with one GetItem and no scan.
	if out, errOut, code := run("projections", "show", "shop-orders/order", "O-9"); code != 0 || !strings.Contains(out, "projection    shop-orders/order\n") || strings.Contains(errOut, "scanned") {
		t.Fatalf("projections show shop-orders/order O-9: exit %d\n%s%s", code, out, errOut)
	}

	intents := len(h.Intents())
	out, errOut, code = run("warehouse", "backfill", "--projection", "order", "--reason", "records lost")
	if code != 2 || !strings.Contains(errOut, "projection order is in 2 scopes: orders/order, shop-orders/order") || len(h.Intents()) != intents {
		t.Fatalf("backfill --projection order (two scopes): exit %d, intents %d -> %d\n%s%s", code, intents, len(h.Intents()), out, errOut)
	}
	if _, err := h.Ledger.GetProjection(context.Background(), "order", "O-9"); err == nil {
		t.Fatal("the ledger itself holds an unscoped projection name")
	} else if !strings.Contains(err.Error(), ledger.ErrNotFound.Error()) {
		t.Fatalf("unscoped read: %v", err)
	}
}
