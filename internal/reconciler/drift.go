package reconciler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"strconv"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/queue"
)

// DefaultDriftChecks bounds the subject cursors one run checks against
// their downstream (Options.DriftChecks).
const DefaultDriftChecks = 100

// DriftReport is what one run's downstream drift check did (I7, see
// docs/architecture.md: the downstream converges to the canonical version).
type DriftReport struct {
	// Checked counts the subject cursors read from the sync shards.
	Checked int `json:"checked"`
	// InSync: the downstream reported the projection's newest version.
	InSync int `json:"in_sync"`
	// Skipped: no effect for the kind, or one that cannot report a
	// subject's version, or nothing expected (no latest intent).
	Skipped int `json:"skipped"`
	// Drifting counts the subjects whose downstream version differs from
	// the newest intent's (behind, ahead, or unknown): the DownstreamDrift
	// metric.
	Drifting int `json:"drifting"`
	// Reannounced: the newest intent was unfinished and was announced
	// again to the effects queue.
	Reannounced int `json:"reannounced"`
	// InFlight: the newest intent is being dispatched; checked again later.
	InFlight int `json:"in_flight"`
	// NeedsOperator: the newest intent is finished (SUCCEEDED, or ended
	// without reaching the downstream) and the downstream still differs;
	// logged as a warning with both versions for the recovery owner.
	NeedsOperator int `json:"needs_operator"`
	// Unreadable: cursors listed without the keys to check them (logged
	// as errors, left due).
	Unreadable int `json:"unreadable,omitempty"`
}

// drift compares, for each subject cursor due on the sync shards, the
// version the downstream reports with the version of the projection's
// newest latest-policy intent of that kind family, and repairs what it
// can (see doc.go, step 5).
func (r *Reconciler) drift(ctx context.Context, o Options, now time.Time, rep *Report) error {
	due, err := r.Ledger.ListSyncDue(ctx, now, o.DriftChecks)
	if err != nil {
		return err
	}
	var errs []error
	var announce []queue.IntentPointer
	for _, c := range due {
		if ctx.Err() != nil {
			errs = append(errs, fmt.Errorf("%d of %d subjects left for the next run: %w", len(due)-rep.Downstream.Checked, len(due), ctx.Err()))
			break
		}
		rep.Downstream.Checked++
		op, err := r.checkSubject(ctx, o, now, c, &rep.Downstream)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s/%s %s: %w", c.Projection, c.ProjSubject, c.Family, err))
			continue
		}
		if op != "" {
			announce = append(announce, queue.IntentPointer{OperationID: op, Reason: "drift"})
		}
	}
	if len(announce) > 0 {
		// The same sender as step 2's re-announcements; a pointer to an
		// intent another pointer covers is harmless (the claim lets one
		// dispatcher through).
		unsent, err := r.effectsQueue().SendIntents(ctx, announce)
		rep.Downstream.Reannounced += len(announce) - len(unsent)
		if err != nil {
			errs = append(errs, fmt.Errorf("re-announce: %w", err))
		}
	}
	return errors.Join(errs...)
}

