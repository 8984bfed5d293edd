package operator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
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

// The warehouse sink's commands. Every applied revision of a projection
// is a change record in S3 at warehouse.Key(prefix, scope, projection,
// subject, version), written by the dispatcher from the record intent
// the processor committed with the revision (warehouse.OperationID). A
// subject's warehouse revision is the highest version it has a record
// of; it should be the canonical one, the projection's in the ledger.
//
//   - stats counts, as the reconciler's warehouse check does, the subjects
//     changed recently whose current version has no record (HeadObject);
//   - projections show gives a subject's canonical version next to its
//     warehouse version and the status of its current version's record;
//   - warehouse backfill writes the record intent of each projection's
//     current version that the warehouse lacks, audited, and announces
//     it: the dispatcher writes the record. It is idempotent.

// Warehouse names the warehouse sink's records: a bucket and a key prefix,
// and the projections whose revisions are recorded (WAREHOUSE_PROJECTIONS,
// as the functions have it; nil: every projection).
type Warehouse struct {
	Bucket, Prefix string
	Projections    []string
}

// records reports whether projection name's revisions are recorded: the
// commands leave the others alone, as the processor and the reconciler do.
func (w Warehouse) records(name string) bool {
	return (&warehouse.Config{Projections: w.Projections}).Includes(name)
}

func (w Warehouse) String() string { return "s3://" + w.Bucket + "/" + w.Prefix }

// S3 is the part of the S3 client the warehouse commands use: they only
// read the warehouse (the dispatcher writes it).
type S3 interface {
	HeadObject(ctx context.Context, in *s3.HeadObjectInput, opts ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
	ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input, opts ...func(*s3.Options)) (*s3.ListObjectsV2Output, error)
}

var _ S3 = (*s3.Client)(nil)

// The bounds of the drift count, the reconciler's defaults
// (reconciler.WarehouseCheck): subjects changed in the last day, at most
// 100 of them (one HeadObject each), found in at most 10,000 items read.
const (
	driftLookback = 24 * time.Hour
	driftChecks   = 100
	driftReadMax  = 10000
)

// Warehouse record statuses, of a subject's current version.
const (
	// WarehouseObserved: the record's intent SUCCEEDED: the store
	// answered that the record exists.
	WarehouseObserved = "WAREHOUSE_OBSERVED"
	// WarehousePending: its intent waits to be written (PENDING,
	// DISPATCHING, RETRY_WAIT, UNCERTAIN).
	WarehousePending = "WAREHOUSE_PENDING"
	// WarehouseMissing: no record and no intent that will write it (the
	// version was advanced without a state change, the sink was off, or
	// the object was removed): the reconciler's warehouse check or
	// `warehouse backfill` writes it.
	WarehouseMissing = "WAREHOUSE_MISSING"
	// WarehouseRefused: its intent ended QUARANTINED or FAILED (a state
	// over the sink's limit, a conflicting object, the attempts spent).
	WarehouseRefused = "WAREHOUSE_REFUSED"
)

func (a *App) needWarehouse() error {
	if a.Warehouse == nil {
		return fmt.Errorf("%w: no warehouse: set --warehouse-bucket or WAREHOUSE_BUCKET (and WAREHOUSE_PREFIX), as the functions have them", ErrConfig)
	}
	if a.S3 == nil {
		return fmt.Errorf("%w: no S3 client for the warehouse", ErrConfig)
	}
	return nil
}

// recordKey is the key of p's current version's record.
func (a *App) recordKey(p ledger.Projection) string {
	scope, base := projection.SplitScoped(p.Name)
	return warehouse.Key(a.Warehouse.Prefix, scope, base, p.Subject, p.Version)
}

// recordExists asks S3 whether key exists: false with no error is a
// NotFound.
func (a *App) recordExists(ctx context.Context, key string) (bool, error) {
	_, err := a.S3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(a.Warehouse.Bucket), Key: aws.String(key)})
	var nf *s3types.NotFound
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &nf):
		return false, nil
	default:
		return false, fmt.Errorf("head s3://%s/%s: %w", a.Warehouse.Bucket, key, err)
	}
}

