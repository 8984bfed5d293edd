package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
)

// A requested crash (POST /_dev/crash) has to prove something: a runtime
// killed while its batch held only duplicate pointers, or after it had
// finished its work, interrupts nothing, and the recovery that follows is
// empty. So a requested crash waits for a batch whose runtime claims one of
// its events: while the invocation runs, the stack reads the batch's
// events from the ledger and kills the runtime as soon as one of them was
// claimed during this invocation. Afterwards it reads the batch's events
// again: those still PROCESSING under the killed runtime's lease are what
// the crash interrupted. When there are none (the batch ended without a
// claim, or the runtime finished everything before the kill landed) the
// crash is re-armed for the next batch. GET /_dev/crash says what each kill
// held, which batches a crash passed over and why, and the timings that
// decide how long recovery takes.

// CrashState is the answer of GET /_dev/crash.
type CrashState struct {
	// Armed counts requested crashes that have not landed on claimed work.
	Armed int `json:"armed"`
	// Kills are the runtimes killed, in order, with what each held.
	Kills []CrashKill `json:"kills"`
	// Rearmed are the batches a requested crash passed over, and why.
	Rearmed []CrashRearm `json:"rearmed"`
	Timings Timings      `json:"timings"`
}

// CrashKill is one processor runtime killed mid-batch.
type CrashKill struct {
	At       time.Time `json:"at"`
	Instance string    `json:"instance"` // the function instance, e.g. processor-2
	// Owner is the killed runtime's name in leases and audit entries.
	Owner string `json:"owner"`
	Batch int    `json:"batch"` // messages in the killed invocation's batch
	// Held are the events (source/event_id) the runtime had claimed and not
	// finished when it died: PROCESSING under its lease until another
	// worker takes them over.
	Held []string `json:"held"`
	// Finished are the events of the batch it had finished before.
	Finished []string `json:"finished,omitempty"`
	// LeaseExpires is when the last of Held's leases expires.
	LeaseExpires time.Time `json:"lease_expires,omitzero"`
}

// CrashRearm is a batch a requested crash passed over.
type CrashRearm struct {
	At       time.Time `json:"at"`
	Instance string    `json:"instance,omitempty"`
	Batch    int       `json:"batch"`
	Why      string    `json:"why"`
}

// Timings are the stack's settings that decide how long recovery takes.
type Timings struct {
	VisibilitySeconds        float64 `json:"visibility_seconds"` // the events queue's
	LeaseSeconds             float64 `json:"lease_seconds"`      // the processor's
	FunctionTimeoutSeconds   float64 `json:"function_timeout_seconds"`
	BatchWindowSeconds       float64 `json:"batch_window_seconds"`
	ScheduleSeconds          float64 `json:"schedule_seconds"`        // the reconciler's schedule
	ReconcileStuckSeconds    float64 `json:"reconcile_stuck_seconds"` // its grace before it re-drives
	EffectsVisibilitySeconds float64 `json:"effects_visibility_seconds"`
	DispatchLeaseSeconds     float64 `json:"dispatch_lease_seconds"`
}

// Timings returns the stack's recovery timings.
func (s *Stack) Timings() Timings {
	c := s.cfg
	return Timings{
		VisibilitySeconds: c.Visibility.Seconds(), LeaseSeconds: c.Lease.Seconds(), FunctionTimeoutSeconds: c.FunctionTimeout.Seconds(),
		BatchWindowSeconds: c.BatchWindow.Seconds(), ScheduleSeconds: c.ScheduleRate.Seconds(), ReconcileStuckSeconds: c.ReconcileStuck.Seconds(),
		EffectsVisibilitySeconds: c.EffectsVisibility.Seconds(), DispatchLeaseSeconds: c.DispatchLease.Seconds(),
	}
}

// CrashState reports the requested crashes.
func (s *Stack) CrashState() CrashState {
	s.crashMu.Lock()
	defer s.crashMu.Unlock()
	return CrashState{Armed: s.crashes, Kills: append([]CrashKill{}, s.kills...), Rearmed: append([]CrashRearm{}, s.rearms...), Timings: s.Timings()}
}

