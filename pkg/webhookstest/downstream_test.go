package webhookstest_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/effectively-once/webhooks/pkg/app"
	"github.com/effectively-once/webhooks/pkg/projection"
	"github.com/effectively-once/webhooks/pkg/webhookstest"
)

// What the downstream ends with: a seat-based subscription whose account
// gets its seat limit (latest), its access while the subscription is
// active (while_current, revoked when it no longer is) and a dunning email
// when a payment fails (once). Each rule is correct with its options
// zero; each option is a mistake a team made.
type seats struct {
	limitWithoutVersion  bool // set_seat_limit keyed by the subscription alone
	accessWithoutVersion bool // grant_access keyed by the subscription alone
	dunningPayload       bool // the dunning email carries the revision's seats
}

func (seats) Name() string { return "seats" }

func (s seats) Project(ev projection.Event) (projection.Result, error) {
	var e struct {
		Data struct {
			ID, Account, Status string
			Revision, Seats     int64
		}
	}
	if err := json.Unmarshal(ev.Payload, &e); err != nil {
		return projection.Result{}, projection.Permanent("malformed", err)
	}
	d := e.Data
	state := map[string]any{"account": d.Account, "status": d.Status, "seats": d.Seats}
	rev := strconv.FormatInt(d.Revision, 10)
	res := projection.Result{Write: &projection.Write{Name: "seats", Subject: d.ID, Version: d.Revision,
		Fingerprint: projection.Fingerprint(state), State: state}}
	limit := projection.OperationID(d.ID, "set_seat_limit", rev)
	if s.limitWithoutVersion {
		limit = projection.OperationID(d.ID, "set_seat_limit")
	}
	res.Intents = append(res.Intents, projection.Intent{OperationID: limit, Kind: "set_seat_limit", Subject: d.Account,
		Policy: projection.PolicyLatest, Payload: map[string]any{"subscription": d.ID, "seats": d.Seats}})
	switch d.Status {
	case "active":
		access := projection.OperationID(d.ID, "grant_access", rev)
		if s.accessWithoutVersion {
			access = projection.OperationID(d.ID, "grant_access")
		}
		res.Intents = append(res.Intents, projection.Intent{OperationID: access, Kind: "grant_access", Subject: d.Account,
			Policy: projection.PolicyWhileCurrent, Condition: map[string]string{"status": "active"}, Compensation: "revoke_access",
			Payload: map[string]any{"subscription": d.ID}})
	case "past_due":
		payload := map[string]any{"subscription": d.ID}
		if s.dunningPayload {
			payload["seats"] = d.Seats
		}
		res.Intents = append(res.Intents, projection.Intent{OperationID: projection.OperationID(d.ID, "dunning"), Kind: "send_dunning",
			Subject: d.Account, Policy: projection.PolicyOnce, Payload: payload})
	}
	return res, nil
}

func seatsPipeline(p seats) webhookstest.Pipeline {
	reg := projection.NewRegistry()
	reg.Register("standard-webhooks", []string{"subscription.updated"}, p)
	return webhookstest.Pipeline{
		Rules:   app.Rules{Registry: reg},
		Sources: `{"sources":[{"name":"billing","kind":"standard-webhooks","options":{"subject_path":"data.id","version_path":"data.revision"}}]}`,
		Effects: `{"effects":[{"kind":"set_seat_limit","scopes":["billing"]},{"kind":"grant_access","scopes":["billing"]},` +
			`{"kind":"revoke_access","scopes":["billing"]},{"kind":"send_dunning","scopes":["billing"]}]}`,
		Orders: 6, Crashes: -1,
	}
}

// seat is a revision of a subscription of account acct_1.
func seat(sub string, revision, n int64, status string) webhookstest.Event {
	return webhookstest.Event{
		ID: fmt.Sprintf("msg_%s_r%d", sub, revision),
		Body: fmt.Appendf(nil, `{"type":"subscription.updated","data":{"id":%q,"account":"acct_1","revision":%d,"seats":%d,"status":%q}}`,
			sub, revision, n, status),
		Subject: sub, Version: revision, State: map[string]any{"seats": n, "status": status},
	}
}

// Seats 5, then 8, then 3: the account's seat limit must end at 3.
var fiveEightThree = []webhookstest.Event{seat("sub_1", 1, 5, "active"), seat("sub_1", 2, 8, "active"), seat("sub_1", 3, 3, "active")}

func TestCorrectSeatRulesPassWithoutWarnings(t *testing.T) {
	p := seatsPipeline(seats{})
	r := &recorder{}
	p.Check(r, append(fiveEightThree, seat("sub_1", 4, 3, "past_due"), seat("sub_1", 5, 2, "past_due"))...)
	if r.fatal != "" || len(r.errors) > 0 || len(r.logs) > 0 {
		t.Fatalf("correct rules: fatal %q, errors %q, logs %q", r.fatal, r.errors, r.logs)
	}
}

