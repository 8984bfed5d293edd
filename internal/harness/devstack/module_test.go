package devstack_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// TestATeamsModuleRunsOnTheLocalStack starts the local stack with the
// example shop's module: its own function mains (built in its module,
// over its rules) under aws-lambda-rie and its own dev.json. One Stripe
// event signed with the shop's visibly fake secret goes through the HTTP
// API, is processed once, and its redelivery is a duplicate.
func TestATeamsModuleRunsOnTheLocalStack(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end stack test skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stack, file, logs := devstack.StartModuleForTest(t, ctx, "examples/shop")
	if !strings.Contains(logs.String(), "functions of ") || !strings.Contains(logs.String(), "examples/shop, configuration ") ||
		!strings.Contains(logs.String(), "examples/shop/dev.json") {
		t.Fatalf("the stack does not run the shop's module:\n%s", logs.Tail(40))
	}
	secret := file.Secrets["LOCAL_SHOP_STRIPE_WEBHOOK_SECRET"]
	if !strings.Contains(secret, "local_FAKE") {
		t.Fatalf("the shop's webhook secret %q is not visibly fake", secret)
	}

	const id = "evt_local_shop_module_1"
	body := shopPayment(id, "pi_local_shop_1", "O-1001")
	post := func() (int, string) { return postShopStripe(ctx, t, stack, secret, body) }
	if code, b := post(); code != http.StatusAccepted {
		t.Fatalf("delivery: %d %s\n%s", code, b, logs.Tail(40))
	}

	l, err := ledger.New(stack.DB, ledger.Options{Table: stack.Table()})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	var ev ledger.Event
	for {
		ev, err = l.Get(ctx, "shop-stripe", id)
		if err == nil && ev.Status == ledger.StatusProcessed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not processed: %+v %v\n%s", ev, err, logs.Tail(60))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := strings.Count(strings.Join(actions(ev), ","), "complete"); n != 1 || ev.Result == nil {
		t.Fatalf("processed %d times: %+v", n, ev)
	}
	if code, b := post(); code != http.StatusOK || !strings.Contains(b, "duplicate") {
		t.Fatalf("redelivery: %d %s", code, b)
	}
	if ev, err := l.Get(ctx, "shop-stripe", id); err != nil || ev.DeliveryCount != 2 || strings.Count(strings.Join(actions(ev), ","), "complete") != 1 {
		t.Fatalf("after the redelivery: %+v %v", ev, err)
	}
}

// A team's module is named by DEV_MODULE; one without a main for a
// function the stack runs is refused before anything is built, naming
// the function; the shop's dev.json is valid and its secrets are visibly
// fake.
func TestATeamsModuleIsConfigured(t *testing.T) {
	c, err := devstack.FromEnv(func(k string) string { return map[string]string{"DEV_MODULE": "examples/shop"}[k] })
	if err != nil || c.Module != "examples/shop" {
		t.Fatalf("%+v %v", c, err)
	}
	empty := t.TempDir()
	err = devstack.Build(context.Background(), devstack.Config{Module: empty, BuildDir: t.TempDir()}, devstack.NewLogs(io.Discard))
	if !errors.Is(err, devstack.ErrConfig) || !strings.Contains(err.Error(), "functions/intake") {
		t.Fatalf("a module without mains: %v", err)
	}
	f, set, err := devstack.LoadFile("../../../examples/shop/" + devstack.TeamConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := set.Lookup("shop-stripe"); !ok {
		t.Fatal("the shop's dev.json has no shop-stripe source")
	}
	for name, v := range f.Secrets {
		if !strings.Contains(v, "local_FAKE") {
			t.Errorf("the shop's secret %s is not visibly fake", name)
		}
	}
}

// A team's module is told from this repository's by its go.mod.
func TestTeamModule(t *testing.T) {
	for doc, want := range map[string]bool{
		"module example.com/shop\n\ngo 1.26\n":                   true,
		"// a team's\nmodule \"example.com/shop\" // quoted\n":   true,
		"module github.com/effectively-once/webhooks\n":          false,
		"module\tgithub.com/effectively-once/webhooks // ours\n": false,
		"go 1.26\n":               false,
		"modules example.com/x\n": false,
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := devstack.TeamModule(dir); got != want {
			t.Errorf("%q: %v, want %v", doc, got, want)
		}
	}
	if devstack.TeamModule(t.TempDir()) || !devstack.TeamModule("../../../examples/shop") || devstack.TeamModule("../../..") {
		t.Error("a directory without go.mod, the shop or this repository misread")
	}
}

// shopPayment is a Stripe payment_intent.succeeded for one of the shop's
// orders, created now.
func shopPayment(id, pi, order string) []byte {
	return []byte(`{"id":"` + id + `","object":"event","api_version":"2025-03-31.basil","created":` + strconv.FormatInt(time.Now().Unix(), 10) +
		`,"type":"payment_intent.succeeded","livemode":false,"data":{"object":{"id":"` + pi + `","object":"payment_intent",` +
		`"amount":12900,"currency":"eur","status":"succeeded","metadata":{"order_id":"` + order + `"}}}}`)
}

// postShopStripe delivers body to the stack's shop-stripe source, signed
// now with secret as Stripe signs, and returns the answer.
func postShopStripe(ctx context.Context, t *testing.T, stack *devstack.Stack, secret string, body []byte) (int, string) {
	t.Helper()
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "." + string(body)))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, stack.HTTPURL()+"/webhooks/shop-stripe", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", fmt.Sprintf("t=%s,v1=%s", ts, hex.EncodeToString(mac.Sum(nil))))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
