package chaos

import (
	"fmt"
	"math/rand/v2"
	"strings"

	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
)

// Op is what one step does.
type Op string

// The steps.
const (
	OpDeliver    Op = "deliver"    // the provider posts Events[Event] (retried until 2xx, as a provider does)
	OpPoll       Op = "poll"       // processor Who runs one queue cycle
	OpDispatch   Op = "dispatch"   // dispatcher Who runs one queue cycle
	OpCrash      Op = "crash"      // arm a crash of Target Who at the Ahead-th next Call, When before|after|lost
	OpPause      Op = "pause"      // processor (or, Target dispatcher, dispatcher) Who polls and stops right before its Ahead-th next Call
	OpResume     Op = "resume"     // the paused processor (or dispatcher) Who goes on
	OpAdvance    Op = "advance"    // the manual clock moves Seconds on
	OpReconcile  Op = "reconcile"  // one reconciler run
	OpDownstream Op = "downstream" // the downstream's next call behaves as Mode
	OpReplay     Op = "replay"     // an operator replays Events[Event] if it is DEAD or QUARANTINED
	OpForge      Op = "forge"      // Events[Event] under a new id, signed with a wrong secret (must touch nothing)
	OpStore      Op = "store"      // the warehouse's S3 store behaves as Mode (down for Seconds, or its next PutObject)
)

// Targets of a crash.
const (
	TargetWorker     = "worker"
	TargetDispatcher = "dispatcher"
	TargetIntake     = "intake"
)

// Downstream modes.
const (
	Mode429        = "429"
	Mode500        = "500"
	Mode503        = "503" // unavailable, Retry-After 20 s
	ModeHangAfter  = "hang_after_apply"
	ModeHangBefore = "hang_before_apply"
)

// Warehouse store modes (OpStore, schedules with the warehouse sink on).
const (
	StoreDown       = "down"              // every S3 request answers 503 SlowDown for Seconds of manual time
	StoreHangAfter  = "hang_after_write"  // the next PutObject is written and its answer held past the client's timeout
	StoreHangBefore = "hang_before_write" // the next PutObject is held past the client's timeout and never written
	Store409        = "409"               // the next PutObject answers 409 ConditionalRequestConflict
)

// storeOutages are the lengths (seconds, manual clock) of a store
// outage: shorter and longer than the dispatcher's attempts on one
// record (8, about 4 minutes of backoff while the run settles).
var storeOutages = []int{20, 61, 301, 601}

// Sources of events.
const (
	SourceOrders = "orders" // the orders source, builtin.Orders (also "")
	SourceStripe = "stripe" // Stripe customer.subscription.* events
)

// Event is one provider fact.
//
// An order event (Source "" or "orders"): its ID is the Standard Webhooks
// webhook-id, which is both its delivery id and its event id; Subject is
// the order, Revision its revision, Status created|confirmed|cancelled.
//
// A Stripe event (Source "stripe"): its ID is the Stripe event id (the
// body's "id"); Subject is the subscription id, Type is created, updated
// or deleted (customer.subscription.<Type>), Revision is the event's
// "created" in seconds after StripeEpoch (an hour before
// pipelinetest.Start), and Status is the subscription's status.
//
// A Stripe event with Thin set is a thin event (object v2.core.event,
// type v1.customer.subscription.<Type>) with no snapshot twin: it carries
// no state, and Type, Revision and Status say what changed in Stripe at
// that time; the processor projects what it fetches from Stripe instead.
//
// The same fact re-sent under a new id is another Event with the same
// content.
type Event struct {
	ID       string `json:"id"`
	Source   string `json:"source,omitempty"`
	Subject  string `json:"subject"`
	Type     string `json:"type,omitempty"`
	Revision int    `json:"revision"`
	Status   string `json:"status"`
	Thin     bool   `json:"thin,omitempty"`
}

// Stripe reports whether e is a Stripe subscription event.
func (e Event) Stripe() bool { return e.Source == SourceStripe }

// SourceName is the ledger source of e.
func (e Event) SourceName() string {
	if e.Stripe() {
		return SourceStripe
	}
	return SourceOrders
}

// key identifies the fact's position: a subject and a version. Two events
// with the same key and different statuses contradict each other.
func (e Event) key() string { return e.Subject + "/" + e.Type + "/" + fmt.Sprint(e.Revision) }

