package operator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/operator"
	"github.com/effectively-once/webhooks/internal/warehouse"
	"github.com/effectively-once/webhooks/pkg/builtin"
)

// whFixture is the orders pipeline with the warehouse sink on a local S3
// (pipelinetest: minidyn, goaws, localaws.S3), and webhookctl pointed at
// its table, queues and bucket.
type whFixture struct {
	t   *testing.T
	h   *pt.Harness
	wh  *pt.Warehouse
	w   *pt.Worker
	d   *pt.Dispatcher
	sts *fakeSTS
}

const backfillReason = "warehouse rebuilt after the bucket was emptied (INC-77)"

// newWarehouseFixture processes, before the sink is on, order O-0 r1 (so
// it has no record intent), then with the sink on O-1 r1 and r2, O-2 r1,
// and O-3 r1 and r2 with the same state (r2 advances the version and
// writes no record intent). The warehouse holds O-1 v1 and v2, O-2 v1 and
// O-3 v1; the canonical versions are O-0 v1, O-1 v2, O-2 v1, O-3 v2.
func newWarehouseFixture(t *testing.T) *whFixture {
	t.Helper()
	h := pt.NewOrders(t, pt.Options{}, pt.OutboxOptions{})
	f := &whFixture{t: t, h: h, sts: &fakeSTS{ARN: callerARN}}
	before := h.NewWorker("w0")
	f.deliver("msg-o0-1", pt.OrderEvent("order.created", "O-0", 1, "", ""))
	h.DrainAll(20*time.Second, 2*time.Second, []*pt.Worker{before})
	f.wh = h.EnableWarehouse(0)
	f.w = h.NewWorker("w1")
	f.d = h.Outbox.NewDispatcher("d1")
	for _, d := range []struct {
		id   string
		body []byte
	}{
		{"msg-o1-1", pt.OrderEvent("order.created", "O-1", 1, "", "")},
		{"msg-o1-2", pt.OrderEvent("order.updated", "O-1", 2, "confirmed", "")},
		{"msg-o2-1", pt.OrderEvent("order.created", "O-2", 1, "", "")},
		{"msg-o3-1", pt.OrderEvent("order.updated", "O-3", 1, "confirmed", "")},
	} {
		f.deliver(d.id, d.body)
		f.drain()
	}
	// O-3's next version (the same state) is processed by a processor
	// still running without the sink, as during a deploy that turns it on.
	f.deliver("msg-o3-2", pt.OrderEvent("order.updated", "O-3", 2, "confirmed", ""))
	h.DrainAll(20*time.Second, 2*time.Second, []*pt.Worker{before}, f.d)
	if ev := h.EventOf("orders", "msg-o3-2"); ev.Result == nil || ev.Result.Outcome != ledger.OutcomeNoop {
		t.Fatalf("O-3 r2 should advance the version without a state change: %+v", ev.Result)
	}
	if got := f.keys(); !slices.Equal(got, f.wantKeys("O-1", 1, "O-1", 2, "O-2", 1, "O-3", 1)) {
		t.Fatalf("warehouse before any backfill: %v", got)
	}
	return f
}

func (f *whFixture) deliver(id string, body []byte) {
	f.t.Helper()
	if r := f.h.DeliverOrder(id, body); r.Status != 202 {
		f.t.Fatalf("%s: %d %s", id, r.Status, r.Body)
	}
}

func (f *whFixture) drain() {
	f.t.Helper()
	f.h.DrainAll(20*time.Second, 2*time.Second, []*pt.Worker{f.w}, f.d)
}

// keys lists the warehouse's record keys, sorted.
func (f *whFixture) keys() []string { return f.wh.S3.Keys(f.wh.Bucket, f.wh.Prefix+"/") }

// wantKeys is the keys of (order, version) pairs, sorted.
func (f *whFixture) wantKeys(pairs ...any) []string {
	var out []string
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, f.wh.Key("orders", builtin.OrderProjection, pairs[i].(string), int64(pairs[i+1].(int))))
	}
	sort.Strings(out)
	return out
}

