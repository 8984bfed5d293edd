package reconciler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// WarehouseLedger is what the warehouse drift check reads and writes.
type WarehouseLedger interface {
	ScanProjectionsChanged(ctx context.Context, q ledger.ChangedScan) (ledger.ChangedPage, error)
	GetWarehousePass(ctx context.Context) (ledger.WarehousePass, error)
	SaveWarehousePass(ctx context.Context, p ledger.WarehousePass) error
	MissingRecord(ctx context.Context, p ledger.Projection, maxState int) (ledger.RecordNeed, error)
	PutIntent(ctx context.Context, p ledger.Projection, in ledger.Intent, source, eventID string) (bool, error)
}

var _ WarehouseLedger = (*ledger.Ledger)(nil)

// S3Header is the part of the S3 client the check uses.
type S3Header interface {
	HeadObject(ctx context.Context, in *s3.HeadObjectInput, opts ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
}

// WarehouseCheck compares the canonical version of projection subjects
// with the warehouse, in passes over the whole table: each run walks the
// next ReadLimit items from where the last run stopped (a cursor kept in
// the ledger, ledger.WarehousePass), and for each projection it meets
// that changed since the last complete pass began (or in the last
// Lookback, or before the last pass's oldest drift, or, with Retention,
// whose revision is older than the records' retention), at most Checks
// of them, it asks S3 (HeadObject) for the record of the projection's
// current version. A run's reads are bounded (ReadLimit items, Checks
// requests) whatever the table's size, and a pass ends when the walk
// reaches the end of the table: about table items / ReadLimit runs, or
// checked subjects / Checks when more. Drift is reported per complete
// pass (WarehouseReport.Pass), with the pass's age.
//
// A missing record is drift, and is re-driven:
//
//   - its intent waits (PENDING, RETRY_WAIT, UNCERTAIN, leased): announced
//     again;
//   - its intent does not exist (the version was advanced without a state
//     change, which writes no intent, or the sink was off when it was
//     applied): the record's own intent is written now, from the
//     projection as it is (its state, last event and update time);
//   - its intent SUCCEEDED and the object is gone (deleted, or expired by
//     the records' retention): a repair intent, keyed
//     warehouse.RepairID(op, n), carrying the original's payload (so the
//     same bytes), is written and announced. The original stays
//     SUCCEEDED: its history is true;
//   - its intent ended otherwise (QUARANTINED: state too large, a
//     conflicting object; FAILED: attempts exhausted): left to an
//     operator, counted as NeedsOperator, except FAILED, which is
//     repaired like a lost object (the warehouse was down longer than the
//     dispatcher's attempts).
//
// A drifting or unreadable subject is checked again by the next pass,
// whatever its age: the next pass's window starts no later than its
// revision.
type WarehouseCheck struct {
	Ledger         WarehouseLedger
	S3             S3Header
	Bucket, Prefix string
	// MaxState is the processors' limit (warehouse.Intent).
	MaxState int
	// Projections are the recorded projections (warehouse.Config); nil:
	// every one. Others are not checked: they have no records.
	Projections []string
	// Lookback: projections updated this recently are checked by every
	// pass, however recently the last one began. Default 24h.
	Lookback time.Duration
	// Retention is the records' lifecycle expiration (0: records are kept
	// forever). With it, every pass also checks each subject whose
	// revision is older than Retention: its record may have expired.
	Retention time.Duration
	// Checks bounds the subjects one run checks (one HeadObject each).
	// Default DefaultWarehouseChecks.
	Checks int
	// ReadLimit bounds the table items one run reads.
	// Default DefaultWarehouseReads.
	ReadLimit int
}

// The warehouse check's default bounds per run.
const (
	DefaultWarehouseChecks = 100
	DefaultWarehouseReads  = 10000
)

// WarehouseReport is what one run's warehouse check did, and what the
// last complete pass found.
type WarehouseReport struct {
	// This run's step of the pass.
	Checked int `json:"checked"`
	InSync  int `json:"in_sync"`
	// Drifting counts the subjects whose canonical revision's record is
	// not in the warehouse: "canonical revision != warehouse revision".
	Drifting int `json:"drifting"`
	// OldestDrift is the age of the oldest drifting revision (since the
	// projection was updated to it).
	OldestDrift   time.Duration `json:"oldest_drift_ns"`
	Reannounced   int           `json:"reannounced"`
	Recreated     int           `json:"recreated"`
	Repaired      int           `json:"repaired"`
	NeedsOperator int           `json:"needs_operator"`
	Unreadable    int           `json:"unreadable,omitempty"`
	// Read is the table items this run read.
	Read int `json:"read"`
	// Capped: the pass goes on in the next run (this run did not reach
	// the end of the table).
	Capped bool `json:"capped"`
	// Completed: this run ended a pass.
	Completed bool `json:"completed"`
	// Pass is the last complete pass (Completed zero: none yet); the
	// metrics WarehouseDrift and WarehouseDriftOldestAgeSeconds are its.
	Pass ledger.CompletedPass `json:"pass"`
	// PassAge is how old the last complete pass's view is (since it
	// began), or, before any completes, how long the first has run:
	// WarehouseCheckPassAgeSeconds.
	PassAge time.Duration `json:"pass_age_ns"`
}

func (w *WarehouseCheck) defaults() (time.Duration, int, int) {
	look, checks, read := w.Lookback, w.Checks, w.ReadLimit
	if look <= 0 {
		look = 24 * time.Hour
	}
	if checks <= 0 {
		checks = DefaultWarehouseChecks
	}
	if read <= 0 {
		read = DefaultWarehouseReads
	}
	return look, checks, read
}

// warehouse runs one step of the check (see WarehouseCheck).
func (r *Reconciler) warehouse(ctx context.Context, now time.Time, rep *Report) error {
	w := r.Warehouse
	wr := &rep.Warehouse
	look, checks, read := w.defaults()
	pass, err := w.Ledger.GetWarehousePass(ctx)
	if err != nil {
		return err
	}
	if pass.Started.IsZero() {
		// A new pass: the subjects changed since the last one began (its
		// Since), those it found drifting, and the last Lookback.
		pass.Started, pass.Cursor = now, ""
		pass.Since = ledger.Earliest(pass.Since, now.Add(-look))
	}
	q := ledger.ChangedScan{Cursor: pass.Cursor, Since: pass.Since, Limit: checks, MaxRead: read}
	if w.Retention > 0 {
		q.Before = now.Add(-w.Retention)
	}
	page, err := w.Ledger.ScanProjectionsChanged(ctx, q)
	if err != nil {
		wr.Pass, wr.PassAge = pass.Last, passAge(pass, now)
		return err
	}
	wr.Read, wr.Capped = page.Read, !page.Done
	var errs []error
	var announce []queue.IntentPointer
	recorded := &warehouse.Config{Projections: w.Projections}
	for _, p := range page.Projections {
		if !recorded.Includes(p.Name) {
			continue
		}
		wr.Checked++
		scope, base := projection.SplitScoped(p.Name)
		key := warehouse.Key(w.Prefix, scope, base, p.Subject, p.Version)
		_, err := w.S3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(w.Bucket), Key: aws.String(key)})
		var nf *s3types.NotFound
		switch {
		case err == nil:
			wr.InSync++
			continue
		case !errors.As(err, &nf):
			wr.Unreadable++
			pass.Recheck = ledger.Earliest(pass.Recheck, time.UnixMilli(p.UpdatedAt))
			errs = append(errs, fmt.Errorf("head s3://%s/%s: %w", w.Bucket, key, err))
			continue
		}
		wr.Drifting++
		wr.OldestDrift = max(wr.OldestDrift, now.Sub(time.UnixMilli(p.UpdatedAt)))
		pass.Recheck = ledger.Earliest(pass.Recheck, time.UnixMilli(p.UpdatedAt))
		ops, err := w.redrive(ctx, p, wr)
		if err != nil {
			errs = append(errs, err)
		}
		for _, op := range ops {
			announce = append(announce, queue.IntentPointer{OperationID: op, Reason: "warehouse_drift"})
		}
	}
	if len(announce) > 0 {
		if _, err := r.effectsQueue().SendIntents(ctx, announce); err != nil {
			errs = append(errs, err)
		}
	}
	pass.Runs++
	pass.Read += page.Read
	pass.Checked += wr.Checked
	pass.Drifting += wr.Drifting
	pass.Unreadable += wr.Unreadable
	pass.OldestDrift = max(pass.OldestDrift, wr.OldestDrift)
	pass.Cursor = page.Next
	if page.Done {
		wr.Completed = true
		pass.Complete(now)
	}
	wr.Pass, wr.PassAge = pass.Last, passAge(pass, now)
	// Saved even when the run's budget is spent: the step's checks were
	// made, and a cursor not saved only walks the step again.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), saveTimeout)
	defer cancel()
	if err := w.Ledger.SaveWarehousePass(sctx, pass); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// saveTimeout bounds the save of the pass at the end of a run.