// Step is one action of a schedule; the fields that matter depend on Op.
//
// Target names the instance of a crash, and of a pause or a resume: a
// processor worker ("" or TargetWorker) or a dispatcher.
type Step struct {
	Op Op `json:"op"`
	// Thin, on a delivery of a Stripe snapshot event, delivers its thin
	// twin instead (snapshot_event = the event's id): a migration from
	// snapshot to thin destinations, where both name one fact.
	Thin    bool   `json:"thin,omitempty"`
	Event   int    `json:"event,omitempty"`
	Who     int    `json:"who,omitempty"`
	Target  string `json:"target,omitempty"`
	Call    string `json:"call,omitempty"`
	Ahead   int    `json:"ahead,omitempty"`
	When    string `json:"when,omitempty"`
	Seconds int    `json:"seconds,omitempty"`
	Mode    string `json:"mode,omitempty"`
}

// Schedule is one random run, plain data: printable and replayable.
type Schedule struct {
	Seed        uint64 `json:"seed"`
	Workers     int    `json:"workers"`
	Dispatchers int    `json:"dispatchers"`
	// EffectTarget, when set, is the AWS target that performs every
	// effect instead of the HTTP downstream: TargetStepFunctions.
	EffectTarget string `json:"effect_target,omitempty"`
	// Warehouse turns the warehouse sink on: every applied revision's
	// change record is written to a local S3 (I9), whose failures the
	// schedule's OpStore steps and a share of its dispatcher crash steps
	// (at S3.PutObject) script.
	Warehouse bool `json:"warehouse,omitempty"`
	// ReuseIDs runs the orders under a rule that also emits a state sync,
	// "order.sync" (policy latest, payload the status), keyed by subject
	// and kind without the revision (ReuseOp): every revision after the
	// first reuses its operation id. See the package doc (I10).
	ReuseIDs bool    `json:"reuse_ids,omitempty"`
	Events   []Event `json:"events"`
	Steps    []Step  `json:"steps"`
}

// TargetStepFunctions, as a schedule's EffectTarget: every effect starts
// an execution of a local STANDARD state machine (outbox.StepFunctionsEffect)
// whose workflow performs the call on the fake downstream, with the
// operation id as its key. Step Functions deduplicates by execution name
// (90 days) and answers DescribeExecution, so the reference model
// expects exactly what it expects of the HTTP downstream, whose key it
// remembers and whose status endpoint answers: every invariant holds as
// it is. The downstream's scripted failures become the target's own
// (a throttle, a 500 or 503 not acted on, an answer held past the timeout
// after or before the start), and a third of the dispatcher's crash steps
// hit its StartExecution call.
const TargetStepFunctions = "states"

// Config bounds the generator. The zero value gives small schedules: 2-4
// subjects, 3-8 events, about 40% of the subjects Stripe subscriptions.
type Config struct {
	MinSubjects, MaxSubjects int
	MinEvents, MaxEvents     int
	// StripePercent is the chance (percent) that a subject is a Stripe
	// subscription rather than an order: 0 means the default 40, a
	// negative value means orders only.
	StripePercent int
	// LostPercent is the chance (percent) that a crash step is instead a
	// lost answer: the call is applied, its answer lost, and the SDK
	// retries it (awstrace.Lost); nothing dies. 0 (the default) leaves
	// every schedule as it was: the choice has its own random stream.
	LostPercent int
	// StepFunctionsPercent is the chance (percent) that a schedule's
	// effects are performed by a Step Functions target
	// (TargetStepFunctions) instead of the HTTP downstream. 0 (the
	// default) leaves every schedule as it was: the choice, and where a
	// crash step hits the target's call, have their own random stream.
	StepFunctionsPercent int
	// WarehousePercent is the chance (percent) that a schedule runs with
	// the warehouse sink on (Schedule.Warehouse). 0 (the default) leaves
	// every schedule as it was: the choice, its store steps and which
	// crash steps hit S3.PutObject have their own random stream.
	WarehousePercent int
	// ReusePercent is the chance (percent) that a schedule runs its
	// orders under the rule that reuses an operation id across revisions
	// (Schedule.ReuseIDs). 0 (the default) leaves every schedule as it
	// was: the choice has its own random stream.
	ReusePercent int
}

