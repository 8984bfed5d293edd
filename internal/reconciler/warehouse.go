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
	ListProjectionsChanged(ctx context.Context, since time.Time, limit, maxRead int) ([]ledger.Projection, bool, error)
	MissingRecord(ctx context.Context, p ledger.Projection, maxState int) (ledger.RecordNeed, error)
	PutIntent(ctx context.Context, p ledger.Projection, in ledger.Intent, source, eventID string) (bool, error)
}

var _ WarehouseLedger = (*ledger.Ledger)(nil)

// S3Header is the part of the S3 client the check uses.
type S3Header interface {
	HeadObject(ctx context.Context, in *s3.HeadObjectInput, opts ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
}

// WarehouseCheck compares the canonical version of recently changed
// projection subjects with the warehouse: for each projection updated in
// the last Lookback (at most Checks of them, reading at most ReadLimit
// items of the table), it asks S3 (HeadObject) for the record of the
// projection's current version. A missing record is drift, and is
// re-driven:
//
//   - its intent waits (PENDING, RETRY_WAIT, UNCERTAIN, leased): announced
//     again;
//   - its intent does not exist (the version was advanced without a state
//     change, which writes no intent, or the sink was off when it was
//     applied): the record's own intent is written now, from the
//     projection as it is (its state, last event and update time);
//   - its intent SUCCEEDED and the object is gone (deleted): a repair
//     intent, keyed warehouse.RepairID(op, n), carrying the
//     original's payload (so the same bytes), is written and announced. The
//     original stays SUCCEEDED: its history is true;
//   - its intent ended otherwise (QUARANTINED: state too large, a
//     conflicting object; FAILED: attempts exhausted): left to an
//     operator, counted as NeedsOperator, except FAILED, which is
//     repaired like a lost object (the warehouse was down longer than the
//     dispatcher's attempts).
type WarehouseCheck struct {
	Ledger         WarehouseLedger
	S3             S3Header
	Bucket, Prefix string
	// MaxState is the processors' limit (warehouse.Intent).
	MaxState int
	// Projections are the recorded projections (warehouse.Config); nil:
	// every one. Others are not checked: they have no records.
	Projections []string
	// Lookback: projections updated this recently are checked. Default 24h.
	Lookback time.Duration
	// Checks bounds the subjects one run checks (one HeadObject each).
	// Default 100.
	Checks int
	// ReadLimit bounds the table items one run reads to find them.
	// Default 10,000.
	ReadLimit int
}

// WarehouseReport is what one run's warehouse check did.
type WarehouseReport struct {
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
	Capped        bool          `json:"capped"`
}

func (w *WarehouseCheck) defaults() (time.Duration, int, int) {
	look, checks, read := w.Lookback, w.Checks, w.ReadLimit
	if look <= 0 {
		look = 24 * time.Hour
	}
	if checks <= 0 {
		checks = 100
	}
	if read <= 0 {
		read = 10000
	}
	return look, checks, read
}

// warehouse runs the check (see WarehouseCheck).
func (r *Reconciler) warehouse(ctx context.Context, now time.Time, rep *Report) error {
	w := r.Warehouse
	look, checks, read := w.defaults()
	ps, capped, err := w.Ledger.ListProjectionsChanged(ctx, now.Add(-look), checks, read)
	rep.Warehouse.Capped = capped
	if err != nil {
		return err
	}
	var errs []error
	var announce []queue.IntentPointer
	recorded := &warehouse.Config{Projections: w.Projections}
	for _, p := range ps {
		if !recorded.Includes(p.Name) {
			continue
		}
		rep.Warehouse.Checked++
		scope, base := projection.SplitScoped(p.Name)
		key := warehouse.Key(w.Prefix, scope, base, p.Subject, p.Version)
		_, err := w.S3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(w.Bucket), Key: aws.String(key)})
		var nf *s3types.NotFound
		switch {
		case err == nil:
			rep.Warehouse.InSync++
			continue
		case !errors.As(err, &nf):
			rep.Warehouse.Unreadable++
			errs = append(errs, fmt.Errorf("head s3://%s/%s: %w", w.Bucket, key, err))
			continue
		}
		rep.Warehouse.Drifting++
		rep.Warehouse.OldestDrift = max(rep.Warehouse.OldestDrift, now.Sub(time.UnixMilli(p.UpdatedAt)))
		ops, err := w.redrive(ctx, p, &rep.Warehouse)
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
	return errors.Join(errs...)
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
