package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
)

// Limiter paces a bulk replay: Wait returns when the next replay may go.
type Limiter interface {
	Wait(ctx context.Context) error
}

// Pacer lets one call through per Interval. Now and Sleep are injected so
// tests count the waits instead of timing them.
type Pacer struct {
	Interval time.Duration
	Now      func() time.Time
	Sleep    func(ctx context.Context, d time.Duration) error
	next     time.Time
}

// NewPacer paces on the wall clock.
func NewPacer(interval time.Duration) *Pacer {
	return &Pacer{Interval: interval, Now: time.Now, Sleep: sleepCtx}
}

// Wait blocks until the next slot, or until ctx is done.
func (p *Pacer) Wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := p.Now()
	if p.next.After(now) {
		if err := p.Sleep(ctx, p.next.Sub(now)); err != nil {
			return err
		}
		now = p.next
	}
	p.next = now.Add(p.Interval)
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// enqueue sends the replay pointer and says what happened.
func (a *App) enqueue(ctx context.Context, url, source, eventID string) (string, error) {
	err := queue.Sender{Client: a.SQS, URL: url}.Send(ctx, queue.Pointer{Source: source, EventID: eventID, Reason: "replay"})
	if err != nil {
		return "NOT enqueued (" + err.Error() + "): the event stays RECEIVED and the reconciler re-enqueues it", err
	}
	return "enqueued", nil
}

type replayJSON struct {
	Source   string `json:"source"`
	EventID  string `json:"event_id"`
	Status   string `json:"status"`
	Actor    string `json:"actor"`
	Reason   string `json:"reason"`
	Enqueued bool   `json:"enqueued"`
	Note     string `json:"note"`
}

// Replay moves one DEAD or QUARANTINED event back to RECEIVED (same
// identity; the audit records the operator and reason) and enqueues it.
// action names it in the output ("replay" or "release").
func (a *App) Replay(ctx context.Context, source, eventID, reason string) error {
	return a.replayOne(ctx, "replayed", source, eventID, reason, a.Ledger.Replay)
}

func (a *App) replayOne(ctx context.Context, verb, source, eventID, reason string,
	reopen func(ctx context.Context, source, eventID, actor, reason string) (ledger.Event, error)) error {
	if reason == "" {
		return fmt.Errorf("%w: --reason is required: it goes into the audit trail", ErrUsage)
	}
	if _, err := a.actor(ctx); err != nil {
		return err
	}
	url, err := a.queueURL(ctx, qEvents)
	if err != nil {
		return err
	}
	ev, err := reopen(ctx, source, eventID, a.Actor, reason)
	if err != nil {
		if errors.Is(err, ledger.ErrNotReplayable) {
			if verb == "released" {
				return fmt.Errorf("refused: %s/%s is %s; only a QUARANTINED event can be released", source, eventID, ev.Status)
			}
			return fmt.Errorf("refused: %s/%s is %s; only DEAD or QUARANTINED events can be replayed", source, eventID, ev.Status)
		}
		return err
	}
	note, serr := a.enqueue(ctx, url, source, eventID)
	if a.JSON {
		if err := a.printJSON(replayJSON{Source: source, EventID: eventID, Status: string(ev.Status), Actor: a.Actor, Reason: reason, Enqueued: serr == nil, Note: note}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.Out, "%s %s/%s -> %s (same identity; audit: %s by %s: %s)\n%s\n", verb, safe(source), safe(eventID), ev.Status, ev.Audit[len(ev.Audit)-1].Action, a.Actor, safe(reason), safe(note))
	}
	if serr != nil {
		return fmt.Errorf("%w: replayed but not enqueued", ErrIncomplete)
	}
	return nil
}

// BulkQuery selects the events of a bulk replay.
type BulkQuery struct {
	Status    ledger.Status // DEAD or QUARANTINED
	Source    string
	EventType string
	Reason    string
	// Interval between replays (the rate limit); default 200 ms (5/s).
	Interval time.Duration
	// Checkpoint is a file recording what this bulk replay did, so a rerun
	// after an interruption skips those events even if they died again.
	Checkpoint string
	Limit      int // most events per run, default 500
	DryRun     bool
}

// checkpoint is the file format.
type checkpoint struct {
	Version int            `json:"version"`
	Status  string         `json:"status"`
	Source  string         `json:"source,omitempty"`
	Type    string         `json:"type,omitempty"`
	Done    []checkpointEv `json:"done"`
	Updated time.Time      `json:"updated_at"`
}

type checkpointEv struct {
	Source  string    `json:"source"`
	EventID string    `json:"event_id"`
	At      time.Time `json:"at"`
	Actor   string    `json:"actor"`
}