func (c Config) withDefaults() Config {
	if c.MinSubjects <= 0 {
		c.MinSubjects = 2
	}
	if c.MaxSubjects < c.MinSubjects {
		c.MaxSubjects = max(4, c.MinSubjects)
	}
	if c.MinEvents <= 0 {
		c.MinEvents = 3
	}
	if c.MaxEvents < c.MinEvents {
		c.MaxEvents = max(8, c.MinEvents)
	}
	if c.StripePercent == 0 {
		c.StripePercent = 40
	}
	return c
}

// crashCalls are the calls a crash or a pause may hit: every DynamoDB and
// SQS call the intake, our processor and dispatcher, and the naive cores
// make. A call an instance never makes simply never fires. A dispatcher
// claims (UpdateItem), reads the projection (GetItem), takes a latest
// intent's subject cursor (UpdateItem), calls the downstream and records
// the outcome (UpdateItem).
var crashCalls = map[string][]string{
	TargetWorker:     {"DynamoDB.UpdateItem", "DynamoDB.TransactWriteItems", "DynamoDB.PutItem", "DynamoDB.GetItem", "SQS.SendMessageBatch"},
	TargetDispatcher: {"DynamoDB.UpdateItem", "DynamoDB.UpdateItem", "DynamoDB.GetItem", "SQS.ChangeMessageVisibility"},
	TargetIntake:     {"DynamoDB.UpdateItem", "DynamoDB.PutItem", "SQS.SendMessage"},
}

// dispatcherPauses are where a dispatcher may be paused: mostly right
// before its downstream call, after it checked the intent against the
// truth (the window no local transaction closes; see docs/effects.md),
// else before a DynamoDB call (its claim, its read of the truth, its
// record).
var dispatcherPauses = []string{pt.EffectCall, pt.EffectCall, "DynamoDB.UpdateItem", "DynamoDB.GetItem"}

// statuses: a cancellation (with its two effects) half the time.
var statuses = []string{"created", "confirmed", "cancelled", "cancelled"}

// Stripe subscription statuses by event type: entitled ones (active,
// trialing, past_due) and not entitled ones, so that grants and revokes
// alternate; a deleted subscription is canceled.
var stripeStatuses = map[string][]string{
	"created": {"active", "trialing", "incomplete"},
	"updated": {"active", "past_due", "canceled", "unpaid", "trialing", "active"},
	"deleted": {"canceled"},
}

