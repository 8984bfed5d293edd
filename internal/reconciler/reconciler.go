package reconciler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/effectively-once/webhooks/internal/intake"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/metrics"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/processor"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/source"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// Ledger is what the reconciler reads and writes.
type Ledger interface {
	ListDue(ctx context.Context, before time.Time, limit int) ([]ledger.DueRef, error)
	ListDueIntents(ctx context.Context, before time.Time, limit int) ([]ledger.IntentDueRef, error)
	ListOpen(ctx context.Context, kind string, limit int, statuses ...ledger.Status) ([]ledger.OpenItem, error)
	GiveUp(ctx context.Context, source, eventID, actor, reason, letter string) (ledger.Event, error)
	Accept(ctx context.Context, d ledger.Delivery) (ledger.Accepted, error)
	GetProjection(ctx context.Context, name, subject string) (ledger.Projection, error)
	GetIntentState(ctx context.Context, op string) (ledger.IntentState, error)
	ListSyncDue(ctx context.Context, before time.Time, limit int) ([]ledger.SubjectCursor, error)
	MarkSynced(ctx context.Context, c ledger.SubjectCursor, next time.Time) error
}

var _ Ledger = (*ledger.Ledger)(nil)

// SQS is the part of the SQS client the reconciler uses.
type SQS interface {
	queue.SQS
	queue.DLQClient
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

var _ SQS = (*sqs.Client)(nil)

// Queues names the four queues, and the EventBridge bridge's DLQ when
// some source has eventbridge delivery.
type Queues struct {
	Events, EventsDLQ, Effects, EffectsDLQ string
	BridgeDLQ                              string
}

// BridgeSweeper redelivers the EventBridge bridge's dead letters through
// the bridge's own accept path (intake.Handler), those its allowed
// senders wrote only (intake.Handler.DLQSenders).
type BridgeSweeper interface {
	SweepEventBridgeDLQ(ctx context.Context, c queue.DLQClient, dlqURL string, maxMessages int) (intake.BridgeDLQReport, error)
}

var _ BridgeSweeper = (*intake.Handler)(nil)

// Options bound and tune a run.
type Options struct {
	// StuckAfter is how long the normal path gets before the reconciler
	// steps in. Default 5 minutes.
	StuckAfter time.Duration
	// MaxItems bounds the items one run touches, per step. Default 500.
	MaxItems int
	// Budget bounds one run's time (the function's timeout must exceed it).
	// Default 90 s.
	Budget time.Duration
	// DriftChecks bounds the subjects whose downstream one run asks for
	// their version (one status request each). Default DefaultDriftChecks.
	DriftChecks int
	// DLQWait is how long each receive of the DLQ sweeps long-polls (SQS
	// WaitTimeSeconds, whole seconds, 1 to 20). Default
	// queue.DefaultDLQWait (1 s): a sweep ends at the first empty answer
	// to a long poll, so an empty DLQ costs one wait per DLQ, inside
	// Budget. Negative short-polls, which SQS may answer empty while dead
	// letters wait: only for an emulator whose short poll is exact (goaws).
	DLQWait time.Duration
	// Actor names the reconciler in audit entries. Default "reconciler".
	Actor string
	Now   func() time.Time
	Log   *slog.Logger
	// Metrics receives one EMF record per run.
	Metrics *metrics.Emitter
}

// Reconciler is one configured reconciler.
type Reconciler struct {
	Ledger   Ledger
	SQS      SQS
	Queues   Queues
	Sources  *source.Set
	Registry *projection.Registry
	// Truths are the sources of truth by source name.
	Truths map[string]SourceOfTruth
	// Bridge sweeps Queues.BridgeDLQ (both set, or the step is skipped).
	Bridge BridgeSweeper
	// Effects are the dispatcher's effects by intent kind; those that are
	// an outbox.SubjectStatus let the drift check ask the downstream which
	// version of a subject it holds. None: every subject is skipped.
	Effects map[string]outbox.Effect
	// Warehouse, when set, checks the warehouse sink's records against
	// the canonical versions (see WarehouseCheck).
	Warehouse *WarehouseCheck
	Opts      Options
}

// Report is what one run did and saw.
type Report struct {
	Reenqueued         int                    `json:"reenqueued"`
	StuckLeases        int                    `json:"stuck_leases"`
	IntentsReannounced int                    `json:"intents_reannounced"`
	DLQ                processor.SweepReport  `json:"dlq"`
	EffectsDLQ         outbox.DLQReport       `json:"effects_dlq"`
	BridgeDLQ          intake.BridgeDLQReport `json:"bridge_dlq"`
	FactsChecked       int                    `json:"facts_checked"`
	DriftFound         int                    `json:"drift_found"`
	DriftRepaired      int                    `json:"drift_repaired"`
	EventsByStatus     map[string]int         `json:"events_by_status"`
	IntentsByStatus    map[string]int         `json:"intents_by_status"`
	OldestUnfinished   time.Duration          `json:"oldest_unfinished_ns"`
	EventsDLQDepth     int                    `json:"events_dlq_depth"`
	EffectsDLQDepth    int                    `json:"effects_dlq_depth"`
	BridgeDLQDepth     int                    `json:"bridge_dlq_depth"`
	// Downstream is the downstream drift check (DownstreamDrift is its
	// Drifting).
	Downstream DriftReport `json:"downstream"`
	// CompensationsDue counts the CONTRADICTED intents that wait for the
	// recovery owner.
	CompensationsDue int `json:"compensations_due"`
	// Warehouse is the warehouse drift check (WarehouseDrift is its
	// Drifting).
	Warehouse WarehouseReport `json:"warehouse"`
	// Capped says a count hit MaxItems: there is more than it shows.
	Capped bool          `json:"capped"`
	Errors []string      `json:"errors,omitempty"`
	Took   time.Duration `json:"took_ns"`
}

func (r *Reconciler) opts() Options {
	o := r.Opts
	if o.StuckAfter <= 0 {
		o.StuckAfter = 5 * time.Minute
	}
	if o.MaxItems <= 0 {
		o.MaxItems = 500
	}
	if o.Budget <= 0 {
		o.Budget = 90 * time.Second
	}
	if o.Actor == "" {
		o.Actor = "reconciler"
	}
	if o.DriftChecks <= 0 {
		o.DriftChecks = DefaultDriftChecks
	}
	if o.DLQWait == 0 {
		o.DLQWait = queue.DefaultDLQWait
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o
}

// Run performs one bounded pass. A failing step is reported and the others
// still run; the error joins every step's failure.
func (r *Reconciler) Run(ctx context.Context) (Report, error) {
	o := r.opts()
	start := o.Now()
	ctx, cancel := context.WithTimeout(ctx, o.Budget)
	defer cancel()
	rep := Report{EventsByStatus: map[string]int{}, IntentsByStatus: map[string]int{}}
	var errs []error
	step := func(name string, fn func() error) {
		if ctx.Err() != nil {
			errs = append(errs, fmt.Errorf("%s: skipped, run budget spent", name))
			return
		}
		if err := fn(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	cutoff := start.Add(-o.StuckAfter)
	dlq := queue.DLQWait{DLQClient: r.SQS, Wait: o.DLQWait}
	step("reenqueue", func() error { return r.reenqueue(ctx, o, cutoff, &rep) })
	step("intents", func() error {
		n, err := outbox.AnnounceDue(ctx, r.Ledger, r.effectsQueue(), cutoff, o.MaxItems, "reconcile")
		rep.IntentsReannounced = n
		return err
	})
	if r.Queues.BridgeDLQ != "" && r.Bridge != nil {
		step("bridge dlq", func() error {
			sw, err := r.Bridge.SweepEventBridgeDLQ(ctx, dlq, r.Queues.BridgeDLQ, o.MaxItems)
			rep.BridgeDLQ = sw
			return err
		})
	}
	if r.Queues.EventsDLQ != "" {
		step("dlq", func() error {
			sw, err := processor.SweepDLQ(ctx, dlq, r.Queues.EventsDLQ, r.Ledger, o.Actor, o.MaxItems, o.Log)
			rep.DLQ = sw
			return err
		})
	}
	if r.Queues.EffectsDLQ != "" {
		step("effects dlq", func() error {
			sw, err := outbox.SweepDLQ(ctx, dlq, r.Queues.EffectsDLQ, r.Ledger, o.MaxItems, o.Log)
			rep.EffectsDLQ = sw
			return err
		})
	}
	step("truth", func() error { return r.compare(ctx, o, &rep) })
	step("downstream", func() error { return r.drift(ctx, o, start, &rep) })
	if r.Warehouse != nil {
		step("warehouse", func() error { return r.warehouse(ctx, start, &rep) })
	}
	step("gauges", func() error { return r.gauges(ctx, o, start, &rep) })
	rep.Took = o.Now().Sub(start)
	for _, e := range errs {
		rep.Errors = append(rep.Errors, e.Error())
	}
	r.emit(o, rep)
	err := errors.Join(errs...)
	lvl := slog.LevelInfo
	if err != nil {
		lvl = slog.LevelWarn
	}
	o.Log.Log(ctx, lvl, "reconciled", "reenqueued", rep.Reenqueued, "stuck_leases", rep.StuckLeases,
		"intents_reannounced", rep.IntentsReannounced, "dead_marked", rep.DLQ.MarkedDead, "facts_checked", rep.FactsChecked,
		"bridge_redelivered", rep.BridgeDLQ.Accepted, "bridge_dlq_refused", rep.BridgeDLQ.Refused, "drift_found", rep.DriftFound, "drift_repaired", rep.DriftRepaired,
		"downstream_drift", rep.Downstream.Drifting, "warehouse_drift", rep.Warehouse.Drifting, "warehouse_pass_drift", rep.Warehouse.Pass.Drifting, "warehouse_pass_completed", rep.Warehouse.Completed, "downstream_reannounced", rep.Downstream.Reannounced, "compensations_due", rep.CompensationsDue, "duration_ms", rep.Took.Milliseconds(), "errors", rep.Errors)
	return rep, err
}

// effectsQueue announces intents to the dispatcher.
func (r *Reconciler) effectsQueue() queue.Sender {
	return queue.Sender{Client: r.SQS, URL: r.Queues.Effects}
}

func (r *Reconciler) reenqueue(ctx context.Context, o Options, cutoff time.Time, rep *Report) error {
	due, err := r.Ledger.ListDue(ctx, cutoff, o.MaxItems)
	if err != nil {
		return err
	}
	if len(due) == 0 {
		return nil
	}
	ps := make([]queue.Pointer, len(due))
	for i, d := range due {
		ps[i] = queue.Pointer{Source: d.Source, EventID: d.EventID, Reason: "reconcile"}
		if d.Status == ledger.StatusProcessing {
			rep.StuckLeases++
		}
	}
	unsent, err := queue.Sender{Client: r.SQS, URL: r.Queues.Events}.SendEvents(ctx, ps)
	rep.Reenqueued = len(ps) - len(unsent)
	return err
}

// compare asks each source of truth and feeds what the store lacks.
func (r *Reconciler) compare(ctx context.Context, o Options, rep *Report) error {
	var errs []error
	budget := o.MaxItems
	for _, name := range r.Sources.Names() {
		truth, ok := r.Truths[name]
		if !ok || budget <= 0 {
			continue
		}
		src, _ := r.Sources.Lookup(name)
		lookback := time.Hour
		if src.Truth != nil {
			lookback = src.Truth.Lookback()
		}
		facts, err := truth.Facts(ctx, o.Now().Add(-lookback), budget)
		if err != nil {
			errs = append(errs, fmt.Errorf("source %s: %w", name, err))
			continue
		}
		budget -= len(facts)
		for _, f := range facts {
			rep.FactsChecked++
			drift, why, err := r.behind(ctx, src, f)
			if err != nil {
				errs = append(errs, fmt.Errorf("source %s fact %s: %w", name, f.EventType, err))
				continue
			}
			if !drift {
				continue
			}
			rep.DriftFound++
			repaired, err := r.feed(ctx, src, f)
			if err != nil {
				errs = append(errs, fmt.Errorf("source %s: feed: %w", name, err))
				continue
			}
			if repaired {
				rep.DriftRepaired++
			}
			o.Log.Warn("drift found", "source", name, "event_id", ReconcileEventID(name, f), "type", f.EventType, "why", why, "fed", repaired)
		}
	}
	return errors.Join(errs...)
}

// behind projects the fact with the source's projection and compares it
// with the stored projection.
func (r *Reconciler) behind(ctx context.Context, src source.Source, f Fact) (bool, string, error) {
	proj, ok := r.Registry.Lookup(src.Kind, f.EventType)
	if !ok {
		return false, "", nil // no projection: nothing to compare
	}
	// The processor's own guard: a team's projection that panics fails
	// this fact's comparison with a message naming it, not the whole run.
	_, res, err := processor.Project(proj, src.Scope(), projection.Event{Source: src.Name, Kind: src.Kind, EventID: ReconcileEventID(src.Name, f), Type: f.EventType, Payload: f.Payload}, r.opts().Log)
	if err != nil {
		return false, "", fmt.Errorf("project: %w", err)
	}
	// Compared with the state this source owns, as the processor writes it.
	res = projection.Scoped(src.Scope(), res)
	if res.Write == nil {
		return false, "", nil
	}
	w := res.Write
	cur, err := r.Ledger.GetProjection(ctx, w.Name, w.Subject)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return true, "missing locally", nil
	case err != nil:
		return false, "", err
	case cur.Version < w.Version:
		return true, "local version " + strconv.FormatInt(cur.Version, 10) + " < source " + strconv.FormatInt(w.Version, 10), nil
	case cur.Version == w.Version && cur.Fingerprint != w.Fingerprint && !cur.Terminal:
		return true, "same version, different state", nil
	}
	return false, "", nil
}

// feed accepts the fact as a reconciliation event and enqueues it. It
// reports false when the ledger already holds that event (in flight or
// finished): nothing new to feed.
func (r *Reconciler) feed(ctx context.Context, src source.Source, f Fact) (bool, error) {
	id := ReconcileEventID(src.Name, f)
	acc, err := r.Ledger.Accept(ctx, ledger.Delivery{
		Source: src.Name, EventID: id, EventType: f.EventType, DeliveryID: "reconcile",
		Payload: f.Payload, Attributes: map[string]string{"origin": "reconciler"},
	})
	if err != nil {
		return false, err
	}
	if acc.Duplicate {
		return false, nil
	}
	// If this send fails the event is RECEIVED without a pointer: step 1 of
	// a later run re-enqueues it.
	return true, queue.Sender{Client: r.SQS, URL: r.Queues.Events}.Send(ctx, queue.Pointer{Source: src.Name, EventID: id, Reason: "reconcile"})
}

func (r *Reconciler) gauges(ctx context.Context, o Options, now time.Time, rep *Report) error {
	var errs []error
	evs, err := r.Ledger.ListOpen(ctx, "event", o.MaxItems)
	if err != nil {
		errs = append(errs, err)
	}
	for _, e := range evs {
		rep.EventsByStatus[e.Status]++
		if e.Status != string(ledger.StatusDead) && e.Status != string(ledger.StatusQuarantined) && !e.ReceivedAt.IsZero() {
			rep.OldestUnfinished = max(rep.OldestUnfinished, now.Sub(e.ReceivedAt))
		}
	}
	ins, err := r.Ledger.ListOpen(ctx, "intent", o.MaxItems)
	if err != nil {
		errs = append(errs, err)
	}
	for _, in := range ins {
		rep.IntentsByStatus[in.Status]++
	}
	rep.Capped = len(evs) >= o.MaxItems || len(ins) >= o.MaxItems
	if err := r.compensationsDue(ctx, o, rep); err != nil {
		errs = append(errs, err)
	}
	for _, q := range []struct {
		url string
		n   *int
	}{{r.Queues.EventsDLQ, &rep.EventsDLQDepth}, {r.Queues.EffectsDLQ, &rep.EffectsDLQDepth}, {r.Queues.BridgeDLQ, &rep.BridgeDLQDepth}} {
		if q.url == "" {
			continue
		}
		n, err := depth(ctx, r.SQS, q.url)
		if err != nil {
			errs = append(errs, err)
		}
		*q.n = n
	}
	return errors.Join(errs...)
}

// depth is a queue's visible plus in-flight messages.
func depth(ctx context.Context, c SQS, url string) (int, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []sqstypes.QueueAttributeName{
		sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
	}})
	if err != nil {
		return 0, fmt.Errorf("depth of %s: %w", url, err)
	}
	n := 0
	for _, a := range []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible} {
		v, _ := strconv.Atoi(out.Attributes[string(a)])
		n += v
	}
	return n, nil
}

