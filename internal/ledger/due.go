package ledger

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The due index: the sparse GSI "due" over the items that wait for
// something (unfinished events and intents, items for an operator,
// cursors due for a drift check). Its keys are due_shard (a shard family's
// prefix and a shard number) and due_at (epoch ms).
const (
	DueIndex     = "due"
	attrDueShard = "due_shard"
	attrDueAt    = "due_at"
	// attrDoneShard is what a finished (PROCESSED) event keeps of its due
	// shard once it left the index: doneShardPrefix and the shard number.
	// Accept falls back to it for due_shard, so a duplicate of a finished
	// event lands on a done shard that no query reads.
	attrDoneShard = "done_shard"
)

// The due index's shard families. Every query names the shards it reads
// (prefix + number), so one family never sees another's items:
//   - work shards ("0" … "n-1"): unfinished events and intents; ListDue,
//     ListDueIntents, ListOpen and the reconciler read them;
//   - attention shards (attentionPrefix, "A0" …): DEAD and QUARANTINED
//     events, QUARANTINED and CONTRADICTED intents; ListOpen reads them,
//     the work queries never do;
//   - done shards (doneShardPrefix, "done#0" …): finished events that
//     received a duplicate after they left the index (see Accept); no query
//     reads them, and the TTL removes them with the event;
//   - sync shards (syncPrefix, "sync#0" …): subject cursors whose
//     downstream the reconciler should compare with the projection
//     (ListSyncDue); cursors found in sync move to syncedPrefix, which no
//     query reads.
const (
	attentionPrefix = "A"
	doneShardPrefix = "done#"
	syncPrefix      = "sync#"
	syncedPrefix    = "synced#"
)

// MaxDueShards bounds the due index's shard count: every query reads each
// shard, so the count is also a cost per query.
const MaxDueShards = 64

// DueShard is the due-index shard (0 … shards-1) of an item keyed by a
// and b (an event's source and id; "OP" and an operation id): an FNV-1a
// hash, so items spread evenly whatever their ids look like.
func DueShard(shards int, a, b string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(a + "#" + b))
	return int(h.Sum32() % uint32(shards))
}

// dueShard is the work shard of an item keyed by a and b, among the
// shards new writes spread over.
func (l *Ledger) dueShard(a, b string) string {
	return strconv.Itoa(DueShard(l.opts.DueShards, a, b))
}

// DueRef names an unfinished item found through the due index.
type DueRef struct {
	Source  string
	EventID string
	Status  Status
	DueAt   time.Time
}

// ListDue returns unfinished events whose due time is at or before `before`
// (RECEIVED since then, leases expired by then, retries due by then), oldest
// first, at most limit. It queries each shard of the sparse due index: no
// table scan. Index reads are eventually consistent; the claim re-checks.
func (l *Ledger) ListDue(ctx context.Context, before time.Time, limit int) ([]DueRef, error) {
	items, err := l.queryDue(ctx, before, limit, "event", StatusReceived, StatusProcessing, StatusRetryWait)
	if err != nil {
		return nil, err
	}
	refs := make([]DueRef, 0, len(items))
	for _, it := range items {
		ev, err := decodeEvent(it.item)
		if err != nil {
			return nil, err
		}
		refs = append(refs, DueRef{Source: ev.Source, EventID: ev.EventID, Status: ev.Status, DueAt: it.dueAt})
	}
	return refs, nil
}

type dueItem struct {
	item  map[string]types.AttributeValue
	dueAt time.Time
}

// dueItemOf is an index entry with its due time read.
func dueItemOf(it map[string]types.AttributeValue) dueItem {
	due := time.Time{}
	if v, ok := it[attrDueAt].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		due = fromMS(n)
	}
	return dueItem{item: it, dueAt: due}
}

func sortDue(items []dueItem) {
	sort.SliceStable(items, func(i, j int) bool { return items[i].dueAt.Before(items[j].dueAt) })
}

// queryDue reads the due index, every shard, for items of one kind in one
// of the given (unfinished) statuses, oldest first, at most limit. The
// status filter is defensive: a finished item has no due keys and so no index
// entry, but index reads lag the table (and an emulator may keep entries
// whose keys were removed).
func (l *Ledger) queryDue(ctx context.Context, before time.Time, limit int, kind string, statuses ...Status) ([]dueItem, error) {
	return l.queryShards(ctx, "", before, limit, kind, statuses...)
}

