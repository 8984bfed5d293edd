package capacity

import (
	"fmt"
	"io"
)

// Prices are AWS list prices, us-east-1, in US dollars. They were written
// down on 2026-11-30 from the public pricing pages as known then (this
// machine has no internet): check them against the pricing pages before
// relying on the totals. Free tiers are ignored.
type Prices struct {
	AsOf                 string
	APIGatewayPerMillion float64 // HTTP API requests, first 300 M per month
	LambdaPerMillion     float64 // invocations
	LambdaArmPerGBSecond float64 // arm64 duration
	SQSPerMillion        float64 // standard queue requests (each 64 KB chunk)
	DynamoWRUPerMillion  float64 // on-demand write request units
	DynamoRRUPerMillion  float64 // on-demand read request units
	DynamoWCUHour        float64 // provisioned write capacity unit-hour (standard table class)
	DynamoRCUHour        float64 // provisioned read capacity unit-hour (standard table class)
	LogsPerGB            float64 // CloudWatch Logs ingestion (standard class)
}

// ListPrices are the prices the cost model uses.
var ListPrices = Prices{
	AsOf:                 "2026-11-30 (us-east-1 list prices; DynamoDB on-demand after the November 2024 reduction)",
	APIGatewayPerMillion: 1.00,
	LambdaPerMillion:     0.20,
	LambdaArmPerGBSecond: 0.0000133334,
	SQSPerMillion:        0.40,
	DynamoWRUPerMillion:  0.625,
	DynamoRRUPerMillion:  0.125,
	DynamoWCUHour:        0.00065,
	DynamoRCUHour:        0.00013,
	LogsPerGB:            0.50,
}

// ProvisionedPricesNote says where the provisioned prices come from: the
// stored copy of the pricing page has its text but not its price table.
const ProvisionedPricesNote = "us-east-1, standard table class: $0.00065 per WCU-hour and $0.00013 per RCU-hour, " +
	"assumed (AWS's list prices as known on 2026-11-30; the copy of https://aws.amazon.com/dynamodb/pricing/provisioned/ " +
	"available here holds its terms, not its price table: check it before relying on these rows)"

// Workload describes a million events for the model. Per-event counts
// come from measurements (write units from MeasurePipeline, requests from
// the request budget test); durations and log volume are assumptions
// stated with the result.
type Workload struct {
	DuplicateRatio   float64 // extra deliveries per event (0.1 = 10 % duplicates)
	IntentsPerEvent  float64 // effects per event
	WriteUnitsEvent  float64 // intake + processing, measured
	WriteUnitsEffect float64 // per dispatched intent, measured
	// WriteUnitsDuplicate is what one duplicate delivery writes, measured
	// (the first duplicate of a processed event: the most one costs).
	WriteUnitsDuplicate float64
	ReadUnitsEvent      float64 // processor's payload read (strongly consistent, per 4 KB)
	BatchSize           float64 // event source mapping batch (messages per invocation)
	IntakeMs            float64 // billed duration per intake invocation
	ProcessorMs         float64 // per processor invocation (a batch)
	DispatcherMs        float64 // per dispatcher invocation (a batch)
	MemoryMB            float64
	LogBytesPerEvent    float64 // logs and EMF records, all functions
}

// WriteUnits is what one event writes in the ledger, its effects and its
// share of duplicates included.
func (w Workload) WriteUnits() float64 {
	return w.WriteUnitsEvent + w.IntentsPerEvent*w.WriteUnitsEffect + w.DuplicateRatio*w.WriteUnitsDuplicate
}

