package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/harness/localwarehouse"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/projection"
)

// The warehouse sink (when the stack runs it: Target.WarehouseBucket).
// Every applied revision is a change record in S3, written by the
// dispatcher; the warehouse's current row of a subject is the record of
// its highest version (DuckDB over the records: localwarehouse). Once
// the story is over, the demo compares, per subject the run's events
// last changed, the ledger's canonical projection with that row: the same
// version and the same state. A record is written after the commit, so
// the demo polls until they are in step; a version advanced without a
// state change writes no record, and the reconciler's warehouse check
// writes it on its next run, so the wait allows two of its schedules.

// WarehouseSubject is one subject's canonical projection next to the
// warehouse's current row.
type WarehouseSubject struct {
	Scope, Projection, Subject string
	Canonical                  int64
	// Warehouse is the current row's version: 0 without a row.
	Warehouse int64
	// Row is the current row's state, as DuckDB read it.
	Row map[string]any
	// RowEvent is the row's source/event_id.
	RowEvent string
	OK       bool
	// Why says what differs.
	Why string
}

// WarehouseOutcome is the warehouse part of the report.
type WarehouseOutcome struct {
	Bucket, Prefix string
	// Records is how many record objects the bucket holds under the
	// prefix (every run's), CurrentRows how many current rows DuckDB
	// found among them.
	Records, CurrentRows int
	Subjects             []WarehouseSubject
	// InStep: every subject matched before the deadline; Waited is how
	// long it took (or how long the demo waited).
	InStep bool
	Waited time.Duration
	// Deadline is how long the demo would wait.
	Deadline time.Duration
}

// warehouseWait is how long the demo waits for the warehouse: two of the
// reconciler's schedules (it re-drives a missing record on its next run)
// and half a minute, or 150 s when the stack does not say its schedule.
func warehouseWait(timings *devstack.Timings) time.Duration {
	if timings == nil || timings.ScheduleSeconds <= 0 {
		return 150 * time.Second
	}
	return 2*time.Duration(timings.ScheduleSeconds*float64(time.Second)) + 30*time.Second
}

// checkWarehouse polls the warehouse until every subject of projections
// whose last event is this run's (causes) has its current row at the
// canonical version with the canonical state, or wait passes; it records
// the last comparison and a violation per subject still out of step.
func (r *Report) checkWarehouse(ctx context.Context, t Target, projections []ledger.Projection, causes map[string]bool, wait time.Duration, progressOut io.Writer) error {
	var run []ledger.Projection
	for _, p := range projections {
		if causes[p.LastEvent] {
			run = append(run, p)
		}
	}
	sort.Slice(run, func(i, j int) bool {
		if run[i].Name != run[j].Name {
			return run[i].Name < run[j].Name
		}
		return run[i].Subject < run[j].Subject
	})
	out := &WarehouseOutcome{Bucket: t.WarehouseBucket, Prefix: t.WarehousePrefix, Deadline: wait}
	r.Warehouse = out
	progress(progressOut, "comparing the warehouse (s3://%s/%s, DuckDB current_state) with the ledger's canonical projections: %d subjects this run changed last; "+
		"waiting up to %s (a version advanced without a state change is recorded by the reconciler's next run)",
		t.WarehouseBucket, t.WarehousePrefix, len(run), wait.Round(time.Second))
	start := time.Now()
	last := ""
	var err error
	for {
		var rows []localwarehouse.Row
		rows, err = localwarehouse.CurrentState(ctx, t.S3, t.WarehouseBucket, t.WarehousePrefix)
		if err != nil {
			return fmt.Errorf("read the warehouse: %w", err)
		}
		out.CurrentRows = len(rows)
		byKey := map[string]localwarehouse.Row{}
		for _, row := range rows {
			byKey[row.Scope+"|"+row.Projection+"|"+row.Subject] = row
		}
		out.Subjects = out.Subjects[:0]
		behind := 0
		for _, p := range run {
			s := compareWarehouse(p, byKey)
			if !s.OK {
				behind++
			}
			out.Subjects = append(out.Subjects, s)
		}
		out.Waited = time.Since(start)
		if behind == 0 {
			out.InStep = true
			break
		}
		if time.Since(start) >= wait || ctx.Err() != nil {
			break
		}
		if line := fmt.Sprintf("  warehouse: %d of %d subjects not in step yet (%s)", behind, len(run), firstBehind(out.Subjects)); line != last {
			progress(progressOut, "%s", line)
			last = line
		}
		time.Sleep(2 * time.Second)
	}
	if out.Records, err = countRecords(ctx, t); err != nil {
		return fmt.Errorf("list the warehouse's records: %w", err)
	}
	for _, s := range out.Subjects {
		if !s.OK {
			r.violate("warehouse", "%s %s: canonical v%d, warehouse %s: %s (after %s)", subjectLabel(scoped(s.Scope, s.Projection)), s.Subject, s.Canonical, rowVersion(s.Warehouse), s.Why, out.Waited.Round(time.Second))
		}
	}
	return nil
}

