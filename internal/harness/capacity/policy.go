package capacity

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/outbox"
)

// PolicyRow is what one dispatch of an intent of a given policy cost, and
// what the commit of a revision cost on the subject that created it.
type PolicyRow struct {
	Policy   ledger.Policy
	Dispatch Totals // claim, truth check, cursor (latest), call, record
	Calls    Calls
	// Revision is the commit of the next revision of the subject (a
	// state that still satisfies the intent's reason), and Contradicting
	// that of a revision that removes it after the intent was performed:
	// only while_current subjects watch their intents, so only they pay
	// there (one cancelled transaction to learn the list, one read per
	// watched intent, one write per contradicted one; on minidyn one read
	// more, since its cancellation reasons do not return the item as
	// DynamoDB's do).
	Revision, Contradicting           Totals
	RevisionCalls, ContradictingCalls Calls
}

// MeasurePolicies commits one intent of each policy on its own subject
// through the ledger, dispatches it against the fake downstream, then
// commits two more revisions of the subject, and meters each step.
func MeasurePolicies(ctx context.Context) ([]PolicyRow, error) {
	rg, err := newRig(ctx, "", "")
	if err != nil {
		return nil, err
	}
	defer rg.close()
	var rows []PolicyRow
	for _, pol := range []ledger.Policy{ledger.PolicyOnce, ledger.PolicyWhileCurrent, ledger.PolicyLatest} {
		row, err := rg.measurePolicy(ctx, pol)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", pol, err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func (r *rig) measurePolicy(ctx context.Context, pol ledger.Policy) (PolicyRow, error) {
	row := PolicyRow{Policy: pol}
	subject := "S-" + string(pol)
	kind := "effect." + string(pol)
	state := func(status string) map[string]any {
		return map[string]any{"status": status, "customer": "cus_1", "total": 1200}
	}
	commit := func(n int64, st map[string]any, intents []ledger.Intent) error {
		id := fmt.Sprintf("evt_%s_%d", pol, n)
		if _, err := r.led.Accept(ctx, ledger.Delivery{Source: "stripe", EventID: id, EventType: "order.updated", DeliveryID: "d-" + id, Payload: []byte(`{}`)}); err != nil {
			return err
		}
		c, err := r.led.Claim(ctx, "stripe", id, ledger.ClaimOptions{Owner: ProcessorOwner, Lease: time.Minute})
		if err != nil {
			return err
		}
		r.m.Reset()
		r.rec.Reset()
		_, err = r.led.Commit(ctx, c, &ledger.ProjectionWrite{Name: "orders", Subject: subject, Version: n, Fingerprint: fmt.Sprint(st), State: st}, intents)
		return err
	}
	in := ledger.Intent{OperationID: "op-" + string(pol), Kind: kind, Subject: subject, Policy: pol, Payload: map[string]any{"amount": 1200}}
	if pol == ledger.PolicyWhileCurrent {
		in.Condition = map[string]string{"status": "cancelled"}
	}
	if err := commit(1, state("cancelled"), []ledger.Intent{in}); err != nil {
		return row, err
	}
	r.disp.Effects[kind] = &outbox.HTTPEffect{Name: kind, URL: r.down.URL, Client: &http.Client{Timeout: 5 * time.Second}, Scopes: anyScope}
	r.m.Reset()
	r.rec.Reset()
	if o, err := r.disp.Dispatch(ctx, in.OperationID); err != nil || o.Status != ledger.IntentStatusSucceeded {
		return row, fmt.Errorf("dispatch: %+v %v", o, err)
	}
	row.Dispatch, row.Calls = r.m.Totals(), calls(r.rec)
	// A revision that keeps the reason (still cancelled, the total changed).
	st2 := state("cancelled")
	st2["total"] = 900
	if err := commit(2, st2, nil); err != nil {
		return row, err
	}
	row.Revision, row.RevisionCalls = r.m.Totals(), calls(r.rec)
	if err := commit(3, state("confirmed"), nil); err != nil {
		return row, err
	}
	row.Contradicting, row.ContradictingCalls = r.m.Totals(), calls(r.rec)
	return row, nil
}

// WritePolicyTable renders the per-policy costs as Markdown.
func WritePolicyTable(w io.Writer, rows []PolicyRow) {
	fmt.Fprintln(w, "| policy | dispatch: requests | dispatch: write units | next revision of the subject | revision that contradicts a performed intent |")
	fmt.Fprintln(w, "|---|---|---:|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %d (%s) | %d | %d req, %d WU | %d req (%s), %d WU |\n", r.Policy,
			r.Calls.Total, r.Calls.Detail, r.Dispatch.Units(),
			r.RevisionCalls.Total, r.Revision.Units(),
			r.ContradictingCalls.Total, r.ContradictingCalls.Detail, r.Contradicting.Units())
	}
}
