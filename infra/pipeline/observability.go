package pipeline

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/jsii-runtime-go"
)

// Metric names the functions emit in CloudWatch Embedded Metric Format,
// without dimensions, in the stage's namespace.
var (
	IntakeMetrics     = []string{"Received", "Accepted", "Duplicates", "Rejected", "IntakeLatencyMs"}
	ProcessorMetrics  = []string{"Processed", "Applied", "Noop", "Stale", "Ignored", "Retries", "Quarantined", "Dead", "OperationIDsReused", "ProcessLatencyMs"}
	DispatcherMetrics = []string{"EffectsSucceeded", "EffectsFailed", "EffectsUncertain", "EffectsRetryWait", "EffectsQuarantined", "EffectsSuperseded", "EffectsObsolete", "EffectsContradicted", "EffectsScopeRefused", "DispatchLatencyMs"}
	ReconcilerMetrics = []string{"Reenqueued", "IntentsReannounced", "StuckLeases", "DriftFound", "DriftRepaired", "DeadMarked",
		"UnfinishedEvents", "OldestUnfinishedAgeSeconds", "IntentsPending", "IntentsUncertain", "EventsDLQDepth", "EffectsDLQDepth",
		"BridgeRedelivered", "BridgeDLQRefused", "BridgeDLQDepth", "ReconcileRunMs", "CompensationsDue", "DownstreamDrift"}
)

// Alarm thresholds.
const (
	// The events queue's oldest message: 5 attempts with a 180 s visibility
	// take at most 15 minutes, so older than that means nothing consumes.
	eventsOldestAlarmSeconds = 900
	// Effects wait on purpose (backoff hides them until due), so the bar is
	// higher: an hour.
	effectsOldestAlarmSeconds = 3600
)

func (s *Pipeline) metric(name, stat string) awscloudwatch.Metric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:  jsii.String(s.props().MetricsNamespace),
		MetricName: jsii.String(name),
		Statistic:  jsii.String(stat),
		Period:     awscdk.Duration_Minutes(jsii.Number(5)),
	})
}

