package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/ledger"
)

// Stripe thin events in the story.
//
// A thin event names the subscription that changed and carries no state:
// the processor fetches the subscription from the Stripe API (the stack's
// fake) and projects what Stripe says now. So before sending, the demo
// puts every subscription's current state in the fake; a subscription a
// thin event was resolved for must end in that state. The story's thin
// events (with at least five subscriptions):
//
//   - subscription 1: a thin update on its own, whose first fetch meets a
//     scripted 429 with Retry-After: 1 (the event waits in RETRY_WAIT and
//     the next fetch succeeds);
//   - subscription 5: a thin deletion on its own. Its snapshot events end
//     active; Stripe has canceled it since and only this thin event says
//     so: the subscription must end canceled, from Stripe's state.
//   - subscriptions 2 and 4: a migration pair each, the last snapshot
//     update and its thin twin (snapshot_event = the snapshot's id, the
//     same created), sent one after the other by one sender: snapshot
//     first for 2, thin first for 4. Each pair is one fact: one ledger row
//     (under the snapshot's id), one outcome, its intents once. Where the
//     snapshot came first the row is processed from its payload and Stripe
//     is not asked; where the thin came first the row is processed by a
//     fetch.

// thinRole is how the story uses one thin event.
type thinRole struct {
	// Twin is the snapshot event this is the thin twin of (its
	// snapshot_event); nil for a thin event on its own.
	Twin *event
	// ThinFirst: a twin sent before its snapshot event.
	ThinFirst bool
	// RateLimited: the first fetch of its subscription meets a scripted
	// 429 with Retry-After: 1.
	RateLimited bool
	What        string // for the report
}

// newThinEvent renders a Stripe thin event (object v2.core.event) about a
// subscription; twin, when set, makes it that snapshot event's thin twin.
func newThinEvent(id, typ, sub string, created time.Time, twin *event) *event {
	snapshot := ""
	if twin != nil {
		snapshot = fmt.Sprintf(`,"snapshot_event":%q`, twin.ID)
	}
	body := fmt.Appendf(nil, `{"id":%q,"object":"v2.core.event","type":%q,"livemode":false,"created":%q,`+
		`"related_object":{"id":%q,"type":"subscription","url":"/v1/subscriptions/%s"},"reason":null,"context":null%s}`,
		id, typ, created.UTC().Format("2006-01-02T15:04:05.000Z"), sub, sub, snapshot)
	return &event{ID: id, Type: typ, Sub: sub, Created: created.Unix(), Body: body}
}

// addThin adds the thin events and Stripe's truth to the story (nothing
// with fewer than five subscriptions).
func (s *story) addThin(now int64) {
	if len(s.subs) < 5 {
		return
	}
	s.truth = map[string]string{}
	for sub, ev := range s.expectedFinal() {
		s.truth[sub] = ev.Status
	}
	at := time.Unix(now, 0)
	account := func(i int) string { return fmt.Sprintf("acct_demo%s_%02d", s.run, i+1) }

	rateLimited := newThinEvent(fmt.Sprintf("evt_thin%s_01", s.run), "v1.customer.subscription.updated", s.subs[0], at, nil)
	rateLimited.Account = account(0)
	rateLimited.Thin = &thinRole{RateLimited: true, What: "on its own; its first fetch met a 429 (Retry-After: 1)"}
	canceled := newThinEvent(fmt.Sprintf("evt_thin%s_05", s.run), "v1.customer.subscription.deleted", s.subs[4], at, nil)
	canceled.Account = account(4)
	canceled.Thin = &thinRole{What: "on its own; Stripe canceled the subscription, no snapshot says so"}
	s.truth[s.subs[4]] = "canceled"
	s.events = append(s.events, rateLimited, canceled)
	s.thins = append(s.thins, rateLimited, canceled)

	for _, p := range []struct {
		i         int
		thinFirst bool
	}{{1, false}, {3, true}} {
		snapshot := s.find(fmt.Sprintf("evt_demo%s_%02d_3", s.run, p.i+1))
		twin := newThinEvent(fmt.Sprintf("evt_thin%s_%02d_twin", s.run, p.i+1), "v1."+snapshot.Type, snapshot.Sub, time.Unix(snapshot.Created, 0), snapshot)
		twin.Account = snapshot.Account
		order := "snapshot sent first"
		if p.thinFirst {
			order = "thin sent first"
		}
		twin.Thin = &thinRole{Twin: snapshot, ThinFirst: p.thinFirst, What: "twin of " + snapshot.ID + ", " + order}
		s.twins = append(s.twins, twin)
		s.thins = append(s.thins, twin)
	}
}