// Generate returns the schedule of a seed (math/rand/v2 PCG).
func Generate(seed uint64, cfg Config) Schedule {
	cfg = cfg.withDefaults()
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	lost := rand.New(rand.NewPCG(seed, seed^0x10570a5e))
	target := rand.New(rand.NewPCG(seed, seed^0x5f0a7a3e))
	wh := rand.New(rand.NewPCG(seed, seed^0x3a7e40a5e))
	between := func(lo, hi int) int { return lo + r.IntN(hi-lo+1) }
	s := Schedule{Seed: seed, Workers: between(1, 3), Dispatchers: between(1, 3)}
	if cfg.StepFunctionsPercent > 0 && target.IntN(100) < cfg.StepFunctionsPercent {
		s.EffectTarget = TargetStepFunctions
	}
	s.Warehouse = cfg.WarehousePercent > 0 && wh.IntN(100) < cfg.WarehousePercent
	reuse := rand.New(rand.NewPCG(seed, seed^0x2e05e1d5))
	s.ReuseIDs = cfg.ReusePercent > 0 && reuse.IntN(100) < cfg.ReusePercent

	nSub := between(cfg.MinSubjects, cfg.MaxSubjects)
	stripeSub := make([]bool, nSub)
	for i := range stripeSub {
		stripeSub[i] = cfg.StripePercent > 0 && r.IntN(100) < cfg.StripePercent
	}
	nEv := between(cfg.MinEvents, cfg.MaxEvents)
	content := map[string]string{} // Event.key -> status, so a version means one state
	for i := range nEv {
		n := r.IntN(nSub)
		var e Event
		var choices []string
		if stripeSub[n] {
			// A subscription's lifecycle: created early, updates in the
			// first seconds (often several in one second), a deletion
			// usually last; an update stamped after the deletion (clock
			// skew) now and then.
			e = Event{ID: fmt.Sprintf("evt_e%d", i+1), Source: SourceStripe, Subject: fmt.Sprintf("sub_chaos_%d", n+1)}
			switch k := r.IntN(20); {
			case k < 4:
				e.Type, e.Revision = "created", between(0, 1)
			case k < 15:
				e.Type, e.Revision = "updated", between(0, 5)
			default:
				e.Type, e.Revision = "deleted", between(3, 5)
			}
			choices = stripeStatuses[e.Type]
			// A thin event without a snapshot twin now and then.
			e.Thin = r.IntN(5) == 0
		} else {
			e = Event{ID: fmt.Sprintf("e%d", i+1), Subject: fmt.Sprintf("O-%d", n+1), Revision: between(1, 5)}
			choices = statuses
		}
		st, seen := content[e.key()]
		switch {
		case seen && len(choices) > 1 && r.IntN(6) == 0:
			// A rare same-version contradiction.
			e.Status = st
			for e.Status == st {
				e.Status = choices[r.IntN(len(choices))]
			}
		case seen:
			e.Status = st
		default:
			// Cancellations often enough that effects matter.
			e.Status = choices[r.IntN(len(choices))]
			content[e.key()] = e.Status
		}
		s.Events = append(s.Events, e)
		if r.IntN(7) == 0 {
			// The same fact re-sent under a new id.
			dup := e
			dup.ID = e.ID + "-resent"
			s.Events = append(s.Events, dup)
		}
	}

	var contradicted []int
	for i, e := range s.Events {
		if content[e.key()] != e.Status {
			contradicted = append(contradicted, i)
		}
	}

	// Stories (I7): an older fact's effects kept waiting while a
	// newer revision of the same subject arrives. Their events are
	// delivered only by their story's steps.
	storyOnly := map[int]bool{}
	var stories [][]Step
	for n := range nSub {
		if r.IntN(5) >= 2 {
			continue
		}
		older, newer, ok := storyEvents(&s, r, n, stripeSub[n], content)
		if !ok {
			continue
		}
		storyOnly[older], storyOnly[newer] = true, true
		stories = append(stories, storySteps(s, r, older, newer))
	}

	// Deliveries: every event once, some twice (same id), shuffled.
	var deliveries []int
	for i := range s.Events {
		if storyOnly[i] {
			continue
		}
		deliveries = append(deliveries, i)
		if r.IntN(4) == 0 {
			deliveries = append(deliveries, i)
		}
	}
	r.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })

	chaos := func() Step {
		switch k := r.IntN(100); {
		case k < 25:
			st := Step{Op: OpCrash, Ahead: between(1, 2), When: "before"}
			if r.IntN(2) == 0 {
				st.When = "after"
			}
			switch t := r.IntN(10); {
			case t < 5:
				st.Target, st.Who = TargetWorker, r.IntN(s.Workers)
			case t < 8:
				st.Target, st.Who = TargetDispatcher, r.IntN(s.Dispatchers)
			default:
				st.Target = TargetIntake
			}
			calls := crashCalls[st.Target]
			st.Call = calls[r.IntN(len(calls))]
			if s.EffectTarget == TargetStepFunctions && st.Target == TargetDispatcher && target.IntN(3) == 0 {
				st.Call = "SFN.StartExecution"
			}
			if cfg.LostPercent > 0 && lost.IntN(100) < cfg.LostPercent {
				st.When = "lost"
			}
			if s.Warehouse && st.Target == TargetDispatcher && wh.IntN(3) == 0 {
				// The sink's own call: the dispatcher dies right before
				// or right after its PutObject, or the answer is lost.
				st.Call, st.When = "S3.PutObject", []string{"before", "after", "lost"}[wh.IntN(3)]
			}
			return st
		case k < 45:
			if r.IntN(4) == 0 {
				return Step{Op: OpPause, Target: TargetDispatcher, Who: r.IntN(s.Dispatchers), Call: dispatcherPauses[r.IntN(len(dispatcherPauses))], Ahead: 1}
			}
			calls := crashCalls[TargetWorker]
			return Step{Op: OpPause, Who: r.IntN(s.Workers), Call: calls[r.IntN(len(calls))], Ahead: between(1, 2)}
		case k < 65:
			return Step{Op: OpAdvance, Seconds: []int{1, 3, 31, 61, 301}[r.IntN(5)]}
		case k < 73:
			return Step{Op: OpReconcile}
		case k < 93:
			return Step{Op: OpDownstream, Mode: []string{Mode429, Mode503, Mode500, ModeHangAfter, ModeHangBefore}[r.IntN(5)]}
		default:
			// Mostly an event of a contradiction: the one likely to be
			// QUARANTINED, so the replay has something to do.
			if len(contradicted) > 0 && r.IntN(3) > 0 {
				return Step{Op: OpReplay, Event: contradicted[r.IntN(len(contradicted))]}
			}
			return Step{Op: OpReplay, Event: r.IntN(len(s.Events))}
		}
	}
	work := func() Step {
		if r.IntN(5) < 3 {
			return Step{Op: OpPoll, Who: r.IntN(s.Workers)}
		}
		return Step{Op: OpDispatch, Who: r.IntN(s.Dispatchers)}
	}
	add := func() {
		if r.IntN(2) > 0 {
			s.Steps = append(s.Steps, work())
			return
		}
		st := chaos()
		s.Steps = append(s.Steps, st)
		if st.Op == OpPause && st.Target == "" && s.Workers > 1 && r.IntN(3) > 0 {
			// A race: time passes (the message comes back, maybe the
			// lease expires) and another worker picks the event up.
			other := (st.Who + 1 + r.IntN(s.Workers-1)) % s.Workers
			s.Steps = append(s.Steps, Step{Op: OpAdvance, Seconds: []int{3, 31}[r.IntN(2)]})
			if r.IntN(2) == 0 {
				s.Steps = append(s.Steps, Step{Op: OpPoll, Who: other})
			} else {
				// Both in the middle of the same event: the first one
				// goes on while the second holds the lease.
				s.Steps = append(s.Steps, Step{Op: OpPause, Who: other, Call: st.Call, Ahead: 1}, Step{Op: OpResume, Who: st.Who})
			}
		}
	}
	storyAt := map[int][]Step{}
	for _, b := range stories {
		at := r.IntN(len(deliveries) + 1)
		storyAt[at] = append(storyAt[at], b...)
	}
	for i, d := range deliveries {
		s.Steps = append(s.Steps, storyAt[i]...)
		st := Step{Op: OpDeliver, Event: d}
		if e := s.Events[d]; e.Stripe() && !e.Thin && r.IntN(3) == 0 {
			st.Thin = true // its thin twin
		}
		s.Steps = append(s.Steps, st)
		if r.IntN(10) == 0 {
			s.Steps = append(s.Steps, Step{Op: OpForge, Event: d})
		}
		for range 1 + r.IntN(3) {
			add()
		}
	}
	s.Steps = append(s.Steps, storyAt[len(deliveries)]...)
	for range between(2, 8) {
		add()
	}
	// A paused worker is resumed at a random later point (or when the
	// run settles).
	for i := 0; i < len(s.Steps); i++ {
		if s.Steps[i].Op == OpPause && r.IntN(3) > 0 {
			at := i + 1 + r.IntN(len(s.Steps)-i)
			s.Steps = append(s.Steps[:at], append([]Step{{Op: OpResume, Target: s.Steps[i].Target, Who: s.Steps[i].Who}}, s.Steps[at:]...)...)
		}
	}
	if s.Warehouse {
		// The store fails now and then: down for a stretch, or its next
		// PutObject held past the client's timeout (after or before the
		// write) or refused as a concurrent write. Drawn from the sink's
		// own stream, after everything else, so the other steps are
		// those of the schedule without the sink (but for the crash
		// steps moved to S3.PutObject).
		for range 1 + wh.IntN(3) {
			st := Step{Op: OpStore}
			switch k := wh.IntN(20); {
			case k < 8:
				st.Mode, st.Seconds = StoreDown, storeOutages[wh.IntN(len(storeOutages))]
			case k < 13:
				st.Mode = StoreHangAfter
			case k < 16:
				st.Mode = StoreHangBefore
			default:
				st.Mode = Store409
			}
			at := wh.IntN(len(s.Steps) + 1)
			s.Steps = append(s.Steps[:at], append([]Step{st}, s.Steps[at:]...)...)
		}
		// And a dispatcher dies right before or right after the sink's
		// PutObject, or its answer is lost.
		for range wh.IntN(3) {
			st := Step{Op: OpCrash, Target: TargetDispatcher, Who: wh.IntN(s.Dispatchers), Call: "S3.PutObject",
				When: []string{"before", "after", "lost"}[wh.IntN(3)], Ahead: 1 + wh.IntN(2)}
			at := wh.IntN(len(s.Steps) + 1)
			s.Steps = append(s.Steps[:at], append([]Step{st}, s.Steps[at:]...)...)
		}
	}
	return s
}

