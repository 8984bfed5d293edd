package operator

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
)

type holdJSON struct {
	Source  string `json:"source"`
	EventID string `json:"event_id"`
	From    string `json:"from"`
	Status  string `json:"status"`
	Actor   string `json:"actor"`
	Reason  string `json:"reason"`
}

// Quarantine puts an event on an operator hold (ledger.Hold): RECEIVED,
// RETRY_WAIT, DEAD, or PROCESSING with an expired lease becomes QUARANTINED,
// audited as "hold" with the operator and reason.
func (a *App) Quarantine(ctx context.Context, source, eventID, reason string) error {
	if reason == "" {
		return fmt.Errorf("%w: --reason is required: it goes into the audit trail", ErrUsage)
	}
	if _, err := a.actor(ctx); err != nil {
		return err
	}
	ev, err := a.Ledger.Hold(ctx, source, eventID, a.Actor, reason)
	if err != nil {
		return err
	}
	from := lastFrom(ev.Audit)
	if a.JSON {
		return a.printJSON(holdJSON{Source: source, EventID: eventID, From: from, Status: string(ev.Status), Actor: a.Actor, Reason: reason})
	}
	fmt.Fprintf(a.Out, "held %s/%s: %s -> %s (audit: hold by %s: %s)\nrelease it with: webhookctl release %s %s --reason ...\n",
		safe(source), safe(eventID), from, ev.Status, a.Actor, safe(reason), safe(source), safe(eventID))
	return nil
}

// Release takes a QUARANTINED event back to RECEIVED (ledger.Release,
// conditional on QUARANTINED, audited as "release" with the operator and
// reason) and enqueues it. A DEAD event is refused: that is what replay is
// for.
func (a *App) Release(ctx context.Context, source, eventID, reason string) error {
	if reason == "" {
		return fmt.Errorf("%w: --reason is required: it goes into the audit trail", ErrUsage)
	}
	if _, err := a.actor(ctx); err != nil {
		return err
	}
	ev, err := a.Ledger.Get(ctx, source, eventID)
	if err != nil {
		return err
	}
	if ev.Status != ledger.StatusQuarantined {
		hint := ""
		if ev.Status == ledger.StatusDead {
			hint = " (a DEAD event is replayed: webhookctl replay)"
		}
		return fmt.Errorf("refused: %s/%s is %s; only a QUARANTINED event can be released%s", source, eventID, ev.Status, hint)
	}
	return a.replayOne(ctx, "released", source, eventID, reason, a.Ledger.Release)
}

type intentRow struct {
	OperationID string    `json:"operation_id"`
	Kind        string    `json:"kind"`
	Status      string    `json:"status"`
	Since       time.Time `json:"since"`
	AgeSeconds  int64     `json:"age_seconds"`
	Attempts    int       `json:"attempts"`
	ErrorCode   string    `json:"error_code,omitempty"`
}

type intentList struct {
	Intents []intentRow `json:"intents"`
	Count   int         `json:"count"`
	More    bool        `json:"more"`
}

// IntentsList lists open outbox intents from the due index, oldest first.
func (a *App) IntentsList(ctx context.Context, statuses []ledger.Status, limit int) error {
	if limit <= 0 {
		limit = 50
	}
	for _, st := range statuses {
		if !validIntentStatus(st) {
			return fmt.Errorf("%w: unknown or finished intent status %q (want one of %s)", ErrUsage, st, statusList(ledger.OpenIntentStatuses))
		}
	}
	items, err := a.Ledger.ListOpen(ctx, "intent", limit+1, statuses...)
	if err != nil {
		return err
	}
	now := a.now()
	list := intentList{Intents: []intentRow{}}
	for _, it := range items {
		list.Intents = append(list.Intents, intentRow{OperationID: it.OperationID, Kind: it.IntentKind, Status: it.Status, Since: it.Since,
			AgeSeconds: int64(now.Sub(it.Since) / time.Second), Attempts: it.Attempts, ErrorCode: it.ErrorCode})
	}
	if len(list.Intents) > limit {
		list.Intents, list.More = list.Intents[:limit], true
	}
	list.Count = len(list.Intents)
	if a.JSON {
		return a.printJSON(list)
	}
	rows := make([][]string, 0, len(list.Intents))
	for _, r := range list.Intents {
		rows = append(rows, []string{r.OperationID, r.Kind, r.Status, stamp(r.Since), age(time.Duration(r.AgeSeconds) * time.Second), strconv.Itoa(r.Attempts), orDash(r.ErrorCode)})
	}
	if err := table(a.Out, []string{"OPERATION_ID", "KIND", "STATUS", "SINCE", "AGE", "ATTEMPTS", "ERROR"}, rows); err != nil {
		return err
	}
	more := ""
	if list.More {
		more = " (more match: raise --limit)"
	}
	fmt.Fprintf(a.Out, "%d open intents%s\n", list.Count, more)
	return nil
}