// WarehouseStats is the dashboard's warehouse line: how many subjects
// changed in the last Lookback have a canonical revision the warehouse
// does not hold (its record is not there), and how long the oldest of
// them has waited since the projection reached that revision.
type WarehouseStats struct {
	Bucket string `json:"bucket"`
	Prefix string `json:"prefix"`
	// Drifting: canonical revision != warehouse revision.
	Drifting           int   `json:"drifting"`
	OldestDriftSeconds int64 `json:"oldest_drift_seconds"`
	Checked            int   `json:"checked"`
	LookbackSeconds    int64 `json:"lookback_seconds"`
	// Capped: the read stopped at its bounds (100 subjects, 10,000 items
	// read); more subjects may drift.
	Capped     bool   `json:"capped"`
	Unreadable int    `json:"unreadable,omitempty"`
	Error      string `json:"error,omitempty"`
}

// warehouseStats counts the drift as the reconciler's check does, without
// re-driving anything: stats only reads.
func (a *App) warehouseStats(ctx context.Context, now time.Time) *WarehouseStats {
	w := &WarehouseStats{Bucket: a.Warehouse.Bucket, Prefix: a.Warehouse.Prefix, LookbackSeconds: int64(driftLookback / time.Second)}
	if a.S3 == nil {
		w.Error = "no S3 client for the warehouse"
		return w
	}
	ps, capped, err := a.Ledger.ListProjectionsChanged(ctx, now.Add(-driftLookback), driftChecks, driftReadMax)
	w.Capped = capped
	if err != nil {
		w.Error = err.Error()
		return w
	}
	for _, p := range ps {
		if !a.Warehouse.records(p.Name) {
			continue
		}
		w.Checked++
		ok, err := a.recordExists(ctx, a.recordKey(p))
		switch {
		case err != nil:
			// The warehouse cannot answer (each request has already been
			// retried): the rest would only wait for the same answer.
			w.Unreadable++
			w.Error = err.Error()
			return w
		case !ok:
			w.Drifting++
			w.OldestDriftSeconds = max(w.OldestDriftSeconds, int64(now.Sub(time.UnixMilli(p.UpdatedAt))/time.Second))
		}
	}
	return w
}

func (a *App) printWarehouseStats(w *WarehouseStats) {
	out := a.Out
	fmt.Fprintf(out, "warehouse (%s; subjects changed in the last %s)\n", Warehouse{Bucket: w.Bucket, Prefix: w.Prefix}, age(time.Duration(w.LookbackSeconds)*time.Second))
	if w.Error != "" && w.Checked == 0 {
		fmt.Fprintf(out, "  unavailable: %s\n", safe(w.Error))
		return
	}
	line := fmt.Sprintf("  canonical revision != warehouse revision: %d", w.Drifting)
	if w.Drifting > 0 {
		line += fmt.Sprintf(" (oldest %s)", age(time.Duration(w.OldestDriftSeconds)*time.Second))
	}
	fmt.Fprintln(out, line)
	checked := fmt.Sprintf("  checked %d subjects", w.Checked)
	if w.Capped {
		checked += fmt.Sprintf(" (capped at %d subjects or %d items read: more may drift)", driftChecks, driftReadMax)
	}
	if w.Unreadable > 0 {
		checked += "; stopped at an unreadable record: " + safe(w.Error)
	}
	fmt.Fprintln(out, checked)
}

// recordView is the warehouse's view of one subject.
type recordView struct {
	Status string `json:"status"`
	// Version is the highest version the warehouse holds a record of (0:
	// none), Current whether that is the canonical one.
	Version int64 `json:"version"`
	Current bool  `json:"current"`
	// Key is the canonical version's record; Present what HeadObject said.
	Key     string `json:"key"`
	Present bool   `json:"present"`
	// Intent is the canonical version's record intent that decides the
	// status (the original, or its newest repair), and its status.
	Intent       string `json:"intent,omitempty"`
	IntentStatus string `json:"intent_status,omitempty"`
	IntentCode   string `json:"intent_code,omitempty"`
	Error        string `json:"error,omitempty"`
}

