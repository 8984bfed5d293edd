package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
)

// The O-42 cancellation's effects, and what the fake downstream is told to
// do with them. The refund is applied and then the downstream hangs past
// the dispatcher's timeout, so the dispatcher cannot know it happened: the
// intent is UNCERTAIN until the refund's status route says it was applied.
// The notification is first throttled (429, Retry-After 1 s), then applied
// and left hanging too; it has no status route, so the dispatcher retries
// with the same key and the downstream replays its stored answer.
var downstreamScripts = []devstack.Script{
	{Kind: "refund", Then: []devstack.Behavior{{Mode: "hang_after_apply"}}},
	{Kind: "notify_cancellation", Then: []devstack.Behavior{{Mode: "throttle_429", RetryAfterSeconds: 1}, {Mode: "hang_after_apply"}}},
}

// EffectOutcome is one outbox intent of the run: its final status in the
// ledger and what the downstream saw for its key.
type EffectOutcome struct {
	OperationID, Kind, Subject string
	Status                     ledger.IntentStatus
	Code                       string // the last recorded outcome code (ok_200, lookup_applied, …)
	Attempts                   int
	Requests                   []string // the downstream's answers to the key's POSTs, in order
	Effective                  int      // times the downstream really applied the key
	Trail                      []string // the intent's audit trail
	// Story is the scripted story the effect plays a part in (StoryTimeout,
	// StoryOverride, StoryRace), "" for none.
	Story string
}

// scriptDownstream tells the local stack's fake downstream how to answer
// the next calls of each script's kind.
func scriptDownstream(ctx context.Context, base string, scripts []devstack.Script) error {
	for _, s := range scripts {
		body, _ := json.Marshal(s)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/_dev/downstream/script", bytes.NewReader(body))
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("script the downstream: %w", err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("script the downstream for %s: HTTP %d", s.Kind, resp.StatusCode)
		}
	}
	return nil
}

// downstreamState reads what the fake downstream received.
func downstreamState(ctx context.Context, base string) (devstack.DownstreamState, error) {
	var st devstack.DownstreamState
	return st, getDev(ctx, base, "/_dev/downstream", "the downstream", &st)
}

// getDev reads one of the stack's dev-only JSON endpoints into out.
func getDev(ctx context.Context, base, path, what string, out any) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return fmt.Errorf("read %s: HTTP %d", what, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	return nil
}

// runIntents returns the intents this run's events created, the
// warehouse's change records included (the wait for quiet waits for them
// too).
func runIntents(snap ledger.Snapshot, causes map[string]bool) []ledger.StoredIntent {
	var out []ledger.StoredIntent
	for _, in := range snap.Intents {
		if causes[in.Causation] {
			out = append(out, in)
		}
	}
	return out
}

// downstreamIntents returns the run's intents that are effects on the
// downstream: runIntents without the warehouse's change records, which
// checkWarehouse checks.
func downstreamIntents(snap ledger.Snapshot, causes map[string]bool) []ledger.StoredIntent {
	var out []ledger.StoredIntent
	for _, in := range runIntents(snap, causes) {
		if !warehouseKind(in.Kind) {
			out = append(out, in)
		}
	}
	return out
}

// announcer does the reconciler's re-announcement on the demo's time scale
// (the reconciler waits RECONCILE_STUCK_SECONDS, minutes): an intent still
// PENDING a while after its commit was never announced (the processor died
// between its commit and its SendMessage), so it announces it once.
type announcer struct {
	sender queue.Sender
	after  time.Duration
	done   map[string]bool
}

func (a *announcer) sweep(ctx context.Context, intents []ledger.StoredIntent, now time.Time) {
	if a.sender.Client == nil || a.sender.URL == "" {
		return
	}
	var ps []queue.IntentPointer
	for _, in := range intents {
		if in.Status == ledger.IntentPending && !a.done[in.OperationID] && now.Sub(time.UnixMilli(in.CreatedAt)) > a.after {
			ps = append(ps, queue.IntentPointer{OperationID: in.OperationID, Reason: "reconcile"})
		}
	}
	if len(ps) == 0 {
		return
	}
	unsent, _ := a.sender.SendIntents(ctx, ps)
	for _, p := range ps {
		if !slices.Contains(unsent, p.OperationID) {
			a.done[p.OperationID] = true
		}
	}
}