func (r *Reconciler) emit(o Options, rep Report) {
	unfinished := rep.EventsByStatus[string(ledger.StatusReceived)] + rep.EventsByStatus[string(ledger.StatusProcessing)] + rep.EventsByStatus[string(ledger.StatusRetryWait)]
	ms := []metrics.Metric{
		metrics.N("CompensationsDue", rep.CompensationsDue),
		metrics.N("DownstreamDrift", rep.Downstream.Drifting),
		metrics.N("Reenqueued", rep.Reenqueued),
		metrics.N("StuckLeases", rep.StuckLeases),
		metrics.N("IntentsReannounced", rep.IntentsReannounced),
		metrics.N("DeadMarked", rep.DLQ.MarkedDead),
		metrics.N("DriftFound", rep.DriftFound),
		metrics.N("DriftRepaired", rep.DriftRepaired),
		metrics.N("UnfinishedEvents", unfinished),
		metrics.Age("OldestUnfinishedAgeSeconds", rep.OldestUnfinished),
		metrics.N("DeadEvents", rep.EventsByStatus[string(ledger.StatusDead)]),
		metrics.N("QuarantinedEvents", rep.EventsByStatus[string(ledger.StatusQuarantined)]),
		metrics.N("IntentsPending", rep.IntentsByStatus[string(ledger.IntentStatusPending)]),
		metrics.N("IntentsUncertain", rep.IntentsByStatus[string(ledger.IntentStatusUncertain)]),
		metrics.N("IntentsQuarantined", rep.IntentsByStatus[string(ledger.IntentStatusQuarantined)]),
		metrics.N("EventsDLQDepth", rep.EventsDLQDepth),
		metrics.N("EffectsDLQDepth", rep.EffectsDLQDepth),
		metrics.N("BridgeRedelivered", rep.BridgeDLQ.Accepted),
		metrics.N("BridgeDLQRefused", rep.BridgeDLQ.Refused),
		metrics.N("BridgeDLQDepth", rep.BridgeDLQDepth),
		metrics.Latency("ReconcileRunMs", rep.Took),
	}
	o.Metrics.Emit(map[string]any{"function": "reconciler", "capped": rep.Capped, "errors": len(rep.Errors)}, append(ms, r.warehouseMetrics(rep.Warehouse)...)...)
}

// warehouseMetrics are the warehouse check's metrics: the last complete
// pass's drift, only once a pass has completed (a partial pass's count
// would read as a fall in drift), and the age of that pass (of the first,
// until it completes), which an alarm bounds.
func (r *Reconciler) warehouseMetrics(w WarehouseReport) []metrics.Metric {
	if r.Warehouse == nil {
		return nil
	}
	ms := []metrics.Metric{metrics.Age("WarehouseCheckPassAgeSeconds", w.PassAge)}
	if !w.Pass.Completed.IsZero() {
		ms = append(ms, metrics.N("WarehouseDrift", w.Pass.Drifting), metrics.Age("WarehouseDriftOldestAgeSeconds", w.Pass.OldestDrift))
	}
	return ms
}