type projectionDetail struct {
	Projection string         `json:"projection"`
	Subject    string         `json:"subject"`
	Version    int64          `json:"version"`
	Terminal   bool           `json:"terminal"`
	UpdatedAt  time.Time      `json:"updated_at"`
	LastEvent  string         `json:"last_event"`
	StateKeys  []string       `json:"state_keys"`
	State      map[string]any `json:"state,omitempty"`
	// Warehouse is nil when no warehouse is configured, or when the
	// projection's revisions are not recorded (NotRecorded).
	Warehouse   *recordView `json:"warehouse,omitempty"`
	NotRecorded bool        `json:"warehouse_not_recorded,omitempty"`
}

// ProjectionsShow prints one projection subject: its canonical version
// and, with a warehouse configured, the warehouse's version and the
// status of the canonical version's record. The state's values only with
// withState.
func (a *App) ProjectionsShow(ctx context.Context, name, subject string, withState bool) error {
	name, err := a.scopedProjection(ctx, name, subject)
	if err != nil {
		return err
	}
	p, err := a.Ledger.GetProjection(ctx, name, subject)
	if err != nil {
		return fmt.Errorf("projection %s/%s: %w", name, subject, err)
	}
	d := projectionDetail{Projection: p.Name, Subject: p.Subject, Version: p.Version, Terminal: p.Terminal, UpdatedAt: time.UnixMilli(p.UpdatedAt).UTC(),
		LastEvent: p.LastEvent, StateKeys: []string{}}
	for k := range p.State {
		d.StateKeys = append(d.StateKeys, k)
	}
	sort.Strings(d.StateKeys)
	if withState {
		d.State = p.State
	}
	switch {
	case a.Warehouse != nil && !a.Warehouse.records(p.Name):
		d.NotRecorded = true
	case a.Warehouse != nil && a.S3 != nil:
		d.Warehouse = a.recordView(ctx, p)
	}
	if a.JSON {
		return a.printJSON(d)
	}
	state := "keys " + strings.Join(d.StateKeys, ", ") + " (values not shown: --state)"
	if withState {
		b, _ := jsonCompact(p.State)
		state = b
	}
	lines := [][]string{
		{"projection", d.Projection},
		{"subject", d.Subject},
		{"version", strconv.FormatInt(d.Version, 10) + " (canonical)"},
		{"terminal", strconv.FormatBool(d.Terminal)},
		{"updated", stamp(d.UpdatedAt)},
		{"last event", orDash(d.LastEvent)},
		{"state", state},
	}
	switch v := d.Warehouse; {
	case d.NotRecorded:
		lines = append(lines, []string{"warehouse", "not recorded: the projection is not in WAREHOUSE_PROJECTIONS (" + strings.Join(a.Warehouse.Projections, ",") + ")"})
	case v == nil:
		lines = append(lines, []string{"warehouse", "not configured (--warehouse-bucket, WAREHOUSE_BUCKET)"})
	default:
		ver := "no record"
		if v.Version > 0 {
			ver = "v" + strconv.FormatInt(v.Version, 10)
		}
		status := v.Status
		if v.Intent != "" {
			status += fmt.Sprintf(" (record intent %s %s", v.Intent, v.IntentStatus)
			if v.IntentCode != "" && v.IntentStatus != string(ledger.IntentStatusSucceeded) {
				status += ", " + v.IntentCode
			}
			status += ")"
		}
		if v.Error != "" {
			status += "; " + v.Error
		}
		lines = append(lines, []string{"warehouse", ver + " " + status}, []string{"record", "s3://" + a.Warehouse.Bucket + "/" + v.Key + presence(v.Present)})
	}
	printLines(a.Out, lines)
	return nil
}

func presence(present bool) string {
	if present {
		return " (present)"
	}
	return " (absent)"
}