// A latest effect keyed without the revision: the ledger holds one intent
// for the subject, the newer revisions' are not written, and the
// downstream keeps 5 seats while the truth is 3.
func TestALatestOperationIDReusedAcrossRevisionsFails(t *testing.T) {
	got := mustReport(t, seatsPipeline(seats{limitWithoutVersion: true}), webhookstest.OneActionPerOperationID, fiveEightThree...)
	if !strings.Contains(got[0], "set_seat_limit") || !strings.Contains(got[0], "projection billing/seats") ||
		!strings.Contains(got[0], "include the revision in the operation id") {
		t.Fatalf("the first failure does not name the rule, the kind and the fix:\n%s", got[0])
	}
	// The mistake is the headline, once: not a cascade of mismatches.
	r, err := seatsPipeline(seats{limitWithoutVersion: true}).Report(fiveEightThree...)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(r.Failures); n == 0 || n > 2 || r.Failures[0].Rule != webhookstest.OneActionPerOperationID {
		t.Fatalf("%d failures, want the reuse first and at most one more (the pipeline's disagreement): %v", n, r.Failures)
	}
	for _, f := range r.Failures {
		if f.Rule != webhookstest.OneActionPerOperationID {
			t.Errorf("a failure besides the reuse: %s", f)
		}
	}
}

// A while_current effect keyed without the revision: access granted,
// revoked when the subscription lapses, and never granted again when it
// is active again.
func TestAWhileCurrentOperationIDReusedAfterItsReasonWasRemovedFails(t *testing.T) {
	got := mustReport(t, seatsPipeline(seats{accessWithoutVersion: true}), webhookstest.OneActionPerOperationID,
		seat("sub_1", 1, 5, "active"), seat("sub_1", 2, 5, "past_due"), seat("sub_1", 3, 5, "active"))
	if !strings.Contains(got[0], "grant_access") || !strings.Contains(got[0], "include the revision in the operation id") {
		t.Fatalf("the first failure does not name the kind and the fix:\n%s", got[0])
	}
}

// A once effect whose payload differs between the revisions that ask for
// it: the downstream keeps the first one processed, which may be the
// older; the kit warns (did you mean latest?) and does not fail.
func TestAOnceEffectWithDifferingPayloadsWarnsAndDoesNotFail(t *testing.T) {
	p := seatsPipeline(seats{dunningPayload: true})
	events := []webhookstest.Event{seat("sub_1", 1, 5, "past_due"), seat("sub_1", 2, 8, "past_due")}
	r := &recorder{}
	p.Check(r, events...)
	if r.fatal != "" || len(r.errors) > 0 {
		t.Fatalf("a once effect with differing payloads failed the check: fatal %q, errors %q", r.fatal, r.errors)
	}
	var warned []string
	for _, l := range r.logs {
		if strings.HasPrefix(l, "webhookstest: WARNING: ") && strings.Contains(l, "send_dunning") && strings.Contains(l, "did you mean latest?") {
			warned = append(warned, l)
		}
	}
	if len(warned) != 1 {
		t.Fatalf("want one warning naming send_dunning and asking \"did you mean latest?\", logged %q", r.logs)
	}
}

// Two subscriptions of one account each set its seat limit: whichever is
// processed last wins at the downstream, so the account ends with one
// subscription's seats while the other's final revision asked for its
// own.
func TestTwoSubjectsSyncingOneDownstreamSubjectFailTheFinalPayload(t *testing.T) {
	got := mustReport(t, seatsPipeline(seats{}), webhookstest.LatestEndsFinal,
		seat("sub_1", 1, 5, "active"), seat("sub_2", 1, 8, "active"))
	if !strings.Contains(got[0], "set_seat_limit") || !strings.Contains(got[0], "sync of acct_1") || !strings.Contains(got[0], `"seats":`) {
		t.Fatalf("the failure does not name the kind, the downstream subject and the payloads:\n%s", got[0])
	}
}

// Two subscriptions of one account each grant its access while they are
// active: one lapsing revokes the access the other still justifies.
func TestAWhileCurrentEffectUndoneByAnotherSubjectFails(t *testing.T) {
	p := seatsPipeline(seats{})
	got := mustReport(t, p, webhookstest.ReasonHeldInForce,
		seat("sub_1", 1, 5, "active"), seat("sub_2", 1, 5, "active"), seat("sub_2", 2, 5, "canceled"))
	if !strings.Contains(got[0], "grant_access") || !strings.Contains(got[0], "revoke_access") {
		t.Fatalf("the failure does not name the effect and what undid it:\n%s", got[0])
	}
}