// storyEvents adds, for subject n, an older fact with effects and a newer
// revision that takes away their reason or state, and returns their
// indexes: for an order, its first cancellation (one is added when it has
// none) and an operator's override, confirmed at a higher revision; for a
// subscription, two updates a few seconds apart, one entitled and one
// not, in either order. ok is false when the versions they need already
// carry other states.
func storyEvents(s *Schedule, r *rand.Rand, n int, stripe bool, content map[string]string) (older, newer int, ok bool) {
	add := func(e Event) int {
		content[e.key()] = e.Status
		s.Events = append(s.Events, e)
		return len(s.Events) - 1
	}
	free := func(e Event) bool { st, seen := content[e.key()]; return !seen || st == e.Status }
	if stripe {
		subj := fmt.Sprintf("sub_chaos_%d", n+1)
		granted, revoked := []string{"active", "trialing"}[r.IntN(2)], []string{"unpaid", "canceled"}[r.IntN(2)]
		first, second := granted, revoked
		if r.IntN(3) == 0 {
			first, second = revoked, granted
		}
		at := r.IntN(3)
		a := Event{ID: fmt.Sprintf("evt_s%da", len(s.Events)+1), Source: SourceStripe, Subject: subj, Type: "updated", Revision: at, Status: first}
		b := Event{ID: fmt.Sprintf("evt_s%db", len(s.Events)+1), Source: SourceStripe, Subject: subj, Type: "updated", Revision: at + 1 + r.IntN(2), Status: second}
		if !free(a) || !free(b) {
			return 0, 0, false
		}
		return add(a), add(b), true
	}
	subj := fmt.Sprintf("O-%d", n+1)
	older = -1
	for i, e := range s.Events {
		if e.Subject == subj && e.Status == "cancelled" && content[e.key()] == e.Status {
			older = i
			break
		}
	}
	if older < 0 {
		c := Event{ID: fmt.Sprintf("s%dc", len(s.Events)+1), Subject: subj, Revision: 1 + r.IntN(4), Status: "cancelled"}
		if !free(c) {
			return 0, 0, false
		}
		older = add(c)
	}
	for rev := s.Events[older].Revision + 1; rev <= s.Events[older].Revision+3; rev++ {
		o := Event{ID: fmt.Sprintf("s%do", len(s.Events)+1), Subject: subj, Revision: rev, Status: "confirmed"}
		if free(o) {
			return older, add(o), true
		}
	}
	return 0, 0, false
}