// alarms creates the alarm topic and every alarm.
func (s *Pipeline) alarms() {
	topic := awssns.NewTopic(s, jsii.String("AlarmTopic"), &awssns.TopicProps{
		TopicName:   jsii.String(s.prefix() + "alarms"),
		DisplayName: jsii.String("Webhooks " + s.props().Stage + " alarms"),
		// Publishers must use TLS. The topic is not KMS-encrypted: it carries
		// alarm state changes only, and CloudWatch cannot publish to a topic
		// under the AWS managed aws/sns key.
		EnforceSSL: jsii.Bool(true),
	})
	if s.props().AlarmEmail != "" {
		topic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(s.props().AlarmEmail), nil))
	}
	action := awscloudwatchactions.NewSnsAction(topic)
	add := func(id, desc string, m awscloudwatch.IMetric, threshold float64) {
		a := awscloudwatch.NewAlarm(s, jsii.String(id), &awscloudwatch.AlarmProps{
			AlarmName:          jsii.String(s.prefix() + id),
			AlarmDescription:   jsii.String(desc),
			Metric:             m,
			Threshold:          jsii.Number(threshold),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
			EvaluationPeriods:  jsii.Number(1),
			// No data means nothing happened (no dead letters, no errors).
			TreatMissingData: awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
		a.AddAlarmAction(action)
		a.AddOkAction(action)
	}
	max5 := &awscloudwatch.MetricOptions{Statistic: jsii.String("Maximum"), Period: awscdk.Duration_Minutes(jsii.Number(5))}
	sum5 := &awscloudwatch.MetricOptions{Statistic: jsii.String("Sum"), Period: awscdk.Duration_Minutes(jsii.Number(5))}

	for _, p := range []struct {
		name string
		q    QueuePair
		old  float64
	}{{"Events", s.Events, eventsOldestAlarmSeconds}, {"Effects", s.Effects, effectsOldestAlarmSeconds}} {
		add(p.name+"DlqNotEmpty", "Messages in the "+p.q.Spec.DLQName()+" queue: work that exhausted its attempts. Inspect, fix, then redrive from the SQS console (infra/README.md).",
			p.q.DLQ.MetricApproximateNumberOfMessagesVisible(max5), 1)
		add(p.name+"OldestMessage", "The oldest message in "+p.q.Spec.Name+" is older than expected: the consumer is failing, throttled or disabled.",
			p.q.Queue.MetricApproximateAgeOfOldestMessage(max5), p.old)
	}
	if s.Bridge != nil {
		add("BridgeDlqNotEmpty", "Messages in the "+s.prefix()+"bridge-dlq queue: partner events the bridge did not accept. "+
			"The reconciler redelivers them every run; one that stays names an event source SOURCES lacks (infra/README.md).",
			s.Bridge.DLQ.MetricApproximateNumberOfMessagesVisible(max5), 1)
		add("BridgeDlqRefused", "The reconciler refused bridge DLQ letters that the bridge's role did not write: each is QUARANTINED under "+
			"source bridge-dlq/refused with its sender and the reason, and was not processed. Someone other than the bridge wrote the DLQ (infra/README.md).",
			s.metric("BridgeDLQRefused", "Sum"), 1)
	}
	for _, name := range s.functionNames() {
		fn := s.Functions[name].Fn
		add(pascal(name)+"Errors", "The "+name+" function returned errors (a failed invocation, not a batch item failure).", fn.MetricErrors(sum5), 1)
		add(pascal(name)+"Throttles", "The "+name+" function was throttled.", fn.MetricThrottles(sum5), 1)
	}
	add("DriftFound", "The reconciler found the ledger disagreeing with the provider's truth.", s.metric("DriftFound", "Sum"), 1)
	add("StuckLeases", "The reconciler found leases held past their expiry (a worker died mid-event).", s.metric("StuckLeases", "Sum"), 1)
	add("IntentsUncertain", "Effects whose outcome is unknown after the downstream's idempotency window: an operator must check.", s.metric("IntentsUncertain", "Maximum"), 1)
	add("EventsDead", "Events that exhausted their attempts (DEAD).", s.metric("Dead", "Sum"), 1)
	add("EventsQuarantined", "Events quarantined (malformed, unknown subject, same-version conflict).", s.metric("Quarantined", "Sum"), 1)
	add("OperationIDsReused", "Events quarantined operation_id_reused: a rule gave a latest or while_current intent (or another kind) an operation id "+
		"another intent holds, so the downstream would not follow the truth. The event's error names the projection, kind, id and both payload hashes: "+
		"fix the rule (the revision in the id), deploy, replay the quarantined events in order.",
		s.metric("OperationIDsReused", "Sum"), 1)
	add("EffectsScopeRefused", "Intents quarantined without a call because their scope may not use their effect (the effect's scopes): "+
		"another source's facts tried to reach the endpoint, or the effect's scopes miss a source. The intent's detail names scope, source and kind.",
		s.metric("EffectsScopeRefused", "Sum"), 1)
	if s.Warehouse != nil {
		// On the age, not the count: see warehouseDriftAlarmSeconds.
		add("WarehouseDriftAge", "A subject's canonical revision has not been in the warehouse for an hour or more "+
			"(WarehouseDriftOldestAgeSeconds): the reconciler re-drives the missing record every run, so the dispatcher's write keeps failing. "+
			"Look for the dispatcher's errors and the effects DLQ; WarehouseDrift counts the subjects behind.",
			s.metric("WarehouseDriftOldestAgeSeconds", "Maximum"), warehouseDriftAlarmSeconds)
		add("WarehouseCheckPassAge", "The warehouse drift check has not completed a pass over the table for a day "+
			"(WarehouseCheckPassAgeSeconds): its drift count is that old. The reconciler fails, or the table outgrew "+
			"WAREHOUSE_CHECK_READS items per run (docs/warehouse.md).",
			s.metric("WarehouseCheckPassAgeSeconds", "Maximum"), warehousePassAlarmSeconds)
	}
	s.AlarmTopic = topic
}

// functionNames lists the deployed functions: the four, and the bridge
// when there is one.
func (s *Pipeline) functionNames() []string {
	names := []string{Intake, Processor, Dispatcher, Reconciler}
	if s.Bridge != nil {
		names = append(names, Bridge)
	}
	return names
}

// dashboard leads with what the business asks, first whether the
// downstream follows the truth (effects performed and then contradicted,
// waiting for the recovery owner; subjects whose downstream is not at the
// canonical version; with the warehouse on, subjects whose warehouse
// record is not the canonical revision), then is every accepted event reconciled, how old is
// the oldest that is not, what effects are pending or uncertain,
// duplicates, stale, quarantined, DLQ age; run metrics go below.
func (s *Pipeline) dashboard() {
	name := s.prefix() + "overview"
	m := s.metric
	sum := func(names ...string) *[]awscloudwatch.IMetric {
		out := []awscloudwatch.IMetric{}
		for _, n := range names {
			out = append(out, m(n, "Sum"))
		}
		return &out
	}
	maxOf := func(names ...string) *[]awscloudwatch.IMetric {
		out := []awscloudwatch.IMetric{}
		for _, n := range names {
			out = append(out, m(n, "Maximum"))
		}
		return &out
	}
	max5 := &awscloudwatch.MetricOptions{Statistic: jsii.String("Maximum"), Period: awscdk.Duration_Minutes(jsii.Number(5))}
	text := func(md string) awscloudwatch.IWidget {
		return awscloudwatch.NewTextWidget(&awscloudwatch.TextWidgetProps{Markdown: jsii.String(md), Width: jsii.Number(24), Height: jsii.Number(1)})
	}
	single := func(title string, ms *[]awscloudwatch.IMetric) awscloudwatch.IWidget {
		return awscloudwatch.NewSingleValueWidget(&awscloudwatch.SingleValueWidgetProps{Title: jsii.String(title), Metrics: ms, Width: jsii.Number(6), Height: jsii.Number(4), Sparkline: jsii.Bool(true)})
	}
	singleWide := func(title string, ms *[]awscloudwatch.IMetric) awscloudwatch.IWidget {
		return awscloudwatch.NewSingleValueWidget(&awscloudwatch.SingleValueWidgetProps{Title: jsii.String(title), Metrics: ms, Width: jsii.Number(12), Height: jsii.Number(4), Sparkline: jsii.Bool(true)})
	}
	graph := func(title string, ms *[]awscloudwatch.IMetric, width float64) awscloudwatch.IWidget {
		return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{Title: jsii.String(title), Left: ms, Width: jsii.Number(width), Height: jsii.Number(6)})
	}
	p99 := func(names ...string) *[]awscloudwatch.IMetric {
		out := []awscloudwatch.IMetric{}
		for _, n := range names {
			out = append(out, m(n, "p99"))
		}
		return &out
	}
	var fnErrors, fnThrottles, fnDuration []awscloudwatch.IMetric
	for _, n := range s.functionNames() {
		fn := s.Functions[n].Fn
		fnErrors = append(fnErrors, fn.MetricErrors(nil))
		fnThrottles = append(fnThrottles, fn.MetricThrottles(nil))
		fnDuration = append(fnDuration, fn.MetricDuration(&awscloudwatch.MetricOptions{Statistic: jsii.String("p99")}))
	}
	dlqAge := []awscloudwatch.IMetric{
		s.Events.DLQ.MetricApproximateAgeOfOldestMessage(max5), s.Effects.DLQ.MetricApproximateAgeOfOldestMessage(max5),
	}
	if s.Bridge != nil {
		dlqAge = append(dlqAge, s.Bridge.DLQ.MetricApproximateAgeOfOldestMessage(max5))
	}
	queues := []awscloudwatch.IMetric{}
	for _, q := range []QueuePair{s.Events, s.Effects} {
		queues = append(queues, q.Queue.MetricApproximateNumberOfMessagesVisible(max5), q.Queue.MetricApproximateAgeOfOldestMessage(max5))
	}
	api := []awscloudwatch.IMetric{
		s.API.MetricCount(nil), s.API.MetricClientError(nil), s.API.MetricServerError(nil),
	}
	lead := []awscloudwatch.IWidget{
		singleWide("Compensations due (effects performed, then contradicted: the recovery owner acts)", maxOf("CompensationsDue")),
		singleWide("Downstream drift (subjects not at the canonical version, per reconciler run)", maxOf("DownstreamDrift")),
	}
	if s.Warehouse != nil {
		// Three in the leading row: does the warehouse follow the truth too.
		third := func(title string, ms *[]awscloudwatch.IMetric) awscloudwatch.IWidget {
			return awscloudwatch.NewSingleValueWidget(&awscloudwatch.SingleValueWidgetProps{Title: jsii.String(title), Metrics: ms, Width: jsii.Number(8), Height: jsii.Number(4), Sparkline: jsii.Bool(true)})
		}
		lead = []awscloudwatch.IWidget{
			third("Compensations due (effects performed, then contradicted: the recovery owner acts)", maxOf("CompensationsDue")),
			third("Downstream drift (subjects not at the canonical version, per reconciler run)", maxOf("DownstreamDrift")),
			third("Warehouse: canonical revision != warehouse revision (subjects; oldest, seconds)", maxOf("WarehouseDrift", "WarehouseDriftOldestAgeSeconds")),
		}
	}
	rows := [][]awscloudwatch.IWidget{
		{text("## Business outcome: does the downstream follow the truth, is every accepted fact applied once, and every effect known?")},
		lead,
		{
			single("Accepted but not reconciled (unfinished events)", maxOf("UnfinishedEvents")),
			single("Oldest unreconciled (seconds)", maxOf("OldestUnfinishedAgeSeconds")),
			single("Intents pending / uncertain", maxOf("IntentsPending", "IntentsUncertain")),
			single("Dead-letter age (seconds)", &dlqAge),
		},
		{
			graph("Deliveries: received, accepted, duplicates, rejected", sum("Received", "Accepted", "Duplicates", "Rejected"), 8),
			graph("Outcomes: applied, noop, stale, ignored, quarantined (of which an operation id reused), dead", sum("Applied", "Noop", "Stale", "Ignored", "Quarantined", "OperationIDsReused", "Dead"), 8),
			graph("Effects: succeeded, failed, uncertain, retry wait, quarantined (of which refused for their scope), superseded, obsolete, contradicted",
				sum("EffectsSucceeded", "EffectsFailed", "EffectsUncertain", "EffectsRetryWait", "EffectsQuarantined", "EffectsScopeRefused", "EffectsSuperseded", "EffectsObsolete", "EffectsContradicted"), 8),
		},
		{
			graph("Reconciler: repairs", sum("Reenqueued", "IntentsReannounced", "StuckLeases", "DriftFound", "DriftRepaired", "DeadMarked", "BridgeRedelivered", "BridgeDLQRefused"), 12),
			graph("Dead-letter depth (reconciler's view)", maxOf("EventsDLQDepth", "EffectsDLQDepth", "BridgeDLQDepth"), 12),
		},
		{text("## Run metrics")},
		{
			graph("Latency p99 (ms)", p99("IntakeLatencyMs", "ProcessLatencyMs", "DispatchLatencyMs", "ReconcileRunMs"), 8),
			graph("Processed and retries", sum("Processed", "Retries"), 8),
			graph("Queues: depth and oldest message", &queues, 8),
		},
		{
			graph("Function errors", &fnErrors, 6),
			graph("Function throttles", &fnThrottles, 6),
			graph("Function duration p99", &fnDuration, 6),
			graph("HTTP API: requests, 4xx, 5xx", &api, 6),
		},
	}
	widgets := []*[]awscloudwatch.IWidget{}
	for _, r := range rows {
		widgets = append(widgets, &r)
	}
	s.DashboardName = name
	s.Dashboard = awscloudwatch.NewDashboard(s, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
		DashboardName: jsii.String(name),
		Widgets:       &widgets,
	})
}
