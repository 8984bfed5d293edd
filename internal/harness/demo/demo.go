// Package demo provides `make demo`: it sends a realistic mix of signed
// deliveries to a running local stack (duplicates, concurrent duplicates,
// out-of-order revisions, forged signatures, an unknown subject, a
// processor killed mid-batch), waits until the pipeline is quiet, and
// reports the business outcome: every subject the run touched (Stripe
// subscriptions, the O-42 order, the Shopify order, the Quiltt connections,
// the GitHub push, the unowned subscription) with its final state and
// version next to what the senders meant (subjects.go), intents per
// operation id, ledger counts by status and outcome, duplicates suppressed,
// stale events, anything quarantined or dead and why, and every violated
// invariant (see docs/architecture.md), checked against a model of what the
// senders meant. Counts are this run's unless labelled as the whole
// ledger's or a whole queue's.
//
// The processor crash must prove something (crash.go): the stack kills a
// runtime only while it holds a claim and re-arms the crash otherwise; the
// report names the killed runtime, the events it held, and from each
// event's ledger audit the takeover by another worker and the completion.
// A crash that interrupted nothing, or held work not taken over, fails the
// run. Before sending, the demo says how long recovery takes with the
// stack's timings; while waiting it prints what is open, by status and
// kind, and when it should be done.
//
// The effects are real: the stack's dispatcher performs every intent the
// run creates against the stack's fake downstream, and the report gives
// each intent's final status and the downstream's effective calls per
// operation id (exactly 1 each, or the run fails). The O-42 order's story
// includes the downstream timeout after success: the demo scripts the
// downstream (POST /_dev/downstream/script) to apply the cancellation's
// refund and then hang, so the dispatcher records UNCERTAIN and the
// refund's status lookup resolves it; the cancellation notice is throttled
// with Retry-After, then applied and left hanging, and a retry with the
// same key is replayed. Neither happens twice.
//
// Once the main story is quiet, the truth moves on while effects wait
// (movedon.go; I7): in the override story order O-43 is cancelled at r12,
// its refund and notice meet a 503 with Retry-After, and the operator's r13
// (order.confirmed) is processed while they wait, so their retries end
// OBSOLETE without a call; in the grant/revoke race a subscription's grant
// meets a 503, its deletion's revoke is performed meanwhile, and the
// grant's retry ends SUPERSEDED. The stories script the downstream only
// after everything else is done, and drop scripted answers no call used
// before and after, so each 503 answers its story's call. The report then
// compares, per subject the run's effects concern, the canonical state and
// version in the ledger's projection with the downstream's own view of what
// it applied (truth.go), lists every SUPERSEDED, OBSOLETE and CONTRADICTED
// intent and every compensation, and fails the run when the downstream is
// not where the truth says, went back to an older version, or performed an
// action the final truth does not justify without a record of it.
//
// Stripe thin events are mixed into the story (see thin.go): before
// sending, the demo sets each subscription's current state in the stack's
// fake Stripe API (PUT /_dev/stripe/objects/…), then sends thin events on
// their own (one scripted to meet a 429 with Retry-After: 1 first, one for
// a cancellation only Stripe's state shows) and two migration pairs, a
// snapshot event and its thin twin in either order. A subscription a thin
// event was resolved for must end in Stripe's state; each pair must be one
// ledger row with one outcome and its intents once.
//
// When the stack runs the warehouse sink, its change records are not
// calls to the downstream: the checks above leave them out, and the
// report ends with the warehouse against the truth (warehouse.go): per
// subject the run changed last, the canonical version, the warehouse's
// version and its current row, read with DuckDB from the local S3; the
// demo waits, within a bound, for them to be in step, and fails with what
// differs.
package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/harness/localwarehouse"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/pkg/builtin"
)

