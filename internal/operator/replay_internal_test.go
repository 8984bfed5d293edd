package operator

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
)

func TestBulkQuery(t *testing.T) {
	for _, tc := range []struct {
		name    string
		q       BulkQuery
		want    BulkQuery
		wantErr string
	}{
		{"defaults", BulkQuery{Status: ledger.StatusDead, Reason: "r"},
			BulkQuery{Status: ledger.StatusDead, Reason: "r", Interval: 200 * time.Millisecond, Limit: 500}, ""},
		{"negative values take the defaults", BulkQuery{Status: ledger.StatusQuarantined, Reason: "r", Interval: -1, Limit: -1},
			BulkQuery{Status: ledger.StatusQuarantined, Reason: "r", Interval: 200 * time.Millisecond, Limit: 500}, ""},
		{"given values kept", BulkQuery{Status: ledger.StatusDead, Reason: "r", Interval: time.Second, Limit: 3, DryRun: true, Source: "s"},
			BulkQuery{Status: ledger.StatusDead, Reason: "r", Interval: time.Second, Limit: 3, DryRun: true, Source: "s"}, ""},
		{"other status", BulkQuery{Status: ledger.StatusReceived, Reason: "r"}, BulkQuery{},
			`usage: bulk replay takes --status DEAD or QUARANTINED, not "RECEIVED"`},
		{"status checked before reason", BulkQuery{Status: ""}, BulkQuery{},
			`usage: bulk replay takes --status DEAD or QUARANTINED, not ""`},
		{"no reason", BulkQuery{Status: ledger.StatusDead}, BulkQuery{},
			"usage: --reason is required: it goes into the audit trail of every event replayed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := bulkQuery(tc.q)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrUsage) || err.Error() != tc.wantErr {
					t.Fatalf("err %v, want %q (ErrUsage)", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("bulkQuery = %+v %v, want %+v", got, err, tc.want)
			}
		})
	}
}

func TestBulkFetch(t *testing.T) {
	for _, tc := range []struct {
		q    BulkQuery
		want int
	}{
		{BulkQuery{Limit: 500}, 501},
		{BulkQuery{Limit: 5, Source: "s"}, indexReadCap},
		{BulkQuery{Limit: 5, EventType: "t"}, indexReadCap},
		{BulkQuery{Limit: 5000, Source: "s"}, 5001},
	} {
		if got := bulkFetch(tc.q); got != tc.want {
			t.Errorf("bulkFetch(%+v) = %d, want %d", tc.q, got, tc.want)
		}
	}
}

func TestBulkCandidates(t *testing.T) {
	a1 := ledger.OpenItem{Source: "a", EventID: "1", EventType: "x"}
	a2 := ledger.OpenItem{Source: "a", EventID: "2", EventType: "y"}
	b3 := ledger.OpenItem{Source: "b", EventID: "3", EventType: "x"}
	a4 := ledger.OpenItem{Source: "a", EventID: "4", EventType: "x"}
	all := []ledger.OpenItem{a1, a2, b3, a4}
	for _, tc := range []struct {
		name     string
		items    []ledger.OpenItem
		q        BulkQuery
		fetch    int
		want     []ledger.OpenItem
		wantMore bool
	}{
		{"none listed", nil, BulkQuery{Limit: 2}, 3, nil, false},
		{"all under the limit", all, BulkQuery{Limit: 10}, 11, all, false},
		{"over the limit: cut, more", all, BulkQuery{Limit: 2}, 3, []ledger.OpenItem{a1, a2}, true},
		{"full listing: more", all[:3], BulkQuery{Limit: 2}, 3, []ledger.OpenItem{a1, a2}, true},
		{"full listing at the limit: more", all[:3], BulkQuery{Limit: 3}, 3, all[:3], true},
		{"by source", all, BulkQuery{Limit: 10, Source: "a"}, 1000, []ledger.OpenItem{a1, a2, a4}, false},
		{"by type", all, BulkQuery{Limit: 10, EventType: "x"}, 1000, []ledger.OpenItem{a1, b3, a4}, false},
		{"by source and type", all, BulkQuery{Limit: 10, Source: "a", EventType: "x"}, 1000, []ledger.OpenItem{a1, a4}, false},
		{"filtered over the limit", all, BulkQuery{Limit: 1, Source: "a", EventType: "x"}, 1000, []ledger.OpenItem{a1}, true},
		{"no match", all, BulkQuery{Limit: 10, Source: "c"}, 1000, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, more := bulkCandidates(tc.items, tc.q, tc.fetch)
			if !reflect.DeepEqual(got, tc.want) || more != tc.wantMore {
				t.Fatalf("bulkCandidates = %v %v, want %v %v", got, more, tc.want, tc.wantMore)
			}
		})
	}
}

func TestBulkDecide(t *testing.T) {
	done := map[[2]string]bool{{"a", "1"}: true}
	for _, tc := range []struct {
		it     ledger.OpenItem
		dryRun bool
		want   bulkStep
	}{
		{ledger.OpenItem{Source: "a", EventID: "1"}, false, stepSkipCheckpoint},
		{ledger.OpenItem{Source: "a", EventID: "1"}, true, stepSkipCheckpoint},
		{ledger.OpenItem{Source: "a", EventID: "2"}, false, stepReplay},
		{ledger.OpenItem{Source: "b", EventID: "1"}, false, stepReplay},
		{ledger.OpenItem{Source: "a", EventID: "2"}, true, stepWouldReplay},
	} {
		if got := bulkDecide(tc.it, done, tc.dryRun); got != tc.want {
			t.Errorf("bulkDecide(%s/%s, dry run %v) = %d, want %d", tc.it.Source, tc.it.EventID, tc.dryRun, got, tc.want)
		}
	}
	if got := bulkDecide(ledger.OpenItem{Source: "a", EventID: "1"}, nil, false); got != stepReplay {
		t.Errorf("no checkpoint: %d", got)
	}
}

func TestClassifyReplay(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want replayOutcome
	}{
		{nil, outcomeReplayed},
		{ledger.ErrNotReplayable, outcomeMoved},
		{fmt.Errorf("replay: %w", ledger.ErrNotReplayable), outcomeMoved},
		{ledger.ErrNotFound, outcomeMoved},
		{ledger.ErrUnavailable, outcomeFailed},
		{errors.New("boom"), outcomeFailed},
	} {
		if got := classifyReplay(tc.err); got != tc.want {
			t.Errorf("classifyReplay(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestBulkResult(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		sum  BulkSummary
		stop error
		want string // "" for nil
	}{
		{"all done", BulkSummary{Matched: 3, Replayed: 3}, nil, ""},
		{"dry run", BulkSummary{Matched: 3, DryRun: true}, nil, ""},
		{"more remain is not an error", BulkSummary{More: true}, nil, ""},
		{"stopped wins", BulkSummary{Interrupted: true, NotEnqueued: 2}, boom, "incomplete: bulk replay stopped: boom"},
		{"interrupted", BulkSummary{Interrupted: true, NotEnqueued: 2}, nil, "incomplete: bulk replay interrupted; run the same command again to resume"},
		{"not enqueued", BulkSummary{NotEnqueued: 2}, nil, "incomplete: 2 events replayed but not enqueued (the reconciler re-enqueues them)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := bulkResult(tc.sum, tc.stop)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("err %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrIncomplete) || err.Error() != tc.want {
				t.Fatalf("err %v, want %q (ErrIncomplete)", err, tc.want)
			}
			if tc.stop != nil && !errors.Is(err, tc.stop) {
				t.Fatalf("err %v does not wrap %v", err, tc.stop)
			}
		})
	}
}