// crashAPI serves GET /_dev/crash (CrashState) and DELETE /_dev/crash
// (disarm what has not landed) in front of the HTTP API, where
// POST /_dev/crash arms a crash.
func (s *Stack) crashAPI(next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_dev/crash", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("content-type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.CrashState())
	})
	mux.HandleFunc("DELETE /_dev/crash", func(w http.ResponseWriter, _ *http.Request) {
		s.crashMu.Lock()
		n := s.crashes
		s.crashes = 0
		s.crashMu.Unlock()
		if n > 0 {
			s.logs.Printf("http-api", "disarmed %d requested crash(es) that never landed on claimed work", n)
		}
		w.Header().Set("content-type", "application/json")
		_, _ = fmt.Fprintf(w, "{\"disarmed\":%d}\n", n)
	})
	mux.Handle("/", next)
	return mux
}

// eventRef names one event a pointer message points at.
type eventRef struct{ source, id string }

func (r eventRef) String() string { return r.source + "/" + r.id }

// processorBatch is one invocation of the processor by an event source
// mapping. The stack keeps every one in flight, so a crash hook can tell an
// event only its batch points at from one another batch may claim too.
type processorBatch struct {
	s      *Stack
	poller string
	refs   []eventRef // distinct events the batch's pointers name
	msgs   int
	start  time.Time
	armed  bool // this batch took a requested crash
	stop   chan struct{}
	done   chan struct{} // closed when the crash hook returns

	// Set by the crash hook.
	instance string
	owner    string
	killedAt time.Time
	missed   string // why the hook killed nothing although it saw a claim
}

// startBatch registers a processor batch about to be invoked; it takes a
// requested crash when one is armed and the batch points at some event.
func (s *Stack) startBatch(poller string, msgs []sqstypes.Message) *processorBatch {
	b := &processorBatch{s: s, poller: poller, msgs: len(msgs), start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	for _, m := range msgs {
		p, err := queue.ParsePointer(aws.ToString(m.Body))
		if err != nil {
			continue
		}
		if r := (eventRef{p.Source, p.EventID}); !slices.Contains(b.refs, r) {
			b.refs = append(b.refs, r)
		}
	}
	s.crashMu.Lock()
	defer s.crashMu.Unlock()
	if s.inflight == nil {
		s.inflight = map[*processorBatch]bool{}
	}
	s.inflight[b] = true
	if s.crashes > 0 && len(b.refs) > 0 {
		if s.crashLedger == nil {
			l, err := ledger.New(s.DB, ledger.Options{Table: s.cfg.Table})
			if err != nil {
				s.logs.Printf(poller, "crash hook: %v", err)
				return b
			}
			s.crashLedger = l
		}
		s.crashes--
		b.armed = true
	}
	return b
}

// during returns the crash hook for Invoke, or nil when the batch took no
// crash.
func (b *processorBatch) during() func(*instance) {
	if !b.armed {
		return nil
	}
	return func(in *instance) {
		defer close(b.done)
		b.watch(in)
	}
}

// shared reports whether another batch in flight points at r too: its
// runtime may be the one that claims it.
func (b *processorBatch) shared(r eventRef) bool {
	b.s.crashMu.Lock()
	defer b.s.crashMu.Unlock()
	for o := range b.s.inflight {
		if o != b && slices.Contains(o.refs, r) {
			return true
		}
	}
	return false
}

// watch reads the batch's events until the invocation's runtime has
// claimed one, then kills the runtime. It returns when the invocation
// ended (stop), when every event of the batch is finished, or after the
// kill.
//
// A claim is followed within milliseconds by its commit, so the claim must
// be seen at once. The processor handles a batch's messages in order: the
// next event it claims is the first one still claimable (RECEIVED, a retry
// that is due, an expired lease). So each round reads the events in batch
// order up to that one, one strongly consistent read each, and forgets
// those that are finished or were handled by this invocation.
func (b *processorBatch) watch(in *instance) {
	b.instance = in.name
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-b.stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	pending := slices.Clone(b.refs)
	since := b.start.Add(-time.Millisecond) // audit times have millisecond precision
	for ctx.Err() == nil && len(pending) > 0 {
		var keep []eventRef
		for i, r := range pending {
			if ctx.Err() != nil {
				return
			}
			if b.shared(r) {
				keep = append(keep, r) // another batch's runtime may claim it: look again later
				continue
			}
			ev, err := b.s.crashLedger.Get(ctx, r.source, r.id)
			now := time.Now()
			switch {
			case err != nil:
				keep = append(keep, r)
				continue
			case ev.Status == ledger.StatusProcessing && ev.LeaseOwner != "" && claimedAt(ev).After(since):
				if ctx.Err() != nil {
					return // the invocation ended first
				}
				if !in.killRuntime() {
					b.missed = "no " + in.name + " runtime process to kill"
					return
				}
				b.owner, b.killedAt = ev.LeaseOwner, time.Now()
				return
			case ev.Status.Terminal(), lastAt(ev).After(since) && ev.Status != ledger.StatusProcessing:
				continue // finished, or already handled by this invocation
			}
			keep = append(keep, r)
			claimable := ev.Status == ledger.StatusReceived ||
				(ev.Status == ledger.StatusRetryWait && !ev.NextAttemptAt.After(now)) ||
				(ev.Status == ledger.StatusProcessing && ev.LeaseExpires.Before(now))
			if claimable {
				keep = append(keep, pending[i+1:]...) // the runtime claims this one before any later one
				break
			}
		}
		pending = keep
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Microsecond):
		}
	}
}

