package ledger_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	pt "github.com/effectively-once/webhooks/internal/harness/pipelinetest"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/builtin"
	"github.com/effectively-once/webhooks/pkg/projection"
	"github.com/effectively-once/webhooks/pkg/state"
)

// The compatibility promise (doc.go, "Compatibility"): an upgrade never
// loses or misreads what an older version wrote. Each golden fixture in
// testdata/golden holds the items one version of the schema wrote, as
// DynamoDB returns them, from a real pipeline run on the manual clock.
// Every fixture is loaded into a fresh table and read through this
// version's read paths (TestGoldenItemsReadByThisVersion), and this
// version must still write every attribute the newest fixture holds, with
// its type (TestThisVersionWritesEveryGoldenAttribute). A fixture is never
// edited: its hash is pinned below, and -update only writes a fixture that
// does not exist yet.

var updateGolden = flag.Bool("update", false, "write testdata/golden/"+newestGolden+".json from a pipeline run (refused if it exists: a golden fixture is never edited)")

// newestGolden is the fixture this version writes. A change to what the
// ledger writes adds a fixture under a new name (and its checks to
// goldenFixtures), never edits one.
const newestGolden = "v1"

// goldenFixtures are the fixtures, with the SHA-256 of their bytes (an
// edit fails the test) and what this version must read from them.
var goldenFixtures = []struct {
	name   string
	sha256 string
	check  func(t *testing.T, r goldenReader)
}{
	{newestGolden, "1262e66c4f64c89ac1aa9e0597a6b45188b357b75b20f83990ecda4bc6d5df8e", checkGoldenV1},
}

// goldenScenario is what the newest fixture records: the generic orders
// source's O-42 cancelled at revision 12 (a refund and a notice, both
// performed), then confirmed at 13 by an operator (the performed refund
// contradicted, the notice compensated); O-43 cancelled at 7 (its refund
// and notice performed and still watched); and a Stripe subscription
// created active (an entitlement grant, latest policy: a subject cursor;
// a payload kept out of line). One processor and one dispatcher on the
// manual clock: two runs write the same items, but for the order in which
// the dispatcher performs one revision's two intents (the fake
// downstream's effect ids in their answers).
func goldenScenario(t *testing.T) *pt.Harness {
	t.Helper()
	h := pt.NewChaos(t, pt.Options{}, pt.OutboxOptions{})
	w, d := h.NewWorker("proc-1"), h.Outbox.NewDispatcher("disp-1")
	step := func(what string, deliver func() int) {
		t.Helper()
		if code := deliver(); code != 202 {
			t.Fatalf("%s: intake answered %d", what, code)
		}
		h.DrainAll(20*time.Second, 2*time.Second, []*pt.Worker{w}, d)
		h.Clock.Advance(time.Minute)
	}
	order := func(msg, typ, id string, rev int, status string) func() int {
		return func() int { return h.DeliverOrder(msg, pt.OrderEvent(typ, id, rev, status, "")).Status }
	}
	step("O-42 r12", order("msg_golden_o42_12", "order.cancelled", "O-42", 12, ""))
	step("O-42 r13", order("msg_golden_o42_13", "order.confirmed", "O-42", 13, "confirmed"))
	step("O-43 r7", order("msg_golden_o43_7", "order.cancelled", "O-43", 7, ""))
	step("sub_golden_1", func() int {
		b := pt.SubscriptionEvent("evt_golden_sub_1", "customer.subscription.created", "sub_golden_1", "active", pt.Start.Unix()-60, "acct_golden_1")
		return h.Deliver(b, h.Sign(b, pt.SecretPrimary)).Status
	})
	return h
}

// goldenFile is a fixture's shape.
type goldenFile struct {
	// About says which version wrote the items, and how.
	About string            `json:"about"`
	Items []json.RawMessage `json:"items"`
}

func goldenPath(name string) string { return filepath.Join("testdata", "golden", name+".json") }