func validIntentStatus(st ledger.Status) bool {
	for _, s := range ledger.OpenIntentStatuses {
		if s == st {
			return true
		}
	}
	return false
}

type intentDetail struct {
	OperationID string `json:"operation_id"`
	Kind        string `json:"kind"`
	Subject     string `json:"subject"`
	Causation   string `json:"causation"`
	// Whose fact it acts on: the scope that owns it ("" for none) and the
	// source that delivered it. An effect performs only the scopes it
	// allows; a refusal is QUARANTINED with code scope_not_allowed.
	Scope  string `json:"scope,omitempty"`
	Source string `json:"source,omitempty"`
	// The truth it came from and its dispatch policy.
	Truth  string `json:"truth,omitempty"` // projection/subject@version
	Policy string `json:"policy,omitempty"`
	// A newer revision that removed its reason, and the compensation it
	// created, if any.
	ContradictedBy int64          `json:"contradicted_by,omitempty"`
	CompensatedBy  string         `json:"compensated_by,omitempty"`
	Status         string         `json:"status"`
	Attempts       int            `json:"attempts"`
	CreatedAt      time.Time      `json:"created_at"`
	FirstAttemptAt *time.Time     `json:"first_attempt_at,omitempty"`
	LeaseOwner     string         `json:"lease_owner,omitempty"`
	LeaseExpires   *time.Time     `json:"lease_expires_at,omitempty"`
	NextAttemptAt  *time.Time     `json:"next_attempt_at,omitempty"`
	NextCheckAt    *time.Time     `json:"next_check_at,omitempty"`
	ErrorCode      string         `json:"error_code,omitempty"`
	Detail         string         `json:"detail,omitempty"`
	FinishedAt     *time.Time     `json:"finished_at,omitempty"`
	ExpiresAt      *time.Time     `json:"expires_at,omitempty"`
	PayloadKeys    []string       `json:"payload_keys"`
	Payload        map[string]any `json:"payload,omitempty"`
	Audit          []auditJSON    `json:"audit"`
}

