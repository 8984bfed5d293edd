package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ChangedScan is one bounded step of a walk over the table's projections
// (ScanProjectionsChanged).
type ChangedScan struct {
	// Cursor resumes the walk: a ChangedPage's Next, "" for the start of
	// the table.
	Cursor string
	// Since: the projections updated at or after it match.
	Since time.Time
	// Before, when not zero: the projections updated before it match too.
	Before time.Time
	// Limit bounds the matches returned, MaxRead the items read.
	Limit, MaxRead int
}

// ChangedPage is what one ChangedScan found.
type ChangedPage struct {
	Projections []Projection
	// Read is how many items the step read, matching or not: DynamoDB
	// bills a Scan per item read, before its filter.
	Read int
	// Next resumes the walk after this step; "" when Done.
	Next string
	// Done: the walk reached the end of the table.
	Done bool
}

// ScanProjectionsChanged reads the next items of a walk over the table
// (a Scan with a filter: the table has no index of projections by update
// time) and returns the projections that match, at most Limit, reading
// at most MaxRead items. Every page is a Scan whose Limit is at most the
// matches still allowed, so a page never holds more matches than the
// step may return and the walk always resumes from the LastEvaluatedKey
// DynamoDB gave (the only ExclusiveStartKey the API documents): nothing
// is skipped, whatever the bounds. A walk from "" to Done visits every
// item that existed for its whole length once.
func (l *Ledger) ScanProjectionsChanged(ctx context.Context, q ChangedScan) (ChangedPage, error) {
	var page ChangedPage
	sc, ok := l.db.(scanner)
	if !ok {
		return page, ErrNoScan
	}
	start, err := decodeScanCursor(q.Cursor)
	if err != nil {
		return page, err
	}
	if q.Limit <= 0 || q.MaxRead <= 0 {
		return page, fmt.Errorf("%w: a walk of the projections needs a positive limit and read bound", ErrInvalid)
	}
	filter := "#item = :p AND (updated_at >= :since"
	vals := map[string]types.AttributeValue{":p": sv("projection"), ":since": nv(ms(q.Since))}
	if !q.Before.IsZero() {
		filter += " OR updated_at < :before"
		vals[":before"] = nv(ms(q.Before))
	}
	filter += ")"
	for {
		n := min(q.MaxRead-page.Read, q.Limit-len(page.Projections), 1000)
		if n <= 0 {
			break
		}
		res, err := sc.Scan(ctx, &dynamodb.ScanInput{
			TableName:                 aws.String(l.opts.Table),
			FilterExpression:          aws.String(filter),
			ExpressionAttributeNames:  map[string]string{"#item": "item"},
			ExpressionAttributeValues: vals,
			ExclusiveStartKey:         start,
			Limit:                     aws.Int32(int32(n)),
		})
		if err != nil {
			return page, fmt.Errorf("scan projections changed since %s: %w", q.Since.Format(time.RFC3339), translate(err))
		}
		// A page reads at most its Limit; the store's ScannedCount says
		// how many when it reports one (minidyn does not).
		if res.ScannedCount > 0 {
			page.Read += int(min(res.ScannedCount, int32(n)))
		} else {
			page.Read += n
		}
		for _, it := range res.Items {
			p, err := decodeProjection(it)
			if err != nil {
				return page, err
			}
			page.Projections = append(page.Projections, p)
		}
		if len(res.LastEvaluatedKey) == 0 {
			page.Done = true
			return page, nil
		}
		start = res.LastEvaluatedKey
	}
	if page.Next, err = encodeScanCursor(start); err != nil {
		return page, err
	}
	return page, nil
}

