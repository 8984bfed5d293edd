package processor

import (
	"context"
	"strconv"

	"github.com/aws/aws-lambda-go/events"
)

// HandleSQS adapts an SQS event to Process and reports the failures as
// batch item failures (the event source mapping needs ReportBatchItemFailures).
// It never returns an error: that would fail and redeliver the whole batch.
func (p *Processor) HandleSQS(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	msgs := make([]Message, 0, len(ev.Records))
	for _, r := range ev.Records {
		n, _ := strconv.Atoi(r.Attributes["ApproximateReceiveCount"])
		msgs = append(msgs, Message{ID: r.MessageId, Body: r.Body, ReceiveCount: n})
	}
	var resp events.SQSEventResponse
	for _, id := range p.Process(ctx, msgs) {
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: id})
	}
	return resp, nil
}