// newerState reports whether another intent of in's projection subject
// carries a newer version with another state.
func newerState(intents []ledger.IntentState, in ledger.IntentState) bool {
	for _, j := range intents {
		if j.Projection == in.Projection && j.ProjectionSubject == in.ProjectionSubject && j.Version > in.Version && j.Fingerprint != in.Fingerprint {
			return true
		}
	}
	return false
}

// checkEffects compares the run's intents with the downstream (I2, I7):
// every intent SUCCEEDED and applied exactly once, except a
// state sync superseded by a newer state of its subject and an action
// made obsolete by a newer revision (never applied), and an action
// performed and then contradicted (applied once, CONTRADICTED). stories
// maps the events of the scripted stories (source/event_id, the intents'
// causation) to their story, whose steps checkStory checks: the O-42
// uncertain refund resolved without a second refund, the override's and
// the race's waiting effects ended without a call. Whether an overtaken
// intent was right is checkTruth's, with the projections.
func (r *Report) checkEffects(intents []ledger.IntentState, down devstack.DownstreamState, stories map[string]string) {
	type seen struct {
		effective int
		requests  []string
	}
	byKey := map[string]*seen{}
	for _, e := range down.Effects {
		for k, n := range e.Effective {
			byKey[k] = &seen{effective: n}
		}
		for _, q := range e.Requests {
			s := byKey[q.Key]
			if s == nil {
				s = &seen{}
				byKey[q.Key] = s
			}
			answer := q.Mode
			if q.Replayed {
				answer += " (replayed)"
			}
			s.requests = append(s.requests, answer)
		}
	}
	r.EffectsByStatus = map[ledger.IntentStatus]int{}
	for _, in := range intents {
		o := EffectOutcome{OperationID: in.OperationID, Kind: in.Kind, Subject: in.Subject, Status: in.Status, Code: in.ErrorCode, Attempts: in.Attempts}
		if s := byKey[in.OperationID]; s != nil {
			o.Effective, o.Requests = s.effective, s.requests
		}
		for _, a := range in.Audit {
			line := fmt.Sprintf("%s  %s → %s (%s by %s)", clock(a.At), orDash(string(a.From)), a.To, a.Action, a.Actor)
			if a.Reason != "" {
				line += ": " + a.Reason
			}
			o.Trail = append(o.Trail, line)
		}
		o.Story = stories[in.Causation]
		r.EffectsByStatus[in.Status]++
		r.MaxEffective = max(r.MaxEffective, o.Effective)
		switch in.Status {
		case ledger.IntentStatusSuperseded:
			// A state sync whose state a newer intent of the same subject
			// carries (policy latest): no call is due, and none may have
			// taken effect.
			if !newerState(intents, in) {
				r.violate("I7", "intent %s (%s v%d) ended SUPERSEDED though no newer state of %s/%s was committed", in.OperationID, in.Kind, in.Version, in.Projection, in.ProjectionSubject)
			}
			if o.Effective != 0 {
				r.violate("I7", "the downstream applied the superseded %s (%s) %d times, want 0", in.OperationID, in.Kind, o.Effective)
			}
		case ledger.IntentStatusObsolete:
			// An action whose reason a newer revision removed before it
			// was performed (policy while_current): no call may have taken
			// effect.
			if o.Effective != 0 {
				r.violate("I7", "the downstream applied the obsolete %s (%s) %d times, want 0", in.OperationID, in.Kind, o.Effective)
			}
		case ledger.IntentStatusContradicted:
			// Performed, then contradicted: an attention item (checkTruth
			// lists it); it was performed once.
			if o.Effective != 1 {
				r.violate("I2", "the downstream applied the contradicted %s (%s) %d times, want exactly 1", in.OperationID, in.Kind, o.Effective)
			}
		default:
			if in.Status != ledger.IntentStatusSucceeded {
				r.violate("I2", "intent %s (%s) ended %s (%s), want SUCCEEDED", in.OperationID, in.Kind, in.Status, in.ErrorCode)
			}
			if o.Effective != 1 {
				r.violate("I2", "the downstream applied %s (%s) %d times, want exactly 1", in.OperationID, in.Kind, o.Effective)
			}
		}
		if o.Story != "" {
			r.checkStory(o, in)
		}
		r.Effects = append(r.Effects, o)
	}
	sort.Slice(r.Effects, func(i, j int) bool {
		a, b := r.Effects[i], r.Effects[j]
		if a.Story != b.Story {
			return storyRank(a.Story) < storyRank(b.Story)
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.OperationID < b.OperationID
	})
}

// storyRank orders the effects of the stories first, in the report's order.
func storyRank(s string) int {
	switch s {
	case StoryTimeout:
		return 0
	case StoryOverride:
		return 1
	case StoryRace:
		return 2
	}
	return 3
}

// checkStory asserts that the scripted failure really happened and was
// resolved the way the design says: never by a new key, never twice, and
// never after the truth moved on.
func (r *Report) checkStory(o EffectOutcome, in ledger.IntentState) {
	switch o.Story {
	case StoryOverride:
		// The refund and the notice met the 503, and the retry found the
		// order confirmed: OBSOLETE, nothing applied.
		if in.Status != ledger.IntentStatusObsolete || o.Effective != 0 || strings.Join(o.Requests, ",") != "unavailable_503" {
			r.violate("I7", "override: %s %s ended %s (%s) with downstream answers %v and %d effective calls; want one 503, then OBSOLETE without a call",
				o.Kind, o.OperationID, in.Status, in.ErrorCode, o.Requests, o.Effective)
		}
		return
	case StoryRace:
		switch o.Kind {
		case "entitlement.grant":
			if in.Status != ledger.IntentStatusSuperseded || o.Effective != 0 || strings.Join(o.Requests, ",") != "unavailable_503" {
				r.violate("I7", "race: the grant %s ended %s (%s) with downstream answers %v and %d effective calls; want one 503, then SUPERSEDED by the revoke without a call",
					o.OperationID, in.Status, in.ErrorCode, o.Requests, o.Effective)
			}
		case "entitlement.revoke":
			if in.Status != ledger.IntentStatusSucceeded || o.Effective != 1 {
				r.violate("I7", "race: the revoke %s ended %s (%s) with %d effective calls; want SUCCEEDED once", o.OperationID, in.Status, in.ErrorCode, o.Effective)
			}
		}
		return
	}
	uncertain := false
	for _, a := range in.Audit {
		uncertain = uncertain || a.To == ledger.Status(ledger.IntentStatusUncertain)
	}
	if !uncertain || !slices.Contains(o.Requests, "hang_after_apply") {
		r.violate("I2", "%s %s: the downstream timeout after success did not happen (requests %v)", o.Kind, o.OperationID, o.Requests)
	}
	switch o.Kind {
	case "refund":
		if o.Code != "lookup_applied" {
			r.violate("I2", "refund %s: resolved by %q, want the status lookup (lookup_applied)", o.OperationID, o.Code)
		}
	case "notify_cancellation":
		if !slices.Contains(o.Requests, "throttle_429") || !slices.Contains(o.Requests, "apply (replayed)") {
			r.violate("I2", "notify_cancellation %s: want a 429 and a replay of the same key, got %v", o.OperationID, o.Requests)
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printEffects writes the effects part of the report.
func (r Report) printEffects(w io.Writer) {
	if r.Effects == nil {
		return
	}
	fmt.Fprintf(w, "\nEffects of this run, performed by the dispatcher against the fake downstream: %d intents, final status: %s; effective calls per operation id: at most %d\n",
		len(r.Effects), tally(r.EffectsByStatus), r.MaxEffective)
	if r.Announced > 0 {
		fmt.Fprintf(w, "  (%d intents were never announced by their processor, which died after committing; the demo announced them as the reconciler does)\n", r.Announced)
	}
	for _, e := range r.Effects {
		if e.Story != StoryTimeout {
			continue // the other stories' effects are in their timelines
		}
		fmt.Fprintf(w, "  O-42 %s %s: %s (%s) after %d attempts; downstream answered %s; effective calls: %d\n",
			e.Kind, e.OperationID, e.Status, e.Code, e.Attempts, strings.Join(e.Requests, ", "), e.Effective)
		for _, t := range e.Trail {
			fmt.Fprintf(w, "      %s\n", t)
		}
	}
	fmt.Fprintf(w, "  %-34s %-20s %-12s %-16s %8s %9s  %s\n", "OPERATION ID", "KIND", "STATUS", "CODE", "REQUESTS", "EFFECTIVE", "STORY")
	for _, e := range r.Effects {
		fmt.Fprintf(w, "  %-34s %-20s %-12s %-16s %8d %9d  %s\n", e.OperationID, e.Kind, e.Status, e.Code, len(e.Requests), e.Effective, orDash(e.Story))
	}
}
