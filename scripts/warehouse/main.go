// Command warehouse queries the `make dev` stack's warehouse with DuckDB:
// `make warehouse`, or `make warehouse SQL='…'`. It asks the running
// stack (GET /_dev/health on DEV_HTTP_ADDR) where the warehouse sink's
// records are (its local S3, bucket and prefix), copies every record into
// a temporary directory (ListObjectsV2, GetObject) and runs one query in
// an in-memory DuckDB over two views:
//
//   - records: every change record (scope, projection, subject, version,
//     state as JSON, event_id, source, applied_at), one per applied revision;
//   - current_state: the record of the highest version per scope,
//     projection and subject: the warehouse's current row.
//
// Without SQL it prints current_state. For example:
//
//	make warehouse
//	make warehouse SQL="SELECT subject, version, state->>'status' AS status FROM records WHERE projection = 'order' ORDER BY subject, version"
//	go run ./scripts/warehouse -bucket local-warehouse -s3 http://127.0.0.1:4566 "SELECT count(*) FROM records"
//
// The table's cells are printed with their control characters escaped
// (what a sender put in a state cannot act on the terminal). It links
// DuckDB (cgo), which is why it is a script of its own: webhookctl and
// the Lambda binaries do not.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/harness/localwarehouse"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// DefaultQuery is what runs without SQL.
const DefaultQuery = "SELECT * FROM current_state ORDER BY scope, projection, subject"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errUsage marks a bad command line (exit 2).
var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	err := query(ctx, args, getenv, stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, "warehouse: "+err.Error())
		return 2
	default:
		fmt.Fprintln(stderr, "warehouse: "+ledger.Printable(err.Error()))
		return 1
	}
}

func query(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("warehouse", flag.ContinueOnError)
	fs.SetOutput(stderr)
	httpAddr := fs.String("http", orDefault(getenv("DEV_HTTP_ADDR"), "127.0.0.1:3000"), "the make-dev stack's HTTP API, asked where the warehouse is (env DEV_HTTP_ADDR)")
	s3URL := fs.String("s3", "", "the S3 endpoint holding the records (default: the stack's)")
	bucket := fs.String("bucket", "", "the warehouse's bucket (default: the stack's)")
	prefix := fs.String("prefix", "", "the records' key prefix (default: the stack's)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: go run ./scripts/warehouse [flags] [SQL]\n\nRuns SQL (default: %s)\nin DuckDB over the views records and current_state of the make-dev stack's warehouse.\n\nFlags:\n", DefaultQuery)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	sql := strings.TrimSpace(strings.Join(fs.Args(), " "))
	if sql == "" {
		sql = DefaultQuery
	}
	if *s3URL == "" || *bucket == "" {
		w, err := stackWarehouse(ctx, *httpAddr)
		if err != nil {
			return err
		}
		*s3URL, *bucket = orDefault(*s3URL, w.S3), orDefault(*bucket, w.Bucket)
		if *prefix == "" {
			*prefix = w.Prefix
		}
	}
	dir, err := os.MkdirTemp("", "warehouse-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	keyPrefix := strings.Trim(*prefix, "/")
	if keyPrefix != "" {
		keyPrefix += "/"
	}
	n, err := localwarehouse.Download(ctx, localaws.S3At(*s3URL), *bucket, keyPrefix, dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "s3://%s/%s: %d records (DuckDB views: records, current_state)\n", *bucket, keyPrefix, n)
	cols, rows, err := localwarehouse.QueryTable(ctx, dir, sql)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, cells(cols))
	for _, r := range rows {
		fmt.Fprintln(tw, cells(r))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "(%d rows)\n", len(rows))
	return nil
}

// cells joins a row's cells with tabs, each escaped as one printable line
// (a tab or a line break in a value would shift the columns).
func cells(row []string) string {
	out := make([]string, len(row))
	for i, c := range row {
		out[i] = ledger.Printable(c)
	}
	return strings.Join(out, "\t")
}

// warehouseAt is where the stack's warehouse is, as /_dev/health says.
type warehouseAt struct{ S3, Bucket, Prefix string }

// stackWarehouse asks the running stack where its warehouse is.
func stackWarehouse(ctx context.Context, httpAddr string) (warehouseAt, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/_dev/health", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return warehouseAt{}, fmt.Errorf("no make-dev stack answers on %s (start one with make dev, set DEV_HTTP_ADDR, or give -s3 and -bucket): %v", httpAddr, err)
	}
	defer resp.Body.Close()
	var health struct {
		Warehouse *warehouseAt `json:"warehouse"`
	}
	if resp.StatusCode != http.StatusOK {
		return warehouseAt{}, fmt.Errorf("GET http://%s/_dev/health: HTTP %d", httpAddr, resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&health); err != nil {
		return warehouseAt{}, fmt.Errorf("GET http://%s/_dev/health: %v", httpAddr, err)
	}
	if health.Warehouse == nil || health.Warehouse.Bucket == "" || health.Warehouse.S3 == "" {
		return warehouseAt{}, fmt.Errorf("the stack on %s runs without the warehouse sink (started with DEV_WAREHOUSE=off?)", httpAddr)
	}
	return *health.Warehouse, nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
