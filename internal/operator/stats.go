package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/effectively-once/webhooks/internal/ledger"
)

func jsonCompact(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// Count is a count that may have stopped at its cap.
type Count struct {
	N      int  `json:"count"`
	Capped bool `json:"capped"` // at least N: the read stopped at the cap
}

func (c Count) String() string {
	if c.Capped {
		return fmt.Sprintf("%d+ (capped)", c.N)
	}
	return strconv.Itoa(c.N)
}

// Oldest names the open event that has waited longest.
type Oldest struct {
	Source     string    `json:"source"`
	EventID    string    `json:"event_id"`
	Status     string    `json:"status"`
	Since      time.Time `json:"since"`
	AgeSeconds int64     `json:"age_seconds"`
}

// DLQDepth is one dead-letter queue's depth.
type DLQDepth struct {
	Queue    string `json:"queue"` // "events" or "effects"
	URL      string `json:"url,omitempty"`
	Visible  int    `json:"visible"`
	InFlight int    `json:"in_flight"`
	Depth    int    `json:"depth"`
	Error    string `json:"error,omitempty"`
}

// Stats is the operator's dashboard (open work, the oldest unfinished
// event, attention items, intents, dead letters), as far as the ledger and
// the queues can tell it.
type Stats struct {
	At time.Time `json:"at"`
	// Unfinished: events accepted but not finished (RECEIVED, PROCESSING,
	// RETRY_WAIT). Attention: DEAD and QUARANTINED, waiting for an operator.
	Unfinished map[string]Count `json:"unfinished"`
	Attention  map[string]Count `json:"attention"`
	Oldest     *Oldest          `json:"oldest_open"`
	Intents    map[string]Count `json:"intents"`
	DLQ        []DLQDepth       `json:"dlq"`
	Cap        int              `json:"cap"`
	// Warehouse is the warehouse sink's drift, when webhookctl is told of
	// the sink (WAREHOUSE_BUCKET, --warehouse-bucket, --local).
	Warehouse *WarehouseStats `json:"warehouse,omitempty"`
}

var workStatuses = []ledger.Status{ledger.StatusReceived, ledger.StatusProcessing, ledger.StatusRetryWait}

// Stats counts open events and intents by status from the due index (each
// count capped at maxPerStatus, said when hit), finds the event that has
// waited longest, and reads the depth of each dead-letter queue.
func (a *App) Stats(ctx context.Context, maxPerStatus int) error {
	if maxPerStatus <= 0 {
		maxPerStatus = 1000
	}
	now := a.now()
	s := Stats{At: now, Unfinished: map[string]Count{}, Attention: map[string]Count{}, Intents: map[string]Count{}, Cap: maxPerStatus}
	for _, st := range ledger.OpenEventStatuses {
		items, err := a.Ledger.ListOpen(ctx, "event", maxPerStatus+1, st)
		if err != nil {
			return err
		}
		c := Count{N: min(len(items), maxPerStatus), Capped: len(items) > maxPerStatus}
		if st == ledger.StatusDead || st == ledger.StatusQuarantined {
			s.Attention[string(st)] = c
		} else {
			s.Unfinished[string(st)] = c
		}
		// ListOpen returns the oldest first; an item due in the future (a
		// retry not yet due, a live lease) is not waiting yet.
		if len(items) > 0 && !items[0].Since.After(now) && (s.Oldest == nil || items[0].Since.Before(s.Oldest.Since)) {
			it := items[0]
			s.Oldest = &Oldest{Source: it.Source, EventID: it.EventID, Status: it.Status, Since: it.Since, AgeSeconds: int64(now.Sub(it.Since) / time.Second)}
		}
	}
	for _, st := range ledger.OpenIntentStatuses {
		items, err := a.Ledger.ListOpen(ctx, "intent", maxPerStatus+1, st)
		if err != nil {
			return err
		}
		s.Intents[string(st)] = Count{N: min(len(items), maxPerStatus), Capped: len(items) > maxPerStatus}
	}
	failed := false
	for _, q := range []string{qEventsDLQ, qEffectsDLQ} {
		d := a.dlqDepth(ctx, q)
		failed = failed || d.Error != ""
		s.DLQ = append(s.DLQ, d)
	}
	warehouseFailed := false
	if a.Warehouse != nil {
		s.Warehouse = a.warehouseStats(ctx, now)
		warehouseFailed = s.Warehouse.Error != ""
	}
	if a.JSON {
		if err := a.printJSON(s); err != nil {
			return err
		}
	} else {
		a.printStats(s)
	}
	if failed {
		return fmt.Errorf("%w: a dead-letter queue could not be read", ErrIncomplete)
	}
	if warehouseFailed {
		return fmt.Errorf("%w: the warehouse could not be read", ErrIncomplete)
	}
	return nil
}

func (a *App) printStats(s Stats) {
	w := a.Out
	fmt.Fprintf(w, "at %s (counts from the due index, each capped at %d)\n", stamp(s.At), s.Cap)
	fmt.Fprintln(w, "events accepted but not finished")
	for _, st := range workStatuses {
		fmt.Fprintf(w, "  %-13s %s\n", st, s.Unfinished[string(st)])
	}
	fmt.Fprintln(w, "events waiting for an operator")
	for _, st := range []ledger.Status{ledger.StatusDead, ledger.StatusQuarantined} {
		fmt.Fprintf(w, "  %-13s %s\n", st, s.Attention[string(st)])
	}
	if o := s.Oldest; o != nil {
		fmt.Fprintf(w, "oldest open event  %s: %s/%s %s since %s\n", age(time.Duration(o.AgeSeconds)*time.Second), safe(o.Source), safe(o.EventID), safe(o.Status), stamp(o.Since))
	} else {
		fmt.Fprintln(w, "oldest open event  none")
	}
	fmt.Fprintln(w, "outbox intents")
	for _, st := range ledger.OpenIntentStatuses {
		if st == ledger.Status(ledger.IntentStatusContradicted) {
			continue
		}
		fmt.Fprintf(w, "  %-13s %s\n", st, s.Intents[string(st)])
	}
	fmt.Fprintln(w, "effects performed, then contradicted by a newer revision (the recovery owner's)")
	fmt.Fprintf(w, "  %-13s %s\n", ledger.IntentStatusContradicted, s.Intents[string(ledger.IntentStatusContradicted)])
	fmt.Fprintln(w, "dead-letter queues (visible + in flight)")
	for _, d := range s.DLQ {
		if d.Error != "" {
			fmt.Fprintf(w, "  %-13s unavailable: %s\n", d.Queue, safe(d.Error))
			continue
		}
		fmt.Fprintf(w, "  %-13s %d\n", d.Queue, d.Depth)
	}
	if s.Warehouse != nil {
		a.printWarehouseStats(s.Warehouse)
	}
}

// dlqDepth reads a DLQ's approximate counts; an error is reported in the
// result so the other queue is still shown.
func (a *App) dlqDepth(ctx context.Context, which string) DLQDepth {
	d := DLQDepth{Queue: dlqLabel(which)}
	url, err := a.queueURL(ctx, which)
	if err != nil {
		d.Error = err.Error()
		return d
	}
	d.URL = url
	out, err := a.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []sqstypes.QueueAttributeName{
		sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
	}})
	if err != nil {
		d.Error = fmt.Sprintf("get attributes of %s: %v", url, err)
		return d
	}
	d.Visible, _ = strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
	d.InFlight, _ = strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	d.Depth = d.Visible + d.InFlight
	return d
}

