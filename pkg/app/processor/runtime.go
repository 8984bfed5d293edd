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
// only then asks the runtime API for the next invocation. So the process
// exits after the runtime API accepted the batch's answer, with its batch
// item failures, and never takes another batch: Lambda starts a fresh
// runtime (an Init) for the next invocation, as after aws-lambda-go's own
// exit on a handler panic (it reports the error, then exits). The two
// alternatives are worse: exiting inside the handler loses this batch's
// answer (the whole batch comes back), and exiting once the next
// invocation has arrived fails that invocation (its batch comes back).
//
// What the exit costs depends on when the caller is given the answer.
// Lambda hands a synchronous caller (the event source mapping) the
// response as the runtime posts it (work a custom runtime does before
// asking for its next invocation runs after the caller has its answer);
// the environment then ends with Runtime.ExitError in the function's log. aws-lambda-rie (the local
// stack) holds the response until the runtime asks for its next
// invocation, so there the exiting invocation answers 502 with the
// batch's response as its body, the local mapping deletes nothing, and
// the batch comes back after the visibility timeout; each of its events
// is then already PROCESSED or QUARANTINED and is acknowledged with no
// second effect. Either way the emulator re-inits the runtime for the
// next invocation, as Lambda does.
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
