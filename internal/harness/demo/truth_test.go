package demo

import (
	"strconv"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/harness/downstream"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/pkg/builtin"
)

// truthFixture is a run's end as checkTruth reads it: the override's order
// O-43 (confirmed at r13; its refund and notice OBSOLETE, never applied)
// and the race's subscription (deleted at vRevoke; the grant SUPERSEDED,
// the revoke applied), with the downstream's views.
type truthFixture struct {
	intents     []ledger.IntentState
	projections []ledger.Projection
	down        devstack.DownstreamState
}

const (
	vGrant  int64 = 7184671589
	vRevoke int64 = builtin.DeletedVersionBase + 7184671707 // above 2^53: compared exactly
)

func goodTruth() truthFixture {
	cancelled := map[string]string{"status": "cancelled"}
	action := func(op, kind string, status ledger.IntentStatus) ledger.IntentState {
		return ledger.IntentState{OperationID: op, Kind: kind, Subject: "O-43", Status: status, Projection: builtin.OrderProjection, ProjectionSubject: "O-43",
			Version: 12, Fingerprint: "f-cancelled", Policy: ledger.PolicyWhileCurrent, Condition: cancelled,
			Audit: []ledger.AuditEntry{{To: ledger.Status(status), Reason: "obsolete: order/O-43 at version 13 says status=confirmed"}}}
	}
	sync := func(op, kind string, v int64, fp string, status ledger.IntentStatus) ledger.IntentState {
		return ledger.IntentState{OperationID: op, Kind: kind, Subject: "acct_race", Status: status, Projection: builtin.StripeSubscriptionProjection,
			ProjectionSubject: "sub_race", Version: v, Fingerprint: fp, Policy: ledger.PolicyLatest}
	}
	return truthFixture{
		intents: []ledger.IntentState{
			action("op-refund", "refund", ledger.IntentStatusObsolete),
			action("op-notice", "notify_cancellation", ledger.IntentStatusObsolete),
			sync("op-grant", "entitlement.grant", vGrant, "f-active", ledger.IntentStatusSuperseded),
			sync("op-revoke", "entitlement.revoke", vRevoke, "f-deleted", ledger.IntentStatusSucceeded),
		},
		projections: []ledger.Projection{
			{Name: builtin.OrderProjection, Subject: "O-43", Version: 13, Fingerprint: "f-confirmed", State: map[string]any{"status": "confirmed"}},
			{Name: builtin.StripeSubscriptionProjection, Subject: "sub_race", Version: vRevoke, Fingerprint: "f-deleted",
				State:  map[string]any{"status": "canceled", "deleted": true, "entitled": false},
				Latest: map[string]ledger.LatestIntent{"entitlement": {OperationID: "op-revoke", Kind: "entitlement.revoke", Version: vRevoke}}},
		},
		down: devstack.DownstreamState{
			Effects: []devstack.DownstreamEffect{{Kind: "entitlement.revoke", Effective: map[string]int{"op-revoke": 1}}},
			Subjects: map[string]map[string]downstream.SubjectView{"entitlement": {"acct_race": {
				Last: strconv.FormatInt(vRevoke, 10), LastKind: "entitlement.revoke",
				History: []downstream.Applied{{Version: strconv.FormatInt(vRevoke, 10), Kind: "entitlement.revoke", Key: "op-revoke"}},
			}}},
		},
	}
}

// TestCheckTruthInStep: a downstream that followed the truth passes, and
// the report has each subject's truth next to the downstream's view, the
// overtaken intents with their versions and reasons, and no compensation.
func TestCheckTruthInStep(t *testing.T) {
	f := goodTruth()
	var r Report
	r.checkTruth(f.intents, f.projections, f.down)
	if !r.OK() || len(r.Truth) != 2 || len(r.Overtaken) != 3 || len(r.Compensations) != 0 {
		t.Fatalf("violations %v; truth %+v; overtaken %+v", r.Violations, r.Truth, r.Overtaken)
	}
	order, sub := r.Truth[0], r.Truth[1]
	if order.Subject != "O-43" || order.State != "confirmed" || order.Version != 13 || len(order.Downstream) != 2 || order.Downstream[0].Last != "" || !order.OK {
		t.Fatalf("order %+v", order)
	}
	if v := sub.Downstream[0]; sub.State != "canceled, deleted, not entitled" || v.Subject != "acct_race" || v.Want != vRevoke || v.WantKind != "entitlement.revoke" || v.Last != strconv.FormatInt(vRevoke, 10) {
		t.Fatalf("subscription %+v", sub)
	}
	if o := r.Overtaken[0]; o.Status != ledger.IntentStatusSuperseded || o.Version != vGrant || o.Truth != vRevoke {
		t.Fatalf("overtaken first %+v", o)
	}
	if o := r.Overtaken[1]; o.Status != ledger.IntentStatusObsolete || o.Version != 12 || o.Truth != 13 || !strings.Contains(o.Reason, "status=confirmed") {
		t.Fatalf("overtaken second %+v", o)
	}
}

