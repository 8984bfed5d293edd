package webhookstest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/harness/awstrace"
	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/reconciler"
	"github.com/effectively-once/webhooks/internal/warehouse"
)

// observed is what one run left: the ledger's rows, the downstream's
// calls, and what the run itself saw go wrong.
type observed struct {
	events      map[string]ledger.Event // by event id
	projections map[subjectKey]ledger.Projection
	intents     map[string]ledger.IntentState // by operation id
	// arrivals are the effect calls the downstream received, in order;
	// phaseEnd[p] is how many had arrived when dispatch p ended.
	arrivals  []pt.Arrival
	phaseEnd  []int
	effective map[string]int // effective calls per operation id
	// counts are the calls each first instance made (for crash points).
	counts   map[string]map[string]int
	problems []Failure
	// crashed: an instance crashed and was replaced.
	crashed bool
	// records are the warehouse's change records (Pipeline.Warehouse).
	records []warehouse.Record
}

// Bounds of a run, in rounds of the settle loops (each idle round moves
// the manual clock by idleStep, past a lease).
const (
	maxRounds = 120
	idleStep  = 31 * time.Second
)

// runner plays one schedule.
type runner struct {
	k      *kit
	s      schedule
	ctx    context.Context
	h      *pt.Harness
	v      *pt.Virtual
	worker *pt.Worker
	disp   *pt.Dispatcher
	gen    int
	obs    observed
	// first are the first instances' recorders: their calls in a clean
	// run are where crash points are chosen.
	first map[string]*awstrace.Recorder
}

// play runs one schedule through a fresh pipeline and returns what it
// left. A panic of the team's code inside the pipeline is reported as a
// failure of the run; a harness that stops is an error.
func (k *kit) play(s schedule) (obs observed, err error) {
	tb := pt.NewRunTB(fmt.Sprintf("webhookstest/run-%d", s.run))
	r := &runner{k: k, s: s, ctx: context.Background()}
	defer func() {
		if p := recover(); p != nil {
			if f, ok := p.(pt.RunFatal); ok {
				err = fmt.Errorf("the in-process pipeline stopped in run %d: %s", s.run, f.Msg)
			} else {
				r.problem(Processed, "the pipeline panicked (a panic in a projection?): %v", p)
				obs = r.obs
			}
		}
		tb.RunCleanups()
	}()
	r.start(tb)
	steps := s.steps(k.facts)
	for i, st := range steps {
		d := st.f.d
		if st.copy {
			d = st.f.again
		}
		// A provider's retry of the same delivery, before it is processed.
		r.deliver(d, st.f.secret, st.name())
		r.deliver(d, st.f.secret, st.name())
		r.process()
		r.checkCombined(st.name(), i == len(steps)-1)
		if s.eager || i == len(steps)-1 {
			r.dispatch()
		}
	}
	r.observe()
	return r.obs, nil
}

// start builds the run's pipeline: the team's sources and registry, the
// team's effects against the fake downstream, one processor and one
// dispatcher, and the schedule's crash armed.
func (r *runner) start(tb *pt.RunTB) {
	k := r.k
	r.h = pt.New(tb, pt.Options{MaxReceiveCount: 20, Registry: k.p.Rules.Registry, SourcesDoc: k.cfg.sourcesDoc, Secrets: k.cfg.secrets})
	ob := r.h.EnableOutbox(pt.OutboxOptions{})
	tb.Cleanup(r.deleteQueues)
	// The team's effects replace the harness's: each calls the fake
	// downstream at its own path, with its kind's scopes and window, and
	// asks the downstream's status endpoint when an outcome is unknown.
	for kind := range ob.Effects {
		delete(ob.Effects, kind)
	}
	client := &http.Client{Timeout: 2 * time.Second}
	for _, e := range k.cfg.effects {
		ob.Effects[e.Kind] = &outbox.HTTPEffect{Name: e.Kind, URL: ob.URL + "/" + e.Kind, StatusURL: ob.URL + "/status",
			Secret: pt.DownstreamToken, Window: e.Window(), Client: client, Clock: r.h.Clock, Scopes: e.Scopes}
	}
	if k.p.Warehouse {
		r.h.EnableWarehouse(0)
	}
	r.v = r.h.NewVirtual()
	r.worker = r.newWorker()
	r.disp = r.newDispatcher()
	r.obs = observed{counts: map[string]map[string]int{}}
	if c := r.s.crash; c != nil {
		switch c.who {
		case "intake":
			r.h.IntakeRec.Arm(c.c)
		case "processor":
			r.worker.Rec.Arm(c.c)
		case "dispatcher":
			r.disp.Rec.Arm(c.c)
		}
	}
	r.first = map[string]*awstrace.Recorder{"intake": r.h.IntakeRec, "processor": r.worker.Rec, "dispatcher": r.disp.Rec}
}

func (r *runner) newWorker() *pt.Worker {
	r.gen++
	return r.h.NewChaosWorker(fmt.Sprintf("processor-%d", r.gen))
}

func (r *runner) newDispatcher() *pt.Dispatcher {
	r.gen++
	return r.h.Outbox.NewChaosDispatcherWith(fmt.Sprintf("dispatcher-%d", r.gen), r.v, pt.ChaosDispatcherOptions{})
}

func (r *runner) problem(rule Rule, format string, a ...any) {
	r.obs.problems = append(r.obs.problems, Failure{Rule: rule, Detail: fmt.Sprintf(format, a...)})
}

