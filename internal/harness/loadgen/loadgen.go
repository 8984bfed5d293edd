package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// Errors.
var (
	// ErrNotLoopback refuses a target that is not on this machine.
	ErrNotLoopback = errors.New("target is not a loopback address")
	// ErrConfig is an invalid option or target.
	ErrConfig = errors.New("loadgen config")
)

// Bounds on a run, so a typo cannot turn the generator into a flood.
const (
	MaxRate  = 5000
	MaxCount = 200000
	// MaxDuration bounds the send phase; a soak of 50,000 deliveries at the
	// 30/s the local stack sustains on 2 CPUs needs about 28 minutes.
	MaxDuration = 2 * time.Hour
	MaxInFlight = 1024
)

// Target is the local stack a run drives.
type Target struct {
	// BaseURL is the HTTP API, e.g. http://127.0.0.1:3000; it must be
	// loopback. The fake downstream is read at BaseURL/_dev/downstream.
	BaseURL string
	// DB reads the ledger (ledger.Get); Table is its name.
	DB      ledger.DynamoDB
	Table   string
	Secrets Secrets
	// HTTP sends the deliveries; default a client sized for MaxInFlight.
	HTTP *http.Client
}

// Options shape a run. The zero value is a 5 s run at 20 deliveries/s.
type Options struct {
	Rate           float64       // offered deliveries per second; default 20
	Duration       time.Duration // send phase; default 5 s
	Count          int           // at most this many deliveries; default Rate × Duration
	DuplicateRatio float64       // fraction of sends that re-send an earlier event; default 0 (set it)
	StripeShare    float64       // fraction of new events that are Stripe (the rest orders); default 0.5
	MaxInFlight    int           // concurrent sends; default 64
	Seed           uint64        // default 1: the same seed sends the same events
	// Drain is how long, after the send phase, events may take to reach
	// PROCESSED and their effects to be applied; default 60 s.
	Drain time.Duration
	// Settle is how long to keep watching the downstream after every
	// expected effect was applied, to catch a late second call; default 1 s.
	Settle time.Duration
	// Run tags the run's subjects and event ids so runs never collide on
	// one stack; default derived from the clock.
	Run      string
	Progress io.Writer // default io.Discard
	Now      func() time.Time
}

func (o *Options) defaults() error {
	if o.Rate == 0 {
		o.Rate = 20
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.Rate < 0 || o.Rate > MaxRate {
		return fmt.Errorf("%w: rate %.1f/s must be in (0, %d]", ErrConfig, o.Rate, MaxRate)
	}
	if o.Duration < 0 || o.Duration > MaxDuration {
		return fmt.Errorf("%w: duration %s must be in (0, %s]", ErrConfig, o.Duration, MaxDuration)
	}
	planned := int(o.Rate * o.Duration.Seconds())
	if o.Count == 0 || o.Count > planned {
		o.Count = max(planned, 1)
	}
	if o.Count < 0 || o.Count > MaxCount {
		return fmt.Errorf("%w: count %d must be in (0, %d]", ErrConfig, o.Count, MaxCount)
	}
	if o.DuplicateRatio < 0 || o.DuplicateRatio >= 1 {
		return fmt.Errorf("%w: duplicate ratio %.2f must be in [0, 1)", ErrConfig, o.DuplicateRatio)
	}
	if o.StripeShare == 0 {
		o.StripeShare = 0.5
	}
	if o.StripeShare < 0 || o.StripeShare > 1 {
		return fmt.Errorf("%w: stripe share %.2f must be in [0, 1]", ErrConfig, o.StripeShare)
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = 64
	}
	if o.MaxInFlight < 0 || o.MaxInFlight > MaxInFlight {
		return fmt.Errorf("%w: max in flight %d must be in (0, %d]", ErrConfig, o.MaxInFlight, MaxInFlight)
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Drain == 0 {
		o.Drain = 60 * time.Second
	}
	if o.Settle == 0 {
		o.Settle = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Run == "" {
		o.Run = strconv.FormatInt(o.Now().UnixMilli()%(1<<40), 36)
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return nil
}

// CheckLoopback refuses a URL whose host is not a loopback IP or
// "localhost". Names are not resolved: a name that resolves elsewhere
// tomorrow must not turn a local load test into someone else's outage.
func CheckLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: %q is not an http(s) URL", ErrNotLoopback, raw)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: %s (use 127.0.0.1, ::1 or localhost)", ErrNotLoopback, host)
}

// sent is one delivery's record.
type sent struct {
	ev      *Event
	at      time.Time // when it was sent
	latency time.Duration
	status  int // 0: transport error
}

// Run sends the load to t, drains, checks and reports. An error means the
// run could not be made or checked; violations are in the Result.
func Run(ctx context.Context, t Target, o Options) (Result, error) {
	if err := o.defaults(); err != nil {
		return Result{}, err
	}
	if err := CheckLoopback(t.BaseURL); err != nil {
		return Result{}, err
	}
	if t.DB == nil || t.Table == "" {
		return Result{}, fmt.Errorf("%w: the target needs a DynamoDB client and the ledger table", ErrConfig)
	}
	l, err := ledger.New(t.DB, ledger.Options{Table: t.Table})
	if err != nil {
		return Result{}, err
	}
	if t.HTTP == nil {
		t.HTTP = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			MaxIdleConns: o.MaxInFlight, MaxIdleConnsPerHost: o.MaxInFlight, IdleConnTimeout: 30 * time.Second,
		}}
	}
	// A known answer before measuring: the stack is up and the secrets sign.
	if _, err := fetchDownstream(ctx, t); err != nil {
		return Result{}, fmt.Errorf("the stack at %s does not answer: %w", t.BaseURL, err)
	}
	res := Result{Run: o.Run, OfferedRate: o.Rate, DuplicateRatio: o.DuplicateRatio, Seed: o.Seed, MaxInFlight: o.MaxInFlight}
	events, sends, elapsed, err := send(ctx, t, o, &res)
	if err != nil {
		return res, err
	}
	res.summarizeSends(sends, elapsed)
	fmt.Fprintf(o.Progress, "loadgen | %s: sent %d deliveries of %d events in %.1f s (%d skipped); draining\n",
		o.Run, res.Sent, res.NewEvents, elapsed.Seconds(), res.Skipped)
	accepted := firstAccepted(sends)
	rows, err := drainEvents(ctx, l, events, accepted, o)
	if err != nil {
		return res, err
	}
	// An event never answered 2xx may still have been stored (a 5xx after
	// the put): read it once, so the intents it created are expected, not
	// unexpected.
	var unanswered []*Event
	for ev := range firstSent(sends) {
		if _, ok := accepted[ev]; !ok {
			unanswered = append(unanswered, ev)
		}
	}
	if len(unanswered) > 0 {
		got, err := getRows(ctx, l, unanswered)
		if err != nil {
			return res, err
		}
		for ev, r := range got {
			rows[ev] = r
		}
	}
	res.summarizeEvents(events, rows, firstSent(sends), accepted)
	fmt.Fprintf(o.Progress, "loadgen | %s: %d of %d accepted events PROCESSED; checking their effects\n",
		o.Run, res.Processed, res.Accepted)
	if err := checkEffects(ctx, t, l, o, events, rows, &res); err != nil {
		return res, err
	}
	res.finish()
	return res, nil
}