// intents is every intent in the ledger, by operation id and status.
func (f *whFixture) intents() map[string]string {
	out := map[string]string{}
	for _, in := range f.h.Intents() {
		out[in.OperationID] = in.Status
	}
	return out
}

func (f *whFixture) run(args ...string) (stdout, stderr string, code int) {
	f.t.Helper()
	var out, errOut bytes.Buffer
	e := operator.Env{
		Getenv:   func(k string) string { return map[string]string{"USER": "alice"}[k] },
		Hostname: func() (string, error) { return "ops-box", nil },
		Stdout:   &out, Stderr: &errOut, Clock: f.h.Clock,
		Connect: func(context.Context, operator.Settings, func(string) string) (operator.Clients, error) {
			return operator.Clients{DynamoDB: f.h.DB, SQS: f.h.SQS, STS: f.sts, S3: f.wh.S3.Client()}, nil
		},
	}
	base := []string{"--table", f.h.Table, "--events-queue-url", f.h.Queues.Queue, "--events-dlq-url", f.h.Queues.DLQ,
		"--effects-queue-url", f.h.Outbox.Queues.Queue, "--effects-dlq-url", f.h.Outbox.Queues.DLQ,
		"--warehouse-bucket", f.wh.Bucket, "--warehouse-prefix", f.wh.Prefix}
	code = operator.Run(context.Background(), append(base, args...), e)
	return out.String(), errOut.String(), code
}