// TableBillingText is the cost section's comparison of the table's billing
// modes: the prose around WriteTableBilling's rows at rates events/s.
func TableBillingText(w io.Writer, wl Workload, target float64, rates ...float64) {
	var rows []TableBilling
	for _, r := range rates {
		rows = append(rows, CompareTableBilling(r, wl.WriteUnits(), wl.ReadUnitsEvent, target, ListPrices))
	}
	fmt.Fprintf(w, "\n### The table: on demand or provisioned with auto scaling\n\n"+
		"The same events at a sustained rate, %.1f write units and %.1f read units each (the table above; table and due index together, "+
		"since both bill the same units at the same price), for 30 days. On demand: $%.3f per million WRU and $%.3f per million RRU "+
		"(the prices above). Provisioned: %s. Auto scaling's steady state provisions consumed / %.0f %% "+
		"(the construct's default `TargetUtilizationPercent`; `Billing.Provisioned` in `infra/pipeline`, `billing` in CDK context). "+
		"Formula and test: `CompareTableBilling` in `internal/harness/capacity/cost.go`, `TestTableBillingComparesOnDemandWithProvisionedAtItsTarget`.\n\n",
		wl.WriteUnits(), wl.ReadUnitsEvent, ListPrices.DynamoWRUPerMillion, ListPrices.DynamoRRUPerMillion, ProvisionedPricesNote, target*100)
	WriteTableBilling(w, rows, target)
	fmt.Fprintf(w, "\nAt these prices a provisioned unit costs as much per hour as %.1f %% of it consumed on demand, so provisioned is cheaper "+
		"whenever the average utilisation over the month stays above that; at a steady rate and a %.0f %% target it costs %.0f %% of on demand. "+
		"The rows are provisioned's best case: a steady rate. Webhook traffic is bursty, and auto scaling follows utilisation after the fact, "+
		"so a burst above the provisioned capacity is throttled until it catches up (its writes wait for their retries, "+
		"and its events in their queue), and quiet hours still pay for the minimum capacity. Hence on demand stays the default; provisioned "+
		"fits a stage whose rate is known and steady, with the minimum at its usual rate and the maximum at its peak.\n",
		BreakEvenUtilization(ListPrices)*100, target*100, rows[0].ProvisionedUSD/rows[0].OnDemandUSD*100)
}

// Line is one component of the cost.
type Line struct {
	Component string
	Quantity  string
	USD       float64
}

// CostPerMillion returns the cost of one million events.
func CostPerMillion(w Workload, p Prices) []Line {
	const m = 1e6
	deliveries := 1 + w.DuplicateRatio
	gbs := func(ms float64) float64 { return ms / 1000 * w.MemoryMB / 1024 }
	procInv := 1 / w.BatchSize
	dispInv := w.IntentsPerEvent / w.BatchSize
	// SQS per event: intake SendMessage; the event source mapping's
	// ReceiveMessage and DeleteMessageBatch per batch; the processor's
	// SendMessageBatch when there are intents; the same receive/delete on the
	// effects queue per intent batch; plus empty long polls (ignored: they
	// depend on traffic shape, about 2 per poller per 20 s idle).
	sqs := 1 + 2*procInv + min(w.IntentsPerEvent, 1) + 2*dispInv
	lambdaInv := deliveries + procInv + dispInv
	lambdaGBs := deliveries*gbs(w.IntakeMs) + procInv*gbs(w.ProcessorMs) + dispInv*gbs(w.DispatcherMs)
	wru := w.WriteUnits()
	return []Line{
		{"API Gateway HTTP API", fmt.Sprintf("%.2f M requests", deliveries), deliveries * p.APIGatewayPerMillion},
		{"Lambda requests", fmt.Sprintf("%.2f M invocations", lambdaInv), lambdaInv * p.LambdaPerMillion},
		{"Lambda duration (arm64)", fmt.Sprintf("%.0f GB-s", lambdaGBs*m), lambdaGBs * m * p.LambdaArmPerGBSecond},
		{"SQS", fmt.Sprintf("%.2f M requests", sqs), sqs * p.SQSPerMillion},
		{"DynamoDB writes", fmt.Sprintf("%.1f M WRU", wru), wru * p.DynamoWRUPerMillion},
		{"DynamoDB reads", fmt.Sprintf("%.1f M RRU", w.ReadUnitsEvent), w.ReadUnitsEvent * p.DynamoRRUPerMillion},
		{"CloudWatch Logs", fmt.Sprintf("%.2f GB", w.LogBytesPerEvent*m/1e9), w.LogBytesPerEvent * m / 1e9 * p.LogsPerGB},
	}
}