// The due index's paging (queryShards, ListSyncDue). DynamoDB applies a
// Query's Limit to the entries it evaluates, before the filter, and one
// shard holds events, intents, live leases and entries the filter drops,
// so a page can hold any number of matches, none included. Each shard is
// therefore paged until it has given its own oldest `limit` matches (the
// oldest `limit` overall are among them) or is exhausted. Pages start at
// the caller's limit and double up to dueMaxPage entries (never below the
// limit), so a shard full of matches costs one request and one mostly
// filtered costs a few; a shard gets at most DueQueryPagesPerShard pages.
const (
	// DueQueryPagesPerShard bounds the Query requests one due query makes
	// per shard: ListDue, ListDueIntents and ListSyncDue make at most
	// DueShards × DueQueryPagesPerShard (64 with the default 4 shards),
	// ListOpen twice that (work and attention shards). Each evaluates at
	// most max(limit, dueMaxPage) index entries and at most 1 MB, the
	// Query's own cap; with limit 1 the 16 pages evaluate 1+2+…+512 then
	// 6×1,000, about 7,000 entries (~2 MB of projected attributes, a few
	// hundred eventually consistent read units).
	DueQueryPagesPerShard = 16
	dueMaxPage            = 1000
)

// queryShards reads one family of shards: "" for work, attentionPrefix for
// items waiting for an operator. It returns the oldest `limit` matches,
// oldest first: exactly those, unless a shard reached its page bound
// without giving `limit` matches (with limit 1, some 7,000 entries to skip
// ahead of them; more with a larger limit). Then its unread entries are
// not compared: the result is
// still oldest first, and exact up to the last entry that shard read, but
// it may hold newer matches of other shards in place of older ones the
// bound left unread (rather than nothing newer than that point, which
// would stall every shard behind one).
func (l *Ledger) queryShards(ctx context.Context, prefix string, before time.Time, limit int, kind string, statuses ...Status) ([]dueItem, error) {
	if limit <= 0 {
		limit = 1
	}
	// A claim does not move an item on the index (that would be a delete and
	// a put of the index entry: two write units): a leased item keeps the
	// due_at it had, and is due only once its lease has expired.
	vals := map[string]types.AttributeValue{":b": nv(ms(before)), ":kind": sv(kind),
		":leased": sv(string(StatusProcessing)), ":dispatching": sv(string(IntentStatusDispatching))}
	var in []string
	for i, st := range statuses {
		k := ":st" + strconv.Itoa(i)
		vals[k] = sv(string(st))
		in = append(in, k)
	}
	var items []dueItem
	// Once `limit` matches are known, a later shard can only contribute
	// items at least as old as the newest of them: its key condition
	// stops there (:hi), so it does not page through newer entries.
	hi := before
	for shard := 0; shard < l.opts.DueShardsRead; shard++ {
		vals[":s"] = sv(prefix + strconv.Itoa(shard))
		vals[":hi"] = nv(ms(hi))
		err := l.pageShard(ctx, dynamodb.QueryInput{
			TableName:                 aws.String(l.opts.Table),
			IndexName:                 aws.String(DueIndex),
			KeyConditionExpression:    aws.String("due_shard = :s AND due_at <= :hi"),
			FilterExpression:          aws.String("#item = :kind AND #status IN (" + join(in) + ") AND NOT (#status IN (:leased, :dispatching) AND lease_expires_at > :b)"),
			ExpressionAttributeNames:  map[string]string{"#item": "item", "#status": "status"},
			ExpressionAttributeValues: vals,
		}, limit, func(it map[string]types.AttributeValue) (bool, error) {
			items = append(items, dueItemOf(it))
			return true, nil
		})
		if err != nil {
			return nil, fmt.Errorf("list due %ss, shard %d: %w", kind, shard, err)
		}
		if len(items) >= limit {
			sortDue(items)
			items = items[:limit]
			hi = items[limit-1].dueAt
		}
	}
	sortDue(items)
	if len(items) > limit {
		items = items[:limit]
	}
	return items, nil
}

// pageShard pages one shard of the due index (q names it), oldest first,
// handing each returned item to take, which says whether it counts, until
// want items counted, the shard is exhausted, or it had
// DueQueryPagesPerShard pages. A Query error is translated; take's are
// returned as they are.
func (l *Ledger) pageShard(ctx context.Context, q dynamodb.QueryInput, want int, take func(map[string]types.AttributeValue) (bool, error)) error {
	page, maxPage := min(want, dueMaxPage), max(want, dueMaxPage)
	taken := 0
	for range DueQueryPagesPerShard {
		q.Limit = aws.Int32(int32(min(page, math.MaxInt32)))
		out, err := l.db.Query(ctx, &q)
		if err != nil {
			return translate(err)
		}
		for _, it := range out.Items {
			ok, err := take(it)
			if err != nil {
				return err
			}
			if ok {
				if taken++; taken >= want {
					return nil
				}
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		q.ExclusiveStartKey = out.LastEvaluatedKey
		page = min(2*page, maxPage)
	}
	return nil
}