const saveTimeout = 5 * time.Second

// passAge is how old the newest complete view is: since the last complete
// pass began, or, before one completes, since the first began.
func passAge(p ledger.WarehousePass, now time.Time) time.Duration {
	if !p.Last.Completed.IsZero() {
		return now.Sub(p.Last.Started)
	}
	if p.Started.IsZero() {
		return 0
	}
	return now.Sub(p.Started)
}

// redrive acts on what a missing record needs (ledger.MissingRecord):
// writes the record intent or its repair, and returns the intents to
// announce.
func (w *WarehouseCheck) redrive(ctx context.Context, p ledger.Projection, rep *WarehouseReport) ([]string, error) {
	need, err := w.Ledger.MissingRecord(ctx, p, w.MaxState)
	if err != nil {
		return nil, err
	}
	switch need.Action {
	case ledger.RecordWrite, ledger.RecordRepair:
		if _, err := w.Ledger.PutIntent(ctx, p, need.Intent, need.Source, need.Event); err != nil {
			return nil, err
		}
		if need.Action == ledger.RecordWrite {
			rep.Recreated++
		} else {
			rep.Repaired++
		}
		return []string{need.OperationID}, nil
	case ledger.RecordAnnounce:
		rep.Reannounced++
		return []string{need.OperationID}, nil
	default:
		rep.NeedsOperator++
		return nil, nil
	}
}

// CheckWarehouse runs the warehouse check alone (Run runs it as one of
// its steps), at now.
func (r *Reconciler) CheckWarehouse(ctx context.Context, now time.Time) (WarehouseReport, error) {
	var rep Report
	if r.Warehouse == nil {
		return rep.Warehouse, errors.New("reconciler: no warehouse check configured")
	}
	err := r.warehouse(ctx, now, &rep)
	return rep.Warehouse, err
}