// HoursPerMonth is the cost model's month: 30 days.
const HoursPerMonth = 30 * 24

// TableBilling is the ledger table's cost for 30 days at a sustained rate,
// billed on demand and provisioned with auto scaling.
type TableBilling struct {
	EventsPerSecond float64
	// WRU and RRU are the units consumed per second (table and due index
	// together: both bill the same units at the same price).
	WRU, RRU float64
	// WCU and RCU are what auto scaling provisions to keep utilisation at
	// the target: consumed / target.
	WCU, RCU                    float64
	OnDemandUSD, ProvisionedUSD float64
}

// CompareTableBilling prices a sustained rate of events, each consuming
// wruPerEvent write and rruPerEvent read units, both ways: on demand per
// request unit, and provisioned per capacity unit-hour at auto scaling's
// steady state (provisioned = consumed / target utilisation, every hour of
// the month). A steady rate is provisioned's best case: a burst above the
// provisioned capacity is throttled until auto scaling catches up, and
// idle hours still pay for the minimum.
func CompareTableBilling(eventsPerSecond, wruPerEvent, rruPerEvent, targetUtilization float64, p Prices) TableBilling {
	b := TableBilling{EventsPerSecond: eventsPerSecond, WRU: eventsPerSecond * wruPerEvent, RRU: eventsPerSecond * rruPerEvent}
	b.WCU, b.RCU = b.WRU/targetUtilization, b.RRU/targetUtilization
	seconds := float64(HoursPerMonth) * 3600
	b.OnDemandUSD = b.WRU*seconds/1e6*p.DynamoWRUPerMillion + b.RRU*seconds/1e6*p.DynamoRRUPerMillion
	b.ProvisionedUSD = (b.WCU*p.DynamoWCUHour + b.RCU*p.DynamoRCUHour) * HoursPerMonth
	return b
}

// BreakEvenUtilization is the average utilisation (consumed / provisioned)
// above which provisioned writes cost less than on-demand ones.
func BreakEvenUtilization(p Prices) float64 {
	return p.DynamoWCUHour / (p.DynamoWRUPerMillion / 1e6 * 3600)
}

// WriteTableBilling renders the comparison as Markdown.
func WriteTableBilling(w io.Writer, rows []TableBilling, target float64) {
	fmt.Fprintf(w, "| events/s | consumed WRU/s, RRU/s | on demand, 30 days | provisioned at %.0f %% target: WCU, RCU | provisioned, 30 days | provisioned / on demand |\n", target*100)
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s, %s | $%s | %s, %s | $%s | %.2f |\n", comma(r.EventsPerSecond), comma(r.WRU), comma(r.RRU),
			comma(r.OnDemandUSD), comma(r.WCU), comma(r.RCU), comma(r.ProvisionedUSD), r.ProvisionedUSD/r.OnDemandUSD)
	}
}

// comma renders a number rounded to a whole, with thousands separators.
func comma(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Total sums the lines.
func Total(lines []Line) float64 {
	t := 0.0
	for _, l := range lines {
		t += l.USD
	}
	return t
}

// WriteCostTable renders the lines as Markdown.
func WriteCostTable(w io.Writer, lines []Line) {
	fmt.Fprintln(w, "| component | quantity per million events | USD |")
	fmt.Fprintln(w, "|---|---:|---:|")
	for _, l := range lines {
		fmt.Fprintf(w, "| %s | %s | %.2f |\n", l.Component, l.Quantity, l.USD)
	}
	fmt.Fprintf(w, "| **total** | | **%.2f** |\n", Total(lines))
}
