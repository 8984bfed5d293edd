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
	LogsPerGB:            0.50,
}

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
	wru := w.WriteUnitsEvent + w.IntentsPerEvent*w.WriteUnitsEffect + w.DuplicateRatio*w.WriteUnitsDuplicate
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
