// Package localwarehouse queries the warehouse sink's change records locally
// with DuckDB (github.com/duckdb/duckdb-go, cgo): the records are copied
// from an S3 bucket (the local S3, or any S3 the credentials reach) into a
// directory with ListObjectsV2 and GetObject, and read there with
// DuckDB's read_json.
//
// It is a harness package: no Lambda binary links DuckDB (the layout test
// of functions/ forbids every internal/harness package in them). Nor does
// the local stack's command, scripts/dev, nor any test of a package it
// imports: a team's `go mod tidy` loads those, and would otherwise put
// DuckDB's library for every platform in the team's go.sum (its test in
// scripts/dev checks it). The stack's end-to-end warehouse test lives
// here for that reason.
//
// current_state is one row per (scope, projection, subject): the record of
// the highest version. Which revision is current is decided here, by
// version, never by when a record was written, so a late older revision is
// one more row of the change log and never the current one.
package localwarehouse

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	// The DuckDB driver, registered as "duckdb".
	_ "github.com/duckdb/duckdb-go/v2"
)

// Row is one change record as DuckDB read it.
type Row struct {
	Scope, Projection, Subject string
	Version                    int64
	State                      map[string]any
	EventID, Source            string
	AppliedAt                  time.Time
}

// records is the relation of every change record under dir: the columns
// named and typed (no inference, no hive partitions taken from the path:
// the record itself carries scope, projection and subject).
func records(dir string) string {
	glob := strings.ReplaceAll(filepath.Join(dir, "**", "*.json"), "'", "''")
	return fmt.Sprintf(`read_json('%s', format = 'newline_delimited', hive_partitioning = false,
  columns = {scope: 'VARCHAR', projection: 'VARCHAR', subject: 'VARCHAR', version: 'BIGINT',
             state: 'JSON', event_id: 'VARCHAR', source: 'VARCHAR', applied_at: 'TIMESTAMP'})`, glob)
}

// CurrentStateSQL is the current_state query over the records in dir:
// the highest version per (scope, projection, subject).
func CurrentStateSQL(dir string) string {
	return `SELECT scope, projection, subject, version, state, event_id, source, applied_at
FROM ` + records(dir) + `
QUALIFY row_number() OVER (PARTITION BY scope, projection, subject ORDER BY version DESC) = 1
ORDER BY scope, projection, subject`
}

// ChangeLogSQL is every record in dir, by subject and version.
func ChangeLogSQL(dir string) string {
	return `SELECT scope, projection, subject, version, state, event_id, source, applied_at
FROM ` + records(dir) + `
ORDER BY scope, projection, subject, version`
}

// Lister is the part of the S3 client Download uses.
type Lister interface {
	ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input, opts ...func(*s3.Options)) (*s3.ListObjectsV2Output, error)
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
}

// Download copies every object under prefix in bucket into dir (its key
// as the relative path) and returns how many.
func Download(ctx context.Context, c Lister, bucket, prefix, dir string) (int, error) {
	n := 0
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return n, fmt.Errorf("list s3://%s/%s: %w", bucket, prefix, err)
		}
		for _, o := range page.Contents {
			key := aws.ToString(o.Key)
			if strings.Contains(key, "..") || !strings.HasSuffix(key, ".json") {
				continue
			}
			out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: o.Key})
			if err != nil {
				return n, fmt.Errorf("get s3://%s/%s: %w", bucket, key, err)
			}
			path := filepath.Join(dir, filepath.FromSlash(key))
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				out.Body.Close()
				return n, err
			}
			f, err := os.Create(path)
			if err != nil {
				out.Body.Close()
				return n, err
			}
			_, err = f.ReadFrom(out.Body)
			out.Body.Close()
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return n, fmt.Errorf("write %s: %w", path, err)
			}
			n++
		}
	}
	return n, nil
}