// deliver posts one delivery, signed now, and retries it as a provider
// does while the intake crashes (a new instance takes the retry).
func (r *runner) deliver(d delivery, secret, name string) {
	for range 5 {
		h, err := d.headers(secret, r.h.Clock.Now())
		if err != nil {
			r.problem(Processed, "event %s: %v", name, err)
			return
		}
		resp := r.h.DeliverTo(d.src.Name, d.body, h)
		if r.h.IntakeRec.Crashed() {
			r.h.IntakeRec.Reset()
			r.obs.crashed = true
			continue
		}
		if resp.Status/100 != 2 {
			r.problem(Processed, "the intake answered the delivery of event %s %d: %s", name, resp.Status, strings.TrimSpace(string(resp.Body)))
		}
		return
	}
	r.problem(Processed, "the intake never accepted event %s", name)
}

// process runs the processor until every delivered event is finished.
func (r *runner) process() {
	for range maxRounds {
		if r.v.Cycle(r.ctx, r.h.Queues.Queue, 10, r.worker.Rec, r.worker.P.HandleSQS) > 0 {
			if r.worker.Rec.Crashed() {
				r.worker = r.newWorker()
				r.obs.crashed = true
			}
			continue
		}
		if r.h.Depth(r.h.Queues.Queue) == 0 && r.finished(true, false) {
			return
		}
		r.idle()
	}
	r.problem(Processed, "the events were not all finished after %s of the pipeline's time", maxRounds*idleStep)
}

// dispatch runs the dispatcher until every intent is finished, and marks
// the end of a dispatch.
func (r *runner) dispatch() {
	defer func() { r.obs.phaseEnd = append(r.obs.phaseEnd, len(r.h.Outbox.Arrivals(""))) }()
	for range maxRounds {
		if r.v.Cycle(r.ctx, r.h.Outbox.Queues.Queue, r.disp.Batch, r.disp.Rec, r.disp.C.HandleSQS) > 0 {
			if r.disp.Rec.Crashed() {
				r.disp = r.newDispatcher()
				r.obs.crashed = true
			}
			continue
		}
		if r.h.Depth(r.h.Outbox.Queues.Queue) == 0 && r.finished(false, true) {
			return
		}
		r.idle()
	}
	r.problem(Processed, "the intents were not all finished after %s of the pipeline's time", maxRounds*idleStep)
}

// finished reports whether every event (or intent) in the ledger is in a
// final state.
func (r *runner) finished(events, intents bool) bool {
	snap, err := ledger.TakeSnapshot(r.ctx, r.h.DB, r.h.Table)
	if err != nil {
		r.h.T.Fatalf("snapshot: %v", err)
	}
	if events {
		for _, ev := range snap.Events {
			if !ev.Status.Terminal() {
				return false
			}
		}
	}
	if intents {
		for _, in := range snap.Intents {
			if !ledger.IntentStatus(in.Status).Terminal() {
				return false
			}
		}
	}
	return true
}

// idle lets the pipeline's time pass: leases and backoffs expire, held
// messages come back, and the reconciler runs, as its schedule would.
func (r *runner) idle() {
	r.h.Clock.Advance(idleStep)
	r.v.Release(r.ctx)
	h := r.h
	rc := &reconciler.Reconciler{Ledger: h.Ledger, SQS: h.SQS, Sources: h.Sources, Registry: r.k.p.Rules.Registry,
		Queues: reconciler.Queues{Events: h.Queues.Queue, EventsDLQ: h.Queues.DLQ, Effects: h.Outbox.Queues.Queue, EffectsDLQ: h.Outbox.Queues.DLQ},
		// goaws answers a short poll with every message: no long poll.
		Opts: reconciler.Options{Now: h.Clock.Now, Log: slog.New(slog.DiscardHandler), MaxItems: 100, DLQWait: -1}}
	if _, err := rc.Run(r.ctx); err != nil {
		r.problem(Processed, "the reconciler failed: %v", err)
	}
}

// observe reads what the run left.
func (r *runner) observe() {
	snap, err := ledger.TakeSnapshot(r.ctx, r.h.DB, r.h.Table)
	if err != nil {
		r.h.T.Fatalf("snapshot: %v", err)
	}
	o := &r.obs
	o.events = map[string]ledger.Event{}
	for _, ev := range snap.Events {
		o.events[ev.EventID] = ev
	}
	o.projections = map[subjectKey]ledger.Projection{}
	for _, p := range snap.Projections {
		o.projections[subjectKey{name: p.Name, subject: p.Subject}] = p
	}
	o.intents = map[string]ledger.IntentState{}
	for _, in := range snap.Intents {
		st, err := r.h.Ledger.GetIntentState(r.ctx, in.OperationID)
		if err != nil {
			r.h.T.Fatalf("intent %s: %v", in.OperationID, err)
		}
		o.intents[in.OperationID] = st
	}
	for who, rec := range r.first {
		o.counts[who] = rec.Counts()
	}
	o.arrivals = r.h.Outbox.Arrivals("")
	if r.h.Warehouse != nil {
		o.records = r.h.Warehouse.Records()
	}
	o.effective = r.h.Outbox.Down.EffectiveByKey()
}

// deleteQueues removes the run's queues from the process-wide SQS
// emulator, which every queue slows down.
func (r *runner) deleteQueues() {
	urls := []string{r.h.Queues.Queue, r.h.Queues.DLQ}
	if r.h.Outbox != nil {
		urls = append(urls, r.h.Outbox.Queues.Queue, r.h.Outbox.Queues.DLQ)
	}
	for _, u := range urls {
		_, _ = r.h.SQS.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(u)})
	}
}