// recordView reads what the warehouse holds for p: the highest version
// it has a record of, and the status of the canonical version's record.
func (a *App) recordView(ctx context.Context, p ledger.Projection) *recordView {
	v := &recordView{Key: a.recordKey(p)}
	var errs []string
	present, err := a.recordExists(ctx, v.Key)
	if err != nil {
		errs = append(errs, err.Error())
	}
	v.Present = present
	if v.Version, err = a.warehouseVersion(ctx, v.Key); err != nil {
		errs = append(errs, err.Error())
	}
	v.Current = v.Version == p.Version
	// The intent that decides: the original record intent, or the newest
	// of its repairs (the reconciler's and the backfill's).
	scope, base := projection.SplitScoped(p.Name)
	op := warehouse.OperationID(scope, base, p.Subject, p.Version)
	var in *ledger.IntentState
	for n, id := 0, op; n <= ledger.MaxRecordRepairs; n, id = n+1, warehouse.RepairID(op, n+1) {
		st, err := a.Ledger.GetIntentState(ctx, id)
		if errors.Is(err, ledger.ErrNotFound) {
			break
		}
		if err != nil {
			errs = append(errs, err.Error())
			break
		}
		in = &st
	}
	switch {
	case in == nil && present:
		v.Status = WarehouseObserved
	case in == nil:
		v.Status = WarehouseMissing
	default:
		v.Intent, v.IntentStatus, v.IntentCode = in.OperationID, string(in.Status), in.ErrorCode
		switch in.Status {
		case ledger.IntentStatusSucceeded:
			v.Status = WarehouseObserved
			if !present && err == nil {
				// The store said it exists; it is gone since.
				v.Status = WarehouseMissing
			}
		case ledger.IntentStatusQuarantined, ledger.IntentStatusFailed:
			v.Status = WarehouseRefused
		default:
			v.Status = WarehousePending
		}
	}
	v.Error = strings.Join(errs, "; ")
	return v
}

// warehouseVersion is the highest version the warehouse holds a record
// of for the subject whose record key is key: the keys of a subject sort
// by version (zero-padded), so it is the last one listed.
func (a *App) warehouseVersion(ctx context.Context, key string) (int64, error) {
	dir := key[:strings.LastIndex(key, "/")+1]
	var last string
	p := s3.NewListObjectsV2Paginator(a.S3, &s3.ListObjectsV2Input{Bucket: aws.String(a.Warehouse.Bucket), Prefix: aws.String(dir)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return 0, fmt.Errorf("list s3://%s/%s: %w", a.Warehouse.Bucket, dir, err)
		}
		for _, o := range page.Contents {
			if k := aws.ToString(o.Key); k > last {
				last = k
			}
		}
	}
	if last == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(last[len(dir):], "v="), ".json"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("s3://%s/%s is not a record's key", a.Warehouse.Bucket, last)
	}
	return v, nil
}

// BackfillQuery selects and paces a warehouse backfill.
type BackfillQuery struct {
	// Projection keeps one projection's subjects (its ledger name,
	// <scope>/<name>); "" is every projection.
	Projection string
	// Cursor resumes a backfill where a run stopped ("" from the start).
	Cursor string
	// Page is how many table items one Scan reads; Limit how many
	// projections one run examines (it stops at the end of the page that
	// reaches it).
	Page, Limit int
	Reason      string
	DryRun      bool
}

// BackfillSummary is what a backfill did.
type BackfillSummary struct {
	DryRun bool `json:"dry_run"`
	// Examined projections, of Read table items.
	Examined int `json:"examined"`
	Read     int `json:"items_read"`
	Pages    int `json:"pages"`
	// Present: the current version's record is in the warehouse.
	Present int `json:"present"`
	// Written: record intents written (the original's, or a repair of a
	// record whose intent ended without the object being there).
	Written int `json:"written"`
	// Reannounced: the record's intent was already waiting: announced
	// again, nothing written.
	Reannounced int `json:"reannounced"`
	// NeedsOperator: the record's intent ended QUARANTINED, or its
	// repairs are spent: see projections show.
	NeedsOperator int      `json:"needs_operator"`
	Announced     int      `json:"announced"`
	NotAnnounced  []string `json:"not_announced,omitempty"`
	Unreadable    int      `json:"unreadable,omitempty"`
	// Next resumes the backfill (--cursor); "" when it reached the end of
	// the table.
	Next        string `json:"next_cursor,omitempty"`
	Interrupted bool   `json:"interrupted,omitempty"`
	// Stopped: the backfill stopped before the end of its page (an
	// error, an interruption): Next resumes at that page.
	Stopped bool `json:"stopped,omitempty"`
}