// storySteps plays a story: the older fact is delivered and processed,
// its effects are held up, the newer revision is delivered and processed
// meanwhile, and another dispatcher goes on. Held up is one of: the
// downstream failing the next calls (503 with Retry-After, 500 or 429)
// while a dispatcher tries them; a dispatcher paused between its check of
// the truth and its call (resumed after the newer revision is committed);
// or simply not dispatched yet (the override while effects are queued).
func storySteps(s Schedule, r *rand.Rand, older, newer int) []Step {
	w := r.IntN(s.Workers)
	w2 := (w + r.IntN(s.Workers)) % s.Workers
	d := r.IntN(s.Dispatchers)
	d2 := (d + 1) % s.Dispatchers
	steps := []Step{{Op: OpDeliver, Event: older}, {Op: OpPoll, Who: w}}
	switch k := r.IntN(6); {
	case k < 3:
		mode := []string{Mode503, Mode503, Mode500, Mode429}[r.IntN(4)]
		steps = append(steps, Step{Op: OpDownstream, Mode: mode}, Step{Op: OpDownstream, Mode: mode},
			Step{Op: OpDispatch, Who: d}, Step{Op: OpDispatch, Who: d},
			Step{Op: OpDeliver, Event: newer}, Step{Op: OpPoll, Who: w2}, Step{Op: OpDispatch, Who: d2})
	case k < 5:
		steps = append(steps, Step{Op: OpPause, Target: TargetDispatcher, Who: d, Call: pt.EffectCall, Ahead: 1},
			Step{Op: OpDeliver, Event: newer}, Step{Op: OpPoll, Who: w2}, Step{Op: OpDispatch, Who: d2},
			Step{Op: OpResume, Target: TargetDispatcher, Who: d})
	default:
		steps = append(steps, Step{Op: OpDeliver, Event: newer}, Step{Op: OpPoll, Who: w2}, Step{Op: OpDispatch, Who: d2})
	}
	return steps
}