// claimedAt is when the event's current lease was taken.
func claimedAt(ev ledger.Event) time.Time {
	for i := len(ev.Audit) - 1; i >= 0; i-- {
		if ev.Audit[i].To == ledger.StatusProcessing {
			return ev.Audit[i].At
		}
	}
	return time.Time{}
}

func lastAt(ev ledger.Event) time.Time {
	if len(ev.Audit) == 0 {
		return time.Time{}
	}
	return ev.Audit[len(ev.Audit)-1].At
}

// end unregisters the batch once its invocation returned. After a kill it
// reads what the killed runtime held and records the kill; a crash that
// interrupted no claimed work is re-armed for the next batch.
func (b *processorBatch) end(ctx context.Context) {
	s := b.s
	close(b.stop)
	if b.armed {
		select {
		case <-b.done:
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
	s.crashMu.Lock()
	delete(s.inflight, b)
	s.crashMu.Unlock()
	if !b.armed || ctx.Err() != nil {
		return
	}
	if b.missed != "" {
		b.rearm(b.missed)
		return
	}
	if b.owner == "" {
		b.rearm(fmt.Sprintf("its runtime claimed none of the batch's %d events (duplicate pointers of finished or leased events)", len(b.refs)))
		return
	}
	// A request the runtime sent just before it died may still be applied:
	// let it land before reading what the runtime left behind.
	time.Sleep(200 * time.Millisecond)
	kill := CrashKill{At: b.killedAt, Instance: b.instance, Owner: b.owner, Batch: b.msgs}
	for _, r := range b.refs {
		ev, err := s.crashLedger.Get(ctx, r.source, r.id)
		if err != nil {
			continue
		}
		if ev.Status == ledger.StatusProcessing && ev.LeaseOwner == b.owner {
			kill.Held = append(kill.Held, r.String())
			if ev.LeaseExpires.After(kill.LeaseExpires) {
				kill.LeaseExpires = ev.LeaseExpires
			}
			continue
		}
		for _, a := range ev.Audit {
			if a.Actor == b.owner && a.From == ledger.StatusProcessing {
				kill.Finished = append(kill.Finished, r.String())
				break
			}
		}
	}
	s.crashMu.Lock()
	s.kills = append(s.kills, kill)
	s.crashMu.Unlock()
	if len(kill.Held) == 0 {
		b.rearm(fmt.Sprintf("killed the %s runtime (%s) mid-batch, but it held no claim any more (it had finished %d of the batch's events)", b.instance, b.owner, len(kill.Finished)))
		return
	}
	s.logs.Printf(b.poller, "killed the %s runtime mid-batch (requested crash): %s held %d claimed event(s) of its batch of %d: %s; another worker takes them over once their lease expires (%s) and a pointer comes back (visibility %s)",
		b.instance, b.owner, len(kill.Held), b.msgs, strings.Join(kill.Held, ", "), kill.LeaseExpires.Format("15:04:05.000"), s.cfg.Visibility)
}

func (b *processorBatch) rearm(why string) {
	s := b.s
	s.crashMu.Lock()
	s.crashes++
	s.rearms = append(s.rearms, CrashRearm{At: time.Now(), Instance: b.instance, Batch: b.msgs, Why: why})
	s.crashMu.Unlock()
	s.logs.Printf(b.poller, "requested crash re-armed for the next batch: %s", why)
}
