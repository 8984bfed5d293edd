package operator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// indexReadCap is how many index items a filtered list reads at most: the
// source, type and age filters run on what the index returned.
const indexReadCap = 1000

// EventQuery selects events for EventsList.
type EventQuery struct {
	Statuses  []ledger.Status // default: every open status
	Source    string
	EventType string
	OlderThan time.Duration // by the SINCE column (see EventsList)
	Limit     int           // default 50
	// Scan reads the table instead of the due index: needed for PROCESSED
	// events, and costly (every item read is billed).
	Scan bool
}

type eventRow struct {
	Source     string    `json:"source"`
	EventID    string    `json:"event_id"`
	Type       string    `json:"type"`
	Status     string    `json:"status"`
	Since      time.Time `json:"since"`
	AgeSeconds int64     `json:"age_seconds"`
	Attempts   int       `json:"attempts"`
	ErrorCode  string    `json:"error_code,omitempty"`
}

type eventList struct {
	Via    string     `json:"via"` // "due_index" or "scan"
	Events []eventRow `json:"events"`
	Count  int        `json:"count"`
	// More: the list stopped at --limit, or the read stopped at its cap,
	// before every match was seen.
	More bool   `json:"more"`
	Note string `json:"note,omitempty"`
}

// EventsList lists events. Open statuses come from the due index, oldest
// first; SINCE is the item's due-index time (ledger.OpenItem.Since):
// acceptance (or replay) for RECEIVED, when the retry is due for RETRY_WAIT,
// when it started waiting for DEAD and QUARANTINED, and for PROCESSING
// whatever due time the ledger keeps for a leased item. With Scan the table
// is scanned (bounded by Limit) and SINCE is the reception time.
func (a *App) EventsList(ctx context.Context, q EventQuery) error {
	if q.Limit <= 0 {
		q.Limit = 50
	}
	for _, st := range q.Statuses {
		if !validEventStatus(st) {
			return fmt.Errorf("%w: unknown status %q (want one of %s)", ErrUsage, st, statusList(append(ledger.OpenEventStatuses, ledger.StatusProcessed)))
		}
		if st == ledger.StatusProcessed && !q.Scan {
			return fmt.Errorf("%w: PROCESSED events are not on the due index; add --scan to scan the table (costly: every item read is billed)", ErrUsage)
		}
	}
	now := a.now()
	var list eventList
	if q.Scan {
		if a.Scanner == nil {
			return fmt.Errorf("%w: no scanning client", ErrConfig)
		}
		f := ledger.EventFilter{Statuses: q.Statuses, Source: q.Source, EventType: q.EventType, Limit: q.Limit}
		if q.OlderThan > 0 {
			f.ReceivedBefore = now.Add(-q.OlderThan)
		}
		res, err := a.Ledger.ScanEvents(ctx, a.Scanner, f)
		if err != nil {
			return err
		}
		list = eventList{Via: "scan", More: res.More}
		for _, ev := range res.Events {
			list.Events = append(list.Events, eventRow{Source: ev.Source, EventID: ev.EventID, Type: ev.EventType, Status: string(ev.Status),
				Since: ev.ReceivedAt, AgeSeconds: int64(now.Sub(ev.ReceivedAt) / time.Second), Attempts: ev.Attempts, ErrorCode: ev.ErrorCode})
		}
		list.Note = fmt.Sprintf("table scan: %d requests", res.Requests)
		if res.Read > 0 {
			list.Note += fmt.Sprintf(", %d items read (billed)", res.Read)
		}
		if res.More {
			list.Note += "; stopped at --limit or the read budget, more may match"
		}
	} else {
		filtered := q.Source != "" || q.EventType != "" || q.OlderThan > 0
		fetch := q.Limit + 1
		if filtered {
			fetch = max(fetch, indexReadCap)
		}
		items, err := a.Ledger.ListOpen(ctx, "event", fetch, q.Statuses...)
		if err != nil {
			return err
		}
		list = eventList{Via: "due_index"}
		for _, it := range items {
			if (q.Source != "" && it.Source != q.Source) || (q.EventType != "" && it.EventType != q.EventType) ||
				(q.OlderThan > 0 && now.Sub(it.Since) < q.OlderThan) {
				continue
			}
			list.Events = append(list.Events, eventRow{Source: it.Source, EventID: it.EventID, Type: it.EventType, Status: it.Status,
				Since: it.Since, AgeSeconds: int64(now.Sub(it.Since) / time.Second), Attempts: it.Attempts, ErrorCode: it.ErrorCode})
		}
		if len(list.Events) > q.Limit {
			list.Events, list.More = list.Events[:q.Limit], true
		}
		if filtered && len(items) == fetch {
			list.More = true
			list.Note = fmt.Sprintf("the index read stopped at %d items before the source/type/age filters; more may match", fetch)
		}
	}
	list.Count = len(list.Events)
	if list.Events == nil {
		list.Events = []eventRow{}
	}
	if a.JSON {
		return a.printJSON(list)
	}
	rows := make([][]string, 0, len(list.Events))
	for _, r := range list.Events {
		rows = append(rows, []string{r.Source, r.EventID, r.Type, r.Status, stamp(r.Since), age(time.Duration(r.AgeSeconds) * time.Second), strconv.Itoa(r.Attempts), orDash(r.ErrorCode)})
	}
	if err := table(a.Out, []string{"SOURCE", "EVENT_ID", "TYPE", "STATUS", "SINCE", "AGE", "ATTEMPTS", "ERROR"}, rows); err != nil {
		return err
	}
	via := "from the due index"
	if list.Via == "scan" {
		via = "from a table scan"
	}
	more := ""
	if list.More {
		more = " (more match: raise --limit or narrow the filter)"
	}
	fmt.Fprintf(a.Out, "%d events %s%s\n", list.Count, via, more)
	if list.Note != "" {
		fmt.Fprintln(a.Out, list.Note)
	}
	return nil
}