// checkSubject checks one cursor. It returns the operation id to
// re-announce, if any, and marks the cursor: parked when the downstream
// agrees (or cannot be asked), due again after StuckAfter otherwise.
func (r *Reconciler) checkSubject(ctx context.Context, o Options, now time.Time, c ledger.SubjectCursor, dr *DriftReport) (string, error) {
	log := o.Log.With("projection", c.Projection, "projection_subject", c.ProjSubject, "family", c.Family)
	skip := func(why string) (string, error) {
		dr.Skipped++
		log.Debug("downstream drift check skipped", "why", why)
		return "", r.Ledger.MarkSynced(ctx, c, time.Time{})
	}
	if c.Projection == "" || c.ProjSubject == "" || c.Family == "" || c.HolderOp == "" {
		// Neither checked nor marked: a cursor the listing could not name
		// is no evidence of agreement. Counted and logged, like an
		// unreadable DLQ message, so one bad item does not fail the run.
		dr.Unreadable++
		log.Error("downstream drift check: a sync cursor without its projection, subject, family or holder", "kind", c.Kind, "due_at", c.DueAt)
		return "", nil
	}
	p, err := r.Ledger.GetProjection(ctx, c.Projection, c.ProjSubject)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return skip("the projection is gone")
	case err != nil:
		return "", err
	}
	want, ok := p.Latest[c.Family]
	if !ok || want.OperationID == "" {
		return skip("the projection names no latest intent for the family")
	}
	eff, ok := r.Effects[want.Kind]
	if !ok {
		return skip("no effect for kind " + want.Kind)
	}
	ss, ok := eff.(outbox.SubjectStatus)
	if !ok {
		return skip("effect " + want.Kind + " cannot report a subject's version")
	}
	// The subject is the cursor's scope's: another scope's subject of the
	// same id is another subject at the downstream.
	got, known, err := ss.SubjectVersion(ctx, c.Scope, want.Subject)
	switch {
	case errors.Is(err, outbox.ErrNoSubjectStatus):
		return skip("effect " + want.Kind + " has no status endpoint")
	case err != nil:
		// Not marked: the cursor stays due and the next run asks again.
		return "", fmt.Errorf("ask the downstream of %s about %s: %w", want.Kind, want.Subject, err)
	}
	expected := strconv.FormatInt(want.Version, 10)
	cmp, err := compareDecimal(got, expected)
	if known && err == nil && cmp == 0 {
		dr.InSync++
		return "", r.Ledger.MarkSynced(ctx, c, time.Time{})
	}
	dr.Drifting++
	reported := got
	if !known {
		reported = "unknown"
	}
	log = log.With("operation_id", want.OperationID, "kind", want.Kind, "subject", want.Subject,
		"expected_version", expected, "downstream_version", reported)
	// Whatever happens below, look again once a repair had time to land.
	again := func(op string) (string, error) {
		return op, r.Ledger.MarkSynced(ctx, c, now.Add(o.StuckAfter))
	}
	operator := func(reason string) (string, error) {
		dr.NeedsOperator++
		log.Warn("downstream drift needs an operator", "reason", reason)
		return again("")
	}
	if known && err == nil && cmp > 0 {
		return operator("the downstream reports a newer version than the canonical projection")
	}
	in, err := r.Ledger.GetIntentState(ctx, want.OperationID)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return operator("the newest intent is gone from the ledger")
	case err != nil:
		return "", err
	}
	log = log.With("intent_status", string(in.Status))
	switch in.Status {
	case ledger.IntentStatusPending, ledger.IntentStatusRetryWait, ledger.IntentStatusUncertain:
		// Its announcement may be lost, or it waits for its retry: a new
		// pointer is held back by the effects consumer until it is due.
		log.Info("downstream drift: re-announcing the newest intent")
		return again(in.OperationID)
	case ledger.IntentStatusDispatching:
		if in.LeaseExpires.Before(now) {
			log.Info("downstream drift: re-announcing the newest intent, its dispatcher's lease expired")
			return again(in.OperationID)
		}
		dr.InFlight++
		log.Debug("downstream drift: the newest intent is being dispatched")
		return again("")
	case ledger.IntentStatusSucceeded:
		return operator("the newest intent SUCCEEDED but the downstream reports another version (an older call landed after it, or the downstream lost it)")
	default:
		return operator("the newest intent ended " + string(in.Status) + " without bringing the downstream to its version")
	}
}

// compareDecimal compares two exact decimal integers (-1, 0, +1); a
// version beyond int64 (a downstream's) is compared exactly too.
func compareDecimal(a, b string) (int, error) {
	x, ok := new(big.Int).SetString(a, 10)
	if !ok {
		return 0, fmt.Errorf("version %q is not a decimal integer", a)
	}
	y, ok := new(big.Int).SetString(b, 10)
	if !ok {
		return 0, fmt.Errorf("version %q is not a decimal integer", b)
	}
	return x.Cmp(y), nil
}

// compensationsDue counts the CONTRADICTED intents waiting for the
// recovery owner on the attention shards (capped at MaxItems).
func (r *Reconciler) compensationsDue(ctx context.Context, o Options, rep *Report) error {
	items, err := r.Ledger.ListOpen(ctx, "intent", o.MaxItems, ledger.Status(ledger.IntentStatusContradicted))
	if err != nil {
		return fmt.Errorf("contradicted intents: %w", err)
	}
	rep.CompensationsDue = len(items)
	if len(items) >= o.MaxItems {
		rep.Capped = true
	}
	if len(items) > 0 {
		o.Log.Log(ctx, slog.LevelWarn, "contradicted intents wait for the recovery owner", "count", len(items), "oldest_operation_id", items[0].OperationID)
	}
	return nil
}