// Target is the stack the demo drives.
type Target struct {
	BaseURL  string // the HTTP API, e.g. http://127.0.0.1:3000
	DB       *dynamodb.Client
	Table    string
	SQS      *sqs.Client
	QueueURL string
	DLQURL   string
	// EffectsQueueURL is the outbox queue the dispatcher consumes. When it
	// is set the demo also waits for the run's effects, scripts the fake
	// downstream behind BaseURL/_dev/downstream, and checks what it did.
	EffectsQueueURL string
	Secret          string                      // the stripe source's (fake) signing secret
	Crash           func(context.Context) error // arms a processor crash mid-batch; optional
	// Others are the secrets of the other providers' sources, by source
	// name ("orders", "shopify", "github", "quiltt"); those present get
	// their deliveries too.
	Others ProviderSecrets
	// WarehouseBucket, when set, is the warehouse sink's bucket (under
	// WarehousePrefix) in the S3 that S3 reaches: the report compares the
	// run's subjects' canonical projections with the warehouse's current
	// rows (warehouse.go).
	WarehouseBucket, WarehousePrefix string
	S3                               localwarehouse.Lister
}

// Options tune a run.
type Options struct {
	Subjects int           // default 6
	Seed     uint64        // default 42: the same seed sends the same story
	Timeout  time.Duration // how long to wait for quiet; default 90 s
	Progress io.Writer     // default io.Discard
}

// delivery is one HTTP request the demo sends.
type delivery struct {
	ev      *event
	secret  string
	forged  bool
	attempt int
	// next is sent by the same sender once this one was answered (a
	// migration pair, in its order).
	next *delivery
}

// event is one provider fact in the model, or a thin event (Thin set).
type event struct {
	ID, Type, Sub, Status, Account string
	Created                        int64
	Body                           []byte
	Thin                           *thinRole
}

// fact is the id of the ledger row a delivery of ev concerns: a thin
// twin's is its snapshot event's.
func (e *event) fact() string {
	if e.Thin != nil && e.Thin.Twin != nil {
		return e.Thin.Twin.ID
	}
	return e.ID
}

func (e *event) version() int64 {
	rank := map[string]int64{"customer.subscription.created": 1, "customer.subscription.updated": 2, "customer.subscription.deleted": 3}[e.Type]
	if e.Type == "customer.subscription.deleted" {
		return builtin.DeletedVersionBase + e.Created*4 + rank // a deletion is final
	}
	return e.Created*4 + rank
}