func loadCheckpoint(path string, q BulkQuery) (*checkpoint, error) {
	cp := &checkpoint{Version: 1, Status: string(q.Status), Source: q.Source, Type: q.EventType}
	if path == "" {
		return cp, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return cp, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	var got checkpoint
	if err := json.Unmarshal(b, &got); err != nil || got.Version != 1 {
		return nil, fmt.Errorf("%w: %s is not a webhookctl checkpoint", ErrUsage, path)
	}
	if got.Status != cp.Status || got.Source != cp.Source || got.Type != cp.Type {
		return nil, fmt.Errorf("%w: checkpoint %s was written for --status %s --source %q --type %q; use another file for another filter",
			ErrUsage, path, got.Status, got.Source, got.Type)
	}
	return &got, nil
}

// save writes the checkpoint atomically (a temporary file renamed over it).
func (cp *checkpoint) save(path string, now time.Time) error {
	if path == "" {
		return nil
	}
	cp.Updated = now
	b, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	return nil
}

// BulkSummary is what a bulk replay did.
type BulkSummary struct {
	Matched     int  `json:"matched"`
	Replayed    int  `json:"replayed"`
	NotEnqueued int  `json:"not_enqueued"`
	Checkpoint  int  `json:"skipped_in_checkpoint"`
	Moved       int  `json:"skipped_no_longer_matching"`
	Failed      int  `json:"failed"`
	Interrupted bool `json:"interrupted"`
	More        bool `json:"more"`
	DryRun      bool `json:"dry_run,omitempty"`
}

// BulkReplay replays every event in q.Status that matches, oldest first, at
// most one per q.Interval, printing a line per event. It resumes: an event
// already replayed is no longer DEAD/QUARANTINED and is not listed again,
// and one recorded in the checkpoint file is skipped even if it has died
// again since. A cancelled ctx stops it between two events.
func (a *App) BulkReplay(ctx context.Context, q BulkQuery) error {
	q, err := bulkQuery(q)
	if err != nil {
		return err
	}
	if !q.DryRun {
		if _, err := a.actor(ctx); err != nil {
			return err
		}
	}
	cp, err := loadCheckpoint(q.Checkpoint, q)
	if err != nil {
		return err
	}
	url := ""
	if !q.DryRun {
		if url, err = a.queueURL(ctx, qEvents); err != nil {
			return err
		}
	}
	fetch := bulkFetch(q)
	items, err := a.Ledger.ListOpen(ctx, "event", fetch, q.Status)
	if err != nil {
		return err
	}
	todo, more := bulkCandidates(items, q, fetch)
	sum := BulkSummary{DryRun: q.DryRun, More: more, Matched: len(todo)}
	stop := a.replayEach(ctx, q, url, cp, todo, &sum)
	if a.JSON {
		if err := a.printJSON(sum); err != nil {
			return err
		}
	} else {
		a.printBulkSummary(sum, q)
	}
	return bulkResult(sum, stop)
}

// bulkQuery checks a bulk replay's query and fills in its defaults: an
// interval of 200 ms (5/s) and a limit of 500 events per run.
func bulkQuery(q BulkQuery) (BulkQuery, error) {
	if q.Status != ledger.StatusDead && q.Status != ledger.StatusQuarantined {
		return q, fmt.Errorf("%w: bulk replay takes --status DEAD or QUARANTINED, not %q", ErrUsage, q.Status)
	}
	if q.Reason == "" {
		return q, fmt.Errorf("%w: --reason is required: it goes into the audit trail of every event replayed", ErrUsage)
	}
	if q.Interval <= 0 {
		q.Interval = 200 * time.Millisecond
	}
	if q.Limit <= 0 {
		q.Limit = 500
	}
	return q, nil
}

// bulkFetch is how many open items to list: one more than the limit, to
// tell whether more remain; with a source or type filter, at least what
// the index read takes anyway, since the filter runs on the listed items.
func bulkFetch(q BulkQuery) int {
	fetch := q.Limit + 1
	if q.Source != "" || q.EventType != "" {
		fetch = max(fetch, indexReadCap)
	}
	return fetch
}

// bulkCandidates are the listed items that match q's source and type, at
// most q.Limit of them in the listed order; more says whether this run
// leaves matching events behind (the listing was full, or more matched
// than the limit).
func bulkCandidates(items []ledger.OpenItem, q BulkQuery, fetch int) (todo []ledger.OpenItem, more bool) {
	for _, it := range items {
		if (q.Source == "" || it.Source == q.Source) && (q.EventType == "" || it.EventType == q.EventType) {
			todo = append(todo, it)
		}
	}
	more = len(items) == fetch || len(todo) > q.Limit
	if len(todo) > q.Limit {
		todo = todo[:q.Limit]
	}
	return todo, more
}

// bulkStep is what a bulk replay does with one candidate before asking
// the ledger.
type bulkStep int

const (
	stepReplay         bulkStep = iota // replay it
	stepSkipCheckpoint                 // already replayed by this bulk replay (checkpoint)
	stepWouldReplay                    // dry run: report it only
)

// bulkDecide is the step for one candidate: the checkpoint wins over a dry
// run, so that a dry run of a resumed replay shows what it would still do.
func bulkDecide(it ledger.OpenItem, done map[[2]string]bool, dryRun bool) bulkStep {
	switch {
	case done[[2]string{it.Source, it.EventID}]:
		return stepSkipCheckpoint
	case dryRun:
		return stepWouldReplay
	}
	return stepReplay
}

// replayOutcome is what the ledger's answer to one replay means for a bulk
// replay.
type replayOutcome int

const (
	outcomeReplayed replayOutcome = iota // reopened: enqueue and record it
	outcomeMoved                         // no longer in the status (or gone): skip it
	outcomeFailed                        // the ledger failed: stop the run
)

func classifyReplay(err error) replayOutcome {
	switch {
	case err == nil:
		return outcomeReplayed
	case errors.Is(err, ledger.ErrNotReplayable), errors.Is(err, ledger.ErrNotFound):
		return outcomeMoved
	}
	return outcomeFailed
}

// replayEach performs the bulk replay of todo, paced by the limiter,
// counting into sum and printing a line per event (to stderr with --json).
// Each replayed event goes into the checkpoint file before the next one.
// It returns the error that stopped the run (a ledger failure or a
// checkpoint that could not be written); a cancelled ctx sets
// sum.Interrupted instead.
func (a *App) replayEach(ctx context.Context, q BulkQuery, url string, cp *checkpoint, todo []ledger.OpenItem, sum *BulkSummary) error {
	done := map[[2]string]bool{}
	for _, d := range cp.Done {
		done[[2]string{d.Source, d.EventID}] = true
	}
	progress := a.Out
	if a.JSON {
		progress = a.errOut()
	}
	newLimiter := a.NewLimiter
	if newLimiter == nil {
		newLimiter = func(d time.Duration) Limiter { return NewPacer(d) }
	}
	limiter := newLimiter(q.Interval)
	for i, it := range todo {
		tag := fmt.Sprintf("[%d/%d] %s/%s", i+1, len(todo), safe(it.Source), safe(it.EventID))
		switch bulkDecide(it, done, q.DryRun) {
		case stepSkipCheckpoint:
			sum.Checkpoint++
			fmt.Fprintf(progress, "%s skipped: already replayed (checkpoint)\n", tag)
			continue
		case stepWouldReplay:
			fmt.Fprintf(progress, "%s would replay (%s, %s)\n", tag, safe(it.Status), safe(orDash(it.ErrorCode)))
			continue
		}
		if err := limiter.Wait(ctx); err != nil {
			sum.Interrupted = true
			return nil
		}
		ev, err := a.Ledger.Replay(ctx, it.Source, it.EventID, a.Actor, q.Reason)
		switch classifyReplay(err) {
		case outcomeMoved:
			sum.Moved++
			fmt.Fprintf(progress, "%s skipped: now %s\n", tag, orDash(string(ev.Status)))
			continue
		case outcomeFailed:
			sum.Failed++
			fmt.Fprintf(progress, "%s failed: %s\n", tag, safe(err.Error()))
			return err
		}
		sum.Replayed++
		note, serr := a.enqueue(ctx, url, it.Source, it.EventID)
		if serr != nil {
			sum.NotEnqueued++
		}
		fmt.Fprintf(progress, "%s %s -> RECEIVED, %s\n", tag, safe(it.Status), safe(note))
		cp.Done = append(cp.Done, checkpointEv{Source: it.Source, EventID: it.EventID, At: a.now(), Actor: a.Actor})
		if err := cp.save(q.Checkpoint, a.now()); err != nil {
			return err
		}
	}
	return nil
}

// bulkResult is the error a bulk replay ends with: what stopped it, an
// interruption, or events replayed but not enqueued; nil when it did all
// it was asked.
func bulkResult(sum BulkSummary, stop error) error {
	switch {
	case stop != nil:
		return fmt.Errorf("%w: bulk replay stopped: %w", ErrIncomplete, stop)
	case sum.Interrupted:
		return fmt.Errorf("%w: bulk replay interrupted; run the same command again to resume", ErrIncomplete)
	case sum.NotEnqueued > 0:
		return fmt.Errorf("%w: %d events replayed but not enqueued (the reconciler re-enqueues them)", ErrIncomplete, sum.NotEnqueued)
	}
	return nil
}

func (a *App) printBulkSummary(s BulkSummary, q BulkQuery) {
	verb := "replayed"
	if s.DryRun {
		verb = "dry run: would replay"
		s.Replayed = s.Matched - s.Checkpoint
	}
	fmt.Fprintf(a.Out, "%s %d of %d %s events", verb, s.Replayed, s.Matched, q.Status)
	if s.NotEnqueued > 0 {
		fmt.Fprintf(a.Out, "; %d not enqueued (they stay RECEIVED and the reconciler re-enqueues them)", s.NotEnqueued)
	}
	fmt.Fprintf(a.Out, "; skipped %d in the checkpoint, %d no longer %s", s.Checkpoint, s.Moved, q.Status)
	if s.Failed > 0 {
		fmt.Fprintf(a.Out, "; %d failed", s.Failed)
	}
	fmt.Fprintln(a.Out)
	if s.Interrupted {
		fmt.Fprintln(a.Out, "interrupted: run the same command again to resume")
	}
	if s.More {
		fmt.Fprintln(a.Out, "more events match than this run took (--limit): run it again")
	}
}
