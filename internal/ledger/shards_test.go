package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// The due index's shard count can change on a live table:
// raising it is safe at once, lowering it keeps reading the old shards
// until they are empty, and a read narrower than the writes is refused.
func TestDueShardsChangeOnALiveTable(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t) // 4 shards
	const n = 40
	for i := range n {
		if _, err := f.L.Accept(ctx, delivery(fmt.Sprintf("evt_s%02d", i), `{"id":"x"}`)); err != nil {
			t.Fatal(err)
		}
	}
	with := func(write, read int) *ledger.Ledger {
		t.Helper()
		l, err := ledger.New(f.DB, ledger.Options{Table: f.Table, Clock: f.Clock, DueShards: write, DueShardsRead: read})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	due := func(l *ledger.Ledger) int {
		t.Helper()
		refs, err := l.ListDue(ctx, f.Clock.Now().Add(time.Hour), 100)
		if err != nil {
			t.Fatal(err)
		}
		return len(refs)
	}
	if got := due(with(16, 0)); got != n {
		t.Fatalf("raised to 16 shards: %d of %d due events found", got, n)
	}
	if got := due(with(2, 4)); got != n {
		t.Fatalf("lowered to 2, still reading 4: %d of %d found", got, n)
	}
	if got := due(with(2, 0)); got >= n {
		t.Fatalf("reading 2 of the 4 shards found all %d: the test's events do not spread", got)
	}
	if _, err := ledger.New(f.DB, ledger.Options{Table: f.Table, DueShards: 8, DueShardsRead: 4}); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("a read narrower than the writes: %v", err)
	}
	if _, err := ledger.New(f.DB, ledger.Options{Table: f.Table, DueShards: ledger.MaxDueShards + 1}); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("too many shards: %v", err)
	}
}
