package capacity

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/reconciler"
	"github.com/effectively-once/webhooks/internal/source"
	"github.com/effectively-once/webhooks/pkg/builtin"
)

// IdleRun is what one reconciler run costs when there is nothing to do:
// its AWS requests, counted by SDK middleware around the real reconciler
// core over an empty ledger and empty queues (the stack's four queues and
// the bridge's DLQ off, as without EventBridge sources).
type IdleRun struct {
	Calls Calls
	// Queries is DynamoDB Query requests: 8 per due shard at the
	// defaults (each work shard 4 times: due events, due intents, and the
	// open events' and intents' gauges; each attention shard 3 times; each
	// sync shard once, for the downstream drift check).
	Queries int
	SQS     int // SQS requests (queue depth gauges and DLQ sweeps)
	// DLQReceives is how many of the SQS requests long-poll a DLQ: each
	// waits queue.DefaultDLQWait in AWS on an empty DLQ, which the run's
	// billed duration includes.
	DLQReceives int
	// Writes is the write units the run consumed (none when idle).
	Writes int
}

// MeasureReconcilerIdle runs the reconciler once over an empty ledger with
// the deployed defaults (DUE_SHARDS and DUE_SHARDS_READ as a new stack
// sets them) and counts its requests.
func MeasureReconcilerIdle(ctx context.Context) (IdleRun, error) {
	t, err := newMeteredTable(ctx)
	if err != nil {
		return IdleRun{}, err
	}
	defer t.d.Close()
	sq, err := localaws.StartSQS("")
	if err != nil {
		return IdleRun{}, err
	}
	var qs reconciler.Queues
	for _, spec := range []queue.Spec{queue.Events(""), queue.Effects("")} {
		spec.Name = localaws.UniqueName(spec.Name)
		q, err := queue.Create(ctx, sq.Client(), spec)
		if err != nil {
			return IdleRun{}, err
		}
		if qs.Events == "" {
			qs.Events, qs.EventsDLQ = q.Queue, q.DLQ
		} else {
			qs.Effects, qs.EffectsDLQ = q.Queue, q.DLQ
		}
	}
	sources, err := source.Parse([]byte(`{"sources":[{"name":"stripe","kind":"stripe","secrets":["env:CAP_SECRET"]}]}`))
	if err != nil {
		return IdleRun{}, err
	}
	r := &reconciler.Reconciler{Ledger: t.led, SQS: sq.Client(t.rec.APIOption), Queues: qs, Sources: sources,
		Registry: builtin.Default(builtin.StripeOptions{}),
		// goaws answers a short poll exactly; the count of receives is the
		// same as with the deployed 1 s long poll.
		Opts: reconciler.Options{Now: t.clock.Now, Log: slog.New(slog.DiscardHandler), DLQWait: -1}}
	t.rec.Reset()
	t.m.Reset()
	if _, err := r.Run(ctx); err != nil {
		return IdleRun{}, fmt.Errorf("idle reconciler run: %w", err)
	}
	c := t.rec.Counts()
	return IdleRun{Calls: calls(t.rec), Queries: c["DynamoDB.Query"], SQS: t.rec.Total("SQS"), DLQReceives: c["SQS.ReceiveMessage"], Writes: t.m.Totals().Units()}, nil
}

// IdleMonth is the fixed monthly cost of a deployed stack with no
// traffic: the scheduled reconciler's runs, and the event source
// mappings' empty long polls.
type IdleMonth struct {
	Runs       float64 // reconciler runs per month (every 5 minutes, 30 days)
	RunSeconds float64 // billed duration of one idle run (its DLQ long polls, plus about 100 ms of work)
	Lines      []Line
}

// IdleMonthly prices a month of idle runs. Assumptions, stated with the
// result: a 5-minute schedule (infra/pipeline ReconcileEvery), 256 MB, every
// empty Query billed as one eventually consistent read (0.5 RRU: DynamoDB
// rounds a query's data up to 4 KB), and for each of the two event source
// mappings 5 pollers long-polling 20 s each (AWS does not publish the idle
// pollers of a standard queue's mapping; 5 is the documented initial
// concurrency of its polling).
func IdleMonthly(run IdleRun, p Prices) IdleMonth {
	const month = 30 * 24 * time.Hour
	m := IdleMonth{Runs: float64(month / (5 * time.Minute))}
	m.RunSeconds = float64(run.DLQReceives)*queue.DefaultDLQWait.Seconds() + 0.1
	gbs := m.Runs * m.RunSeconds * 256 / 1024
	rru := m.Runs * float64(run.Queries) * 0.5
	sqsReqs := m.Runs * float64(run.SQS)
	polls := 2 * 5 * float64(month/(20*time.Second))
	m.Lines = []Line{
		{"reconciler: Lambda requests", fmt.Sprintf("%.0f invocations", m.Runs), m.Runs / 1e6 * p.LambdaPerMillion},
		{"reconciler: Lambda duration (arm64)", fmt.Sprintf("%.0f GB-s", gbs), gbs * p.LambdaArmPerGBSecond},
		{"reconciler: DynamoDB reads", fmt.Sprintf("%.0f RRU (%d Query per run)", rru, run.Queries), rru / 1e6 * p.DynamoRRUPerMillion},
		{"reconciler: SQS", fmt.Sprintf("%.0f requests (%d per run)", sqsReqs, run.SQS), sqsReqs / 1e6 * p.SQSPerMillion},
		{"event source mappings: empty long polls (estimate)", fmt.Sprintf("%.0f requests", polls), polls / 1e6 * p.SQSPerMillion},
	}
	return m
}

// WriteIdleTable renders a month of idle cost as Markdown.
func WriteIdleTable(w io.Writer, m IdleMonth) {
	fmt.Fprintln(w, "| component | quantity per month | USD |")
	fmt.Fprintln(w, "|---|---:|---:|")
	for _, l := range m.Lines {
		fmt.Fprintf(w, "| %s | %s | %.2f |\n", l.Component, l.Quantity, l.USD)
	}
	fmt.Fprintf(w, "| **total** | | **%.2f** |\n", Total(m.Lines))
}