// progressEvery is how often a long send phase reports on Options.Progress.
const progressEvery = time.Minute

// send runs the open-loop send phase.
func send(ctx context.Context, t Target, o Options, res *Result) ([]*Event, []sent, time.Duration, error) {
	start := o.Now()
	m := newModel(o.Run, o.Seed, o.StripeShare, start)
	rng := rand.New(rand.NewPCG(o.Seed, 0xd0b1e))
	var (
		events []*Event
		mu     sync.Mutex
		sends  []sent
		wg     sync.WaitGroup
	)
	slots := make(chan struct{}, o.MaxInFlight)
	interval := time.Duration(float64(time.Second) / o.Rate)
	timer := time.NewTimer(0)
	defer timer.Stop()
	deadline := start.Add(o.Duration)
	nextReport := start.Add(progressEvery)
	for i := 0; i < o.Count; i++ {
		due := start.Add(time.Duration(i) * interval)
		if !due.Before(deadline) {
			break
		}
		if !due.Before(nextReport) {
			nextReport = nextReport.Add(progressEvery)
			mu.Lock()
			done := len(sends)
			mu.Unlock()
			fmt.Fprintf(o.Progress, "loadgen | %s: %d of %d deliveries scheduled, %d answered, %d skipped, %s\n",
				o.Run, i, o.Count, done, res.Skipped, due.Sub(start).Round(time.Second))
		}
		if d := due.Sub(o.Now()); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				wg.Wait()
				return nil, nil, 0, ctx.Err()
			case <-timer.C:
			}
		}
		// Plan the send whether or not a slot is free, so a skip changes
		// nothing that follows (same seed, same events).
		var ev *Event
		dup, variant := false, VariantPlain
		if len(events) > 0 && rng.Float64() < o.DuplicateRatio {
			// Mostly recent events (still in flight or just processed),
			// sometimes any earlier one.
			k := len(events) - 1 - rng.IntN(min(len(events), 8))
			if rng.IntN(4) == 0 {
				k = rng.IntN(len(events))
			}
			ev, dup = events[k], true
			if rng.IntN(2) == 0 {
				variant = VariantRotation
			}
		} else {
			ev = m.next()
			events = append(events, ev)
		}
		select {
		case slots <- struct{}{}:
		default:
			res.Skipped++
			if !dup {
				res.SkippedNew++
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			s := deliver(ctx, t, o, ev, variant)
			mu.Lock()
			sends = append(sends, s)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return events, sends, o.Now().Sub(start), nil
}

// deliver signs and posts one delivery, once: a provider would retry a
// 5xx, but the generator records it instead (an unanswered event is not
// accepted, so it is not counted as lost).
func deliver(ctx context.Context, t Target, o Options, ev *Event, v Variant) sent {
	now := o.Now()
	s := sent{ev: ev, at: now}
	r, err := Sign(ev, t.Secrets, v, now)
	if err != nil {
		return s
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.BaseURL+r.Path, bytes.NewReader(r.Body))
	if err != nil {
		return s
	}
	for k, v := range r.Headers {
		req.Header.Set(k, v)
	}
	resp, err := t.HTTP.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		s.status = resp.StatusCode
	}
	s.latency = o.Now().Sub(now)
	return s
}

// firstSent is each event's first send time.
func firstSent(sends []sent) map[*Event]time.Time {
	out := map[*Event]time.Time{}
	for _, s := range sends {
		if t, ok := out[s.ev]; !ok || s.at.Before(t) {
			out[s.ev] = s.at
		}
	}
	return out
}

// firstAccepted is each accepted event's first 2xx send.
func firstAccepted(sends []sent) map[*Event]time.Time {
	out := map[*Event]time.Time{}
	for _, s := range sends {
		if s.status < 200 || s.status > 299 {
			continue
		}
		if t, ok := out[s.ev]; !ok || s.at.Before(t) {
			out[s.ev] = s.at
		}
	}
	return out
}