// backfillAction is what one projection needs.
type backfillAction struct {
	Projection string `json:"projection"`
	Subject    string `json:"subject"`
	Version    int64  `json:"version"`
	// Action: "write" (the record's intent), "repair" (a repair intent),
	// "announce" (already waiting), "operator" (left to an operator).
	Action      string `json:"action"`
	OperationID string `json:"operation_id,omitempty"`
	Detail      string `json:"detail,omitempty"`
}

// WarehouseBackfill rebuilds the warehouse from the canonical state: for
// every projection (or q.Projection's), page by page, it asks S3 for the
// record of the current version; when it is missing, it writes the
// record's intent as the reconciler's warehouse check does (the original
// intent, warehouse.OperationID, when none exists; a repair,
// warehouse.RepairID, carrying the original's payload, when the original
// ended without the object being there), audited with the operator and
// the reason (ledger.BackfillIntent), and announces it on the effects
// queue; the dispatcher writes the record. A record present, or an
// intent already waiting, writes nothing, so a second run adds nothing.
// Each page ends with a cursor line: --cursor resumes there.
func (a *App) WarehouseBackfill(ctx context.Context, q BackfillQuery) error {
	if err := a.needWarehouse(); err != nil {
		return err
	}
	if !q.DryRun && q.Reason == "" {
		return fmt.Errorf("%w: --reason is required: it goes into the audit trail of every intent written", ErrUsage)
	}
	if q.Projection != "" {
		var err error
		if q.Projection, err = a.scopedProjection(ctx, q.Projection, ""); err != nil {
			return err
		}
	}
	if q.Projection != "" && !a.Warehouse.records(q.Projection) {
		return fmt.Errorf("%w: projection %q is not recorded in the warehouse (WAREHOUSE_PROJECTIONS=%s)", ErrUsage, q.Projection, strings.Join(a.Warehouse.Projections, ","))
	}
	if q.Page <= 0 {
		q.Page = 500
	}
	if q.Limit <= 0 {
		q.Limit = 1000
	}
	var effects string
	if !q.DryRun {
		if _, err := a.actor(ctx); err != nil {
			return err
		}
		var err error
		if effects, err = a.queueURL(ctx, qEffects); err != nil {
			return err
		}
	}
	progressOut := a.Out
	if a.JSON {
		progressOut = a.errOut()
	}
	sum := BackfillSummary{DryRun: q.DryRun}
	cursor := q.Cursor
	var failed error
	for {
		if ctx.Err() != nil {
			sum.Interrupted, sum.Stopped = true, true
			break
		}
		page, err := a.Ledger.ScanProjections(ctx, a.Scanner, q.Projection, cursor, q.Page)
		if errors.Is(err, ledger.ErrCursor) {
			return fmt.Errorf("%w: --cursor %q is not a cursor a backfill printed", ErrUsage, cursor)
		}
		if err != nil {
			failed = err
			break
		}
		sum.Pages++
		sum.Read += page.Read
		var announce []queue.IntentPointer
		written, present := 0, 0
		for _, p := range page.Projections {
			if !a.Warehouse.records(p.Name) {
				continue
			}
			sum.Examined++
			act, err := a.backfillOne(ctx, p, q, &sum)
			if err != nil {
				// S3 or the ledger cannot answer: stop here; the page is
				// done again on resume (what it wrote is then found).
				sum.Unreadable++
				failed = err
				fmt.Fprintf(progressOut, "  %s %s v%d: %s\n", safe(p.Name), safe(p.Subject), p.Version, safe(err.Error()))
				break
			}
			switch act.Action {
			case "":
				present++
				continue
			case "write", "repair":
				written++
				if !q.DryRun {
					announce = append(announce, queue.IntentPointer{OperationID: act.OperationID, Reason: "operator"})
				}
			case "announce":
				if !q.DryRun {
					announce = append(announce, queue.IntentPointer{OperationID: act.OperationID, Reason: "operator"})
				}
			}
			fmt.Fprintf(progressOut, "  %s %s v%d: %s\n", safe(act.Projection), safe(act.Subject), act.Version, safe(act.Detail))
		}
		sum.Present += present
		if len(announce) > 0 {
			unsent, err := (queue.Sender{Client: a.SQS, URL: effects}).SendIntents(ctx, announce)
			sum.Announced += len(announce) - len(unsent)
			sum.NotAnnounced = append(sum.NotAnnounced, unsent...)
			if err != nil && len(unsent) == 0 {
				failed = err
			}
		}
		if failed != nil {
			if ctx.Err() != nil {
				failed, sum.Interrupted = nil, true
			}
			sum.Stopped = true
			fmt.Fprintf(progressOut, "page %d: stopped; it is done again on resume\n", sum.Pages)
			break
		}
		cursor = page.Next
		line := fmt.Sprintf("page %d: %d projections: %d present, %d written", sum.Pages, len(page.Projections), present, written)
		if q.DryRun {
			line = fmt.Sprintf("page %d: %d projections: %d present, %d would be written", sum.Pages, len(page.Projections), present, written)
		}
		if cursor != "" {
			line += "; cursor " + cursor
		} else {
			line += "; end of the table"
		}
		fmt.Fprintln(progressOut, line)
		if cursor == "" || sum.Examined >= q.Limit || failed != nil {
			break
		}
	}
	sum.Next = cursor
	if a.JSON {
		if err := a.printJSON(sum); err != nil {
			return err
		}
	} else {
		a.printBackfill(sum, q)
	}
	switch {
	case failed != nil:
		return fmt.Errorf("%w: backfill stopped: %w", ErrIncomplete, failed)
	case sum.Interrupted:
		return fmt.Errorf("%w: backfill interrupted; run it again to resume (with the cursor above, if any)", ErrIncomplete)
	case len(sum.NotAnnounced) > 0:
		return fmt.Errorf("%w: %d intents written but not announced (the reconciler announces PENDING intents it finds stuck)", ErrIncomplete, len(sum.NotAnnounced))
	}
	return nil
}

