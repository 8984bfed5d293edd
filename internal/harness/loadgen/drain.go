package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// pollEvery is the drain's polling period.
const pollEvery = 250 * time.Millisecond

// drainEvents reads the ledger row of every accepted event until each is
// PROCESSED or the drain deadline passes; it returns the last row read per
// event (a missing row is absent). Reads are strongly consistent GetItems,
// eight at a time, and a PROCESSED row is never read again.
func drainEvents(ctx context.Context, l *ledger.Ledger, events []*Event, accepted map[*Event]time.Time, o Options) (map[*Event]ledger.Event, error) {
	rows := map[*Event]ledger.Event{}
	deadline := time.Now().Add(o.Drain)
	for {
		var pending []*Event
		for _, ev := range events {
			if _, ok := accepted[ev]; !ok {
				continue
			}
			if r, ok := rows[ev]; ok && r.Status == ledger.StatusProcessed {
				continue
			}
			pending = append(pending, ev)
		}
		if len(pending) == 0 {
			return rows, nil
		}
		got, err := getRows(ctx, l, pending)
		if err != nil {
			return rows, err
		}
		done := 0
		for ev, r := range got {
			rows[ev] = r
			if r.Status == ledger.StatusProcessed {
				done++
			}
		}
		if done == len(pending) || time.Now().After(deadline) {
			return rows, nil
		}
		select {
		case <-ctx.Done():
			return rows, ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// getRows reads the rows of evs; a missing row is left out.
func getRows(ctx context.Context, l *ledger.Ledger, evs []*Event) (map[*Event]ledger.Event, error) {
	out := map[*Event]ledger.Event{}
	var mu sync.Mutex
	var firstErr error
	work := make(chan *Event)
	var wg sync.WaitGroup
	for range min(8, len(evs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range work {
				r, err := l.Get(ctx, ev.Source, ev.ID)
				mu.Lock()
				switch {
				case err == nil:
					out[ev] = r
				case !errors.Is(err, ledger.ErrNotFound) && firstErr == nil:
					firstErr = fmt.Errorf("read %s: %w", ev.Key(), err)
				}
				mu.Unlock()
			}
		}()
	}
	for _, ev := range evs {
		work <- ev
	}
	close(work)
	wg.Wait()
	return out, firstErr
}

// downstream is the part of GET /_dev/downstream the check reads.
type downstream struct {
	Effects []struct {
		Kind      string         `json:"kind"`
		Effective map[string]int `json:"effective"`
		Requests  []struct {
			Key string `json:"key"`
		} `json:"requests"`
	} `json:"effects"`
}

// effective returns the effective calls and the requests per key.
func (d downstream) effective() (calls, requests map[string]int) {
	calls, requests = map[string]int{}, map[string]int{}
	for _, e := range d.Effects {
		for k, n := range e.Effective {
			calls[k] += n
		}
		for _, r := range e.Requests {
			requests[r.Key]++
		}
	}
	return calls, requests
}

func fetchDownstream(ctx context.Context, t Target) (downstream, error) {
	var d downstream
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.BaseURL+"/_dev/downstream", nil)
	if err != nil {
		return d, err
	}
	resp, err := t.HTTP.Do(req)
	if err != nil {
		return d, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return d, fmt.Errorf("GET /_dev/downstream: HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		return d, fmt.Errorf("GET /_dev/downstream: %w", err)
	}
	return d, nil
}

// checkEffects waits until every expected intent was applied (or the drain
// deadline passes), keeps watching for Settle, and counts missing, doubled
// and unexpected effects.
func checkEffects(ctx context.Context, t Target, l *ledger.Ledger, o Options, events []*Event, rows map[*Event]ledger.Event, res *Result) error {
	want := map[string]Intent{}
	possible := map[string]bool{} // every key the run's events could create
	for _, ev := range events {
		for _, in := range ev.Intents {
			possible[in.OperationID] = true
		}
		if r, ok := rows[ev]; ok {
			for _, in := range expected(ev, r) {
				want[in.OperationID] = in
			}
		}
	}
	res.Effects.Expected = len(want)
	deadline := time.Now().Add(o.Drain)
	suppressed := map[string]bool{}
	var settledAt time.Time
	var calls, requests map[string]int
	for {
		d, err := fetchDownstream(ctx, t)
		if err != nil {
			return err
		}
		calls, requests = d.effective()
		applied := 0
		for k := range want {
			switch {
			case calls[k] > 0:
				applied++
			case suppressed[k]:
				applied++ // settled without a call
			default:
				// A checked intent the current truth does not justify
				// ends without a call: SUPERSEDED or OBSOLETE.
				if st, err := l.GetIntentState(ctx, k); err == nil && (st.Status == ledger.IntentStatusSuperseded || st.Status == ledger.IntentStatusObsolete) {
					suppressed[k] = true
					applied++
				}
			}
		}
		now := time.Now()
		if applied == len(want) && settledAt.IsZero() {
			settledAt = now
		}
		if (!settledAt.IsZero() && now.Sub(settledAt) >= o.Settle) || now.After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollEvery):
		}
	}
	e := &res.Effects
	e.ByKind = map[string]int{}
	for k, in := range want {
		n := calls[k]
		e.Requests += requests[k]
		switch {
		case n == 0 && suppressed[k]:
			e.Suppressed++
		case n == 0:
			// Say where it is stuck: an intent still PENDING was committed
			// but never announced (the reconciler re-announces it later).
			status := "NO_INTENT"
			if st, err := l.GetIntentState(ctx, k); err == nil {
				status = string(st.Status)
			} else if !errors.Is(err, ledger.ErrNotFound) {
				return fmt.Errorf("read intent %s: %w", k, err)
			}
			e.Missing++
			if e.MissingByStatus == nil {
				e.MissingByStatus = map[string]int{}
			}
			e.MissingByStatus[status]++
			e.MissingKeys = appendCapped(e.MissingKeys, in.Kind+" "+k+" "+status)
		case n > 1:
			e.Doubled++
			e.DoubledKeys = appendCapped(e.DoubledKeys, fmt.Sprintf("%s %s ×%d", in.Kind, k, n))
		}
		if n > 0 {
			e.Applied++
			e.ByKind[in.Kind]++
		}
		e.MaxPerKey = max(e.MaxPerKey, n)
	}
	// A key of this run that no applied event should have created (a stale
	// event's intent, say) is a violation too, applied once or not.
	for k := range possible {
		if _, ok := want[k]; !ok && calls[k] > 0 {
			e.Unexpected++
			e.MaxPerKey = max(e.MaxPerKey, calls[k])
			if calls[k] > 1 {
				e.Doubled++
			}
		}
	}
	return nil
}

func appendCapped(s []string, v string) []string {
	if len(s) < 20 {
		return append(s, v)
	}
	return s
}
