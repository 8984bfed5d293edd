package capacity

import (
	"fmt"
	"math/rand/v2"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// PartitionWriteLimit is DynamoDB's throughput limit for one partition key
// value: about 1,000 write units per second (AWS's "Best practices for
// designing and using partition keys effectively"). Every entry of a
// given due shard has the same partition key value in the due index.
const PartitionWriteLimit = 1000

// IndexUnits is the sum of global-secondary-index write units.
func (t Totals) IndexUnits() int {
	n := 0
	for _, o := range t.ByOp {
		n += o.IndexUnits
	}
	return n
}

// ShardLoad is what the due index does at one shard count.
type ShardLoad struct {
	Shards int
	// HottestShare is the busiest shard's share of events in a sample of
	// generated event ids (1/Shards when perfectly even).
	HottestShare float64
	// CapEventsPerSecond is the sustained rate at which the busiest shard
	// reaches PartitionWriteLimit.
	CapEventsPerSecond float64
}

// DueIndexCap simulates the due index under a sustained load: n event ids
// shaped like real ones (Stripe's "evt_" + 24 random characters) are
// placed on shards by the ledger's own hash (ledger.DueShard), and the
// rate at which the busiest shard reaches the per-partition limit is
// derived from the index write units one event costs (indexUnitsPerEvent,
// measured: MeasurePipeline). Intents are keyed by their operation ids,
// which spread the same way.
func DueIndexCap(shards, n int, indexUnitsPerEvent float64, seed uint64) ShardLoad {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	counts := make([]int, shards)
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	id := make([]byte, 28)
	copy(id, "evt_")
	for range n {
		for i := 4; i < len(id); i++ {
			id[i] = alphabet[r.IntN(len(alphabet))]
		}
		counts[ledger.DueShard(shards, "stripe", string(id))]++
	}
	hot := 0
	for _, c := range counts {
		hot = max(hot, c)
	}
	share := float64(hot) / float64(n)
	return ShardLoad{Shards: shards, HottestShare: share, CapEventsPerSecond: PartitionWriteLimit / (indexUnitsPerEvent * share)}
}

// String renders a load as a table row.
func (s ShardLoad) String() string {
	return fmt.Sprintf("| %d | %.3f | %.0f |", s.Shards, s.HottestShare, s.CapEventsPerSecond)
}
