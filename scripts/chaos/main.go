// Command chaos runs model-based chaos schedules (internal/harness/chaos) against our
// design and the naive ones, prints progress and a summary table, and
// exits 1 when our design violates any invariant.
//
//	go run ./scripts/chaos -n 1000 -seed 1 -design all -json chaos.json
//
// A share of the schedules (-sfn, percent; 25 by default) performs its
// effects through a Step Functions target instead of the HTTP downstream,
// and a share (-warehouse, percent; 50 by default) runs with the
// warehouse sink on.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/chaos"
)

func main() {
	os.Exit(run())
}

func run() int {
	n := flag.Int("n", 100, "schedules per design")
	seed := flag.Uint64("seed", uint64(time.Now().UnixNano()%1_000_000), "first seed; schedule i has seed+i")
	design := flag.String("design", "ours", "ours|checkthen|split|nolease|dispatch-everything|warehouse-overwrite|warehouse-unobserved|reuse-drop|all (or a comma-separated list)")
	parallel := flag.Int("parallel", 2, "schedules run at once")
	shrink := flag.Int("shrink", 1, "failures shrunk and printed per design")
	jsonOut := flag.String("json", "", "write the summaries as JSON to this file")
	lost := flag.Int("lost", 0, "percent of crash steps that lose the call's answer instead (the SDK retries it; nothing dies)")
	sfn := flag.Int("sfn", 25, "percent of schedules whose effects a Step Functions target performs instead of the HTTP downstream (0: none)")
	wh := flag.Int("warehouse", 50, "percent of schedules with the warehouse sink on (its store failing now and then; I9); a naive warehouse writer's design runs every schedule with it")
	reuse := flag.Int("reuse", 20, "percent of schedules whose orders run under a rule that reuses its state sync's operation id across revisions (I10); the reuse-drop design runs every schedule with it")
	flag.Parse()
	if *lost < 0 || *lost > 100 || *sfn < 0 || *sfn > 100 || *wh < 0 || *wh > 100 || *reuse < 0 || *reuse > 100 {
		fmt.Fprintln(os.Stderr, "chaos: -lost, -sfn, -warehouse and -reuse are percents, 0 to 100")
		return 2
	}

	designs := strings.Split(*design, ",")
	if *design == "all" {
		designs = chaos.DesignNames()
	}
	if *shrink == 0 {
		*shrink = -1
	}
	fmt.Printf("chaos: %d schedules per design, seeds %d..%d, designs %s, %d at once\n", *n, *seed, *seed+uint64(*n)-1, strings.Join(designs, ","), *parallel)
	start := time.Now()
	step := max(*n/20, 1)
	sums, err := chaos.RunBatch(chaos.BatchOptions{
		N: *n, Seed: *seed, Designs: designs, Parallel: *parallel, ShrinkFirst: *shrink, Config: chaos.Config{LostPercent: *lost, StepFunctionsPercent: *sfn, WarehousePercent: *wh, ReusePercent: *reuse},
		Progress: func(d string, done, total, failed int) {
			if done%step == 0 || done == total {
				fmt.Fprintf(os.Stderr, "  %-10s %5d/%d schedules, %d failing, %s\n", d, done, total, failed, time.Since(start).Round(time.Second))
			}
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	code := 0
	for _, s := range sums {
		for _, f := range s.Failures {
			if f.Report != "" {
				fmt.Printf("\n%s\n", f.Report)
			}
		}
		if s.Design == chaos.Ours.Name && s.Failed > 0 {
			code = 1
			fmt.Printf("\nours: failing seeds:")
			for _, f := range s.Failures {
				fmt.Printf(" %d", f.Seed)
			}
			fmt.Println()
		}
	}
	fmt.Printf("\n%s", chaos.Table(sums))
	fmt.Printf("total %s\n", time.Since(start).Round(100*time.Millisecond))
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(sums, "", "  ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 2
		}
	}
	return code
}
