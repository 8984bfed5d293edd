package processor

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/events"

	inprocessor "github.com/effectively-once/webhooks/internal/processor"
)

// ExitStalled is the exit status of an instance that ends because a
// projection call outlived its budget (Lambda's log names it: "Runtime
// exited with error: exit status 3").
const ExitStalled = 3

// handler is what the runtime loop runs: Processor.HandleSQS, whose
// response is returned as an answer (an io.Reader the runtime sends as
// is). When a projection call of the batch outlived its budget
// (Processor.Stalled), the answer's Close ends the instance.
//
// Why this is sound: aws-lambda-go sends a handler's io.Reader response
// with POST /runtime/invocation/{id}/response and calls its Close once
// that request has returned (documented on lambda.Start: "If the response
// also implements io.Closer, Close() will be called after sending"), and
// only then asks the runtime API for the next invocation. So the batch's
// answer, with its batch item failures, is delivered before the process
// exits, and the process never takes another batch: the next invocation
// finds no runtime and Lambda starts a fresh one (its Init), exactly as
// after the runtime's own exit on a handler panic (aws-lambda-go reports
// the error, then exits). Exiting at the start of the next invocation
// instead would fail that invocation and bring its batch back; exiting
// inside the handler would lose this batch's answer.
func handler(p *inprocessor.Processor, end func()) func(context.Context, events.SQSEvent) (*answer, error) {
	return func(ctx context.Context, ev events.SQSEvent) (*answer, error) {
		resp, err := p.HandleSQS(ctx, ev)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(resp)
		if err != nil {
			return nil, err
		}
		a := &answer{r: bytes.NewReader(b)}
		if p.Stalled() {
			a.end = end
		}
		return a, nil
	}
}

// answer is a batch's response as the runtime loop sends it. It has no
// exported field: aws-lambda-go sends a response that encodes to "{}" and
// is an io.Reader as the reader's bytes.
type answer struct {
	r   *bytes.Reader
	end func() // nil: the instance goes on
}

func (a *answer) Read(p []byte) (int, error) { return a.r.Read(p) }

// ContentType is what the runtime API is told the answer is.
func (a *answer) ContentType() string { return "application/json" }

// Close runs after the runtime API received the answer.
func (a *answer) Close() error {
	if a.end != nil {
		a.end()
	}
	return nil
}

// endInstance ends the process: a projection's goroutine may still be
// running, and must not run beside another batch (see handler).
func endInstance(log *slog.Logger) {
	log.Error("a projection call outlived its budget and may still be running: this instance ends now that its batch is answered; Lambda starts a fresh one for the next batch", "exit_status", ExitStalled)
	os.Exit(ExitStalled)
}