func validEventStatus(st ledger.Status) bool {
	switch st {
	case ledger.StatusReceived, ledger.StatusProcessing, ledger.StatusRetryWait, ledger.StatusDead, ledger.StatusQuarantined, ledger.StatusProcessed:
		return true
	}
	return false
}

func statusList(sts []ledger.Status) string {
	s := make([]string, len(sts))
	for i, st := range sts {
		s[i] = string(st)
	}
	return strings.Join(s, ", ")
}

// maxKeys bounds the payload's top-level keys shown.
const maxKeys = 50

// PayloadSummary describes a payload without showing it.
type PayloadSummary struct {
	Size int `json:"size"`
	// SHA256 is the full hash of the raw bytes when they could be read;
	// otherwise StoredHash is the ledger's (the first 128 bits).
	SHA256     string   `json:"sha256,omitempty"`
	StoredHash string   `json:"stored_hash"`
	Kind       string   `json:"kind"` // "JSON object", "JSON array", "JSON value", "not JSON"
	Keys       []string `json:"keys,omitempty"`
	MoreKeys   int      `json:"more_keys,omitempty"`
	Chunks     int      `json:"chunks"` // 0: stored in the event item
	Error      string   `json:"error,omitempty"`
}

func summarize(ev ledger.Event, raw []byte, err error) PayloadSummary {
	s := PayloadSummary{Size: ev.PayloadSize, StoredHash: ev.PayloadHash, Chunks: ev.PayloadChunks}
	if err != nil {
		s.Error = err.Error()
		s.Kind = "unavailable"
		return s
	}
	sum := sha256.Sum256(raw)
	s.SHA256 = hex.EncodeToString(sum[:])
	var obj map[string]json.RawMessage
	switch {
	case json.Unmarshal(raw, &obj) == nil && obj != nil:
		s.Kind = "JSON object"
		for k := range obj {
			s.Keys = append(s.Keys, k)
		}
		sort.Strings(s.Keys)
		if len(s.Keys) > maxKeys {
			s.MoreKeys = len(s.Keys) - maxKeys
			s.Keys = s.Keys[:maxKeys]
		}
	case json.Valid(raw) && strings.HasPrefix(strings.TrimSpace(string(raw)), "["):
		s.Kind = "JSON array"
	case json.Valid(raw):
		s.Kind = "JSON value"
	default:
		s.Kind = "not JSON"
	}
	return s
}

