// Package awstrace provides AWS SDK middleware that counts requests per
// service and operation and can inject a crash right before or right after
// any call. The counts back the request budgets (DESIGN.md §9); the crashes
// back the "crash at the awkward moment" tests.
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
)

func (w When) String() string {
	if w == Before {
		return "before"
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
	mu      sync.Mutex
	counts  map[string]int
	crashes []Crash
	crashed bool
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
	r.counts, r.crashes, r.crashed = nil, nil, false
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

// APIOption installs the recorder on a client's middleware stack; add it to
// the client's Options.APIOptions.
func (r *Recorder) APIOption(stack *middleware.Stack) error {
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