// Run plays the story against t and checks the outcome.
func Run(ctx context.Context, t Target, o Options) (Report, error) {
	if o.Subjects <= 0 {
		o.Subjects = 6
	}
	if o.Seed == 0 {
		o.Seed = 42
	}
	if o.Timeout <= 0 {
		o.Timeout = 90 * time.Second
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	start := time.Now()
	rng := rand.New(rand.NewPCG(o.Seed, 0xdead))
	story := newStory(o.Subjects, start.Unix())
	rep := Report{Seed: o.Seed, statusOf: map[string]int{}}

	// How long recovery takes on this stack, said before the wait starts.
	crash := &CrashOutcome{Requested: t.Crash != nil}
	st, reported := crashState(ctx, t.BaseURL)
	crash.Reported = reported
	var timings *devstack.Timings
	if reported {
		timings = &st.Timings
		for _, line := range describeTimings(st.Timings, crash.Requested) {
			progress(o.Progress, "%s", line)
		}
	} else {
		progress(o.Progress, "this stack does not report its timings or what a crash held (GET /_dev/crash): a `make dev` from an older tree; restart it for the full report")
	}

	// 0. Stripe's truth, before anything is sent: what a thin event's
	// fetch will find.
	if len(story.thins) > 0 {
		progress(o.Progress, "setting Stripe's truth: %d subscriptions in the fake Stripe API; the first fetch for %s will meet a 429 (Retry-After: 1)", len(story.subs), story.rateLimitedSub())
		if err := setStripeTruth(ctx, t.BaseURL, story); err != nil {
			return rep, err
		}
	}

	// 1. Forged signatures first: they must leave no trace.
	progress(o.Progress, "sending %d forged deliveries (wrong secret)", len(story.forged))
	for _, ev := range story.forged {
		rep.record(ev.ID, send(ctx, t.BaseURL, delivery{ev: ev, secret: "whsec_local_FAKE_attacker_guess_9999", forged: true}))
	}

	// 2. Twenty concurrent deliveries of one event.
	first := story.events[0]
	progress(o.Progress, "sending 20 concurrent deliveries of %s", first.ID)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code := send(ctx, t.BaseURL, delivery{ev: first, secret: t.Secret})
			mu.Lock()
			rep.record(first.ID, code)
			mu.Unlock()
		}()
	}
	wg.Wait()

	// 3. A processor crash mid-batch, then everything else shuffled (out of
	// order), with duplicates, eight senders at once.
	armed := time.Now()
	if t.Crash != nil {
		progress(o.Progress, "arming a processor crash: the stack kills a processor runtime in the middle of the first batch whose runtime claims an event (re-armed while a batch holds no claimed work)")
		if err := t.Crash(ctx); err != nil {
			return rep, fmt.Errorf("arm crash: %w", err)
		}
	}
	var plan []delivery
	for _, ev := range story.events[1:] {
		if story.paired(ev) {
			continue // sent with its thin twin, in the pair's order
		}
		copies := 1
		if rng.Float64() < 0.35 {
			copies += 1 + rng.IntN(2)
		}
		for i := range copies {
			plan = append(plan, delivery{ev: ev, secret: t.Secret, attempt: i})
		}
	}
	plan = append(plan, story.pairDeliveries(t.Secret)...)
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	progress(o.Progress, "sending %d deliveries of %d events out of order, with duplicates; among them %d Stripe thin events on their own and %d migration pairs (a snapshot event and its thin twin, one after the other)",
		len(plan), len(story.events)-1, len(story.thins)-len(story.twins), len(story.twins))
	work := make(chan delivery)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range work {
				for p := &d; p != nil; p = p.next {
					code := send(ctx, t.BaseURL, *p)
					mu.Lock()
					rep.record(p.ev.fact(), code)
					mu.Unlock()
				}
			}
		}()
	}
	for i, d := range plan {
		work <- d
		if (i+1)%20 == 0 {
			progress(o.Progress, "  sent %d/%d", i+1, len(plan))
		}
	}
	close(work)
	wg.Wait()

	// The other providers: duplicates under new delivery ids, svix-* headers,
	// a partly duplicate Quiltt batch, and one forged request each. The O-42
	// cancellation's effects meet a downstream that times out after
	// applying them.
	var others []otherDelivery
	for _, d := range otherStory(story.run) {
		if _, ok := t.Others[d.source]; ok {
			others = append(others, d)
		}
	}
	stories := map[string]string{} // source/event_id → the scripted story its effects play in
	if _, ok := t.Others["orders"]; ok && t.EffectsQueueURL != "" {
		// An answer scripted earlier and never used (an earlier run cut
		// short) would answer these calls instead.
		if cleared, err := clearScripts(ctx, t.BaseURL); err != nil {
			return rep, err
		} else if len(cleared) > 0 {
			progress(o.Progress, "dropped scripted downstream answers no call had used (%v)", cleared)
		}
		progress(o.Progress, "scripting the fake downstream: the O-42 refund is applied and then the downstream hangs; the notice is throttled (429), then applied and left hanging")
		if err := scriptDownstream(ctx, t.BaseURL, downstreamScripts); err != nil {
			return rep, err
		}
		stories["orders/msg_o42_12_"+story.run] = StoryTimeout
	}
	rng.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
	if len(others) > 0 {
		progress(o.Progress, "sending %d deliveries to %d other providers (and one forged request each)", len(others), len(t.Others))
	}
	for _, d := range others {
		code := sendOther(ctx, t.BaseURL, d, t.Others[d.source])
		rep.recordOther(d, code, false)
	}
	for src := range t.Others {
		for _, d := range others {
			if d.source == src {
				rep.recordOther(d, sendOther(ctx, t.BaseURL, d, "local_FAKE_attacker_guess_9999"), true)
				break
			}
		}
	}

	// 4. Wait until the pipeline is quiet: every event of this run
	// finished and, with the dispatcher, every effect of this run.
	causes := map[string]bool{}
	for _, ev := range story.events {
		causes["stripe/"+ev.ID] = true
	}
	for _, d := range others {
		for _, id := range d.events {
			causes[d.source+"/"+id] = true
		}
	}
	ann := &announcer{sender: queue.Sender{Client: t.SQS, URL: t.EffectsQueueURL}, after: 5 * time.Second, done: map[string]bool{}}
	snap, quiet := waitQuiet(ctx, t, o, story.run, causes, t.EffectsQueueURL != "", ann, timings)
	rep.Announced = len(ann.done)
	if t.Crash != nil && reported {
		// A crash still armed now never found a batch holding claimed
		// work: nothing is left to claim, so withdraw it.
		if st, ok := crashState(ctx, t.BaseURL); ok && st.Armed > 0 {
			crash.Disarmed = disarm(ctx, t.BaseURL)
			progress(o.Progress, "the requested crash never landed on claimed work; withdrawn")
		}
	}
	// 5. The truth moves on while effects wait (movedon.go): the override
	// story and the grant/revoke race, played once nothing else of the
	// run calls the downstream.
	var moved *movedOn
	if quiet && t.EffectsQueueURL != "" {
		_, orders := t.Others["orders"]
		moved = newMovedOn(story.run, start.Unix(), orders)
		for e, name := range moved.stories() {
			causes[e] = true
			stories[e] = name
		}
		if err := moved.play(ctx, t, o, &rep); err != nil {
			return rep, err
		}
	}
	// 6. Late duplicates of processed events: 200 with their outcome.
	for _, ev := range story.events[:3] {
		rep.record(ev.ID, send(ctx, t.BaseURL, delivery{ev: ev, secret: t.Secret}))
	}
	if quiet {
		var err error
		if snap, err = ledger.TakeSnapshot(ctx, t.DB, t.Table); err != nil {
			return rep, err
		}
	}
	rep.check(story, snap, quiet, depth(ctx, t.SQS, t.DLQURL), causes)
	rows := runRows(snap, story.run)
	rep.checkSubjects(expectations(others), rows, snap, downstreamIntents(snap, causes))
	if reported {
		st, _ = crashState(ctx, t.BaseURL)
	}
	rep.checkCrash(crash, st, armed, rows)
	if len(story.thins) > 0 {
		reqs, err := stripeRequests(ctx, t.BaseURL)
		if err != nil {
			return rep, err
		}
		rep.checkThin(story, snap, reqs)
	}
	if t.EffectsQueueURL != "" {
		if err := rep.effects(ctx, t, snap, causes, stories, moved, rows); err != nil {
			return rep, err
		}
	}
	if t.WarehouseBucket != "" && t.S3 != nil {
		if err := rep.checkWarehouse(ctx, t, snap.Projections, causes, warehouseWait(timings), o.Progress); err != nil {
			return rep, err
		}
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// effects reads the run's intents with their audit trails and the fake
// downstream's record, and checks them: per intent, per subject against
// the truth, and the stories of the truth moving on (when they were
// played: moved set).
func (r *Report) effects(ctx context.Context, t Target, snap ledger.Snapshot, causes map[string]bool, stories map[string]string, moved *movedOn, rows map[string]ledger.Event) error {
	l, err := ledger.New(t.DB, ledger.Options{Table: t.Table})
	if err != nil {
		return err
	}
	var states []ledger.IntentState
	for _, in := range downstreamIntents(snap, causes) {
		st, err := l.GetIntentState(ctx, in.OperationID)
		if err != nil {
			return err
		}
		states = append(states, st)
	}
	down, err := downstreamState(ctx, t.BaseURL)
	if err != nil {
		return err
	}
	r.checkEffects(states, down, stories)
	r.checkTruth(states, snap.Projections, down)
	if moved != nil {
		r.checkMoved(moved, rows, snap.Projections, states, down)
	}
	return nil
}

// story is the model: what the senders meant.
type story struct {
	run    string
	events []*event // every legitimate event (thin twins aside); [0] is sent concurrently
	forged []*event
	subs   []string
	orphan *event
	// thins are the Stripe thin events (twins included), twins the thin
	// twins of snapshot events (not in events: one fact with their
	// snapshot), truth each subscription's state in the fake Stripe API.
	thins []*event
	twins []*event
	truth map[string]string
}

// newStory builds the story; ids carry a run tag so the demo can run again
// and again against one stack.
func newStory(n int, now int64) *story {
	s := &story{}
	base := now - 3600
	run := strconv.FormatInt(now%(36*36*36*36), 36)
	s.run = run
	statuses := []string{"trialing", "active", "past_due", "active"}
	for i := range n {
		sub := fmt.Sprintf("sub_demo%s_%02d", run, i+1)
		acct := fmt.Sprintf("acct_demo%s_%02d", run, i+1)
		s.subs = append(s.subs, sub)
		t0 := base + int64(i)*10
		for k, st := range statuses {
			typ := "customer.subscription.updated"
			if k == 0 {
				typ = "customer.subscription.created"
			}
			s.events = append(s.events, newEvent(fmt.Sprintf("evt_demo%s_%02d_%d", run, i+1, k), typ, sub, st, acct, t0+int64(k)*100))
		}
		if i%3 == 2 {
			s.events = append(s.events, newEvent(fmt.Sprintf("evt_demo%s_%02d_del", run, i+1), "customer.subscription.deleted", sub, "canceled", acct, t0+400))
		}
		if i%2 == 1 {
			// A second event in the same second with the same state: a noop.
			s.events = append(s.events, newEvent(fmt.Sprintf("evt_demo%s_%02d_same_second", run, i+1), "customer.subscription.updated", sub, "active", acct, t0+300))
		}
	}
	s.orphan = newEvent("evt_demo"+run+"_orphan", "customer.subscription.updated", "sub_demo"+run+"_orphan", "active", "", base)
	s.events = append(s.events, s.orphan)
	for k := range 3 {
		s.forged = append(s.forged, newEvent(fmt.Sprintf("evt_demo%s_forged_%d", run, k), "customer.subscription.updated", s.subs[0], "canceled", "acct_demo"+run+"_01", now))
	}
	s.addThin(now)
	return s
}

func newEvent(id, typ, sub, status, account string, created int64) *event {
	body := fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2025-03-31.basil","created":%d,"type":%q,"livemode":false,"pending_webhooks":1,`+
		`"data":{"object":%s}}`, id, created, typ, subscriptionObject(sub, status, account))
	return &event{ID: id, Type: typ, Sub: sub, Status: status, Account: account, Created: created, Body: body}
}