type eventDetail struct {
	Source        string            `json:"source"`
	EventID       string            `json:"event_id"`
	Type          string            `json:"type"`
	Subject       string            `json:"subject,omitempty"`
	VersionHint   string            `json:"version_hint,omitempty"`
	Attributes    map[string]string `json:"attributes,omitempty"`
	Status        string            `json:"status"`
	Attempts      int               `json:"attempts"`
	TotalAttempts int               `json:"total_attempts"`
	ErrorCode     string            `json:"error_code,omitempty"`
	ErrorMessage  string            `json:"error_message,omitempty"`
	LeaseOwner    string            `json:"lease_owner,omitempty"`
	LeaseExpires  *time.Time        `json:"lease_expires_at,omitempty"`
	NextAttemptAt *time.Time        `json:"next_attempt_at,omitempty"`
	ReceivedAt    time.Time         `json:"received_at"`
	ProcessedAt   *time.Time        `json:"processed_at,omitempty"`
	ExpiresAt     *time.Time        `json:"expires_at,omitempty"`
	Deliveries    int               `json:"delivery_count"`
	// Conflicts: deliveries of this id with other bytes (not duplicates),
	// and the last one as "<epoch ms>|<payload hash>|<delivery id>".
	Conflicts     int        `json:"conflict_count,omitempty"`
	LastConflict  string     `json:"last_conflict,omitempty"`
	FirstDelivery string     `json:"first_delivery_id,omitempty"`
	LastDelivery  string     `json:"last_delivery_id,omitempty"`
	LastDelivAt   *time.Time `json:"last_delivery_at,omitempty"`
	// Recent is the ledger's bounded sample of deliveries, newest first.
	Recent  []ledger.DeliveryRecord `json:"recent_deliveries,omitempty"`
	Result  *ledger.Result          `json:"result,omitempty"`
	Payload PayloadSummary          `json:"payload"`
	Body    *string                 `json:"body,omitempty"`
	Audit   []auditJSON             `json:"audit"`
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// EventsShow prints one event: its identities, status, attempts, result, a
// payload summary (the body itself only when withBody) and its audit trail.
func (a *App) EventsShow(ctx context.Context, source, eventID string, withBody bool) error {
	ev, err := a.Ledger.Get(ctx, source, eventID)
	if err != nil {
		return err
	}
	raw, perr := a.Ledger.Payload(ctx, ev)
	d := eventDetail{
		Source: ev.Source, EventID: ev.EventID, Type: ev.EventType, Subject: ev.Subject, VersionHint: ev.VersionHint, Attributes: ev.Attributes,
		Status: string(ev.Status), Attempts: ev.Attempts, TotalAttempts: ev.TotalAttempts, ErrorCode: ev.ErrorCode, ErrorMessage: ev.ErrorMessage,
		ReceivedAt: ev.ReceivedAt.UTC(), ProcessedAt: optTime(ev.ProcessedAt), ExpiresAt: optTime(ev.ExpiresAt),
		Deliveries: ev.DeliveryCount, FirstDelivery: ev.FirstDeliveryID, LastDelivery: ev.LastDeliveryID, LastDelivAt: optTime(ev.LastDeliveryAt),
		Conflicts: ev.Conflicts, LastConflict: ev.LastConflict,
		Recent: ev.RecentDeliveries, Result: ev.Result, Payload: summarize(ev, raw, perr), Audit: auditOf(ev.Audit),
	}
	if ev.Status == ledger.StatusProcessing {
		d.LeaseOwner, d.LeaseExpires = ev.LeaseOwner, optTime(ev.LeaseExpires)
	}
	if ev.Status == ledger.StatusRetryWait {
		d.NextAttemptAt = optTime(ev.NextAttemptAt)
	}
	if withBody && perr == nil {
		body := string(raw)
		d.Body = &body
	}
	if a.JSON {
		return a.printJSON(d)
	}
	lines := [][]string{
		{"event", d.Source + "/" + d.EventID},
		{"type", d.Type},
		{"subject", orDash(d.Subject)},
		{"version hint", orDash(d.VersionHint)},
		{"status", d.Status},
		{"attempts", fmt.Sprintf("%d this round, %d in all", d.Attempts, d.TotalAttempts)},
	}
	if d.ErrorCode != "" || d.ErrorMessage != "" {
		lines = append(lines, []string{"error", d.ErrorCode + ": " + d.ErrorMessage})
	}
	// Lease and next attempt only in the status they belong to (see the
	// package doc).
	if ev.Status == ledger.StatusProcessing {
		lines = append(lines, []string{"lease", d.LeaseOwner + " until " + stamp(ev.LeaseExpires)})
	}
	if ev.Status == ledger.StatusRetryWait {
		lines = append(lines, []string{"next attempt", stamp(ev.NextAttemptAt)})
	}
	lines = append(lines,
		[]string{"received", stamp(ev.ReceivedAt)},
		[]string{"processed", stamp(ev.ProcessedAt)},
		[]string{"expires", stamp(ev.ExpiresAt)},
		[]string{"deliveries", fmt.Sprintf("%d (first %s, last %s at %s)", d.Deliveries, orDash(d.FirstDelivery), orDash(d.LastDelivery), stamp(ev.LastDeliveryAt))},
	)
	if d.Conflicts > 0 {
		lines = append(lines, []string{"conflicts", fmt.Sprintf("%d deliveries of this id with other bytes, not duplicates (last: %s)", d.Conflicts, d.LastConflict)})
	}
	if len(d.Recent) > 0 {
		recent := make([]string, len(d.Recent))
		for i, r := range d.Recent {
			recent[i] = r.At.UTC().Format("2006-01-02T15:04:05.000Z07:00") + " " + orDash(r.ID) // to the millisecond: retries come close together
		}
		lines = append(lines, []string{"recent", strings.Join(recent, ", ")})
	}
	if len(d.Attributes) > 0 {
		keys := make([]string, 0, len(d.Attributes))
		for k := range d.Attributes {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		kv := make([]string, len(keys))
		for i, k := range keys {
			kv[i] = k + "=" + d.Attributes[k]
		}
		lines = append(lines, []string{"attributes", strings.Join(kv, " ")})
	}
	if r := d.Result; r != nil {
		res := string(r.Outcome)
		if r.Projection != "" {
			res += fmt.Sprintf(" %s/%s version %d, %d intents", r.Projection, r.Subject, r.Version, r.Intents)
		}
		lines = append(lines, []string{"result", res})
		// One line per intent, so its id can be picked out
		// (awk '$1 == "operation" {print $2}').
		for _, op := range r.Operations {
			lines = append(lines, []string{"operation", op.ID + " " + op.Kind})
		}
		// A once intent this event carried again, not written: the
		// declared deduplication, and who performs it instead.
		for _, d := range r.Deduplicated {
			payload := "another payload"
			if d.SamePayload {
				payload = "same payload"
			}
			lines = append(lines, []string{"deduplicated", fmt.Sprintf("%s %s held by %s at version %d (%s)", d.OperationID, d.Kind, d.HeldBy, d.HeldVersion, payload)})
		}
	}
	lines = append(lines, []string{"payload", payloadLine(d.Payload, withBody)})
	printLines(a.Out, lines)
	fmt.Fprintln(a.Out, "audit:")
	if err := table(a.Out, auditHeader, auditRows(ev.Audit)); err != nil {
		return err
	}
	if d.Body != nil {
		fmt.Fprintln(a.Out, "payload body:")
		fmt.Fprintln(a.Out, printableText(*d.Body)) // its own line breaks and tabs kept
	}
	return nil
}

func payloadLine(p PayloadSummary, withBody bool) string {
	if p.Error != "" {
		return fmt.Sprintf("%d bytes, stored hash %s; unavailable: %s", p.Size, p.StoredHash, p.Error)
	}
	s := fmt.Sprintf("%d bytes, sha256 %s, %s", p.Size, p.SHA256, p.Kind)
	if len(p.Keys) > 0 {
		s += " with keys " + strings.Join(p.Keys, ", ")
		if p.MoreKeys > 0 {
			s += fmt.Sprintf(" (+%d more)", p.MoreKeys)
		}
	}
	if !withBody {
		s += " (body not shown: --payload)"
	}
	return s
}