// String renders one step compactly.
func (st Step) String() string {
	switch st.Op {
	case OpDeliver, OpReplay, OpForge:
		if st.Thin {
			return fmt.Sprintf("%s e#%d (thin twin)", st.Op, st.Event)
		}
		return fmt.Sprintf("%s e#%d", st.Op, st.Event)
	case OpPoll, OpDispatch:
		return fmt.Sprintf("%s %d", st.Op, st.Who)
	case OpResume:
		if st.Target == TargetDispatcher {
			return fmt.Sprintf("resume dispatcher %d", st.Who)
		}
		return fmt.Sprintf("%s %d", st.Op, st.Who)
	case OpCrash:
		return fmt.Sprintf("crash %s %d %s %s +%d", st.Target, st.Who, st.When, st.Call, st.Ahead)
	case OpPause:
		if st.Target == TargetDispatcher {
			return fmt.Sprintf("pause dispatcher %d before %s +%d", st.Who, st.Call, st.Ahead)
		}
		return fmt.Sprintf("pause %d before %s +%d", st.Who, st.Call, st.Ahead)
	case OpAdvance:
		return fmt.Sprintf("advance %ds", st.Seconds)
	case OpDownstream:
		return "downstream " + st.Mode
	case OpStore:
		if st.Mode == StoreDown {
			return fmt.Sprintf("store down %ds", st.Seconds)
		}
		return "store " + st.Mode
	}
	return string(st.Op)
}

// GoString renders the schedule as a Go expression, for a reproducer.
func (s Schedule) GoString() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos.Schedule{Seed: %d, Workers: %d, Dispatchers: %d,", s.Seed, s.Workers, s.Dispatchers)
	if s.EffectTarget != "" {
		fmt.Fprintf(&b, " EffectTarget: %q,", s.EffectTarget)
	}
	if s.Warehouse {
		b.WriteString(" Warehouse: true,")
	}
	b.WriteString("\n\tEvents: []chaos.Event{\n")
	for _, e := range s.Events {
		if e.Stripe() {
			thin := ""
			if e.Thin {
				thin = ", Thin: true"
			}
			fmt.Fprintf(&b, "\t\t{ID: %q, Source: %q, Subject: %q, Type: %q, Revision: %d, Status: %q%s},\n", e.ID, e.Source, e.Subject, e.Type, e.Revision, e.Status, thin)
			continue
		}
		fmt.Fprintf(&b, "\t\t{ID: %q, Subject: %q, Revision: %d, Status: %q},\n", e.ID, e.Subject, e.Revision, e.Status)
	}
	b.WriteString("\t},\n\tSteps: []chaos.Step{\n")
	for _, st := range s.Steps {
		b.WriteString("\t\t{Op: " + opConst(st.Op))
		if st.Thin {
			b.WriteString(", Thin: true")
		}
		if st.Event != 0 {
			fmt.Fprintf(&b, ", Event: %d", st.Event)
		}
		if st.Who != 0 {
			fmt.Fprintf(&b, ", Who: %d", st.Who)
		}
		if st.Target != "" {
			fmt.Fprintf(&b, ", Target: %q", st.Target)
		}
		if st.Call != "" {
			fmt.Fprintf(&b, ", Call: %q", st.Call)
		}
		if st.Ahead != 0 {
			fmt.Fprintf(&b, ", Ahead: %d", st.Ahead)
		}
		if st.When != "" {
			fmt.Fprintf(&b, ", When: %q", st.When)
		}
		if st.Seconds != 0 {
			fmt.Fprintf(&b, ", Seconds: %d", st.Seconds)
		}
		if st.Mode != "" {
			fmt.Fprintf(&b, ", Mode: %q", st.Mode)
		}
		b.WriteString("},\n")
	}
	b.WriteString("\t},\n}")
	return b.String()
}

func opConst(op Op) string {
	name := string(op)
	return "chaos.Op" + strings.ToUpper(name[:1]) + name[1:]
}
