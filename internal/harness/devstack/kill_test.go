package devstack

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeInstance is an instance whose "emulator" is a shell and whose
// "runtime" is the sleep it waits for, as aws-lambda-rie waits for the
// bootstrap.
func fakeInstance(t *testing.T, name string) *instance {
	t.Helper()
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	in := &instance{name: name, fn: strings.Split(name, "-")[0], cmd: cmd}
	for start := time.Now(); len(childrenOf(cmd.Process.Pid)) == 0; {
		if time.Since(start) > 5*time.Second {
			t.Fatal("the fake runtime did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return in
}

func TestKillRuntime(t *testing.T) {
	var logs strings.Builder
	idle, busy := fakeInstance(t, "dispatcher-1"), fakeInstance(t, "intake-2")
	s := &Stack{logs: NewLogs(&logs), all: []*instance{idle, busy}}

	// At once, whatever the instance is doing: here nothing.
	k, err := s.KillRuntime("dispatcher-1")
	if err != nil || len(k.PIDs) != 1 || k.Invoked || k.Function != "dispatcher" {
		t.Fatalf("kill of an idle runtime: %+v, %v", k, err)
	}
	if _, err := s.KillRuntime("dispatcher-1"); !errors.Is(err, ErrNoRuntime) {
		t.Fatalf("a second kill found a runtime: %v", err)
	}
	if _, err := s.KillRuntime("processor-9"); !errors.Is(err, ErrNoRuntime) || !strings.Contains(err.Error(), "intake-2") {
		t.Fatalf("unknown instance: %v", err)
	}

	// During an invocation, once it has run for 20 ms.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() {
		time.Sleep(30 * time.Millisecond)
		busy.invokedSince.Store(time.Now().UnixNano())
	}()
	k, err = s.KillRuntimeInvoked(ctx, "intake-2", 20*time.Millisecond)
	if err != nil || !k.Invoked || k.Into < 20*time.Millisecond || len(k.PIDs) != 1 {
		t.Fatalf("kill during an invocation: %+v, %v", k, err)
	}
	// The idle kill takes effect at the instance's next invocation, which
	// fails; the kill during an invocation took effect at once.
	next := time.Now()
	s.invoked(idle, next, errors.New("Runtime.ExitError"))
	s.invoked(busy, k.At.Add(-k.Into), errors.New("Runtime.ExitError"))
	s.invoked(idle, next.Add(time.Second), errors.New("a later failure"))
	got := s.RuntimeKills()
	if len(got) != 2 || got[0].Instance != "dispatcher-1" || got[1].Instance != "intake-2" {
		t.Fatalf("kills recorded: %+v", got)
	}
	if !got[0].HitAt.Equal(next) || got[0].Interrupted || !got[1].HitAt.IsZero() || !got[1].Interrupted {
		t.Fatalf("where the kills took effect: %+v", got)
	}

	// A kill whose invocation answered before the signal landed takes
	// effect at the next invocation.
	late := fakeInstance(t, "processor-1")
	s.all = append(s.all, late)
	late.invokedSince.Store(time.Now().UnixNano())
	k, err = s.KillRuntimeInvoked(ctx, "processor-1", 0)
	if err != nil || !k.Invoked {
		t.Fatalf("kill: %+v, %v", k, err)
	}
	s.invoked(late, k.At.Add(-k.Into), nil)
	next = time.Now()
	s.invoked(late, next, errors.New("Runtime.ExitError"))
	if got := s.RuntimeKills()[2]; got.Interrupted || !got.HitAt.Equal(next) {
		t.Fatalf("a kill after the answer: %+v", got)
	}
	if !strings.Contains(logs.String(), "into an invocation") {
		t.Fatalf("log:\n%s", logs.String())
	}
}
