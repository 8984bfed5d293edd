package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
)

// Errors. Run maps ErrUsage and ErrConfig to exit status 2, every other
// error to 1.
var (
	// ErrUsage: the command line is wrong (a missing argument, a bad flag value).
	ErrUsage = errors.New("usage")
	// ErrConfig: the table or a queue is not configured.
	ErrConfig = errors.New("configuration")
	// ErrIncomplete: a command did part of its work (a bulk replay that was
	// interrupted or could not enqueue some events, a stats source that
	// could not be read); its output says what is left.
	ErrIncomplete = errors.New("incomplete")
	// ErrUnverified: a command that writes could not verify who is calling
	// (STS GetCallerIdentity failed), so it wrote nothing.
	ErrUnverified = errors.New("unverified caller")
)

// Ledger is what the operator needs from the ledger.
type Ledger interface {
	Get(ctx context.Context, source, eventID string) (ledger.Event, error)
	Payload(ctx context.Context, ev ledger.Event) ([]byte, error)
	ListOpen(ctx context.Context, kind string, limit int, statuses ...ledger.Status) ([]ledger.OpenItem, error)
	ScanEvents(ctx context.Context, db ledger.Scanner, f ledger.EventFilter) (ledger.ScanResult, error)
	Replay(ctx context.Context, source, eventID, actor, reason string) (ledger.Event, error)
	Release(ctx context.Context, source, eventID, actor, reason string) (ledger.Event, error)
	Hold(ctx context.Context, source, eventID, actor, reason string) (ledger.Event, error)
	GetIntentState(ctx context.Context, op string) (ledger.IntentState, error)
	ResolveIntent(ctx context.Context, op string, to ledger.IntentStatus, actor, reason string) (ledger.IntentState, error)
	// The warehouse commands' (warehouse.go).
	GetProjection(ctx context.Context, name, subject string) (ledger.Projection, error)
	ListProjectionsChanged(ctx context.Context, since time.Time, limit, maxRead int) ([]ledger.Projection, bool, error)
	ScanProjections(ctx context.Context, db ledger.Scanner, name, cursor string, limit int) (ledger.ProjectionPage, error)
	BackfillIntent(ctx context.Context, p ledger.Projection, in ledger.Intent, source, eventID, actor, reason string) (bool, error)
	MissingRecord(ctx context.Context, p ledger.Projection, maxState int) (ledger.RecordNeed, error)
}

var _ Ledger = (*ledger.Ledger)(nil)