func (s *story) find(id string) *event {
	for _, ev := range s.events {
		if ev.ID == id {
			return ev
		}
	}
	panic("demo: no event " + id) // the story is built in this package
}

// paired reports whether ev is the snapshot half of a migration pair.
func (s *story) paired(ev *event) bool {
	return slices.ContainsFunc(s.twins, func(t *event) bool { return t.Thin.Twin == ev })
}

// fetched reports whether a thin event about sub is processed by fetching
// it from Stripe (a thin event on its own, or a twin sent first).
func (s *story) fetched(sub string) bool {
	return slices.ContainsFunc(s.thins, func(t *event) bool {
		return t.Sub == sub && (t.Thin.Twin == nil || t.Thin.ThinFirst)
	})
}

func (s *story) rateLimitedSub() string {
	for _, t := range s.thins {
		if t.Thin.RateLimited {
			return t.Sub
		}
	}
	return ""
}

// pairDeliveries returns each migration pair as one delivery chain, in
// the pair's order.
func (s *story) pairDeliveries(secret string) []delivery {
	var out []delivery
	for _, twin := range s.twins {
		first, second := twin.Thin.Twin, twin
		if twin.Thin.ThinFirst {
			first, second = second, first
		}
		out = append(out, delivery{ev: first, secret: secret, next: &delivery{ev: second, secret: secret}})
	}
	return out
}

// stripePath is the Stripe API path the processor fetches sub from.
func stripePath(sub string) string { return "/v1/subscriptions/" + sub }

// setStripeTruth puts every subscription's current state in the stack's
// fake Stripe API and scripts the one rate-limited answer.
func setStripeTruth(ctx context.Context, base string, s *story) error {
	for _, sub := range s.subs {
		account := strings.Replace(sub, "sub_", "acct_", 1)
		body := subscriptionObject(sub, s.truth[sub], account)
		if err := devCall(ctx, http.MethodPut, base+"/_dev/stripe/objects/subscription/"+sub, body, http.StatusOK); err != nil {
			return fmt.Errorf("set Stripe's state of %s: %w", sub, err)
		}
	}
	script, _ := json.Marshal(devstack.StripeScript{Path: stripePath(s.rateLimitedSub()), Then: []devstack.StripeBehavior{{Mode: "rate_limited", RetryAfterSeconds: 1}}})
	if err := devCall(ctx, http.MethodPost, base+"/_dev/stripe/script", script, http.StatusAccepted); err != nil {
		return fmt.Errorf("script the fake Stripe API: %w", err)
	}
	return nil
}

