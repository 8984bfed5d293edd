package reconciler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/downstream"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/queue"
)

// The downstream drift check (I7) on minidyn and goaws: the
// real processor commits Stripe subscription states (entitlement.grant and
// entitlement.revoke, policy latest), the real dispatcher performs them
// against the fake downstream, and the reconciler compares the version the
// downstream reports with the projection's newest intent.

const driftAccount = "acct_local_1" // subscriptionEvent's metadata.account_id

// entitlements is a fake downstream and the two HTTP effects that reach it,
// with a status endpoint.
type entitlements struct {
	Down    *downstream.Fake
	Effects map[string]outbox.Effect
}

func newEntitlements(t *testing.T, f *fixture) *entitlements {
	t.Helper()
	down := &downstream.Fake{Now: f.Clock.Now}
	srv := httptest.NewServer(down)
	t.Cleanup(srv.Close)
	e := &entitlements{Down: down, Effects: map[string]outbox.Effect{}}
	for _, kind := range []string{"entitlement.grant", "entitlement.revoke"} {
		e.Effects[kind] = &outbox.HTTPEffect{Name: kind, URL: srv.URL + "/" + kind, StatusURL: srv.URL + "/status",
			Client: &http.Client{Timeout: 2 * time.Second}, Clock: f.Clock, Scopes: []string{"stripe"}}
	}
	return e
}

// deliver accepts an event and enqueues its pointer, as intake does.
func (f *fixture) deliver(src, id, typ string, body []byte) {
	f.t.Helper()
	f.accept(src, id, typ, body)
	if err := (queue.Sender{Client: f.SQS, URL: f.Q.Events}).Send(context.Background(), queue.Pointer{Source: src, EventID: id}); err != nil {
		f.t.Fatal(err)
	}
}

