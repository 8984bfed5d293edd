package ledger_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// dueModel is what the test knows it wrote: every item of one kind that a
// due query may return, with its due time.
type dueModel struct {
	id    string
	dueAt time.Time
}

// oldest returns the ids of the limit oldest entries, oldest first.
func oldest(m []dueModel, limit int) []string {
	s := append([]dueModel(nil), m...)
	sort.Slice(s, func(i, j int) bool { return s[i].dueAt.Before(s[j].dueAt) })
	var ids []string
	for i := 0; i < len(s) && i < limit; i++ {
		ids = append(ids, s[i].id)
	}
	return ids
}

// shardOf is the ledger's spread of items over the due shards (FNV-1a of
// the key parts, as ledger.dueShard), so the cloned items sit where the
// ledger would have put them.
func shardOf(a, b string, shards int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(a + "#" + b))
	return int(h.Sum32() % uint32(shards))
}

// idsIn returns n ids with the prefix whose items the ledger puts on shard.
func idsIn(prefix, part string, shard, n int) []string {
	var ids []string
	for k := 0; len(ids) < n; k++ {
		id := prefix + strconv.Itoa(k)
		if shardOf(part, id, 4) == shard {
			ids = append(ids, id)
		}
	}
	return ids
}

// rawItem reads one item as stored.
func rawItem(t *testing.T, f fixture, pk, sk string) map[string]types.AttributeValue {
	t.Helper()
	out, err := f.DB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(f.Table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: sk}}})
	if err != nil || len(out.Item) == 0 {
		t.Fatalf("read %s/%s: %v", pk, sk, err)
	}
	return out.Item
}

// batchPut writes items 25 per BatchWriteItem: thousands of items in a few
// hundred requests instead of one request each.
func batchPut(t *testing.T, f fixture, items []map[string]types.AttributeValue) {
	t.Helper()
	for start := 0; start < len(items); start += 25 {
		var reqs []types.WriteRequest
		for _, it := range items[start:min(start+25, len(items))] {
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: it}})
		}
		in := map[string][]types.WriteRequest{f.Table: reqs}
		for len(in) > 0 {
			out, err := f.DB.BatchWriteItem(context.Background(), &dynamodb.BatchWriteItemInput{RequestItems: in})
			if err != nil {
				t.Fatal(err)
			}
			in = out.UnprocessedItems
		}
	}
}

// clone copies a template item written by the ledger under another key,
// with another due shard and due time; set changes anything else.
func clone(tpl map[string]types.AttributeValue, pk string, shard int, due time.Time, set map[string]types.AttributeValue) map[string]types.AttributeValue {
	it := make(map[string]types.AttributeValue, len(tpl))
	for k, v := range tpl {
		it[k] = v
	}
	it["pk"] = &types.AttributeValueMemberS{Value: pk}
	it["due_shard"] = &types.AttributeValueMemberS{Value: strconv.Itoa(shard)}
	it["due_at"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(due.UnixMilli(), 10)}
	for k, v := range set {
		it[k] = v
	}
	return it
}

