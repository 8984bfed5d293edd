package demo

import (
	"slices"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// TestExpectationsFromWhatWasSent: the senders' meaning of each subject is
// its newest revision, whatever order the deliveries were sent in; a
// redelivery is one event.
func TestExpectationsFromWhatWasSent(t *testing.T) {
	sent := otherStory("ab12")
	slices.Reverse(sent)
	exp := expectations(sent)
	var kinds []string
	for _, e := range exp {
		kinds = append(kinds, e.final.kind+" "+e.final.subject)
		if e.final.subject == "O-42-ab12" {
			if e.final.version != 12 || e.final.state["status"] != "cancelled" || len(e.events) != 3 || !slices.Equal(e.final.intents, []string{"notify_cancellation", "refund"}) {
				t.Fatalf("O-42: %+v", e)
			}
		}
	}
	want := []string{"github push acme/webhooks refs/heads/main@ab12", "order O-42-ab12", "quiltt connection conn_qevt_1_ab12", "quiltt connection conn_qevt_2_ab12",
		"quiltt connection conn_qevt_3_ab12", "shopify order 820982911946154508" + digits("ab12")}
	if !slices.Equal(kinds, want) {
		t.Fatalf("subjects %v, want %v", kinds, want)
	}
}

// TestCheckSubjectsFailsTheRun: a subject whose state, version or effects
// differ from what the senders meant fails the run.
func TestCheckSubjectsFailsTheRun(t *testing.T) {
	sent := otherStory("ab12")
	exp := expectations(sent)
	good := func() (map[string]ledger.Event, ledger.Snapshot, []ledger.StoredIntent) {
		rows := map[string]ledger.Event{}
		var snap ledger.Snapshot
		for _, e := range exp {
			m := e.final
			for _, id := range e.events {
				out := ledger.OutcomeApplied
				switch {
				case m.projection == "":
					out = ledger.OutcomeIgnored
				case id != m.event:
					out = ledger.OutcomeStale
				}
				rows[e.source+"/"+id] = ledger.Event{Source: e.source, EventID: id, Status: ledger.StatusProcessed, Result: &ledger.Result{Outcome: out}}
			}
			if m.projection != "" {
				state := map[string]any{}
				for k, v := range m.state {
					state[k] = v
				}
				snap.Projections = append(snap.Projections, ledger.Projection{Name: m.projection, Subject: m.subject, Version: max(m.version, 1), State: state})
			}
		}
		intents := []ledger.StoredIntent{
			{OperationID: "op1", Kind: "refund", Subject: "O-42-ab12", Causation: "orders/msg_o42_12_ab12"},
			{OperationID: "op2", Kind: "notify_cancellation", Subject: "O-42-ab12", Causation: "orders/msg_o42_12_ab12"},
		}
		return rows, snap, intents
	}

	rows, snap, intents := good()
	var ok Report
	ok.checkSubjects(exp, rows, snap, intents)
	if !ok.OK() || len(ok.OtherSubjects) != 6 {
		t.Fatalf("a good ledger reported %v (%d subjects)", ok.Violations, len(ok.OtherSubjects))
	}
	for _, o := range ok.OtherSubjects {
		if o.Subject == "O-42-ab12" && (o.State != "cancelled" || o.Version != 12 || o.Applied != 1 || o.Stale != 2 || !o.OK) {
			t.Fatalf("O-42: %+v", o)
		}
	}

	for _, c := range []struct {
		name  string
		spoil func(rows map[string]ledger.Event, snap *ledger.Snapshot, intents *[]ledger.StoredIntent)
		want  string
	}{
		{"an older revision won", func(_ map[string]ledger.Event, snap *ledger.Snapshot, _ *[]ledger.StoredIntent) {
			for i, p := range snap.Projections {
				if p.Subject == "O-42-ab12" {
					snap.Projections[i].Version, snap.Projections[i].State = 11, map[string]any{"status": "confirmed"}
				}
			}
		}, `order O-42-ab12: status is "confirmed", the senders meant "cancelled"`},
		{"a refund missing", func(_ map[string]ledger.Event, _ *ledger.Snapshot, intents *[]ledger.StoredIntent) {
			*intents = (*intents)[1:]
		}, "O-42-ab12: this run created effects [notify_cancellation]"},
		{"no projection", func(_ map[string]ledger.Event, snap *ledger.Snapshot, _ *[]ledger.StoredIntent) {
			snap.Projections = slices.DeleteFunc(snap.Projections, func(p ledger.Projection) bool { return p.Name == "shopify_order" })
		}, "shopify order 820982911946154508" + digits("ab12") + " has no projection"},
		{"a push that was projected", func(rows map[string]ledger.Event, _ *ledger.Snapshot, _ *[]ledger.StoredIntent) {
			rows["github/gh-delivery-ab12"] = ledger.Event{Status: ledger.StatusProcessed, Result: &ledger.Result{Outcome: ledger.OutcomeApplied}}
		}, "github push"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rows, snap, intents := good()
			c.spoil(rows, &snap, &intents)
			var r Report
			r.checkSubjects(exp, rows, snap, intents)
			if !slices.ContainsFunc(r.Violations, func(v string) bool { return strings.Contains(v, c.want) }) {
				t.Fatalf("violations %v, want one saying %q", r.Violations, c.want)
			}
			if !slices.ContainsFunc(r.OtherSubjects, func(o OtherSubject) bool { return !o.OK }) {
				t.Fatalf("no subject marked as differing: %+v", r.OtherSubjects)
			}
		})
	}
}
