package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/warehouse"
)

// stack is a local S3 with the warehouse's bucket and an HTTP API whose
// /_dev/health names it, as `make dev` serves them.
func stack(t *testing.T, health string) (*localaws.S3, string) {
	t.Helper()
	s3 := localaws.NewS3("local-warehouse")
	t.Cleanup(s3.Close)
	if health == "" {
		health = `{"status":"ok","warehouse":{"s3":"` + s3.URL + `","bucket":"local-warehouse","prefix":"records"}}`
	}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/_dev/health" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(health))
	}))
	t.Cleanup(api.Close)
	return s3, strings.TrimPrefix(api.URL, "http://")
}

func put(t *testing.T, s3 *localaws.S3, subject string, version int64, state map[string]any) {
	t.Helper()
	b, err := warehouse.Record{Scope: "orders", Projection: "order", Subject: subject, Version: json.Number(strconv.FormatInt(version, 10)), State: state,
		EventID: "msg-" + subject + "-" + strconv.FormatInt(version, 10), Source: "orders", AppliedAt: "2026-12-01T10:00:00.000Z"}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := s3.Put("local-warehouse", warehouse.Key("records", "orders", "order", subject, version), b); err != nil {
		t.Fatal(err)
	}
}

func runIt(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, func(string) string { return "" }, &out, &errOut)
	return out.String(), errOut.String(), code
}

// Without SQL it prints current_state: one row per subject, its highest
// version; a state's control characters are escaped. SQL runs over the
// records view too.
func TestQueriesTheStacksWarehouse(t *testing.T) {
	s3, api := stack(t, "")
	put(t, s3, "O-1", 1, map[string]any{"status": "created"})
	put(t, s3, "O-1", 2, map[string]any{"status": "confirmed", "note": "\x1b[31mred\n"})
	put(t, s3, "O-2", 7, map[string]any{"status": "created"})

	out, errOut, code := runIt(t, "-http", api)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "scope projection subject version state event_id source applied_at" {
		t.Fatalf("current_state:\n%s", out)
	}
	o1, o2 := strings.Fields(lines[1]), strings.Fields(lines[2])
	if o1[2] != "O-1" || o1[3] != "2" || o1[4] != `{"note":"\u001b[31mred\n","status":"confirmed"}` || o1[5] != "msg-O-1-2" || o2[2] != "O-2" || o2[3] != "7" {
		t.Fatalf("current rows:\n%s", out)
	}
	if strings.ContainsRune(out, 0x1b) || !strings.Contains(errOut, "s3://local-warehouse/records/: 3 records") || !strings.Contains(errOut, "(2 rows)") {
		t.Fatalf("stdout %q\nstderr %s", out, errOut)
	}

	// A subject (a sender's text) reaches the terminal escaped.
	put(t, s3, "O-\x1b]0;owned\a", 1, map[string]any{})
	out, _, code = runIt(t, "-http", api, "SELECT subject FROM current_state WHERE subject LIKE 'O-_]%'")
	if code != 0 || strings.ContainsRune(out, 0x1b) || strings.ContainsRune(out, 0x07) || !strings.Contains(out, `O-\x1b]0;owned\x07`) {
		t.Fatalf("exit %d, a subject with control characters: %q", code, out)
	}
	out, _, code = runIt(t, "-http", api, "SELECT subject, count(*) AS revisions, max(version) AS current FROM records WHERE subject IN ('O-1', 'O-2') GROUP BY subject ORDER BY subject")
	if code != 0 || strings.Join(strings.Fields(out), " ") != "subject revisions current O-1 2 2 O-2 1 7" {
		t.Fatalf("exit %d, records by subject:\n%s", code, out)
	}
	out, _, code = runIt(t, "-http", api, "SELECT", "state->>'status'", "AS", "status", "FROM", "current_state", "WHERE", "subject", "IN", "('O-1',", "'O-2')", "ORDER", "BY", "subject")
	if code != 0 || strings.Join(strings.Fields(out), " ") != "status confirmed created" {
		t.Fatalf("exit %d, SQL in several arguments:\n%s", code, out)
	}
}

// An empty warehouse is an empty table; a stack without the sink, no
// stack and bad SQL are clear errors.
func TestWarehouseErrors(t *testing.T) {
	_, api := stack(t, "")
	if out, errOut, code := runIt(t, "-http", api); code != 0 || strings.TrimSpace(out) != strings.Join(strings.Fields("scope  projection  subject  version  state  event_id  source  applied_at"), "  ") ||
		!strings.Contains(errOut, ": 0 records") {
		t.Fatalf("empty: exit %d\n%q\n%s", code, out, errOut)
	}
	if _, errOut, code := runIt(t, "-http", api, "SELECT nope FROM records"); code != 1 || !strings.Contains(errOut, "warehouse: duckdb:") {
		t.Fatalf("bad SQL: exit %d %s", code, errOut)
	}
	_, off := stack(t, `{"status":"ok"}`)
	if _, errOut, code := runIt(t, "-http", off); code != 1 || !strings.Contains(errOut, "runs without the warehouse sink") {
		t.Fatalf("sink off: exit %d %s", code, errOut)
	}
	if _, errOut, code := runIt(t, "-http", "127.0.0.1:1"); code != 1 || !strings.Contains(errOut, "no make-dev stack answers on 127.0.0.1:1") {
		t.Fatalf("no stack: exit %d %s", code, errOut)
	}
	if _, errOut, code := runIt(t, "-nope"); code != 2 || !strings.Contains(errOut, "warehouse: usage:") {
		t.Fatalf("bad flag: exit %d %s", code, errOut)
	}
}