// WarehousePass is the warehouse drift check's progress: a walk over the
// whole table, one bounded step per reconciler run (ScanProjectionsChanged),
// and what the last complete walk found. One item holds it
// (CUR#warehouse); the reconciler reads it at the start of a run and
// saves it at the end, conditioned on what it read (SaveWarehousePass).
type WarehousePass struct {
	// Cursor resumes the current pass ("" : at the start of the table).
	Cursor string `json:"cursor,omitempty"`
	// Started is when the current pass began; zero: none has.
	Started time.Time `json:"started"`
	// Since: the current pass checks the subjects updated at or after it.
	Since time.Time `json:"since"`
	// The current pass so far.
	Runs     int `json:"runs,omitempty"`
	Read     int `json:"read,omitempty"`
	Checked  int `json:"checked,omitempty"`
	Drifting int `json:"drifting,omitempty"`
	// Unreadable counts the subjects whose record the store did not answer
	// for.
	Unreadable int `json:"unreadable,omitempty"`
	// OldestDrift is the age of the oldest drifting revision when it was
	// found.
	OldestDrift time.Duration `json:"oldest_drift_ns,omitempty"`
	// Recheck is the update time of the oldest subject found drifting or
	// unreadable: the next pass's Since is no later, so the next pass
	// checks it again.
	Recheck time.Time `json:"recheck"`
	// Last is the last complete pass (its Completed is zero: none yet).
	Last CompletedPass `json:"last"`

	rev int64 // the item's revision, which SaveWarehousePass conditions on
}

// CompletedPass is what one complete pass of the warehouse drift check
// found.
type CompletedPass struct {
	Started, Completed time.Time
	Runs, Read         int
	Checked, Drifting  int
	Unreadable         int
	OldestDrift        time.Duration
}

// Complete ends the pass at now: Last becomes what it found, and the
// next pass, which starts at the first run after, checks the subjects
// updated since this one began, and those it found behind (Recheck),
// again.
func (p *WarehousePass) Complete(now time.Time) {
	*p = WarehousePass{
		Last: CompletedPass{Started: p.Started, Completed: now, Runs: p.Runs, Read: p.Read,
			Checked: p.Checked, Drifting: p.Drifting, Unreadable: p.Unreadable, OldestDrift: p.OldestDrift},
		Since: Earliest(p.Started, p.Recheck),
		rev:   p.rev,
	}
}

// Earliest is the earlier of a and b; a zero time is neither.
func Earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

// GetWarehousePass reads the warehouse drift check's pass; the zero pass
// when there is none yet.
func (l *Ledger) GetWarehousePass(ctx context.Context) (WarehousePass, error) {
	var p WarehousePass
	out, err := l.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(l.opts.Table), Key: warehousePassKey(), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return p, fmt.Errorf("get warehouse pass: %w", translate(err))
	}
	if len(out.Item) == 0 {
		return p, nil
	}
	body, _ := out.Item["pass"].(*types.AttributeValueMemberS)
	rev, _ := out.Item["rev"].(*types.AttributeValueMemberS)
	if body == nil || rev == nil {
		return p, fmt.Errorf("decode warehouse pass: missing attributes")
	}
	if err := json.Unmarshal([]byte(body.Value), &p); err != nil {
		return p, fmt.Errorf("decode warehouse pass: %w", err)
	}
	if _, err := fmt.Sscan(rev.Value, &p.rev); err != nil {
		return p, fmt.Errorf("decode warehouse pass revision: %w", err)
	}
	return p, nil
}

// SaveWarehousePass writes p, read by GetWarehousePass, back: one
// UpdateItem conditioned on the revision it was read at, so of two runs
// that read the same pass one saves and the other gets ErrConflict (its
// checks were done, and are idempotent; its step is walked again).
func (l *Ledger) SaveWarehousePass(ctx context.Context, p WarehousePass) error {
	body, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode warehouse pass: %w", err)
	}
	// The revision is text: minidyn rewrites the numbers of an item it
	// updates as floats (see the package doc).
	vals := map[string]types.AttributeValue{":pass": sv(string(body)), ":next": sv(fmt.Sprint(p.rev + 1)), ":item": sv("warehouse_pass")}
	cond := "attribute_not_exists(pk)"
	if p.rev > 0 {
		cond = "#rev = :rev"
		vals[":rev"] = sv(fmt.Sprint(p.rev))
	}
	_, err = l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(l.opts.Table),
		Key:                       warehousePassKey(),
		UpdateExpression:          aws.String("SET #pass = :pass, #rev = :next, #item = :item"),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  map[string]string{"#item": "item", "#pass": "pass", "#rev": "rev"},
		ExpressionAttributeValues: vals,
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return fmt.Errorf("save warehouse pass: another run saved it first: %w", ErrConflict)
	case err != nil:
		return fmt.Errorf("save warehouse pass: %w", translate(err))
	}
	return nil
}
