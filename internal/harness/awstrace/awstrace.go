// Package awstrace provides AWS SDK middleware that counts requests per
// service and operation and can inject a crash right before or right after
// any call, or lose a call's answer so that the SDK retries it. The counts
// back the request budget tests; the crashes back the "crash at the
// awkward moment" tests.
//
// A crash is sticky: once it fires, every later call through the same
// Recorder fails too, as if the process had died at that point. Nothing the
// code would have written afterwards reaches the emulators.
package awstrace

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
)

// ErrCrash is returned by calls after an injected crash.
var ErrCrash = errors.New("awstrace: injected crash")

// When says which side of a call a crash hits.
type When int

// Crash points.
const (
	// Before: the request is never sent.
	Before When = iota
	// After: the request was sent and took effect, but its response is lost.
	After
	// Lost: the request took effect and its answer was lost on the wire (a
	// reset connection, a 500 after the write), and the SDK retried it,
	// as it does: the same request, with the same idempotency token where
	// the operation has one. Nothing crashes; the caller sees whatever the
	// retry answers.
	Lost
)

func (w When) String() string {
	switch w {
	case Before:
		return "before"
	case Lost:
		return "lost-answer"
	}
	return "after"
}

// Crash arms a crash at the nth (1-based) call of an operation, named
// "Service.Operation", for example "DynamoDB.TransactWriteItems".
type Crash struct {
	Op   string
	Nth  int
	When When
}

func (c Crash) String() string { return fmt.Sprintf("crash %s %s #%d", c.When, c.Op, c.Nth) }

// Recorder counts calls and fires armed crashes. The zero value is ready.
type Recorder struct {
	// LostTotal, when set, also counts every answer Lost dropped (one
	// counter for many recorders; Reset does not clear it).
	LostTotal *atomic.Int64

	mu      sync.Mutex
	counts  map[string]int
	crashes []Crash
	crashed bool
	lost    int
}

// Arm adds a crash.
func (r *Recorder) Arm(c Crash) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.crashes = append(r.crashes, c)
}

// Crashed reports whether a crash has fired.
func (r *Recorder) Crashed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.crashed
}

// Reset clears counts, crashes and the crashed state (a process restart).
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts, r.crashes, r.crashed, r.lost = nil, nil, false, 0
}

// Lost returns how many answers Lost crashes dropped: an armed Lost on a
// call that failed on its own drops nothing.
func (r *Recorder) Lost() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lost
}

// Count returns the calls of one operation ("DynamoDB.PutItem").
func (r *Recorder) Count(op string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[op]
}

// Total returns all calls, or those of one service when service != "".
func (r *Recorder) Total(service string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for op, c := range r.counts {
		if service == "" || strings.HasPrefix(op, service+".") {
			n += c
		}
	}
	return n
}

// Counts returns a copy of the per-operation counts.
func (r *Recorder) Counts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.counts))
	for k, v := range r.counts {
		out[k] = v
	}
	return out
}

// String renders the counts sorted by operation.
func (r *Recorder) String() string {
	c := r.Counts()
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, c[k]))
	}
	return strings.Join(parts, " ")
}

// lostAnswer is the error of an attempt whose answer Lost dropped. It is a
// connection error, so the SDK's retryer retries it as it retries a reset.
type lostAnswer struct{ op string }

func (e lostAnswer) Error() string         { return e.op + ": answer lost (awstrace)" }
func (e lostAnswer) ConnectionError() bool { return true }

type loseKey struct{}

// APIOption installs the recorder on a client's middleware stack; add it to
// the client's Options.APIOptions.
func (r *Recorder) APIOption(stack *middleware.Stack) error {
	// Lost acts inside the retry loop: at the end of Finalize, once per
	// attempt, after the attempt reached the server.
	if err := stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("awstrace-lose",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleFinalize(ctx, in)
			if lose, ok := ctx.Value(loseKey{}).(*bool); ok && *lose && err == nil {
				*lose = false
				r.mu.Lock()
				r.lost++
				r.mu.Unlock()
				if r.LostTotal != nil {
					r.LostTotal.Add(1)
				}
				return middleware.FinalizeOutput{}, md, lostAnswer{op: awsmiddleware.GetServiceID(ctx) + "." + awsmiddleware.GetOperationName(ctx)}
			}
			return out, md, err
		}), middleware.After); err != nil {
		return err
	}
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("awstrace",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			op := awsmiddleware.GetServiceID(ctx) + "." + awsmiddleware.GetOperationName(ctx)
			crash, ok := r.enter(op)
			if !ok {
				return middleware.InitializeOutput{}, middleware.Metadata{}, fmt.Errorf("%s: %w", op, ErrCrash)
			}
			if crash != nil && crash.When == Before {
				r.fire()
				return middleware.InitializeOutput{}, middleware.Metadata{}, fmt.Errorf("%s before %s: %w", op, crash, ErrCrash)
			}
			if crash != nil && crash.When == Lost {
				lose := true
				ctx = context.WithValue(ctx, loseKey{}, &lose)
			}
			out, md, err := next.HandleInitialize(ctx, in)
			if crash != nil && crash.When == After {
				r.fire()
				return middleware.InitializeOutput{}, md, fmt.Errorf("%s after %s: %w", op, crash, ErrCrash)
			}
			return out, md, err
		}), middleware.After)
}

// enter counts the call; ok is false when the process has already crashed.
func (r *Recorder) enter(op string) (*Crash, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.crashed {
		return nil, false
	}
	if r.counts == nil {
		r.counts = map[string]int{}
	}
	r.counts[op]++
	n := r.counts[op]
	for i := range r.crashes {
		if r.crashes[i].Op == op && r.crashes[i].Nth == n {
			c := r.crashes[i]
			return &c, true
		}
	}
	return nil, true
}

func (r *Recorder) fire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.crashed = true
}
