// Command demo proves the promise on the local stack: `make demo`. It uses
// a running `make dev` stack if one answers on DEV_HTTP_ADDR, or starts one
// in-process with fast timings (its logs go to build/demo-stack.log), sends
// the demo story, waits until every event and every effect it caused is
// finished (the dispatcher performs the effects against the stack's fake
// downstream; it says first how long that takes with the stack's timings),
// prints the business-outcome report and exits 1 if an invariant (see
// docs/architecture.md) was violated, a subject differs from what the
// senders meant, the downstream's view of a subject differs from the truth
// (I7: a state sync not at the newest version carrying the canonical state,
// a regression, an obsolete or superseded intent applied, a refund for an
// order the final truth does not cancel, with no CONTRADICTED record), the
// processor crash did not interrupt and recover claimed work, or (with the
// warehouse sink, on unless DEV_WAREHOUSE=off) a subject's current row in
// the warehouse is not at its canonical version and state within two
// reconciler schedules.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/demo"
	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
)

func main() {
	ok, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo: "+err.Error())
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

func run() (bool, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := devstack.FromEnv(os.Getenv)
	if err != nil {
		return false, err
	}
	file, _, err := devstack.LoadFile(orDefault(cfg.ConfigFile, "scripts/devstack.json"))
	if err != nil {
		return false, err
	}
	target := demo.Target{Secret: file.Secrets["LOCAL_STRIPE_WEBHOOK_SECRET"], Others: demo.ProviderSecrets{}}
	for src, env := range map[string]string{"orders": "LOCAL_ORDERS_WEBHOOK_SECRET", "shopify": "LOCAL_SHOPIFY_CLIENT_SECRET", "github": "LOCAL_GITHUB_WEBHOOK_SECRET", "quiltt": "LOCAL_QUILTT_WEBHOOK_SECRET"} {
		if v := file.Secrets[env]; v != "" {
			target.Others[src] = v
		}
	}
	httpAddr := orDefault(cfg.HTTPAddr, "127.0.0.1:3000")

	var health struct {
		Table, Queue, DLQ string
		EffectsQueue      string  `json:"effects_queue"`
		VisibilitySeconds float64 `json:"visibility_seconds"`
		LeaseSeconds      float64 `json:"lease_seconds"`
		// Warehouse names the warehouse sink's S3 endpoint, bucket and
		// prefix (absent: the stack runs without the sink).
		Warehouse *struct{ S3, Bucket, Prefix string } `json:"warehouse"`
	}
	timeout := 90 * time.Second
	if resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + httpAddr + "/_dev/health"); err == nil {
		_ = json.NewDecoder(resp.Body).Decode(&health)
		_ = resp.Body.Close()
	}
	if health.Table != "" {
		fmt.Printf("demo | using the running stack at http://%s\n", httpAddr)
		target.BaseURL = "http://" + httpAddr
		target.DB = localaws.DynamoAt("http://" + orDefault(cfg.DynamoAddr, "127.0.0.1:8000"))
		target.SQS = localaws.SQSAt("http://" + orDefault(cfg.SQSAddr, "127.0.0.1:4100"))
		target.Table, target.QueueURL, target.DLQURL, target.EffectsQueueURL = health.Table, health.Queue, health.DLQ, health.EffectsQueue
		if w := health.Warehouse; w != nil && w.Bucket != "" {
			target.S3, target.WarehouseBucket, target.WarehousePrefix = localaws.S3At(w.S3), w.Bucket, w.Prefix
		}
		// A batch killed mid-way comes back after the visibility timeout.
		// (demo.Run says how long this stack's recovery takes.)
		timeout = max(timeout, time.Duration(2*health.VisibilitySeconds+2*health.LeaseSeconds+30)*time.Second)
	} else {
		logPath := "build/demo-stack.log"
		if err := os.MkdirAll("build", 0o755); err != nil {
			return false, err
		}
		logFile, err := os.Create(logPath)
		if err != nil {
			return false, err
		}
		defer logFile.Close()
		fmt.Printf("demo | no stack on %s: building and starting one (fast timings; logs in %s)\n", httpAddr, logPath)
		cfg.FastProfile()
		logs := devstack.NewLogs(logFile)
		if err := devstack.Build(ctx, cfg, logs); err != nil {
			return false, err
		}
		stack, err := devstack.Start(ctx, cfg, logs)
		if err != nil {
			return false, err
		}
		defer stack.Close()
		target.BaseURL, target.DB, target.SQS, target.Table = stack.HTTPURL(), stack.DB, stack.SQS, stack.Table()
		target.QueueURL, target.DLQURL, target.EffectsQueueURL = stack.Queues.Queue, stack.Queues.DLQ, stack.EffectsQueues.Queue
		if bucket, prefix := stack.Warehouse(); bucket != "" {
			target.S3, target.WarehouseBucket, target.WarehousePrefix = stack.S3.Client(), bucket, prefix
		}
	}
	if target.WarehouseBucket == "" {
		fmt.Println("demo | this stack runs without the warehouse sink (DEV_WAREHOUSE=off): the warehouse is not compared")
	}
	target.Crash = func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, target.BaseURL+"/_dev/crash", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		return nil
	}
	seed, _ := strconv.ParseUint(os.Getenv("DEMO_SEED"), 10, 64)
	rep, err := demo.Run(ctx, target, demo.Options{Seed: seed, Progress: os.Stdout, Timeout: timeout})
	if err != nil {
		return false, err
	}
	rep.Print(os.Stdout)
	return rep.OK(), nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