// backfillOne decides (ledger.MissingRecord, the reconciler's decision)
// and unless q.DryRun does what p's current version's record needs:
// nothing (Action "") when the record is there.
func (a *App) backfillOne(ctx context.Context, p ledger.Projection, q BackfillQuery, sum *BackfillSummary) (backfillAction, error) {
	act := backfillAction{Projection: p.Name, Subject: p.Subject, Version: p.Version}
	present, err := a.recordExists(ctx, a.recordKey(p))
	if err != nil || present {
		return act, err
	}
	need, err := a.Ledger.MissingRecord(ctx, p, 0)
	if err != nil {
		return act, err
	}
	act.Action, act.OperationID = need.Action, need.OperationID
	what := "record intent"
	if need.Original.OperationID != "" && need.OperationID != need.Original.OperationID {
		what = "repair intent"
	}
	switch need.Action {
	case ledger.RecordWrite:
		return a.backfillWrite(ctx, act, p, need.Intent, need.Source, need.Event, q, sum, "its record intent "+need.OperationID)
	case ledger.RecordRepair:
		orig := need.Original
		return a.backfillWrite(ctx, act, p, need.Intent, need.Source, need.Event, q, sum,
			fmt.Sprintf("repair intent %s (repair %d of record intent %s, %s without its object)", need.OperationID, need.Repair, orig.OperationID, orig.Status))
	case ledger.RecordAnnounce:
		sum.Reannounced++
		act.Detail = fmt.Sprintf("%s %s is %s: %s", what, need.OperationID, need.Status, announced(q.DryRun))
		return act, nil
	}
	sum.NeedsOperator++
	if need.OperationID == "" {
		act.Detail = fmt.Sprintf("record intent %s has had %d repairs and its object is still not there: left to an operator", need.Original.OperationID, ledger.MaxRecordRepairs)
	} else {
		act.Detail = fmt.Sprintf("%s %s is QUARANTINED (%s): left to an operator", what, need.OperationID, need.ErrorCode)
	}
	return act, nil
}