func dlqLabel(which string) string {
	if which == qEffectsDLQ {
		return "effects"
	}
	return "events"
}

// DLQStatus is one DLQ's depth and the age of the oldest message sampled.
type DLQStatus struct {
	DLQDepth
	Sampled int `json:"sampled"`
	// OldestSampledSeconds is the age of the oldest of the sampled
	// messages (SentTimestamp), not necessarily of the queue's oldest.
	OldestSampledSeconds *int64 `json:"oldest_sampled_age_seconds"`
}

// peekMax is SQS's most messages per receive.
const peekMax = 10

// DLQStatus prints each dead-letter queue's depth (ApproximateNumberOfMessages
// + NotVisible) and the age of the oldest of up to 10 sampled messages. SQS
// attributes do not give the age, so it peeks: one ReceiveMessage asking for
// SentTimestamp with a 1-second visibility (the SDK omits a zero
// VisibilityTimeout, which would hide the messages for the queue's default),
// then ChangeMessageVisibility 0 on each, so they are visible again at once.
// It never deletes. A peek counts as a receive of those messages.
func (a *App) DLQStatus(ctx context.Context) error {
	var all []DLQStatus
	failed := false
	for _, q := range []string{qEventsDLQ, qEffectsDLQ} {
		st := DLQStatus{DLQDepth: a.dlqDepth(ctx, q)}
		if st.Error == "" {
			if err := a.peek(ctx, &st); err != nil {
				st.Error = err.Error()
			}
		}
		failed = failed || st.Error != ""
		all = append(all, st)
	}
	if a.JSON {
		if err := a.printJSON(map[string]any{"at": a.now(), "dlq": all}); err != nil {
			return err
		}
	} else {
		rows := make([][]string, 0, len(all))
		for _, s := range all {
			if s.Error != "" {
				rows = append(rows, []string{s.Queue, orDash(s.URL), "-", "-", "-", "-", "unavailable: " + s.Error})
				continue
			}
			oldest := "-"
			if s.OldestSampledSeconds != nil {
				oldest = age(time.Duration(*s.OldestSampledSeconds) * time.Second)
			}
			rows = append(rows, []string{s.Queue, s.URL, strconv.Itoa(s.Visible), strconv.Itoa(s.InFlight), strconv.Itoa(s.Depth), oldest, fmt.Sprintf("%d sampled", s.Sampled)})
		}
		if err := table(a.Out, []string{"DLQ", "URL", "VISIBLE", "IN_FLIGHT", "DEPTH", "OLDEST", "SAMPLE"}, rows); err != nil {
			return err
		}
		fmt.Fprintln(a.Out, "OLDEST is the age of the oldest of the sampled messages (up to 10 per queue), not necessarily of the queue's oldest.")
	}
	if failed {
		return fmt.Errorf("%w: a dead-letter queue could not be read", ErrIncomplete)
	}
	return nil
}

func (a *App) peek(ctx context.Context, st *DLQStatus) error {
	if st.Visible == 0 {
		return nil
	}
	out, err := a.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(st.URL), MaxNumberOfMessages: peekMax, VisibilityTimeout: 1,
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameSentTimestamp},
	})
	if err != nil {
		return fmt.Errorf("peek at %s: %w", st.URL, err)
	}
	now := a.now()
	for _, m := range out.Messages {
		// Visible again right away; a message already visible (SQS may
		// answer MessageNotInflight) is fine.
		_, _ = a.SQS.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(st.URL), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
		st.Sampled++
		ms, err := strconv.ParseInt(m.Attributes[string(sqstypes.MessageSystemAttributeNameSentTimestamp)], 10, 64)
		if err != nil {
			continue
		}
		ageS := int64(now.Sub(time.UnixMilli(ms)) / time.Second)
		if st.OldestSampledSeconds == nil || ageS > *st.OldestSampledSeconds {
			st.OldestSampledSeconds = &ageS
		}
	}
	return nil
}
