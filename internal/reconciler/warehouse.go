package reconciler

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	GetIntentState(ctx context.Context, op string) (ledger.IntentState, error)
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
		ops, err := w.redrive(ctx, p, scope, base, &rep.Warehouse)
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

// redrive decides what a missing record needs and returns the intents
// to announce.
func (w *WarehouseCheck) redrive(ctx context.Context, p ledger.Projection, scope, base string, rep *WarehouseReport) ([]string, error) {
	op := warehouse.OperationID(scope, base, p.Subject, p.Version)
	in, err := w.Ledger.GetIntentState(ctx, op)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		source, event, _ := strings.Cut(p.LastEvent, "/")
		wi := warehouse.Intent(projection.Write{Name: p.Name, Subject: p.Subject, Version: p.Version, State: p.State},
			source, event, time.UnixMilli(p.UpdatedAt), w.MaxState)
		if _, err := w.Ledger.PutIntent(ctx, p, wi, source, event); err != nil {
			return nil, err
		}
		rep.Recreated++
		return []string{op}, nil
	case err != nil:
		return nil, err
	}
	switch in.Status {
	case ledger.IntentStatusSucceeded, ledger.IntentStatusFailed:
		return w.repair(ctx, p, in, rep)
	case ledger.IntentStatusQuarantined:
		rep.NeedsOperator++
		return nil, nil
	default:
		rep.Reannounced++
		return []string{op}, nil
	}
}

// repair writes (or finds) the repair intent of a record whose intent
// ended without the object being there.
func (w *WarehouseCheck) repair(ctx context.Context, p ledger.Projection, orig ledger.IntentState, rep *WarehouseReport) ([]string, error) {
	source, event, _ := strings.Cut(orig.Causation, "/")
	for n := 1; n <= 5; n++ {
		id := warehouse.RepairID(orig.OperationID, n)
		in, err := w.Ledger.GetIntentState(ctx, id)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			if _, err := w.Ledger.PutIntent(ctx, p, ledger.Intent{OperationID: id, Kind: warehouse.Kind, Subject: orig.Subject,
				Payload: orig.Payload, Policy: ledger.PolicyOnce}, source, event); err != nil {
				return nil, err
			}
			rep.Repaired++
			return []string{id}, nil
		case err != nil:
			return nil, err
		case in.Status == ledger.IntentStatusSucceeded || in.Status == ledger.IntentStatusFailed:
			continue // that repair's object is gone too: the next one
		case in.Status == ledger.IntentStatusQuarantined:
			rep.NeedsOperator++
			return nil, nil
		default:
			rep.Reannounced++
			return []string{id}, nil
		}
	}
	rep.NeedsOperator++
	return nil, nil
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
