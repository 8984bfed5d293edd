package chaos

import (
	"fmt"
	"sync"
	"testing"
)

// runTB lets the harness (written for tests) run inside the chaos program
// and inside a test without failing it: Fatal ends the schedule, not the
// process, and the failure is reported as the schedule's harness error.
// Methods the harness does not use are left to the embedded nil TB and
// would panic, which the executor also turns into a harness error.
type runTB struct {
	testing.TB
	name string

	mu       sync.Mutex
	cleanups []func()
	errs     []string
}

// fatal is the panic value of runTB.Fatal.
type fatal struct{ msg string }

func (t *runTB) Helper()             {}
func (t *runTB) Name() string        { return t.name }
func (t *runTB) Log(a ...any)        {}
func (t *runTB) Logf(string, ...any) {}
func (t *runTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.errs) > 0
}
func (t *runTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}
func (t *runTB) Error(a ...any) { t.Errorf("%s", fmt.Sprint(a...)) }
func (t *runTB) Errorf(format string, a ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.errs = append(t.errs, fmt.Sprintf(format, a...))
}
func (t *runTB) Fatal(a ...any)                 { panic(fatal{fmt.Sprint(a...)}) }
func (t *runTB) Fatalf(format string, a ...any) { panic(fatal{fmt.Sprintf(format, a...)}) }
func (t *runTB) FailNow()                       { panic(fatal{"FailNow"}) }

// cleanup runs the registered cleanups, last first.
func (t *runTB) cleanup() {
	t.mu.Lock()
	cs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		func() {
			defer func() { _ = recover() }()
			cs[i]()
		}()
	}
}