// scanItems returns every item of a table, sorted by key.
func scanItems(t *testing.T, db *dynamodb.Client, table string) []map[string]types.AttributeValue {
	t.Helper()
	var items []map[string]types.AttributeValue
	var start map[string]types.AttributeValue
	for {
		out, err := db.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table), ExclusiveStartKey: start, ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, out.Items...)
		if start = out.LastEvaluatedKey; len(start) == 0 {
			break
		}
	}
	sort.Slice(items, func(i, j int) bool { return itemKey(items[i]) < itemKey(items[j]) })
	return items
}

func itemKey(it map[string]types.AttributeValue) string {
	s := func(k string) string {
		v, _ := it[k].(*types.AttributeValueMemberS)
		if v == nil {
			return ""
		}
		return v.Value
	}
	return s("pk") + " " + s("sk")
}

// TestWriteGoldenFixture writes the newest fixture when -update is given
// and it does not exist yet.
func TestWriteGoldenFixture(t *testing.T) {
	if !*updateGolden {
		t.Skip("-update writes testdata/golden/" + newestGolden + ".json")
	}
	path := goldenPath(newestGolden)
	if _, err := os.Stat(path); err == nil {
		t.Fatalf("%s exists: a golden fixture is never edited; name a new one (newestGolden) for a schema change", path)
	}
	h := goldenScenario(t)
	f := goldenFile{About: "written by the ledger of schema " + newestGolden + " (goldenScenario in golden_test.go) on the manual clock from " + pt.Start.Format(time.RFC3339)}
	for _, it := range scanItems(t, h.DB, h.Table) {
		j, err := localaws.ItemJSON(it)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		f.Items = append(f.Items, raw)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(f); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	t.Logf("wrote %s (%d items); pin its sha256 %s in goldenFixtures", path, len(f.Items), hex.EncodeToString(sum[:]))
}

// goldenReader is a table loaded with one fixture, and its readers.
type goldenReader struct {
	L     *ledger.Ledger
	State *state.Reader
	Items map[string]map[string]types.AttributeValue // by "pk sk"
}

// loadGolden reads a fixture, checks its pinned hash and puts its items
// into a fresh table.
func loadGolden(t *testing.T, name, sum string) goldenReader {
	t.Helper()
	raw, err := os.ReadFile(goldenPath(name))
	if err != nil {
		t.Fatal(err)
	}
	if got := sha256.Sum256(raw); hex.EncodeToString(got[:]) != sum {
		t.Fatalf("%s has sha256 %s, pinned %s: a golden fixture is never edited; add a new one for a schema change", goldenPath(name), hex.EncodeToString(got[:]), sum)
	}
	var f goldenFile
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	// The suite's fixture: minidyn, or dynalite (LEDGER_TEST_DYNAMODB_URL,
	// make test-dynalite), whose validation is AWS's.
	fx := newFixture(t)
	ctx := context.Background()
	r := goldenReader{L: fx.L, State: state.New(fx.DB, fx.Table), Items: map[string]map[string]types.AttributeValue{}}
	for i, j := range f.Items {
		it, err := localaws.ParseItemJSON(j)
		if err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
		if _, err := fx.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(fx.Table), Item: it}); err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
		r.Items[itemKey(it)] = it
	}
	return r
}

func TestGoldenItemsReadByThisVersion(t *testing.T) {
	for _, g := range goldenFixtures {
		t.Run(g.name, func(t *testing.T) {
			g.check(t, loadGolden(t, g.name, g.sha256))
		})
	}
}