// pointers takes every effects-queue message and returns its pointers.
func (f *fixture) pointers() []queue.IntentPointer {
	f.t.Helper()
	var out []queue.IntentPointer
	for _, b := range f.receive(f.Q.Effects) {
		p, err := queue.ParseIntentPointer(b)
		if err != nil {
			f.t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// dispatch performs every announced intent with the real dispatcher.
func (f *fixture) dispatch(effects map[string]outbox.Effect) []queue.IntentPointer {
	f.t.Helper()
	d := &outbox.Dispatcher{Ledger: f.L, Effects: effects, Clock: f.Clock, Owner: "disp", Lease: 30 * time.Second, Rand: func() float64 { return 0.5 }}
	ps := f.pointers()
	for _, p := range ps {
		if _, err := d.Dispatch(context.Background(), p.OperationID); err != nil {
			f.t.Fatalf("dispatch %s: %v", p.OperationID, err)
		}
	}
	return ps
}

// subscription delivers one state of sub_A and processes it; it returns
// the version and the operation id of the intent it committed.
func (f *fixture) subscription(id, status string, created int64) (int64, string) {
	f.t.Helper()
	f.deliver("stripe", id, "customer.subscription.updated", []byte(subscriptionEvent(id, "sub_A", status, created)))
	f.process()
	ev := f.event("stripe", id)
	if ev.Status != ledger.StatusProcessed || len(ev.Result.Operations) != 1 {
		f.t.Fatalf("%s: %s %+v", id, ev.Status, ev.Result)
	}
	return ev.Result.Version, ev.Result.Operations[0].ID
}

func (f *fixture) intent(op string) ledger.IntentState {
	f.t.Helper()
	in, err := f.L.GetIntentState(context.Background(), op)
	if err != nil {
		f.t.Fatal(err)
	}
	return in
}

func (f *fixture) syncDue() []ledger.SubjectCursor {
	f.t.Helper()
	cs, err := f.L.ListSyncDue(context.Background(), f.Clock.Now().Add(365*24*time.Hour), 10)
	if err != nil {
		f.t.Fatal(err)
	}
	return cs
}

func (f *fixture) lastEMF() map[string]any {
	f.t.Helper()
	lines := strings.Split(strings.TrimSpace(f.EMF.String()), "\n")
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rec); err != nil {
		f.t.Fatal(err)
	}
	return rec
}

func versions(sv downstream.SubjectView) []string {
	out := make([]string, len(sv.History))
	for i, a := range sv.History {
		out[i] = a.Version
	}
	return out
}

// The subscription's newest state (a revoke) was committed but its
// announcement was lost, while the downstream still holds the grant: the
// reconciler finds the drift before the intent is old enough for the
// stuck-intent step, announces the revoke again, and once it is performed
// the downstream is at the canonical version and the next check is quiet.
// (Not with a deletion's version above 2^53: minidyn v0.8.2 rounds every
// number of an item it updates, so the claimed intent would carry a
// rounded version; the check would rightly report that drift.)
func TestDownstreamDriftReannouncesTheNewestIntent(t *testing.T) {
	f := newFixture(t)
	ent := newEntitlements(t, f)
	created := t0.Unix()
	v5, grant := f.subscription("evt_grant", "active", created)
	if got := f.dispatch(ent.Effects); len(got) != 1 || f.intent(grant).Status != ledger.IntentStatusSucceeded {
		t.Fatalf("grant: %+v %s", got, f.intent(grant).Status)
	}

	f.Clock.Advance(10 * time.Second)
	v9, revoke := f.subscription("evt_revoke", "canceled", created+1)
	if lost := f.pointers(); len(lost) != 1 || lost[0].OperationID != revoke {
		t.Fatalf("the revoke's announcement: %+v", lost)
	}
	if in := f.intent(revoke); in.Status != ledger.IntentStatusPending || in.Kind != "entitlement.revoke" || v9 <= v5 {
		t.Fatalf("revoke %s %s, v%d after v%d", in.Kind, in.Status, v9, v5)
	}

	// Two minutes later: the grant's cursor is due, the revoke is not yet
	// old enough for step 2 (StuckAfter 5 minutes).
	f.Clock.Advance(2 * time.Minute)
	r := f.reconciler(nil)
	r.Effects = ent.Effects
	rep := f.run(r)
	if rep.Downstream.Checked != 1 || rep.Downstream.Drifting != 1 || rep.Downstream.Reannounced != 1 || rep.IntentsReannounced != 0 {
		t.Fatalf("report %+v", rep.Downstream)
	}
	if rec := f.lastEMF(); rec["DownstreamDrift"] != 1.0 || rec["CompensationsDue"] != 0.0 {
		t.Fatalf("EMF %v", rec)
	}
	got := f.dispatch(ent.Effects)
	if len(got) != 1 || got[0].OperationID != revoke || got[0].Reason != "drift" {
		t.Fatalf("re-announced %+v, want %s", got, revoke)
	}
	if in := f.intent(revoke); in.Status != ledger.IntentStatusSucceeded {
		t.Fatalf("revoke %s", in.Status)
	}
	sv, _ := ent.Down.Subject("stripe", driftAccount)
	want := strconv.FormatInt(v5, 10) + "," + strconv.FormatInt(v9, 10)
	if strings.Join(versions(sv), ",") != want || sv.Regressions != 0 || sv.LastKind != "entitlement.revoke" || sv.History[1].State["entitled"] != false {
		t.Fatalf("downstream %+v, want versions %s", sv, want)
	}

	// The repaired subject is checked again and found in sync.
	f.Clock.Advance(6 * time.Minute)
	rep = f.run(r)
	if rep.Downstream.Checked != 1 || rep.Downstream.InSync != 1 || rep.Downstream.Drifting != 0 {
		t.Fatalf("after the repair %+v", rep.Downstream)
	}
	if f.lastEMF()["DownstreamDrift"] != 0.0 {
		t.Fatalf("EMF %v", f.lastEMF())
	}
	if due := f.syncDue(); len(due) != 0 {
		t.Fatalf("cursor not parked: %+v", due)
	}
}

// A subject whose downstream agrees is marked synced and not asked again
// until the next dispatch; an effect that cannot say a subject's version
// (not a SubjectStatus, or no status endpoint) is skipped, the cursor
// parked, nothing counted as drift.
func TestDownstreamDriftInSyncAndSkipped(t *testing.T) {
	tests := []struct {
		name    string
		effects func(*entitlements) map[string]outbox.Effect
		inSync  int
		skipped int
	}{
		{"in sync", func(e *entitlements) map[string]outbox.Effect { return e.Effects }, 1, 0},
		{"no SubjectStatus", func(e *entitlements) map[string]outbox.Effect {
			return map[string]outbox.Effect{"entitlement.grant": plainEffect{e.Effects["entitlement.grant"]}}
		}, 0, 1},
		{"no status endpoint", func(e *entitlements) map[string]outbox.Effect {
			h := *e.Effects["entitlement.grant"].(*outbox.HTTPEffect)
			h.StatusURL = ""
			return map[string]outbox.Effect{"entitlement.grant": &h}
		}, 0, 1},
		{"no effect for the kind", func(*entitlements) map[string]outbox.Effect { return nil }, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			ent := newEntitlements(t, f)
			_, grant := f.subscription("evt_grant", "active", t0.Unix())
			f.dispatch(ent.Effects)
			if f.intent(grant).Status != ledger.IntentStatusSucceeded || len(f.syncDue()) != 1 {
				t.Fatalf("setup: %s, %d cursors due", f.intent(grant).Status, len(f.syncDue()))
			}
			f.Clock.Advance(2 * time.Minute)
			r := f.reconciler(nil)
			r.Effects = tc.effects(ent)
			rep := f.run(r)
			d := rep.Downstream
			if d.Checked != 1 || d.InSync != tc.inSync || d.Skipped != tc.skipped || d.Drifting != 0 || d.Reannounced != 0 {
				t.Fatalf("report %+v", d)
			}
			if due := f.syncDue(); len(due) != 0 {
				t.Fatalf("cursor not parked: %+v", due)
			}
			if again := f.run(r); again.Downstream.Checked != 0 {
				t.Fatalf("asked again without a dispatch: %+v", again.Downstream)
			}
			if got := f.pointers(); len(got) != 0 {
				t.Fatalf("announced %+v", got)
			}
		})
	}
}

// plainEffect hides every method but Kind and Do: an effect that cannot
// report a subject's version.
type plainEffect struct{ outbox.Effect }

// The newest intent SUCCEEDED and yet the downstream reports the older
// version (here: it lost the revoke). Nothing can be re-announced; the
// reconciler warns with the operation id and both versions, counts the
// drift, and looks again later.
func TestDownstreamDriftAfterSuccessIsLeftForAnOperator(t *testing.T) {
	f := newFixture(t)
	ent := newEntitlements(t, f)
	elsewhere := newEntitlements(t, f) // a downstream whose state the status endpoint does not see
	created := t0.Unix()
	v5, _ := f.subscription("evt_grant", "active", created)
	f.dispatch(ent.Effects)
	f.Clock.Advance(10 * time.Second)
	v9, revoke := f.subscription("evt_revoke", "canceled", created+1)
	f.dispatch(elsewhere.Effects)
	if f.intent(revoke).Status != ledger.IntentStatusSucceeded {
		t.Fatalf("revoke %s", f.intent(revoke).Status)
	}

	f.Clock.Advance(2 * time.Minute)
	var logs bytes.Buffer
	r := f.reconciler(nil)
	r.Effects = ent.Effects
	r.Opts.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	rep := f.run(r)
	if d := rep.Downstream; d.Drifting != 1 || d.NeedsOperator != 1 || d.Reannounced != 0 {
		t.Fatalf("report %+v", d)
	}
	var warned map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "downstream drift needs an operator" {
			warned = m
		}
	}
	if warned == nil || warned["level"] != "WARN" || warned["operation_id"] != revoke || warned["intent_status"] != "SUCCEEDED" ||
		warned["expected_version"] != strconv.FormatInt(v9, 10) || warned["downstream_version"] != strconv.FormatInt(v5, 10) || warned["reason"] == "" {
		t.Fatalf("warning %v\nlogs:\n%s", warned, logs.String())
	}
	if got := f.pointers(); len(got) != 0 {
		t.Fatalf("announced %+v", got)
	}
	// Checked again after StuckAfter, and still reported.
	if rep := f.run(r); rep.Downstream.Checked != 0 {
		t.Fatalf("asked again before StuckAfter: %+v", rep.Downstream)
	}
	f.Clock.Advance(6 * time.Minute)
	if rep := f.run(r); rep.Downstream.Drifting != 1 || rep.Downstream.NeedsOperator != 1 {
		t.Fatalf("later run %+v", rep.Downstream)
	}
}