// IntentsShow prints one intent with its dispatch bookkeeping and audit
// trail; the payload's values only when withPayload.
func (a *App) IntentsShow(ctx context.Context, op string, withPayload bool) error {
	in, err := a.Ledger.GetIntentState(ctx, op)
	if err != nil {
		return err
	}
	d := intentDetail{
		OperationID: in.OperationID, Kind: in.Kind, Subject: in.Subject, Causation: in.Causation, Scope: in.Scope, Source: in.Source,
		Status: string(in.Status), Attempts: in.Attempts,
		CreatedAt: in.CreatedAt.UTC(), FirstAttemptAt: optTime(in.FirstAttemptAt), ErrorCode: in.ErrorCode, Detail: in.Detail,
		FinishedAt: optTime(in.FinishedAt), ExpiresAt: optTime(in.ExpiresAt), PayloadKeys: []string{}, Audit: auditOf(in.Audit),
		ContradictedBy: in.ContradictedBy, CompensatedBy: in.CompensatedBy,
	}
	if in.Projection != "" {
		d.Truth = fmt.Sprintf("%s/%s@%d", in.Projection, in.ProjectionSubject, in.Version)
		d.Policy = string(in.Policy)
		if d.Policy == "" {
			d.Policy = string(ledger.PolicyOnce)
		}
	}
	// Lease and due times only in the status they belong to (see the
	// package doc).
	switch in.Status {
	case ledger.IntentStatusDispatching:
		d.LeaseOwner, d.LeaseExpires = in.LeaseOwner, optTime(in.LeaseExpires)
	case ledger.IntentStatusRetryWait:
		d.NextAttemptAt = optTime(in.NextAttemptAt)
	case ledger.IntentStatusUncertain:
		d.NextCheckAt = optTime(in.NextCheckAt)
	case ledger.IntentStatusContradicted:
		d.ExpiresAt = nil // an attention item does not expire
	}
	for k := range in.Payload {
		d.PayloadKeys = append(d.PayloadKeys, k)
	}
	sort.Strings(d.PayloadKeys)
	if withPayload {
		d.Payload = in.Payload
	}
	if a.JSON {
		return a.printJSON(d)
	}
	lines := [][]string{
		{"intent", d.OperationID},
		{"kind", d.Kind},
		{"subject", d.Subject},
		{"caused by", d.Causation},
		{"scope", orDash(d.Scope)},
		{"from", orDash(d.Truth)},
		{"policy", orDash(d.Policy)},
		{"status", d.Status},
	}
	if d.ContradictedBy != 0 {
		lines = append(lines, []string{"contradicted", fmt.Sprintf("by version %d", d.ContradictedBy)})
	}
	if d.CompensatedBy != "" {
		lines = append(lines, []string{"compensated", "by " + d.CompensatedBy})
	}
	lines = append(lines, [][]string{
		{"attempts", strconv.Itoa(d.Attempts)},
		{"created", stamp(in.CreatedAt)},
		{"first attempt", stamp(in.FirstAttemptAt)},
	}...)
	if d.LeaseOwner != "" {
		lines = append(lines, []string{"lease", d.LeaseOwner + " until " + stamp(in.LeaseExpires)})
	}
	if d.NextAttemptAt != nil {
		lines = append(lines, []string{"next attempt", stamp(in.NextAttemptAt)})
	}
	if d.NextCheckAt != nil {
		lines = append(lines, []string{"next check", stamp(in.NextCheckAt)})
	}
	if d.ErrorCode != "" || d.Detail != "" {
		lines = append(lines, []string{"last outcome", d.ErrorCode + ": " + d.Detail})
	}
	if d.FinishedAt != nil {
		lines = append(lines, []string{"finished", stamp(in.FinishedAt)})
		if d.ExpiresAt != nil {
			lines = append(lines, []string{"expires", stamp(*d.ExpiresAt)})
		}
	}
	payload := "keys " + strings.Join(d.PayloadKeys, ", ") + " (values not shown: --payload)"
	if withPayload {
		b, _ := jsonCompact(in.Payload)
		payload = b
	}
	lines = append(lines, []string{"payload", payload})
	printLines(a.Out, lines)
	fmt.Fprintln(a.Out, "audit:")
	return table(a.Out, auditHeader, auditRows(in.Audit))
}

type resolveJSON struct {
	OperationID string    `json:"operation_id"`
	From        string    `json:"from"`
	Status      string    `json:"status"`
	Actor       string    `json:"actor"`
	Reason      string    `json:"reason"`
	ExpiresAt   time.Time `json:"expires_at"`
}

// IntentsResolve records the outcome an operator verified with the
// downstream ("succeeded" or "failed") for an UNCERTAIN, RETRY_WAIT,
// QUARANTINED or expired DISPATCHING intent (ledger.ResolveIntent).
func (a *App) IntentsResolve(ctx context.Context, op, outcome, reason string) error {
	var to ledger.IntentStatus
	switch strings.ToLower(outcome) {
	case "succeeded":
		to = ledger.IntentStatusSucceeded
	case "failed":
		to = ledger.IntentStatusFailed
	default:
		return fmt.Errorf("%w: --outcome must be succeeded or failed, got %q", ErrUsage, outcome)
	}
	if reason == "" {
		return fmt.Errorf("%w: --reason is required: say what you verified downstream; it goes into the audit trail", ErrUsage)
	}
	if _, err := a.actor(ctx); err != nil {
		return err
	}
	in, err := a.Ledger.ResolveIntent(ctx, op, to, a.Actor, reason)
	if err != nil {
		return err
	}
	from := lastFrom(in.Audit)
	if a.JSON {
		return a.printJSON(resolveJSON{OperationID: op, From: from, Status: string(in.Status), Actor: a.Actor, Reason: reason, ExpiresAt: in.ExpiresAt})
	}
	fmt.Fprintf(a.Out, "resolved intent %s: %s -> %s (audit: resolve by %s: %s); it expires %s\n", safe(op), from, in.Status, a.Actor, safe(reason), stamp(in.ExpiresAt))
	return nil
}

// lastFrom is the from-state of the newest audit entry: the state an
// operator action found.
func lastFrom(trail []ledger.AuditEntry) string {
	if n := len(trail); n > 0 {
		return string(trail[n-1].From)
	}
	return ""
}