// Query runs one of the queries (CurrentStateSQL, ChangeLogSQL) in an
// in-memory DuckDB.
func Query(ctx context.Context, query string) ([]Row, error) {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("duckdb: %w", err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		var r Row
		var state any
		if err := rows.Scan(&r.Scope, &r.Projection, &r.Subject, &r.Version, &state, &r.EventID, &r.Source, &r.AppliedAt); err != nil {
			return nil, fmt.Errorf("duckdb: %w", err)
		}
		switch s := state.(type) {
		case map[string]any:
			r.State = s
		case string:
			_ = json.Unmarshal([]byte(s), &r.State)
		case []byte:
			_ = json.Unmarshal(s, &r.State)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// viewsSQL creates the views a query runs over: records (every change
// record in dir) and current_state (its highest version per scope,
// projection and subject). With no record in dir (read_json refuses an
// empty glob), records is empty with the same columns.
func viewsSQL(dir string, empty bool) []string {
	rel := records(dir)
	if empty {
		rel = `(SELECT NULL::VARCHAR AS scope, NULL::VARCHAR AS projection, NULL::VARCHAR AS subject, NULL::BIGINT AS version,
  NULL::JSON AS state, NULL::VARCHAR AS event_id, NULL::VARCHAR AS source, NULL::TIMESTAMP AS applied_at WHERE false)`
	}
	return []string{
		`CREATE VIEW records AS SELECT scope, projection, subject, version, state, event_id, source, applied_at FROM ` + rel,
		`CREATE VIEW current_state AS SELECT * FROM records
QUALIFY row_number() OVER (PARTITION BY scope, projection, subject ORDER BY version DESC) = 1`,
	}
}

// QueryTable runs query, any SQL DuckDB takes, in an in-memory DuckDB
// where the views records (every change record in dir, as Download
// copied them; empty when there is none) and current_state (the highest
// version per scope, projection and subject) are defined, and returns its
// columns and rows, each value as text: NULL as NULL, a time in RFC 3339
// (UTC), JSON, lists and structs as JSON.
func QueryTable(ctx context.Context, dir, query string) (columns []string, rows [][]string, err error) {
	empty := true
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".json") {
			empty = false
			return filepath.SkipAll
		}
		return nil
	})
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return nil, nil, err
	}
	defer db.Close()
	// One connection: the views live in its database, whatever the pool
	// would do.
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	for _, v := range viewsSQL(dir, empty) {
		if _, err := conn.ExecContext(ctx, v); err != nil {
			return nil, nil, fmt.Errorf("duckdb: %w", err)
		}
	}
	rs, err := conn.QueryContext(ctx, query)
	if err != nil {
		return nil, nil, fmt.Errorf("duckdb: %w", err)
	}
	defer rs.Close()
	if columns, err = rs.Columns(); err != nil {
		return nil, nil, err
	}
	vals := make([]any, len(columns))
	ptrs := make([]any, len(columns))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rs.Next() {
		if err := rs.Scan(ptrs...); err != nil {
			return nil, nil, fmt.Errorf("duckdb: %w", err)
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			row[i] = text(v)
		}
		rows = append(rows, row)
	}
	return columns, rows, rs.Err()
}

// text renders one value DuckDB returned.
func text(v any) string {
	switch v := v.(type) {
	case nil:
		return "NULL"
	case string:
		return v
	case []byte:
		return string(v)
	case time.Time:
		return v.UTC().Format(time.RFC3339Nano)
	case map[string]any, []any:
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Sprint(v)
		}
		return string(b)
	default:
		return fmt.Sprint(v)
	}
}

// CurrentState downloads the records under prefix and returns current_state.
func CurrentState(ctx context.Context, c Lister, bucket, prefix string) ([]Row, error) {
	return downloadAnd(ctx, c, bucket, prefix, CurrentStateSQL)
}

// ChangeLog downloads the records under prefix and returns every one.
func ChangeLog(ctx context.Context, c Lister, bucket, prefix string) ([]Row, error) {
	return downloadAnd(ctx, c, bucket, prefix, ChangeLogSQL)
}

func downloadAnd(ctx context.Context, c Lister, bucket, prefix string, q func(string) string) ([]Row, error) {
	dir, err := os.MkdirTemp("", "warehouse-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	n, err := Download(ctx, c, bucket, prefix, dir)
	if err != nil || n == 0 {
		return nil, err
	}
	return Query(ctx, q(dir))
}