// TestThisVersionWritesEveryGoldenAttribute runs the newest fixture's
// scenario again: every item it holds is written again, with every
// attribute it has, each of the same type. Attributes are only added.
func TestThisVersionWritesEveryGoldenAttribute(t *testing.T) {
	sum := ""
	for _, g := range goldenFixtures {
		if g.name == newestGolden {
			sum = g.sha256
		}
	}
	golden := loadGolden(t, newestGolden, sum)
	h := goldenScenario(t)
	now := map[string]map[string]types.AttributeValue{}
	for _, it := range scanItems(t, h.DB, h.Table) {
		now[itemKey(it)] = it
	}
	for key, old := range golden.Items {
		cur, ok := now[key]
		if !ok {
			t.Errorf("%s: %s wrote it, this version does not", key, newestGolden)
			continue
		}
		for attr, v := range old {
			switch w, ok := cur[attr]; {
			case !ok:
				t.Errorf("%s: attribute %s (%s) is no longer written", key, attr, typeName(v))
			case typeName(w) != typeName(v):
				t.Errorf("%s: attribute %s was %s, is %s", key, attr, typeName(v), typeName(w))
			}
		}
	}
}

func typeName(v types.AttributeValue) string { return fmt.Sprintf("%T", v) }

// The operation ids v1 wrote (pt.OrderOps, and the Stripe subscription
// projection's grant). They are keys: a version that derived another id
// for the same intent would perform its effect a second time.
const (
	v1RefundO42  = "01ff3d88620757d6fff9412927d899a1"
	v1NotifyO42  = "9380da3ddd590db3f848f0673bb429a8"
	v1RefundO43  = "9fae3a14dfb7c043a88cabeb979540e4"
	v1NotifyO43  = "e5a64e4294e5654a761e97a8815fec3f"
	v1GrantSub   = "4a039fb08285aed875c9462b256a7be5"
	v1SubVersion = 7184159761
)

