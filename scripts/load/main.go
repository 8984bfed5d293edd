// Command load sends signed webhook deliveries to a running local stack
// (`make dev`, best with DEV_FAST=1) at a fixed offered rate and reports
// intake latency percentiles, throughput, status codes, time to PROCESSED,
// and lost and doubled effects (both must be 0; the exit status is 1 when
// they are not). The target must be loopback. See package loadgen.
//
//	go run ./scripts/load -rate 50 -duration 10s -dup 0.2 -json build/load.json
//	go run ./scripts/load -sweep 10,20,50,100 -duration 10s -json build/sweep.json -plot build/latency.png
//	go run ./scripts/load -soak 50000 -rate 30 -drain 5m     # a soak: ~28 min; prints the last 1,000 against the first 1,000
//
// A run of at least 2,000 deliveries also prints the intake latency and the
// time to PROCESSED of its last 1,000 deliveries against its first 1,000.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/harness/loadgen"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
)

func main() {
	ok, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "load: "+err.Error())
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

func run() (bool, error) {
	var (
		target    = flag.String("url", "http://127.0.0.1:3000", "the local stack's HTTP API (loopback only)")
		dynamo    = flag.String("dynamodb", "http://127.0.0.1:8000", "the local DynamoDB endpoint (loopback only)")
		table     = flag.String("table", "", "ledger table (default: the stack's, from GET /_dev/health)")
		config    = flag.String("config", "scripts/devstack.json", "local stack config with the fake secrets")
		rate      = flag.Float64("rate", 20, "offered deliveries per second")
		duration  = flag.Duration("duration", 5*time.Second, "send phase length")
		count     = flag.Int("count", 0, "at most this many deliveries (default rate × duration)")
		soak      = flag.Int("soak", 0, "a soak: send this many deliveries at -rate (the send phase lasts as long as they need; -duration is ignored) and compare the last 1,000 with the first 1,000")
		dup       = flag.Float64("dup", 0.2, "fraction of sends that re-send an earlier event")
		stripe    = flag.Float64("stripe", 0.5, "fraction of new events that are Stripe (the rest: orders)")
		inflight  = flag.Int("concurrency", 64, "concurrent sends at most; a send with no free slot is skipped and counted")
		seed      = flag.Uint64("seed", 1, "random seed (same seed, same events)")
		drain     = flag.Duration("drain", 60*time.Second, "how long events may take to be PROCESSED and effects to be applied after the send phase")
		sweep     = flag.String("sweep", "", "comma-separated offered rates to run one after the other (overrides -rate)")
		jsonOut   = flag.String("json", "", "write the result (a sweep: the list of results) as JSON to this file")
		plotOut   = flag.String("plot", "", "sweep only: write intake latency percentiles against offered rate as PNG to this file")
		plotE2E   = flag.String("plot-e2e", "", "sweep only: write time to PROCESSED percentiles against offered rate as PNG to this file")
		runTag    = flag.String("run", "", "tag for this run's ids (default from the clock)")
		quietFlag = flag.Bool("q", false, "no progress lines")
	)
	flag.Parse()
	for _, u := range []string{*target, *dynamo} {
		if err := loadgen.CheckLoopback(u); err != nil {
			return false, err
		}
	}
	if *soak > 0 {
		if *sweep != "" {
			return false, fmt.Errorf("-soak and -sweep exclude each other")
		}
		*count = *soak
		*duration = time.Duration(float64(*soak)/(*rate)*float64(time.Second)) + time.Second
	}
	var rates []float64
	if *sweep != "" {
		for _, f := range strings.Split(*sweep, ",") {
			r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil {
				return false, fmt.Errorf("-sweep: %q is not a rate", f)
			}
			rates = append(rates, r)
		}
	} else if *plotOut != "" || *plotE2E != "" {
		return false, fmt.Errorf("-plot and -plot-e2e need -sweep")
	}
	file, _, err := devstack.LoadFile(*config)
	if err != nil {
		return false, err
	}
	if *table == "" {
		*table = stackTable(*target)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	t := loadgen.Target{
		BaseURL: strings.TrimRight(*target, "/"), DB: localaws.DynamoAt(*dynamo), Table: *table,
		Secrets: loadgen.LocalSecrets(file.Secrets),
	}
	o := loadgen.Options{Rate: *rate, Duration: *duration, Count: *count, DuplicateRatio: *dup, StripeShare: *stripe,
		MaxInFlight: *inflight, Seed: *seed, Drain: *drain, Run: *runTag, Progress: os.Stderr}
	if *quietFlag {
		o.Progress = nil
	}
	if rates == nil {
		res, err := loadgen.Run(ctx, t, o)
		if err != nil {
			return false, err
		}
		res.Print(os.Stdout)
		if *jsonOut != "" {
			if err := loadgen.WriteJSON(*jsonOut, res); err != nil {
				return false, err
			}
		}
		return res.OK(), nil
	}
	rs, err := loadgen.Sweep(ctx, t, o, rates)
	for _, r := range rs {
		r.Print(os.Stdout)
	}
	if len(rs) > 0 {
		loadgen.PrintSweep(os.Stdout, rs)
	}
	if err != nil {
		return false, err
	}
	if *jsonOut != "" {
		if err := loadgen.WriteJSON(*jsonOut, rs); err != nil {
			return false, err
		}
	}
	if *plotOut != "" {
		if err := loadgen.LatencyChart(rs).WriteFile(*plotOut); err != nil {
			return false, err
		}
	}
	if *plotE2E != "" {
		if err := loadgen.EndToEndChart(rs).WriteFile(*plotE2E); err != nil {
			return false, err
		}
	}
	ok := true
	for _, r := range rs {
		ok = ok && r.OK()
	}
	return ok, nil
}

// stackTable asks the stack for its ledger table, or says the default.
func stackTable(base string) string {
	var health struct {
		Table string `json:"table"`
	}
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(strings.TrimRight(base, "/") + "/_dev/health")
	if err == nil {
		_ = json.NewDecoder(resp.Body).Decode(&health)
		_ = resp.Body.Close()
	}
	if health.Table == "" {
		return "local-ledger"
	}
	return health.Table
}