func (f *whFixture) mustRun(args ...string) string {
	f.t.Helper()
	out, errOut, code := f.run(args...)
	if code != 0 {
		f.t.Fatalf("webhookctl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// backfill runs a backfill and returns its JSON summary.
func (f *whFixture) backfill(args ...string) operator.BackfillSummary {
	f.t.Helper()
	var sum operator.BackfillSummary
	out := f.mustRun(append([]string{"warehouse", "backfill", "--json"}, args...)...)
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		f.t.Fatalf("%v\n%s", err, out)
	}
	return sum
}

// checkCurrentRecords asserts that each order's record at its canonical
// version is in the warehouse and carries the canonical state.
func (f *whFixture) checkCurrentRecords(orders ...string) {
	f.t.Helper()
	byKey := map[string]warehouse.Record{}
	for _, r := range f.wh.Records() {
		byKey[f.wh.Key(r.Scope, r.Projection, r.Subject, r.VersionInt())] = r
	}
	for _, o := range orders {
		p, err := f.h.Ledger.GetProjection(context.Background(), "orders/"+builtin.OrderProjection, o)
		if err != nil {
			f.t.Fatal(err)
		}
		r, ok := byKey[f.wh.Key("orders", builtin.OrderProjection, o, p.Version)]
		if !ok {
			f.t.Fatalf("%s: no record of its canonical v%d", o, p.Version)
		}
		got, _ := json.Marshal(r.State)
		want, _ := json.Marshal(p.State)
		if string(got) != string(want) || r.VersionInt() != p.Version {
			f.t.Fatalf("%s: record v%d %s, canonical v%d %s", o, r.VersionInt(), got, p.Version, want)
		}
	}
}

// A backfill writes the record intent of each current version the
// warehouse lacks (O-0: applied before the sink was on; O-3 v2: advanced
// by a processor still without the sink), audited, and announces it; the
// dispatcher writes the records. A second run adds nothing. After the bucket is
// emptied, a backfill recreates exactly the current versions' records
// (repairs of intents that ended SUCCEEDED), and a run after that adds
// nothing again.
func TestWarehouseBackfillRebuildsTheWarehouseIdempotently(t *testing.T) {
	t.Parallel()
	f := newWarehouseFixture(t)
	ctx := context.Background()

	// A dry run writes nothing.
	intentsBefore := f.intents()
	dry := f.backfill("--dry-run")
	if dry.Examined != 4 || dry.Present != 2 || dry.Written != 2 || dry.Announced != 0 || dry.Next != "" {
		t.Fatalf("dry run %+v", dry)
	}
	if got := f.intents(); len(got) != len(intentsBefore) {
		t.Fatalf("a dry run wrote intents: %d, was %d", len(got), len(intentsBefore))
	}

	sum := f.backfill("--reason", backfillReason)
	if sum.Examined != 4 || sum.Present != 2 || sum.Written != 2 || sum.Announced != 2 || sum.Reannounced != 0 || sum.NeedsOperator != 0 {
		t.Fatalf("backfill %+v", sum)
	}
	for _, o := range []struct {
		order   string
		version int64
	}{{"O-0", 1}, {"O-3", 2}} {
		in, err := f.h.Ledger.GetIntentState(ctx, warehouse.OperationID("orders", builtin.OrderProjection, o.order, o.version))
		if err != nil {
			t.Fatalf("%s v%d: %v", o.order, o.version, err)
		}
		want := ledger.AuditEntry{At: f.h.Clock.Now(), To: ledger.Status(ledger.IntentPending), Actor: aliceActor, Action: "backfill", Reason: backfillReason}
		if in.Kind != warehouse.Kind || in.Status != ledger.IntentStatusPending || len(in.Audit) != 1 || in.Audit[0] != want {
			t.Fatalf("%s v%d intent %+v", o.order, o.version, in)
		}
	}
	f.drain()
	want := f.wantKeys("O-0", 1, "O-1", 1, "O-1", 2, "O-2", 1, "O-3", 1, "O-3", 2)
	if got := f.keys(); !slices.Equal(got, want) {
		t.Fatalf("after the backfill: %v, want %v", got, want)
	}
	f.checkCurrentRecords("O-0", "O-1", "O-2", "O-3")

	// Again: nothing to write, nothing changes.
	intents := f.intents()
	if again := f.backfill("--reason", backfillReason); again.Written != 0 || again.Present != 4 || again.Announced != 0 {
		t.Fatalf("second backfill %+v", again)
	}
	f.drain()
	if got := f.keys(); !slices.Equal(got, want) {
		t.Fatalf("after a second backfill: %v", got)
	}
	if got := f.intents(); !mapsEqual(got, intents) {
		t.Fatalf("a second backfill changed the intents:\n%v\nwas\n%v", got, intents)
	}

	// The bucket emptied: the records are gone, their intents SUCCEEDED.
	for _, k := range f.keys() {
		if err := f.wh.S3.Delete(f.wh.Bucket, k); err != nil {
			t.Fatal(err)
		}
	}
	sum = f.backfill("--reason", backfillReason)
	if sum.Examined != 4 || sum.Present != 0 || sum.Written != 4 || sum.Announced != 4 {
		t.Fatalf("backfill of an empty bucket %+v", sum)
	}
	f.drain()
	current := f.wantKeys("O-0", 1, "O-1", 2, "O-2", 1, "O-3", 2)
	if got := f.keys(); !slices.Equal(got, current) {
		t.Fatalf("after rebuilding an empty bucket: %v, want exactly the current versions %v", got, current)
	}
	f.checkCurrentRecords("O-0", "O-1", "O-2", "O-3")
	intents = f.intents()
	for op, st := range intents {
		if st != string(ledger.IntentStatusSucceeded) {
			t.Fatalf("intent %s is %s", op, st)
		}
	}
	if again := f.backfill("--reason", backfillReason); again.Written != 0 || again.Present != 4 {
		t.Fatalf("backfill after the rebuild %+v", again)
	}
	f.drain()
	if got := f.keys(); !slices.Equal(got, current) || !mapsEqual(f.intents(), intents) {
		t.Fatalf("a backfill after the rebuild changed the warehouse %v or the intents", got)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A backfill walks the table in pages and stops at --limit with a cursor;
// resumed from the cursors it printed, it sees every projection once.
// --projection keeps one projection's; a write needs --reason, a backfill
// a warehouse, and a cursor must be one it printed.
func TestWarehouseBackfillResumesFromItsCursor(t *testing.T) {
	t.Parallel()
	f := newWarehouseFixture(t)
	cursorRE := regexp.MustCompile(`--cursor (\S+)\n`)
	seen := map[string]int{}
	lineRE := regexp.MustCompile(`(?m)^  orders/order (O-\d) v\d+: would write`)
	args := []string{"warehouse", "backfill", "--dry-run", "--page", "3", "--limit", "1"}
	runs := 0
	for cursor := ""; ; {
		runs++
		a := args
		if cursor != "" {
			a = append(slices.Clone(args), "--cursor", cursor)
		}
		out := f.mustRun(a...)
		for _, m := range lineRE.FindAllStringSubmatch(out, -1) {
			seen[m[1]]++
		}
		if !strings.Contains(out, "page 1: ") {
			t.Fatalf("no page line:\n%s", out)
		}
		m := cursorRE.FindStringSubmatch(out)
		if m == nil {
			if !strings.Contains(out, "reached the end of the table") {
				t.Fatalf("neither a cursor nor the end:\n%s", out)
			}
			break
		}
		cursor = m[1]
		if runs > 50 {
			t.Fatal("the cursor does not move")
		}
	}
	if runs < 2 || len(seen) != 2 || seen["O-0"] != 1 || seen["O-3"] != 1 {
		t.Fatalf("%d runs saw %v, want O-0 and O-3 once each", runs, seen)
	}
	if sum := f.backfill("--dry-run", "--projection", "stripe/stripe_subscription"); sum.Examined != 0 || sum.Written != 0 {
		t.Fatalf("another projection's backfill %+v", sum)
	}
	if sum := f.backfill("--dry-run", "--projection", "orders/order"); sum.Examined != 4 || sum.Written != 2 {
		t.Fatalf("orders/order's backfill %+v", sum)
	}
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"warehouse", "backfill"}, 2, "webhookctl: usage: --reason is required: it goes into the audit trail of every intent written\n"},
		{[]string{"warehouse", "backfill", "--dry-run", "--cursor", "nope"}, 2, `webhookctl: usage: --cursor "nope" is not a cursor a backfill printed` + "\n"},
		{[]string{"warehouse", "backfill", "--warehouse-bucket", "", "--dry-run"}, 2, "webhookctl: configuration: no warehouse: set --warehouse-bucket or WAREHOUSE_BUCKET"},
		{[]string{"warehouse"}, 2, "webhookctl: usage: warehouse needs a subcommand: backfill\n"},
	} {
		out, errOut, code := f.run(tc.args...)
		if code != tc.code || !strings.HasPrefix(errOut, tc.stderr) {
			t.Errorf("%v: exit %d\n%s%s", tc.args, code, out, errOut)
		}
	}
	if f.sts.calls() != 0 {
		t.Fatalf("a dry run asked who the caller is %d times", f.sts.calls())
	}
}

// stats counts the subjects whose canonical revision has no record, as
// the reconciler does, with the oldest one's age; projections show puts a
// subject's warehouse version and record status next to its canonical
// version.
func TestWarehouseDriftInStatsAndProjectionsShow(t *testing.T) {
	t.Parallel()
	f := newWarehouseFixture(t)
	f.h.Clock.Advance(90 * time.Second)
	out := f.mustRun("stats")
	if !strings.Contains(out, "\nwarehouse (s3://"+f.wh.Bucket+"/"+f.wh.Prefix+"; subjects changed in the last 1d00h)\n"+
		"  canonical revision != warehouse revision: 2 (oldest ") || !strings.Contains(out, "  checked 4 subjects\n") {
		t.Fatalf("stats:\n%s", out)
	}
	var st operator.Stats
	if err := json.Unmarshal([]byte(f.mustRun("stats", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	o0, err := f.h.Ledger.GetProjection(context.Background(), "orders/order", "O-0")
	if err != nil {
		t.Fatal(err)
	}
	oldest := int64(f.h.Clock.Now().Sub(time.UnixMilli(o0.UpdatedAt)) / time.Second)
	if w := st.Warehouse; w == nil || w.Drifting != 2 || w.Checked != 4 || w.OldestDriftSeconds != oldest || w.Bucket != f.wh.Bucket || w.Capped {
		t.Fatalf("stats --json warehouse %+v (want oldest %ds)", st.Warehouse, oldest)
	}

	show := func(order string) map[string]string {
		t.Helper()
		lines := map[string]string{}
		for _, l := range strings.Split(f.mustRun("projections", "show", "orders/order", order), "\n") {
			if k, v, ok := strings.Cut(l, "  "); ok {
				lines[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
		return lines
	}
	op := warehouse.OperationID("orders", builtin.OrderProjection, "O-1", 2)
	if l := show("O-1"); l["version"] != "2 (canonical)" || l["warehouse"] != "v2 WAREHOUSE_OBSERVED (record intent "+op+" SUCCEEDED)" ||
		l["record"] != "s3://"+f.wh.Bucket+"/"+f.wh.Key("orders", "order", "O-1", 2)+" (present)" {
		t.Fatalf("O-1: %q", l)
	}
	if l := show("O-3"); l["version"] != "2 (canonical)" || l["warehouse"] != "v1 WAREHOUSE_MISSING" {
		t.Fatalf("O-3: %q", l)
	}

	// The warehouse unavailable: stats and a backfill stop at the first
	// record they cannot read, say so and exit 1, writing nothing.
	f.wh.S3.SetDown(true)
	out, errOut, code := f.run("stats")
	if code != 1 || !strings.Contains(out, "  checked 1 subjects; stopped at an unreadable record: head s3://") || errOut != "webhookctl: incomplete: the warehouse could not be read\n" {
		t.Fatalf("stats with the warehouse down: exit %d\n%s%s", code, out, errOut)
	}
	intents := f.intents()
	out, errOut, code = f.run("warehouse", "backfill", "--reason", backfillReason)
	if code != 1 || !strings.Contains(out, "page 1: stopped; it is done again on resume\n") || !strings.Contains(out, "stopped on the first page: run webhookctl warehouse backfill again\n") ||
		!strings.HasPrefix(errOut, "webhookctl: incomplete: backfill stopped: head s3://") || !mapsEqual(f.intents(), intents) {
		t.Fatalf("backfill with the warehouse down: exit %d\n%s%s", code, out, errOut)
	}
	f.wh.S3.SetDown(false)

	// The warehouse down while the dispatcher writes: the backfilled
	// record waits (RETRY_WAIT).
	f.mustRun("warehouse", "backfill", "--projection", "orders/order", "--reason", backfillReason)
	f.wh.S3.SetDown(true)
	f.d.PollOnce(context.Background())
	f.wh.S3.SetDown(false)
	op3 := warehouse.OperationID("orders", builtin.OrderProjection, "O-3", 2)
	if l := show("O-3"); l["warehouse"] != "v1 WAREHOUSE_PENDING (record intent "+op3+" RETRY_WAIT, retryable)" {
		t.Fatalf("O-3 while its record waits: %q", l)
	}
	var d struct {
		Version   int64 `json:"version"`
		Warehouse struct {
			Status, IntentStatus string
			Version              int64
			Present              bool
		} `json:"warehouse"`
		StateKeys []string `json:"state_keys"`
	}
	if err := json.Unmarshal([]byte(f.mustRun("projections", "show", "orders/order", "O-3", "--json")), &d); err != nil {
		t.Fatal(err)
	}
	if d.Version != 2 || d.Warehouse.Status != operator.WarehousePending || d.Warehouse.Version != 1 || d.Warehouse.Present || len(d.StateKeys) == 0 {
		t.Fatalf("projections show --json %+v", d)
	}
	// A bare projection name is its only scope's (found by a scan, which
	// it reports); without a warehouse, the line says so.
	if out, errOut, code := f.run("projections", "show", "order", "O-3"); code != 0 || !strings.Contains(out, "projection    orders/order\n") ||
		!strings.Contains(errOut, "projection order with subject O-3: scanned ") {
		t.Fatalf("bare name: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := f.run("warehouse", "backfill", "--projection", "order", "--dry-run"); code != 0 || !strings.Contains(errOut, "items for its scope: orders/order\n") {
		t.Fatalf("backfill --projection order: exit %d\n%s%s", code, out, errOut)
	}
	if out := f.mustRun("--warehouse-bucket", "", "projections", "show", "orders/order", "O-3"); !strings.Contains(out, "warehouse     not configured") {
		t.Fatalf("without a warehouse:\n%s", out)
	}
	if out := f.mustRun("--warehouse-bucket", "", "stats"); strings.Contains(out, "warehouse") {
		t.Fatalf("stats without a warehouse shows one:\n%s", out)
	}
}

// --local reads the make-dev stack's warehouse (its bucket in the local S3
// on DEV_S3_ADDR) unless DEV_WAREHOUSE=off; through the AWS configuration
// chain, WAREHOUSE_BUCKET and AWS_ENDPOINT_URL_S3 name it, and a host
// name endpoint is addressed by path. The stack's defaults are the
// devstack's.
func TestWarehouseThroughConnect(t *testing.T) {
	if operator.LocalS3Addr != devstack.DefaultS3Addr || operator.LocalWarehouseBucket != devstack.DefaultWarehouseBucket ||
		operator.LocalWarehousePrefix != devstack.DefaultWarehousePrefix {
		t.Fatalf("webhookctl's make-dev warehouse %s %s/%s differs from the devstack's", operator.LocalS3Addr, operator.LocalWarehouseBucket, operator.LocalWarehousePrefix)
	}
	ctx := context.Background()
	e := newEmulated(t, operator.LocalTable, operator.LocalPrefix)
	s3 := localaws.NewS3(operator.LocalWarehouseBucket)
	defer s3.Close()
	s3Host := strings.Replace(strings.TrimPrefix(s3.URL, "http://"), "127.0.0.1", "localhost", 1)
	l, err := ledger.New(e.DB, ledger.Options{Table: operator.LocalTable})
	if err != nil {
		t.Fatal(err)
	}
	// One projection whose current version has no record.
	if _, err := l.Accept(ctx, ledger.Delivery{Source: "orders", EventID: "msg-1", EventType: "order.created", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	c, err := l.Claim(ctx, "orders", "msg-1", ledger.ClaimOptions{Owner: "w", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Commit(ctx, c, &ledger.ProjectionWrite{Name: "orders/order", Subject: "O-9", Version: 3, Fingerprint: "f", State: map[string]any{"status": "created"}}, nil); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"DEV_DYNAMODB_ADDR": strings.TrimPrefix(e.DynamoURL, "http://"), "DEV_SQS_ADDR": strings.TrimPrefix(e.SQSURL, "http://"),
		"DEV_S3_ADDR": s3Host, "USER": "alice"}
	run := func(env operator.Env, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		env.Stdout, env.Stderr, env.Hostname = &out, &errOut, func() (string, error) { return "h", nil }
		if code := operator.Run(ctx, args, env); code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out.String(), errOut.String())
		}
		return out.String()
	}
	local := operator.Env{Getenv: func(k string) string { return vars[k] }, Connect: operator.Connect}
	if out := run(local, "--local", "projections", "show", "orders/order", "O-9"); !strings.Contains(out, "warehouse     no record WAREHOUSE_MISSING\n") ||
		!strings.Contains(out, "s3://local-warehouse/records/scope=orders/projection=order/") {
		t.Fatalf("--local projections show:\n%s", out)
	}
	if out := run(local, "--local", "stats"); !strings.Contains(out, "  canonical revision != warehouse revision: 1 (oldest ") {
		t.Fatalf("--local stats:\n%s", out)
	}
	vars["DEV_WAREHOUSE"] = "off"
	if out := run(local, "--local", "stats"); strings.Contains(out, "warehouse") {
		t.Fatalf("--local stats with DEV_WAREHOUSE=off:\n%s", out)
	}

	awsEnv(t, map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": e.DynamoURL, "AWS_ENDPOINT_URL_SQS": e.SQSURL, "AWS_ENDPOINT_URL_S3": "http://" + s3Host,
		"AWS_REGION": localaws.Region, "TABLE_NAME": operator.LocalTable, "WAREHOUSE_BUCKET": operator.LocalWarehouseBucket, "WAREHOUSE_PREFIX": "records",
		"EVENTS_DLQ_URL": e.Events.DLQ, "EFFECTS_DLQ_URL": e.Effects.DLQ})
	chain := operator.Env{Getenv: os.Getenv, Connect: operator.Connect}
	if out := run(chain, "stats"); !strings.Contains(out, "  canonical revision != warehouse revision: 1 (oldest ") {
		t.Fatalf("stats through the AWS chain:\n%s", out)
	}
}

// A projection not in WAREHOUSE_PROJECTIONS is not recorded: stats does
// not count it as drifting, a backfill leaves it alone (and refuses it by
// name), projections show says so. Without the setting the same stack
// drifts and backfills (TestWarehouseDriftInStatsAndProjectionsShow).
func TestWarehouseCommandsLeaveProjectionsNotRecordedAlone(t *testing.T) {
	t.Parallel()
	f := newWarehouseFixture(t)
	only := []string{"--warehouse-projections", "stripe_subscription"}
	var st operator.Stats
	if err := json.Unmarshal([]byte(f.mustRun(append(only, "stats", "--json")...)), &st); err != nil {
		t.Fatal(err)
	}
	if w := st.Warehouse; w == nil || w.Drifting != 0 || w.Checked != 0 {
		t.Fatalf("stats of an unrecorded projection: %+v", st.Warehouse)
	}
	intents := f.intents()
	keys := f.keys()
	if sum := f.backfill(append(only, "--reason", backfillReason)...); sum.Examined != 0 || sum.Written != 0 {
		t.Fatalf("backfill of an unrecorded projection: %+v", sum)
	}
	out, errOut, code := f.run(append(only, "warehouse", "backfill", "--projection", "orders/order", "--reason", backfillReason)...)
	if code != 2 || !strings.Contains(errOut, `projection "orders/order" is not recorded in the warehouse (WAREHOUSE_PROJECTIONS=stripe_subscription)`) {
		t.Fatalf("backfill --projection of an unrecorded projection: exit %d\n%s%s", code, out, errOut)
	}
	if !mapsEqual(f.intents(), intents) || !slices.Equal(f.keys(), keys) {
		t.Fatalf("an unrecorded projection was backfilled: intents %v, keys %v", f.intents(), f.keys())
	}
	if out := f.mustRun(append(only, "projections", "show", "orders/order", "O-3")...); !strings.Contains(out, "not recorded: the projection is not in WAREHOUSE_PROJECTIONS (stripe_subscription)") {
		t.Fatalf("projections show:\n%s", out)
	}
	// The order projection named: recorded as before.
	if err := json.Unmarshal([]byte(f.mustRun("--warehouse-projections", "order", "stats", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if w := st.Warehouse; w == nil || w.Drifting != 2 || w.Checked != 4 {
		t.Fatalf("stats of a recorded projection: %+v", st.Warehouse)
	}
}