// subscriptionObject is the subscription as Stripe renders it, in a
// snapshot event's data.object and from the API.
func subscriptionObject(sub, status, account string) []byte {
	meta := "{}"
	if account != "" {
		meta = fmt.Sprintf(`{"account_id":%q}`, account)
	}
	return fmt.Appendf(nil, `{"id":%q,"object":"subscription","customer":"cus_%s","status":%q,"cancel_at_period_end":false,"metadata":%s,`+
		`"items":{"object":"list","data":[{"id":"si_%s","current_period_end":1800000000,"price":{"id":"price_demo_pro"}}]}}`,
		sub, sub[4:], status, meta, sub[4:])
}

var client = &http.Client{Timeout: 30 * time.Second}

// send posts one signed Stripe delivery and returns the HTTP status.
func send(ctx context.Context, base string, d delivery) int {
	return post(ctx, base+"/webhooks/stripe", d.ev.Body, func(now time.Time) map[string]string {
		sig := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: d.ev.Body, Secret: d.secret, Timestamp: now}).Header
		return map[string]string{"Content-Type": "application/json; charset=utf-8", "Stripe-Signature": sig,
			"User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks) demo"}
	})
}

// post sends body with freshly signed headers and returns the HTTP status
// (0 on a transport error). A 5xx is retried a few times, re-signed each
// time, as a provider would.
func post(ctx context.Context, url string, body []byte, headers func(now time.Time) map[string]string) int {
	for attempt := range 5 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		for k, v := range headers(time.Now()) {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode < 500 {
				return resp.StatusCode
			}
		}
		time.Sleep(time.Duration(100*(attempt+1)) * time.Millisecond)
	}
	return 0
}