// checkGoldenV1 reads schema v1's items (goldenScenario): through the
// ledger (events, payloads, projections, intents, cursors, the due
// index's families, the snapshot) and through package state.
func checkGoldenV1(t *testing.T, r goldenReader) {
	ctx := context.Background()
	at := func(minutes int) time.Time { return pt.Start.Add(time.Duration(minutes) * time.Minute) }
	for _, c := range []struct {
		order          string
		rev            int
		refund, notify string
	}{{"O-42", 12, v1RefundO42, v1NotifyO42}, {"O-43", 7, v1RefundO43, v1NotifyO43}} {
		refund, notify := pt.OrderOps(c.order, c.rev)
		if refund != c.refund || notify != c.notify {
			t.Fatalf("%s r%d: this version derives operation ids %s, %s; v1 wrote %s, %s", c.order, c.rev, refund, notify, c.refund, c.notify)
		}
	}

	// Events.
	events := []struct {
		source, id, typ, subject, hint string
		minute                         int
		projection                     string
		version                        int64
		ops                            []ledger.Operation
		chunks                         int
	}{
		{"orders", "msg_golden_o42_12", "order.cancelled", "O-42", "12", 0, "orders/order", 12,
			[]ledger.Operation{{ID: v1RefundO42, Kind: "refund"}, {ID: v1NotifyO42, Kind: "notify_cancellation"}}, 0},
		{"orders", "msg_golden_o42_13", "order.confirmed", "O-42", "13", 1, "orders/order", 13,
			[]ledger.Operation{{ID: v1NotifyO42 + "-c", Kind: "notify_reinstatement"}}, 0},
		{"orders", "msg_golden_o43_7", "order.cancelled", "O-43", "7", 2, "orders/order", 7,
			[]ledger.Operation{{ID: v1RefundO43, Kind: "refund"}, {ID: v1NotifyO43, Kind: "notify_cancellation"}}, 0},
		{"stripe", "evt_golden_sub_1", "customer.subscription.created", "sub_golden_1", "", 3, "stripe/stripe_subscription", v1SubVersion,
			[]ledger.Operation{{ID: v1GrantSub, Kind: "entitlement.grant"}}, 1},
	}
	for _, e := range events {
		ev, err := r.L.Get(ctx, e.source, e.id)
		if err != nil {
			t.Fatal(err)
		}
		res := ev.Result
		if ev.Status != ledger.StatusProcessed || ev.EventType != e.typ || ev.Subject != e.subject || ev.VersionHint != e.hint ||
			ev.Attempts != 1 || ev.TotalAttempts != 1 || ev.DeliveryCount != 1 || !ev.ReceivedAt.Equal(at(e.minute)) || !ev.ProcessedAt.Equal(at(e.minute)) ||
			!ev.LastDeliveryAt.Equal(at(e.minute)) || !ev.ExpiresAt.Equal(at(e.minute).Add(30*24*time.Hour)) || ev.PayloadChunks != e.chunks ||
			res == nil || res.Outcome != ledger.OutcomeApplied || res.Projection != e.projection || res.Subject != e.subject ||
			res.Version != e.version || res.Intents != len(e.ops) || fmt.Sprint(res.Operations) != fmt.Sprint(e.ops) {
			t.Fatalf("event %s/%s: %+v result %+v", e.source, e.id, ev, res)
		}
		if got := strings.Join(pt.Actions(ev), ","); got != "accept,claim,complete" || ev.Audit[2].Actor != "proc-1" || ev.Audit[2].To != ledger.StatusProcessed {
			t.Fatalf("event %s/%s audit %+v", e.source, e.id, ev.Audit)
		}
		body, err := r.L.Payload(ctx, ev) // checks the stored hash
		var doc map[string]any
		if err != nil || len(body) != ev.PayloadSize || json.Unmarshal(body, &doc) != nil {
			t.Fatalf("event %s/%s payload %q: %v", e.source, e.id, body, err)
		}
	}
	if ev, _ := r.L.Get(ctx, "orders", "msg_golden_o42_12"); ev.FirstDeliveryID != "msg_golden_o42_12" || ev.LastDeliveryID != "msg_golden_o42_12" {
		t.Fatalf("delivery ids %q %q", ev.FirstDeliveryID, ev.LastDeliveryID)
	}
	if ev, _ := r.L.Get(ctx, "stripe", "evt_golden_sub_1"); ev.Attributes["format"] != "snapshot" {
		t.Fatalf("stripe attributes %v", ev.Attributes)
	}

	// Projections.
	o42, err := r.L.GetProjection(ctx, "orders/order", "O-42")
	if err != nil || o42.Version != 13 || o42.Terminal || o42.State["status"] != "confirmed" || o42.State["total_minor"] != json.Number("12900") ||
		o42.Fingerprint == "" || o42.UpdatedAt != at(1).UnixMilli() || o42.LastEvent != "orders/msg_golden_o42_13" || len(o42.Watch) != 0 || len(o42.Latest) != 0 {
		t.Fatalf("O-42 %+v %v", o42, err)
	}
	o43, err := r.L.GetProjection(ctx, "orders/order", "O-43")
	wantWatch := []ledger.WatchEntry{
		{OperationID: v1RefundO43, Kind: "refund", Version: 7, Condition: map[string]string{"status": "cancelled"}},
		{OperationID: v1NotifyO43, Kind: "notify_cancellation", Version: 7, Condition: map[string]string{"status": "cancelled"}, Compensation: "notify_reinstatement"},
	}
	if err != nil || o43.Version != 7 || o43.State["status"] != "cancelled" || fmt.Sprint(o43.Watch) != fmt.Sprint(wantWatch) {
		t.Fatalf("O-43 %+v %v", o43, err)
	}
	sub, err := r.L.GetProjection(ctx, "stripe/stripe_subscription", "sub_golden_1")
	if err != nil || sub.Version != v1SubVersion || sub.State["entitled"] != true || fmt.Sprint(sub.State["price_ids"]) != "[price_pro_monthly]" ||
		sub.State["current_period_end"] != json.Number("1798632000") ||
		sub.Latest["entitlement"] != (ledger.LatestIntent{OperationID: v1GrantSub, Kind: "entitlement.grant", Subject: "acct_golden_1", Version: v1SubVersion}) {
		t.Fatalf("subscription %+v %v", sub, err)
	}

	// Intents.
	intents := []struct {
		op, kind, subject, scope string
		status                   ledger.IntentStatus
		policy                   ledger.Policy
		version, contradictedBy  int64
		compensatedBy, code      string
		minute                   int
		expires                  bool
	}{
		{v1RefundO42, "refund", "O-42", "orders", ledger.IntentStatusContradicted, ledger.PolicyWhileCurrent, 12, 13, "", "contradicted", 0, false},
		{v1NotifyO42, "notify_cancellation", "O-42", "orders", ledger.IntentStatusSucceeded, ledger.PolicyWhileCurrent, 12, 13, v1NotifyO42 + "-c", "ok_200", 0, true},
		{v1NotifyO42 + "-c", "notify_reinstatement", "O-42", "orders", ledger.IntentStatusSucceeded, "", 13, 0, "", "ok_200", 1, true},
		{v1RefundO43, "refund", "O-43", "orders", ledger.IntentStatusSucceeded, ledger.PolicyWhileCurrent, 7, 0, "", "ok_200", 2, true},
		{v1NotifyO43, "notify_cancellation", "O-43", "orders", ledger.IntentStatusSucceeded, ledger.PolicyWhileCurrent, 7, 0, "", "ok_200", 2, true},
		{v1GrantSub, "entitlement.grant", "acct_golden_1", "stripe", ledger.IntentStatusSucceeded, ledger.PolicyLatest, v1SubVersion, 0, "", "ok_200", 3, true},
	}
	for _, w := range intents {
		in, err := r.L.GetIntentState(ctx, w.op)
		if err != nil {
			t.Fatal(err)
		}
		if in.OperationID != w.op || in.Kind != w.kind || in.Subject != w.subject || in.Scope != w.scope || in.Source != w.scope ||
			in.Status != w.status || in.Policy != w.policy || in.Version != w.version || in.ContradictedBy != w.contradictedBy ||
			in.CompensatedBy != w.compensatedBy || in.ErrorCode != w.code || in.Attempts != 1 || !in.CreatedAt.Equal(at(w.minute)) ||
			!in.FirstAttemptAt.Equal(at(w.minute)) || !in.FinishedAt.Equal(at(w.minute)) || in.ExpiresAt.IsZero() == w.expires ||
			in.Fingerprint == "" || in.LeaseToken != "" || len(in.Audit) < 2 || in.Audit[1].Actor != "disp-1" {
			t.Fatalf("intent %s: %+v", w.op, in)
		}
	}
	if in, _ := r.L.GetIntentState(ctx, v1RefundO42); in.Causation != "orders/msg_golden_o42_12" || in.Projection != "orders/order" ||
		in.ProjectionSubject != "O-42" || in.Condition["status"] != "cancelled" || in.Payload["total_minor"] != json.Number("12900") ||
		fmt.Sprint(in.Payload["origin"]) != "map[hop:1]" {
		t.Fatalf("O-42's refund %+v", in)
	}
	if in, _ := r.L.GetIntentState(ctx, v1NotifyO42+"-c"); in.Payload["compensates"] != v1NotifyO42 || in.Payload["contradicted_by"] != "13" {
		t.Fatalf("the compensation's payload %v", in.Payload)
	}

	// The subject cursor, and the due index's families: nothing due, the
	// contradicted refund on the attention shards, the cursor on the sync
	// shards.
	cur, err := r.L.GetCursor(ctx, "stripe/stripe_subscription", "sub_golden_1", "entitlement")
	if err != nil || cur.Scope != "stripe" || cur.Kind != "entitlement.grant" || cur.Subject != "acct_golden_1" || cur.HolderOp != v1GrantSub ||
		cur.HolderVersion != v1SubVersion || !cur.HolderUntil.After(at(3)) || !cur.DueAt.Equal(cur.HolderUntil) {
		t.Fatalf("cursor %+v %v", cur, err)
	}
	far := pt.Start.Add(365 * 24 * time.Hour)
	if due, err := r.L.ListDue(ctx, far, 10); err != nil || len(due) != 0 {
		t.Fatalf("due events %+v %v", due, err)
	}
	if due, err := r.L.ListDueIntents(ctx, far, 10); err != nil || len(due) != 0 {
		t.Fatalf("due intents %+v %v", due, err)
	}
	if open, err := r.L.ListOpen(ctx, "intent", 10, ledger.Status(ledger.IntentStatusContradicted)); err != nil || len(open) != 1 || open[0].OperationID != v1RefundO42 {
		t.Fatalf("attention %+v %v", open, err)
	}
	if sync, err := r.L.ListSyncDue(ctx, far, 10); err != nil || len(sync) != 1 || sync[0].HolderOp != v1GrantSub {
		t.Fatalf("sync due %+v %v", sync, err)
	}

	// Package state, over the same items. It reads no event item, and a
	// v1 projection item does not name its revision's other intents (ops):
	// O-42's compensation is not listed until its next revision, and is
	// read by its operation id.
	s, err := r.State.Subject(ctx, "orders", builtin.OrderProjection, "O-42")
	if err != nil || s.Version != 13 || !s.UpdatedAt.Equal(at(1)) || len(s.Intents) != 0 {
		t.Fatalf("state O-42 %+v %v", s, err)
	}
	if in, err := r.State.Intent(ctx, v1NotifyO42+"-c"); err != nil || in.Status != state.Succeeded {
		t.Fatalf("state O-42's compensation %+v %v", in, err)
	}
	s, err = r.State.Subject(ctx, "orders", builtin.OrderProjection, "O-43")
	if err != nil || len(s.Intents) != 2 || s.Intents[0].Status != state.Succeeded || s.Intents[1].Status != state.Succeeded {
		t.Fatalf("state O-43 %+v %v", s, err)
	}
	s, err = r.State.Subject(ctx, "stripe", builtin.StripeSubscriptionProjection, "sub_golden_1")
	if err != nil || s.Version != v1SubVersion || len(s.Intents) != 1 || s.Intents[0].OperationID != v1GrantSub || s.Intents[0].Policy != projection.PolicyLatest {
		t.Fatalf("state subscription %+v %v", s, err)
	}
	if in, err := r.State.Intent(ctx, v1RefundO42); err != nil || in.Status != state.Contradicted || !in.UpdatedAt.Equal(at(1)) {
		t.Fatalf("state refund %+v %v", in, err)
	}
	if _, err := r.State.Subject(ctx, "vendor", builtin.OrderProjection, "O-42"); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("another scope's O-42: %v", err)
	}
}

// The examples of docs/state.md are items of the v1 fixture, as they
// are: the page shows what the ledger writes, not what it once wrote.
func TestDocumentedItemsAreGoldenItems(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "state.md"))
	if err != nil {
		t.Fatal(err)
	}
	golden := loadGolden(t, goldenFixtures[0].name, goldenFixtures[0].sha256)
	blocks := strings.Split(string(doc), "```json\n")[1:]
	if len(blocks) == 0 {
		t.Fatal("docs/state.md has no JSON example")
	}
	for _, b := range blocks {
		raw, _, _ := strings.Cut(b, "```")
		it, err := localaws.ParseItemJSON(json.RawMessage(raw))
		if err != nil {
			t.Fatalf("example %.60q: %v", raw, err)
		}
		want, ok := golden.Items[itemKey(it)]
		if !ok {
			t.Fatalf("example %s is not an item of the v1 fixture", itemKey(it))
		}
		got, _ := localaws.ItemJSON(it)
		exp, _ := localaws.ItemJSON(want)
		if g, e := mustJSON(t, got), mustJSON(t, exp); g != e {
			t.Errorf("example %s differs from the v1 fixture's item:\n%s\nwant\n%s", itemKey(it), g, e)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