// compareWarehouse compares one canonical projection with its current row.
func compareWarehouse(p ledger.Projection, rows map[string]localwarehouse.Row) WarehouseSubject {
	scope, base := projection.SplitScoped(p.Name)
	s := WarehouseSubject{Scope: scope, Projection: base, Subject: p.Subject, Canonical: p.Version}
	row, ok := rows[scope+"|"+base+"|"+p.Subject]
	if !ok {
		s.Why = "no record of this subject"
		return s
	}
	s.Warehouse, s.Row, s.RowEvent = row.Version, row.State, row.Source+"/"+row.EventID
	switch {
	case row.Version != p.Version:
		s.Why = fmt.Sprintf("the current row is v%d", row.Version)
	case stateJSON(row.State) != stateJSON(p.State):
		s.Why = fmt.Sprintf("the current row's state %s differs from the canonical %s", stateJSON(row.State), stateJSON(p.State))
	default:
		s.OK = true
	}
	return s
}

// stateJSON is a state as compact JSON with sorted keys and numbers as
// written, so the ledger's exact numbers and DuckDB's decoded ones compare
// by their text.
func stateJSON(state map[string]any) string {
	if state == nil {
		state = map[string]any{}
	}
	b, err := json.Marshal(state)
	if err != nil {
		return fmt.Sprint(state)
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return string(b)
	}
	b, _ = json.Marshal(v)
	return string(b)
}

func firstBehind(subjects []WarehouseSubject) string {
	for _, s := range subjects {
		if !s.OK {
			return fmt.Sprintf("first: %s %s canonical v%d, warehouse %s", subjectLabel(scoped(s.Scope, s.Projection)), s.Subject, s.Canonical, rowVersion(s.Warehouse))
		}
	}
	return ""
}

func rowVersion(v int64) string {
	if v == 0 {
		return "no row"
	}
	return fmt.Sprintf("v%d", v)
}

func scoped(scope, base string) string {
	if scope == "" {
		return base
	}
	return scope + "/" + base
}

// countRecords counts the record objects under the prefix (every run's).
func countRecords(ctx context.Context, t Target) (int, error) {
	n := 0
	p := s3.NewListObjectsV2Paginator(t.S3, &s3.ListObjectsV2Input{Bucket: aws.String(t.WarehouseBucket), Prefix: aws.String(t.WarehousePrefix + "/")})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return n, err
		}
		n += len(page.Contents)
	}
	return n, nil
}

func (r Report) printWarehouse(w io.Writer) {
	o := r.Warehouse
	if o == nil {
		return
	}
	verdict := fmt.Sprintf("in step after %s", o.Waited.Round(100*time.Millisecond))
	if !o.InStep {
		verdict = fmt.Sprintf("NOT in step after %s (the limit: two reconciler schedules and 30 s)", o.Waited.Round(time.Second))
	}
	fmt.Fprintf(w, "\nThe warehouse against the truth (s3://%s/%s: %s, %d current rows by DuckDB; the subjects this run changed last: %d): %s\n",
		o.Bucket, o.Prefix, plural(o.Records, "record", "records"), o.CurrentRows, len(o.Subjects), verdict)
	fmt.Fprintf(w, "(A revision is recorded by the dispatcher after its commit; a version advanced without a state change is recorded by the reconciler's warehouse check on its next run.)\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  PROJECTION\tSUBJECT\tCANONICAL\tWAREHOUSE\tMATCH\tCURRENT ROW (state, from event)")
	for _, s := range o.Subjects {
		row := "-"
		if s.Warehouse != 0 {
			row = stateJSON(s.Row) + " from " + s.RowEvent
		}
		mark := "ok"
		if !s.OK {
			mark = "MISMATCH"
		}
		fmt.Fprintf(tw, "  %s\t%s\tv%d\t%s\t%s\t%s\n", scoped(s.Scope, s.Projection), s.Subject, s.Canonical, rowVersion(s.Warehouse), mark, row)
	}
	_ = tw.Flush()
	for _, s := range o.Subjects {
		if !s.OK {
			fmt.Fprintf(w, "  MISMATCH %s %s: %s\n", scoped(s.Scope, s.Projection), s.Subject, s.Why)
		}
	}
}

// warehouseKind reports whether an intent is a warehouse change record:
// written to the warehouse, not a call to the downstream, so the
// downstream checks leave it out (checkWarehouse checks the records).
func warehouseKind(kind string) bool { return kind == warehouse.Kind }