// TestCheckTruthFailsTheRun: each way the downstream can part from the
// truth fails the run, and the subject says why.
func TestCheckTruthFailsTheRun(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(*truthFixture)
		want  string
	}{
		{"the downstream left at the grant", func(f *truthFixture) {
			sv := f.down.Subjects["entitlement"]["acct_race"]
			sv.Last, sv.LastKind = strconv.FormatInt(vGrant, 10), "entitlement.grant"
			f.down.Subjects["entitlement"]["acct_race"] = sv
		}, "the downstream's entitlement last applied v7184671589, the truth's newest intent (entitlement.revoke) is v" + strconv.FormatInt(vRevoke, 10)},
		{"the downstream never applied the revoke", func(f *truthFixture) {
			delete(f.down.Subjects, "entitlement")
		}, "the downstream's entitlement last applied nothing"},
		{"the downstream went back to an older version", func(f *truthFixture) {
			sv := f.down.Subjects["entitlement"]["acct_race"]
			sv.Regressions = 1
			f.down.Subjects["entitlement"]["acct_race"] = sv
		}, "went back to an older version 1 time(s)"},
		{"an obsolete refund was applied", func(f *truthFixture) {
			f.down.Effects = append(f.down.Effects, devstack.DownstreamEffect{Kind: "refund", Effective: map[string]int{"op-refund": 1}})
		}, "refund op-refund ended OBSOLETE, yet the downstream applied it 1 time(s)"},
		{"a refund applied for a confirmed order, recorded nowhere", func(f *truthFixture) {
			f.intents[0].Status = ledger.IntentStatusSucceeded
			f.down.Effects = append(f.down.Effects, devstack.DownstreamEffect{Kind: "refund", Effective: map[string]int{"op-refund": 1}})
		}, `refund op-refund (v12) was applied, status is "confirmed", a refund needs "cancelled" at v13, and nothing records it`},
		{"an obsolete refund for an order still cancelled", func(f *truthFixture) {
			f.projections[0].State["status"] = "cancelled"
		}, "refund op-refund ended OBSOLETE, yet the canonical state v13 still justifies it"},
		{"a superseded grant was applied", func(f *truthFixture) {
			f.down.Effects = append(f.down.Effects, devstack.DownstreamEffect{Kind: "entitlement.grant", Effective: map[string]int{"op-grant": 1}})
		}, "entitlement.grant op-grant ended SUPERSEDED, yet the downstream applied it 1 time(s)"},
		{"the projection names another latest intent", func(f *truthFixture) {
			f.projections[1].Latest["entitlement"] = ledger.LatestIntent{OperationID: "op-grant", Version: vGrant}
		}, "the projection names op-grant v7184671589 as its newest entitlement intent"},
		{"no intent carries the canonical state", func(f *truthFixture) {
			f.projections[1].Fingerprint = "f-other"
		}, "no entitlement intent carries its canonical state"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := goodTruth()
			c.spoil(&f)
			var r Report
			r.checkTruth(f.intents, f.projections, f.down)
			got := strings.Join(r.Violations, "\n")
			if r.OK() || !strings.Contains(got, c.want) || !strings.HasPrefix(got, "I7: ") {
				t.Fatalf("violations %q, want one saying %q", got, c.want)
			}
			bad := 0
			for _, s := range r.Truth {
				if !s.OK {
					bad++
				}
			}
			if bad != 1 {
				t.Fatalf("%d subjects marked as mismatching, want 1: %+v", bad, r.Truth)
			}
		})
	}
}

// TestCheckTruthRecordedContradictions: an action applied and then
// contradicted is right when it is recorded: a refund as CONTRADICTED (an
// attention item), a notice compensated by its reinstatement notice.
func TestCheckTruthRecordedContradictions(t *testing.T) {
	f := goodTruth()
	f.intents[0].Status, f.intents[0].ContradictedBy = ledger.IntentStatusContradicted, 13
	f.intents[1].Status, f.intents[1].ContradictedBy, f.intents[1].CompensatedBy = ledger.IntentStatusSucceeded, 13, ledger.CompensationID("op-notice")
	f.intents = append(f.intents, ledger.IntentState{OperationID: ledger.CompensationID("op-notice"), Kind: "notify_reinstatement", Subject: "O-43",
		Status: ledger.IntentStatusSucceeded, Projection: builtin.OrderProjection, ProjectionSubject: "O-43", Version: 13, Policy: ledger.PolicyOnce})
	f.down.Effects = append(f.down.Effects, devstack.DownstreamEffect{Kind: "orders", Effective: map[string]int{"op-refund": 1, "op-notice": 1, "op-notice-c": 1}})
	var r Report
	r.checkTruth(f.intents, f.projections, f.down)
	if !r.OK() {
		t.Fatalf("violations %v", r.Violations)
	}
	notes := strings.Join(r.Truth[0].Notes, "\n")
	if !strings.Contains(notes, "refund op-refund was applied at v12 and contradicted by v13: an attention item (CONTRADICTED)") ||
		!strings.Contains(notes, "compensated by op-notice-c") {
		t.Fatalf("notes %q", notes)
	}
	if len(r.Compensations) != 1 || r.Compensations[0].ByKind != "notify_reinstatement" || r.Compensations[0].Effective != 1 {
		t.Fatalf("compensations %+v", r.Compensations)
	}
	var contradicted []Overtaken
	for _, o := range r.Overtaken {
		if o.Status == ledger.IntentStatusContradicted {
			contradicted = append(contradicted, o)
		}
	}
	if len(contradicted) != 1 || contradicted[0].ContradictedBy != 13 || contradicted[0].Effective != 1 {
		t.Fatalf("attention items %+v", contradicted)
	}
}
