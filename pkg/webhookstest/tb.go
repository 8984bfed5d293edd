package webhookstest

import (
	"fmt"
	"sync"
	"testing"
)

// runTB is the testing.TB the pipeline harness gets for one run: its
// cleanups run when the run ends (not when the team's test does), and a
// Fatal ends the run, which reports it, instead of the test. Methods the
// harness does not use are left to the embedded nil TB.
type runTB struct {
	testing.TB
	name string

	mu       sync.Mutex
	cleanups []func()
	errs     []string
}

// harnessFatal is the panic value of runTB.Fatal.
type harnessFatal struct{ msg string }

func (t *runTB) Helper()             {}
func (t *runTB) Name() string        { return t.name }
func (t *runTB) Log(...any)          {}
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
func (t *runTB) Fatal(a ...any)                 { panic(harnessFatal{fmt.Sprint(a...)}) }
func (t *runTB) Fatalf(format string, a ...any) { panic(harnessFatal{fmt.Sprintf(format, a...)}) }
func (t *runTB) FailNow()                       { panic(harnessFatal{"FailNow"}) }

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