func progress(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "demo | "+format+"\n", args...)
}

// waitQuiet polls until no event of this run (run tag) is unfinished and,
// with effects, no intent this run caused (causes) is unfinished, twice in
// a row. Pointer messages still in the events queue do not hold it up:
// once an event's row is finished, a pointer to it is acknowledged without
// effect. Intents still PENDING a while after their commit are announced
// by ann. Each line says what is open, by status and kind, and, with the
// stack's timings, when it should be done and why then.
func waitQuiet(ctx context.Context, t Target, o Options, run string, causes map[string]bool, effects bool, ann *announcer, timings *devstack.Timings) (ledger.Snapshot, bool) {
	deadline := time.Now().Add(o.Timeout)
	calm := 0
	var snap ledger.Snapshot
	last, lastAt := "", time.Time{}
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var err error
		snap, err = ledger.TakeSnapshot(ctx, t.DB, t.Table)
		if err == nil {
			now := time.Now()
			rows := runRows(snap, run)
			open := map[string]map[string]int{}
			unfinished := 0
			var latest openItem
			killed := map[string]time.Time{} // lease owner → when it was killed
			if timings != nil {
				if st, ok := crashState(ctx, t.BaseURL); ok {
					for _, k := range st.Kills {
						killed[k.Owner] = k.At
					}
				}
			}
			for _, ev := range rows {
				if ev.Status.Terminal() {
					continue
				}
				unfinished++
				count(open, string(ev.Status), ev.Source)
				if timings != nil {
					if it := eventETA(ev, *timings, now, killed); it.eta.After(latest.eta) {
						latest = it
					}
				}
			}
			line := fmt.Sprintf("waiting: %d of this run's %d events open", unfinished, len(rows))
			if unfinished > 0 {
				line += " (" + openSummary(open) + ")"
			}
			if effects {
				intents := runIntents(snap, causes)
				waiting := 0
				openIntents := map[string]map[string]int{}
				for _, in := range intents {
					if !ledger.IntentStatus(in.Status).Terminal() {
						waiting++
						count(openIntents, in.Status, in.Kind)
					}
				}
				line += fmt.Sprintf("; %d of its %d effects open", waiting, len(intents))
				if waiting > 0 {
					line += " (" + openSummary(openIntents) + ")"
				}
				unfinished += waiting
				ann.sweep(ctx, intents, now)
			}
			line += fmt.Sprintf("; %d messages in the events queue (whole queue, in flight included)", depth(ctx, t.SQS, t.QueueURL))
			eta := ""
			if !latest.eta.IsZero() {
				eta = fmt.Sprintf("expected done in ~%s (by %s)", latest.eta.Sub(now).Round(time.Second), clock(latest.eta))
			}
			switch {
			case line != last:
				out := line
				if eta != "" {
					out += "\ndemo |   " + eta + ": " + latest.why
				}
				progress(o.Progress, "%s", out)
				last, lastAt = line, now
			case unfinished > 0 && now.Sub(lastAt) >= 15*time.Second:
				// Nothing changed: say so briefly, with the countdown.
				progress(o.Progress, "  still waiting, nothing changed; %s", orDash(eta))
				lastAt = now
			}
			if unfinished == 0 {
				if calm++; calm >= 2 {
					return snap, true
				}
			} else {
				calm = 0
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	return snap, false
}

func count(m map[string]map[string]int, status, kind string) {
	if m[status] == nil {
		m[status] = map[string]int{}
	}
	m[status][kind]++
}

func depth(ctx context.Context, c *sqs.Client, url string) int {
	if c == nil || url == "" {
		return 0
	}
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages}})
	if err != nil {
		return -1
	}
	n, _ := strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
	return n
}

// expectedFinal returns, per subject, the snapshot event whose state must
// win among the snapshot events.
func (s *story) expectedFinal() map[string]*event {
	final := map[string]*event{}
	for _, ev := range s.events {
		if ev.Account == "" || ev.Thin != nil {
			continue // the orphan; a thin event's state is Stripe's (truth)
		}
		cur := final[ev.Sub]
		if cur == nil || (cur.Type != "customer.subscription.deleted" && ev.version() > cur.version()) {
			final[ev.Sub] = ev
		}
	}
	return final
}