// SQS is the part of the SQS client the operator uses. It never deletes.
type SQS interface {
	queue.SQS
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

var _ SQS = (*sqs.Client)(nil)

// Queues names the four queues. An empty URL is looked up by name
// (GetQueueUrl) from the names package queue gives, with Prefix, when
// HavePrefix is set.
type Queues struct {
	Events, EventsDLQ, Effects, EffectsDLQ string
	Prefix                                 string
	HavePrefix                             bool
}

// Queue kinds, as Queues names them.
const (
	qEvents     = "events"
	qEventsDLQ  = "events-dlq"
	qEffects    = "effects"
	qEffectsDLQ = "effects-dlq"
)

// App runs the operator commands. Every field but Scanner, Err and Limiter
// is required.
type App struct {
	Ledger  Ledger
	Scanner ledger.Scanner // for events list --scan
	SQS     SQS
	Queues  Queues
	Out     io.Writer // results
	Err     io.Writer // progress of a bulk replay in JSON mode; default Out
	Clock   ledger.Clock
	// Actor is what audit entries name. Empty, the first command that
	// writes sets it from Claim and Verifier (AuditActor); set, it is used
	// as it is.
	Actor string
	// Claim is who the operator says they are (--actor, else $USER@host);
	// it may be empty.
	Claim string
	// Verifier tells who is really calling (CallerARN, or LocalUser with
	// --local). Without one, and without Actor, writes are refused.
	Verifier Verifier
	// JSON prints results as JSON instead of tables.
	JSON bool
	// NewLimiter paces bulk replays; default a Pacer on the wall clock.
	NewLimiter func(interval time.Duration) Limiter
	// Warehouse is the warehouse sink's bucket and prefix, nil when
	// webhookctl is not told of one (WAREHOUSE_BUCKET, --warehouse-bucket;
	// --local: the make-dev stack's); S3 reads it.
	Warehouse *Warehouse
	S3        S3
}

func (a *App) now() time.Time { return a.Clock.Now().UTC() }

// actor is who the audit names; commands that write call it first, and
// write nothing when it fails. It verifies the caller once per run.
func (a *App) actor(ctx context.Context) (string, error) {
	if a.Actor != "" {
		return a.Actor, nil
	}
	if a.Verifier == nil {
		return "", fmt.Errorf("%w: no way to verify who you are for the audit trail; nothing was written", ErrUnverified)
	}
	id, err := a.Verifier.Verify(ctx)
	if err != nil {
		return "", fmt.Errorf("%w; nothing was written: an operator write records your verified AWS identity "+
			"(check your AWS credentials and region, or use --local for the `make dev` stack)", err)
	}
	a.Actor = AuditActor(a.Claim, id)
	return a.Actor, nil
}

func (a *App) errOut() io.Writer {
	if a.Err != nil {
		return a.Err
	}
	return a.Out
}

// queueURL returns a configured URL or looks it up by name.
func (a *App) queueURL(ctx context.Context, which string) (string, error) {
	var url, name, flagName, env string
	switch which {
	case qEvents:
		url, name, flagName, env = a.Queues.Events, queue.Events(a.Queues.Prefix).Name, "--events-queue-url", "EVENTS_QUEUE_URL"
	case qEventsDLQ:
		url, name, flagName, env = a.Queues.EventsDLQ, queue.Events(a.Queues.Prefix).DLQName(), "--events-dlq-url", "EVENTS_DLQ_URL"
	case qEffects:
		url, name, flagName, env = a.Queues.Effects, queue.Effects(a.Queues.Prefix).Name, "--effects-queue-url", "EFFECTS_QUEUE_URL"
	case qEffectsDLQ:
		url, name, flagName, env = a.Queues.EffectsDLQ, queue.Effects(a.Queues.Prefix).DLQName(), "--effects-dlq-url", "EFFECTS_DLQ_URL"
	default:
		return "", fmt.Errorf("unknown queue %q", which)
	}
	if url != "" {
		return url, nil
	}
	if !a.Queues.HavePrefix {
		return "", fmt.Errorf("%w: the %s queue: set %s (or %s), or --prefix to look it up by name", ErrConfig, which, flagName, env)
	}
	out, err := a.SQS.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		return "", fmt.Errorf("look up the %s queue %q: %w", which, name, err)
	}
	return aws.ToString(out.QueueUrl), nil
}

// table writes rows aligned in columns, every cell made safe (a tab or a
// line break in a value would shift the columns or forge a row).
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	cells := make([]string, 0, len(header))
	for _, r := range rows {
		cells = cells[:0]
		for _, c := range r {
			cells = append(cells, safe(c))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// age renders a duration compactly, to the second: 45s, 12m05s, 3h05m, 2d04h.
// A negative duration (a retry not yet due) renders as "in 45s".
func age(d time.Duration) string {
	if d < 0 {
		return "in " + age(-d)
	}
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	default:
		return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
	}
}

// stamp renders a time as RFC 3339 UTC, or "-" when zero.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// auditRows renders an audit trail as table rows.
func auditRows(trail []ledger.AuditEntry) [][]string {
	rows := make([][]string, 0, len(trail))
	for _, e := range trail {
		rows = append(rows, []string{stamp(e.At), orDash(string(e.From)), string(e.To), e.Actor, e.Action, orDash(e.Reason)})
	}
	return rows
}

var auditHeader = []string{"AT", "FROM", "TO", "ACTOR", "ACTION", "REASON"}

// auditJSON is an audit entry as the JSON output shows it.
type auditJSON struct {
	At     time.Time `json:"at"`
	From   string    `json:"from,omitempty"`
	To     string    `json:"to"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Reason string    `json:"reason,omitempty"`
}

func auditOf(trail []ledger.AuditEntry) []auditJSON {
	out := make([]auditJSON, 0, len(trail))
	for _, e := range trail {
		out = append(out, auditJSON{At: e.At.UTC(), From: string(e.From), To: string(e.To), Actor: e.Actor, Action: e.Action, Reason: e.Reason})
	}
	return out
}