// CompensationsDue counts the CONTRADICTED intents on the attention
// shards.
func TestCompensationsDueGauge(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	ent := newEntitlements(t, f)
	_, grant := f.subscription("evt_grant", "active", t0.Unix())
	// Claim and record it CONTRADICTED, as the dispatcher does for an
	// action performed after its reason was removed.
	c, err := f.L.ClaimIntent(ctx, grant, ledger.ClaimOptions{Owner: "disp", Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.L.RecordIntent(ctx, c, ledger.IntentOutcome{Status: ledger.IntentStatusContradicted, Code: "performed_then_obsolete", Detail: "test"}); err != nil {
		t.Fatal(err)
	}
	f.receive(f.Q.Effects)
	r := f.reconciler(nil)
	r.Effects = ent.Effects
	rep := f.run(r)
	if rep.CompensationsDue != 1 || f.lastEMF()["CompensationsDue"] != 1.0 {
		t.Fatalf("compensations due %d, EMF %v", rep.CompensationsDue, f.lastEMF())
	}
}

// brokenListing lists a sync cursor without the keys to check it.
type brokenListing struct{ *ledger.Ledger }

func (brokenListing) ListSyncDue(context.Context, time.Time, int) ([]ledger.SubjectCursor, error) {
	return []ledger.SubjectCursor{{Kind: "entitlement.grant", DueAt: t0}}, nil
}

// A cursor listed without its projection, subject, family or holder is
// counted and logged, not taken for agreement, and does not fail the run.
func TestDownstreamDriftUnreadableCursor(t *testing.T) {
	f := newFixture(t)
	ent := newEntitlements(t, f)
	var logs bytes.Buffer
	r := f.reconciler(nil)
	r.Ledger = brokenListing{f.L}
	r.Effects = ent.Effects
	r.Opts.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	rep := f.run(r)
	if d := rep.Downstream; d.Checked != 1 || d.Unreadable != 1 || d.InSync+d.Skipped+d.Drifting != 0 {
		t.Fatalf("report %+v", d)
	}
	if !strings.Contains(logs.String(), `"level":"ERROR","msg":"downstream drift check: a sync cursor without`) {
		t.Fatalf("logs:\n%s", logs.String())
	}
}
