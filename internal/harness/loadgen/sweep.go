package loadgen

import (
	"context"
	"fmt"
	"slices"

	"github.com/effectively-once/webhooks/internal/harness/plot"
)

// Sweep runs o at each offered rate in turn, each run drained and checked
// before the next starts, with its own run tag (o.Run + "-r<i>") so the
// runs' events never collide. It stops at the first run that could not be
// made; results so far are returned with the error.
func Sweep(ctx context.Context, t Target, o Options, rates []float64) ([]Result, error) {
	if len(rates) == 0 {
		return nil, fmt.Errorf("%w: a sweep needs at least one rate", ErrConfig)
	}
	count := o.Count // a cap for every run, or 0: rate × duration each
	if err := o.defaults(); err != nil {
		return nil, err
	}
	base := o.Run
	var out []Result
	for i, rate := range rates {
		ro := o
		ro.Rate, ro.Run, ro.Count = rate, fmt.Sprintf("%s-r%d", base, i), count
		fmt.Fprintf(o.Progress, "loadgen | sweep %d/%d: %.1f/s for %s\n", i+1, len(rates), rate, o.Duration)
		r, err := Run(ctx, t, ro)
		if err != nil {
			return out, fmt.Errorf("sweep at %.1f/s: %w", rate, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// LatencyChart plots intake latency p50, p95 and p99 against offered rate.
func LatencyChart(rs []Result) plot.Chart {
	return percentileChart(rs, "Intake latency by offered rate", "latency (ms)", func(r Result) Percentiles { return r.Intake })
}

// EndToEndChart plots the time from first send to PROCESSED (p50, p95,
// p99) against offered rate.
func EndToEndChart(rs []Result) plot.Chart {
	return percentileChart(rs, "Time to PROCESSED by offered rate", "time to processed (ms)", func(r Result) Percentiles { return r.EndToEnd })
}

// percentileChart plots one set of percentiles of each run against its
// offered rate: x on a log scale when the rates span a factor of ten, y
// when the percentiles span a factor of fifty (an overloaded run's
// seconds next to an idle run's milliseconds).
func percentileChart(rs []Result, title, ylabel string, of func(Result) Percentiles) plot.Chart {
	var x, p50, p95, p99 []float64
	for _, r := range rs {
		p := of(r)
		x = append(x, r.OfferedRate)
		p50, p95, p99 = append(p50, p.P50), append(p95, p.P95), append(p99, p.P99)
	}
	ys := append(append(slices.Clone(p50), p95...), p99...)
	return plot.Chart{
		Title: title, XLabel: "offered rate (deliveries/s)", YLabel: ylabel, YFromZero: true, LogX: wide(x, 10), LogY: wide(ys, 50),
		Series: []plot.Series{{Name: "p50", X: x, Y: p50}, {Name: "p95", X: x, Y: p95}, {Name: "p99", X: x, Y: p99}},
	}
}

// wide reports whether the values are positive and span a factor of
// ratio or more: then a log scale keeps the small ones apart.
func wide(x []float64, ratio float64) bool {
	if len(x) == 0 {
		return false
	}
	lo, hi := x[0], x[0]
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo > 0 && hi/lo >= ratio
}
