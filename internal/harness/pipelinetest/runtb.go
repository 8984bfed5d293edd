package pipelinetest

import (
	"fmt"
	"sync"
	"testing"
)

// RunTB is the testing.TB the harness gets for one run that is not a test
// of its own (a chaos schedule, a run of a team's test kit): its cleanups
// run when the run ends (RunCleanups), not when the enclosing test does,
// and Fatal ends the run (a RunFatal panic the runner recovers and
// reports) instead of the test or the process. Errors are kept (Failed).
// Methods the harness does not use are left to the embedded nil TB and
// would panic, which the runners also report.
type RunTB struct {
	testing.TB
	name string

	mu       sync.Mutex
	cleanups []func()
	errs     []string
}

// RunFatal is the panic value of RunTB.Fatal (and of a run that cannot go on).
type RunFatal struct{ Msg string }

func (t *RunTB) Helper()             {}
func (t *RunTB) Name() string        { return t.name }
func (t *RunTB) Log(a ...any)        {}
func (t *RunTB) Logf(string, ...any) {}
func (t *RunTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.errs) > 0
}
func (t *RunTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}
func (t *RunTB) Error(a ...any) { t.Errorf("%s", fmt.Sprint(a...)) }
func (t *RunTB) Errorf(format string, a ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.errs = append(t.errs, fmt.Sprintf(format, a...))
}
func (t *RunTB) Fatal(a ...any)                 { panic(RunFatal{Msg: fmt.Sprint(a...)}) }
func (t *RunTB) Fatalf(format string, a ...any) { panic(RunFatal{Msg: fmt.Sprintf(format, a...)}) }
func (t *RunTB) FailNow()                       { panic(RunFatal{Msg: "FailNow"}) }

// RunCleanups runs the registered cleanups, last first, each protected
// from the others' panics.
func (t *RunTB) RunCleanups() {
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

// NewRunTB returns the TB of a run named name.
func NewRunTB(name string) *RunTB { return &RunTB{name: name} }