func devCall(ctx context.Context, method, url string, body []byte, want int) error {
	req, _ := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode == http.StatusNotFound {
			return fmt.Errorf("%s %s: 404: this stack serves no fake Stripe API (restart `make dev` from this tree)", method, url)
		}
		return fmt.Errorf("%s %s: HTTP %d: %s", method, url, resp.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}

// stripeRequests reads what the fake Stripe API was asked for
// subscriptions.
func stripeRequests(ctx context.Context, base string) (devstack.StripeRequests, error) {
	var out devstack.StripeRequests
	return out, getDev(ctx, base, "/_dev/stripe/requests?path=/v1/subscriptions/", "the fake Stripe API's requests", &out)
}

// ThinOutcome is one Stripe thin event of the run and what it became.
type ThinOutcome struct {
	EventID, Subject, What string
	Twin                   string // the snapshot event it is the thin twin of
	Row                    string // the ledger row it belongs to (its own id, or its twin's)
	Rows                   int    // ledger rows for the fact: the thin id's and the twin's (must be 1)
	Status                 ledger.Status
	Outcome                ledger.Outcome
	Fetched                bool  // the row was processed from the object fetched from Stripe
	Intents                int   // intents the fact created (at most 1)
	Requests               []int // the fake Stripe API's answers for its subscription, in order
}

// checkThin checks the thin events: each ended PROCESSED, each migration
// pair is one ledger row with one set of intents, the scripted 429 was met
// and followed by a success, and a thin event processed by fetching asked
// Stripe.
func (r *Report) checkThin(s *story, snap ledger.Snapshot, reqs devstack.StripeRequests) {
	r.StripeAPI = reqs.Addr
	rows := map[string]ledger.Event{}
	for _, ev := range snap.Events {
		if ev.Source == "stripe" {
			rows[ev.EventID] = ev
		}
	}
	intents := map[string]int{}
	for _, in := range snap.Intents {
		if !warehouseKind(in.Kind) {
			intents[in.Causation]++
		}
	}
	asked := map[string][]int{}
	for _, q := range reqs.Requests {
		asked[q.Path] = append(asked[q.Path], q.Status)
	}
	for _, t := range s.thins {
		o := ThinOutcome{EventID: t.ID, Subject: t.Sub, What: t.Thin.What, Row: t.fact(), Requests: asked[stripePath(t.Sub)]}
		if t.Thin.Twin != nil {
			o.Twin = t.Thin.Twin.ID
		}
		for _, id := range []string{t.ID, o.Twin} {
			if _, ok := rows[id]; ok && id != "" {
				o.Rows++
			}
			o.Intents += intents["stripe/"+id]
		}
		row, ok := rows[o.Row]
		if ok {
			o.Status = row.Status
			if row.Result != nil {
				o.Outcome = row.Result.Outcome
			}
			o.Fetched = fetchedFromStripe(row)
		}
		switch {
		case !ok:
			r.violate("I1", "thin event %s: no ledger row %s", t.ID, o.Row)
		case row.Status != ledger.StatusProcessed:
			r.violate("I1", "thin event %s: row %s ended %s (%s: %s), want PROCESSED", t.ID, o.Row, row.Status, row.ErrorCode, row.ErrorMessage)
		}
		if o.Rows > 1 {
			r.violate("I2", "migration pair %s + %s: %d ledger rows, want 1 (one fact)", o.Twin, t.ID, o.Rows)
		}
		if o.Intents > 1 || (o.Outcome == ledger.OutcomeApplied && o.Intents != 1) {
			r.violate("I2", "thin event %s (row %s, %s): %d intents, want one set", t.ID, o.Row, o.Outcome, o.Intents)
		}
		switch answered := slices.Contains(o.Requests, http.StatusOK); {
		case t.Thin.Twin != nil && t.Thin.ThinFirst && !answered:
			r.violate("I1", "migration pair %s: the thin event was sent first, but Stripe was never asked for %s (answers %v)", o.Row, t.Sub, o.Requests)
		case t.Thin.Twin != nil && !t.Thin.ThinFirst && len(o.Requests) > 0:
			r.violate("I1", "migration pair %s: the snapshot was sent first, yet Stripe was asked for %s (answers %v)", o.Row, t.Sub, o.Requests)
		}
		if o.Fetched && !slices.Contains(o.Requests, http.StatusOK) {
			r.violate("I1", "thin event %s was processed from Stripe's state, but the fake Stripe API never answered 200 for %s (answers %v)", t.ID, t.Sub, o.Requests)
		}
		if t.Thin.RateLimited {
			first429 := slices.Index(o.Requests, http.StatusTooManyRequests)
			if first429 != 0 || !slices.Contains(o.Requests[first429+1:], http.StatusOK) {
				r.violate("I1", "thin event %s: want a 429 first and then a success from the Stripe API, got %v", t.ID, o.Requests)
			}
		}
		r.Thin = append(r.Thin, o)
	}
}

// fetchedFromStripe reports whether the row's completion says its state
// was fetched from Stripe (the processor's note in the completion audit,
// "…; fetched from Stripe at …"). The row's attributes cannot say it: a
// thin twin delivered while its snapshot's row is unfinished adds
// format=thin to a row whose payload is the snapshot.
func fetchedFromStripe(row ledger.Event) bool {
	for _, a := range row.Audit {
		if a.Action == "complete" && strings.Contains(strings.ToLower(a.Reason), "fetched") {
			return true
		}
	}
	return false
}

// printThin writes the thin events' part of the report.
func (r Report) printThin(w io.Writer) {
	if r.Thin == nil {
		return
	}
	fmt.Fprintf(w, "\nStripe thin events (the processor fetches the subscription each names from the fake Stripe API at http://%s):\n", r.StripeAPI)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  THIN EVENT\tSUBSCRIPTION\tROLE\tLEDGER ROW\tROWS\tSTATUS\tOUTCOME\tSTATE FROM\tINTENTS\tSTRIPE API REQUESTS")
	pairs, pairsOK := 0, 0
	for _, t := range r.Thin {
		from := "snapshot"
		if t.Fetched {
			from = "Stripe API"
		}
		answers := make([]string, len(t.Requests))
		for i, c := range t.Requests {
			answers[i] = strconv.Itoa(c)
		}
		reqs := strconv.Itoa(len(t.Requests))
		if len(answers) > 0 {
			reqs += " (" + strings.Join(answers, ", ") + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\n", t.EventID, t.Subject, t.What, t.Row, t.Rows, t.Status, orDash(string(t.Outcome)), from, t.Intents, reqs)
		if t.Twin != "" {
			pairs++
			if t.Rows == 1 && t.Intents <= 1 && t.Status == ledger.StatusProcessed {
				pairsOK++
			}
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "Migration pairs: %d of %d are one ledger row with one outcome and their intents once\n", pairsOK, pairs)
}