// The due index answers "the oldest due items" however the items are
// spread over its shards. Thousands of due items sit unevenly on the four
// work shards, mixed with items the query must skip (events whose lease is
// live, intents: DynamoDB's Limit counts them before the filter drops
// them): the oldest due events hide on shard 1 behind 700 such items,
// shard 0 holds 1,200 newer ones, shard 3 none. ListDue, ListDueIntents
// and ListOpen each return exactly the oldest `limit` matches, oldest
// first, within the documented number of Query requests.
func TestDueQueriesReturnTheOldestAcrossUnevenShards(t *testing.T) {
	if testing.Short() {
		t.Skip("thousands of items: skipped in -short mode")
	}
	ctx := context.Background()
	f := newFixture(t)
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v int64) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	}

	// Templates, written by the ledger itself: a RECEIVED event, an event
	// whose lease is live, and (where the store has transactions) a
	// PENDING intent.
	if _, err := f.L.Accept(ctx, delivery("tpl_ev", `{"id":"x"}`)); err != nil {
		t.Fatal(err)
	}
	f.Clock.Advance(time.Second)
	if _, err := f.L.Accept(ctx, delivery("tpl_leased", `{"id":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.L.Claim(ctx, "stripe", "tpl_leased", ledger.ClaimOptions{Owner: "proc", Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	f.Clock.Advance(time.Second)
	withIntents := true
	if _, err := f.L.Accept(ctx, delivery("evt_tpl_op", `{"id":"x"}`)); err != nil {
		t.Fatal(err)
	}
	c, err := f.L.Claim(ctx, "stripe", "evt_tpl_op", ledger.ClaimOptions{Owner: "proc", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	w := &ledger.ProjectionWrite{Name: "sub", Subject: "sub_tpl", Version: 1, Fingerprint: "f1", State: map[string]any{"status": "active"}}
	if _, err := f.L.Commit(ctx, c, w, []ledger.Intent{{OperationID: "tpl_op", Kind: "entitlement.grant", Subject: "sub_tpl"}}); err != nil {
		withIntents = false // dynalite: no TransactWriteItems; intents are left out
	}
	before := f.Clock.Now().Add(10 * time.Minute)
	evTpl := rawItem(t, f, "EV#stripe#tpl_ev", "EV")
	leasedTpl := rawItem(t, f, "EV#stripe#tpl_leased", "EV")
	var opTpl map[string]types.AttributeValue
	if withIntents {
		opTpl = rawItem(t, f, "OP#tpl_op", "OP")
	}

	var items []map[string]types.AttributeValue
	var dueEvents, dueIntents, openEvents []dueModel
	dueEvents = append(dueEvents, dueModel{"tpl_ev", t0})
	openEvents = append(openEvents, dueModel{"tpl_ev", t0}, dueModel{"tpl_leased", t0.Add(time.Second)})
	if withIntents {
		dueIntents = append(dueIntents, dueModel{"tpl_op", t0.Add(2 * time.Second)})
	} else {
		// Its event stays claimed, with a lease that has expired by then.
		dueEvents = append(dueEvents, dueModel{"evt_tpl_op", t0.Add(2 * time.Second)})
		openEvents = append(openEvents, dueModel{"evt_tpl_op", t0.Add(2 * time.Second)})
	}
	base := t0.Add(-30 * 24 * time.Hour)
	event := func(id string, shard int, due time.Time) {
		items = append(items, clone(evTpl, "EV#stripe#"+id, shard, due, map[string]types.AttributeValue{"event_id": s(id), "received_at": n(due.UnixMilli())}))
		dueEvents = append(dueEvents, dueModel{id, due})
		openEvents = append(openEvents, dueModel{id, due})
	}
	leased := func(id string, shard int, due time.Time) {
		items = append(items, clone(leasedTpl, "EV#stripe#"+id, shard, due, map[string]types.AttributeValue{"event_id": s(id), "received_at": n(due.UnixMilli())}))
		openEvents = append(openEvents, dueModel{id, due})
	}
	intent := func(op string, shard int, due time.Time) {
		if !withIntents {
			leased("evt_"+op, shard, due) // still something to skip
			return
		}
		items = append(items, clone(opTpl, "OP#"+op, shard, due, map[string]types.AttributeValue{"operation_id": s(op)}))
		dueIntents = append(dueIntents, dueModel{op, due})
	}
	sec := func(at time.Time, i int) time.Time { return at.Add(time.Duration(i) * time.Second) }

	// Shard 0: 1,200 due events, newer than every other shard's.
	for i, id := range idsIn("evt_a", "stripe", 0, 1200) {
		event(id, 0, sec(base.Add(20*24*time.Hour), i))
	}
	// Shard 1: the oldest due events (10), behind and between 900 items
	// to skip: 360 live leases and 540 intents.
	evs, skips := idsIn("evt_b", "stripe", 1, 10), idsIn("evt_bl", "stripe", 1, 360)
	ops := idsIn("op_b", "OP", 1, 540)
	for i, k := 0, 0; i < 910; i++ {
		switch at := sec(base, i); {
		case i >= 700 && (i-700)%21 == 0 && len(evs) > 0:
			event(evs[0], 1, at)
			evs = evs[1:]
		case k%5 < 2 && len(skips) > 0:
			leased(skips[0], 1, at)
			skips, k = skips[1:], k+1
		default:
			intent(ops[0], 1, at)
			ops, k = ops[1:], k+1
		}
	}
	// Shard 2: 200 due events interleaved with 200 intents.
	ops2 := idsIn("op_c", "OP", 2, 200)
	for i, id := range idsIn("evt_c", "stripe", 2, 200) {
		intent(ops2[i], 2, sec(base.Add(10*24*time.Hour), 2*i))
		event(id, 2, sec(base.Add(10*24*time.Hour), 2*i+1))
	}
	// Shard 3: no due event, 120 intents and 60 live leases.
	ops3, skips3 := idsIn("op_d", "OP", 3, 120), idsIn("evt_dl", "stripe", 3, 60)
	for i := range 180 {
		if i%3 == 2 {
			leased(skips3[i/3], 3, sec(base.Add(5*24*time.Hour), i))
		} else {
			intent(ops3[i-i/3], 3, sec(base.Add(5*24*time.Hour), i))
		}
	}
	start := time.Now()
	batchPut(t, f, items)
	t.Logf("%d items written in %s", len(items), time.Since(start).Round(time.Millisecond))

	// The documented worst case: DueQueryPagesPerShard requests per shard
	// (ListOpen reads the work and the attention shards).
	bound := 4 * ledger.DueQueryPagesPerShard
	check := func(what string, want, got []string, maxQueries int) {
		t.Helper()
		if q := f.Rec.Count("DynamoDB.Query"); q > maxQueries {
			t.Errorf("%s: %d Query requests, documented bound %d", what, q, maxQueries)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			n := min(len(want), len(got), 5)
			t.Fatalf("%s: got %d items, want %d, oldest first; got %v…, want %v…", what, len(got), len(want), got[:n], want[:n])
		}
	}
	for _, limit := range []int{1, 2, 57, 500, 5000} {
		f.Rec.Reset()
		due, err := f.L.ListDue(ctx, before, limit)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for i, d := range due {
			got = append(got, d.EventID)
			if i > 0 && d.DueAt.Before(due[i-1].DueAt) {
				t.Fatalf("ListDue(%d) not oldest first at %d", limit, i)
			}
		}
		check(fmt.Sprintf("ListDue(limit %d)", limit), oldest(dueEvents, limit), got, bound)
	}
	if withIntents {
		for _, limit := range []int{2, 500} {
			f.Rec.Reset()
			due, err := f.L.ListDueIntents(ctx, before, limit)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range due {
				got = append(got, d.OperationID)
			}
			check(fmt.Sprintf("ListDueIntents(limit %d)", limit), oldest(dueIntents, limit), got, bound)
		}
	}
	// ListOpen also lists the live leases (it reads far into the future).
	f.Rec.Reset()
	open, err := f.L.ListOpen(ctx, "event", 2)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range open {
		got = append(got, o.EventID)
	}
	check("ListOpen(event, limit 2)", oldest(openEvents, 2), got, 2*bound)
}

// ListSyncDue pages each sync shard for its own oldest cursors too, and
// reads (one consistent GetItem each) only the cursors it answers with:
// the cursors of a crowded shard do not take the place of an emptier
// shard's older ones, and no cursor is read that the answer does not use.
func TestListSyncDueTakesEachShardsOldest(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	op := commitLatest(t, f, 3)
	c, err := f.L.ClaimIntent(ctx, op, claimOpts)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.L.LockSubject(ctx, c); err != nil {
		t.Fatal(err)
	}
	tpl := rawItem(t, f, "CUR#sub#sub_c#entitlement", "CUR")
	model := []dueModel{{"sub_c", c.Expires}}
	var items []map[string]types.AttributeValue
	base := t0.Add(-24 * time.Hour)
	cursors := func(prefix string, shard, n int, from time.Time) {
		for i, subj := range idsIn(prefix, "sub", shard, n) {
			due := from.Add(time.Duration(i) * time.Second)
			items = append(items, clone(tpl, "CUR#sub#"+subj+"#entitlement", shard, due, map[string]types.AttributeValue{
				"proj_subject": &types.AttributeValueMemberS{Value: subj},
				"due_shard":    &types.AttributeValueMemberS{Value: "sync#" + strconv.Itoa(shard)},
			}))
			model = append(model, dueModel{subj, due})
		}
	}
	// Shard 0 none, shard 1 300 newer, shard 2 the 3 oldest, shard 3 50.
	cursors("sub_b", 1, 300, base.Add(2*time.Hour))
	cursors("sub_c", 2, 3, base)
	cursors("sub_d", 3, 50, base.Add(time.Hour))
	batchPut(t, f, items)

	perShard := map[int]int{1: 300, 2: 3, 3: 50}
	perShard[shardOf("sub", "sub_c", 4)]++ // the template
	for _, limit := range []int{1, 10, 400} {
		f.Rec.Reset()
		due, err := f.L.ListSyncDue(ctx, f.Clock.Now().Add(time.Hour), limit)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range due {
			got = append(got, d.ProjSubject)
		}
		if want := oldest(model, limit); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("ListSyncDue(limit %d): got %v, want %v", limit, got, want)
		}
		total := 0
		for _, n := range perShard {
			total += n
		}
		if g, reads := f.Rec.Count("DynamoDB.GetItem"), min(limit, total); g != reads {
			t.Errorf("ListSyncDue(limit %d): %d cursor reads, want %d (the cursors of the answer)", limit, g, reads)
		}
		if q := f.Rec.Count("DynamoDB.Query"); q > 4*ledger.DueQueryPagesPerShard {
			t.Errorf("ListSyncDue(limit %d): %d Query requests, documented bound %d", limit, q, 4*ledger.DueQueryPagesPerShard)
		}
	}
}