// backfillWrite writes one intent for act (unless q.DryRun), audited.
func (a *App) backfillWrite(ctx context.Context, act backfillAction, p ledger.Projection, in ledger.Intent, source, event string, q BackfillQuery, sum *BackfillSummary, what string) (backfillAction, error) {
	if q.DryRun {
		act.Detail = "would write " + what
		sum.Written++
		return act, nil
	}
	created, err := a.Ledger.BackfillIntent(ctx, p, in, source, event, a.Actor, q.Reason)
	if err != nil {
		return act, err
	}
	if !created {
		// Written meanwhile (the reconciler, another backfill): announced
		// again, harmlessly.
		sum.Reannounced++
		act.Action, act.Detail = "announce", what+" was written meanwhile: announced again"
		return act, nil
	}
	sum.Written++
	act.Detail = "wrote " + what + ", announced"
	return act, nil
}

func announced(dry bool) string {
	if dry {
		return "would announce it again"
	}
	return "announced again"
}

func (a *App) printBackfill(sum BackfillSummary, q BackfillQuery) {
	verb := "wrote"
	if sum.DryRun {
		verb = "dry run: would write"
	}
	audit := ""
	if sum.Written > 0 && !sum.DryRun {
		audit = fmt.Sprintf(" (audit: backfill by %s: %s)", a.Actor, safe(q.Reason))
	}
	fmt.Fprintf(a.Out, "%s %d record intents%s; %d of %d projections already in the warehouse, %d waiting (announced again), %d left to an operator; %d announced\n",
		verb, sum.Written, audit, sum.Present, sum.Examined, sum.Reannounced, sum.NeedsOperator, sum.Announced)
	proj := ""
	if q.Projection != "" {
		proj = " --projection " + q.Projection
	}
	switch {
	case sum.Next != "":
		fmt.Fprintf(a.Out, "more projections remain: resume with webhookctl warehouse backfill%s --cursor %s\n", safe(proj), sum.Next)
	case sum.Stopped:
		fmt.Fprintf(a.Out, "stopped on the first page: run webhookctl warehouse backfill%s again\n", safe(proj))
	default:
		fmt.Fprintln(a.Out, "reached the end of the table")
	}
}

// scopedProjection returns a projection's ledger name, <scope>/<name>. A
// name without a scope ("order") is looked for in every scope: the table
// has no index of projections by name, so it scans the projection items
// (billed per item read; subject, when not "", narrows what matches, not
// what is read) and says on the error output what it read. It is that
// scope's when exactly one scope has it; in none, ledger.ErrNotFound;
// in several, ErrUsage listing each scoped name to choose from.
func (a *App) scopedProjection(ctx context.Context, name, subject string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	what := "projection " + name
	if subject != "" {
		what += " with subject " + subject
	}
	if a.Scanner == nil {
		return "", fmt.Errorf("%w: %s: no scanning client to find its scope; name it <scope>/<name>, as `events show` prints it", ErrConfig, what)
	}
	found := map[string]bool{}
	read, cursor := 0, ""
	for {
		page, err := a.Ledger.ScanProjections(ctx, a.Scanner, "", cursor, 1000)
		if err != nil {
			return "", fmt.Errorf("%s: looking for its scope: %w", what, err)
		}
		read += page.Read
		for _, p := range page.Projections {
			if strings.HasSuffix(p.Name, "/"+name) && (subject == "" || p.Subject == subject) {
				found[p.Name] = true
			}
		}
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	names := slices.Sorted(maps.Keys(found))
	fmt.Fprintf(a.errOut(), "%s: scanned %d items for its scope: %s\n", what, read, orDash(strings.Join(names, ", ")))
	switch len(names) {
	case 0:
		return "", fmt.Errorf("%s: %w in any scope (a projection's ledger name is <scope>/<name>, as `events show` prints it)", what, ledger.ErrNotFound)
	case 1:
		return names[0], nil
	}
	return "", fmt.Errorf("%w: %s is in %d scopes: %s; name one of them (<scope>/<name>)", ErrUsage, what, len(names), strings.Join(names, ", "))
}
