package devstack

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"
)

// A requested crash (crash.go) waits for a processor batch that claimed
// work. KillRuntime is the blunt one: it sends SIGKILL to the bootstrap a
// function instance's emulator runs, at once, whatever the instance is
// doing (idle, in an intake request, mid-batch, between a dispatcher's
// call and its record). The emulator stays up; its next invocation starts
// a fresh runtime (an init, as Lambda replaces a sandbox whose runtime
// died). The invocation the kill interrupts, if any, fails: the HTTP API
// answers 500, an event source mapping deletes nothing and the batch comes
// back after its queue's visibility timeout. The emulator reports a
// runtime that died while idle on its next invocation, which fails the
// same way (Runtime.ExitError) without running the function: so every
// kill costs one failed invocation, interrupted or not.
// KillRuntimeInvoked waits for an invocation to be under way first.

// ErrNoRuntime is a kill that found nothing to kill: no such instance, or
// its emulator has no runtime process (it was killed and not invoked
// since).
var ErrNoRuntime = errors.New("no runtime to kill")

// RuntimeKill is one SIGKILL sent by KillRuntime.
type RuntimeKill struct {
	At       time.Time `json:"at"`
	Instance string    `json:"instance"` // e.g. dispatcher-1
	Function string    `json:"function"`
	PIDs     []int     `json:"pids"` // the runtime processes killed
	// Invoked: an invocation was in flight on the instance, so the kill
	// interrupted it; Into is how long it had been running.
	Invoked bool          `json:"invoked"`
	Into    time.Duration `json:"into,omitempty"`
	// Interrupted: the invocation in flight at the kill failed. (One that
	// had already answered when the signal landed completes.)
	Interrupted bool `json:"interrupted,omitempty"`
	// HitAt, when the kill interrupted nothing (the runtime was idle, or
	// its invocation completed anyway), is when the instance's next
	// invocation started: the one the emulator failed for the dead runtime,
	// where the kill took effect. Zero until then, or if that invocation
	// succeeded.
	HitAt time.Time `json:"hit_at,omitzero"`
}

// InstanceNames lists the instances of fn, e.g. processor-1, processor-2.
func (s *Stack) InstanceNames(fn string) []string {
	var out []string
	for _, in := range s.all {
		if in.fn == fn {
			out = append(out, in.name)
		}
	}
	return out
}

// KillRuntime sends SIGKILL to the runtime (the real bootstrap) of the
// named instance now. It fails with ErrNoRuntime when the instance does
// not exist or runs no runtime at the moment.
func (s *Stack) KillRuntime(name string) (RuntimeKill, error) {
	in, err := s.instanceNamed(name)
	if err != nil {
		return RuntimeKill{}, err
	}
	return s.kill(in)
}

// KillRuntimeInvoked waits until an invocation of the named instance has
// run for at least into, then kills its runtime as KillRuntime does. An
// invocation that ends sooner is let go and the next one waited for. It
// gives up when ctx ends.
func (s *Stack) KillRuntimeInvoked(ctx context.Context, name string, into time.Duration) (RuntimeKill, error) {
	in, err := s.instanceNamed(name)
	if err != nil {
		return RuntimeKill{}, err
	}
	for {
		if since := in.invokedSince.Load(); since != 0 && time.Since(time.Unix(0, since)) >= into {
			return s.kill(in)
		}
		select {
		case <-ctx.Done():
			return RuntimeKill{}, fmt.Errorf("kill %s during an invocation: %w", name, ctx.Err())
		case <-time.After(200 * time.Microsecond):
		}
	}
}

func (s *Stack) instanceNamed(name string) (*instance, error) {
	i := slices.IndexFunc(s.all, func(in *instance) bool { return in.name == name })
	if i < 0 {
		return nil, fmt.Errorf("%w: no instance %q (have %v)", ErrNoRuntime, name, s.names())
	}
	in := s.all[i]
	if in.cmd == nil || in.cmd.Process == nil {
		return nil, fmt.Errorf("%w: %s has no emulator process", ErrNoRuntime, name)
	}
	return in, nil
}

func (s *Stack) kill(in *instance) (RuntimeKill, error) {
	k := RuntimeKill{Instance: in.name, Function: in.fn}
	if since := in.invokedSince.Load(); since != 0 {
		k.Invoked, k.Into = true, time.Since(time.Unix(0, since))
	}
	for _, pid := range childrenOf(in.cmd.Process.Pid) {
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			k.PIDs = append(k.PIDs, pid)
		}
	}
	k.At = time.Now()
	if len(k.PIDs) == 0 {
		return k, fmt.Errorf("%w: %s's emulator runs no runtime process", ErrNoRuntime, in.name)
	}
	// SIGKILL is delivered at once but the process dies when next
	// scheduled: return once it has (or after a second), so that the
	// instance runs no runtime when the kill returns.
	for deadline := time.Now().Add(time.Second); len(childrenOf(in.cmd.Process.Pid)) > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	s.crashMu.Lock()
	s.runtimeKills = append(s.runtimeKills, k)
	in.pendingKill = len(s.runtimeKills) // 1-based: 0 is none
	s.crashMu.Unlock()
	during := "idle"
	if k.Invoked {
		during = fmt.Sprintf("%s into an invocation", k.Into.Round(time.Millisecond))
	}
	s.logs.Printf(in.name, "requested kill: SIGKILL to its runtime (pid %v), %s", k.PIDs, during)
	return k, nil
}

// invoked notes the end of an invocation of in that started at start. A
// kill is settled by the first invocation that fails after it, or by the
// first one that started after it: the invocation in flight at the kill
// failed (Interrupted), or completed and left the kill to the next one; the
// next one failed (HitAt) or succeeded (the kill did nothing).
func (s *Stack) invoked(in *instance, start time.Time, err error) {
	s.crashMu.Lock()
	defer s.crashMu.Unlock()
	if in.pendingKill == 0 {
		return
	}
	k := &s.runtimeKills[in.pendingKill-1]
	switch {
	case start.Before(k.At) && err != nil:
		k.Interrupted = true
	case start.Before(k.At):
		return // answered before the signal landed: the next one decides
	case err != nil:
		k.HitAt = start
	}
	in.pendingKill = 0
}

// RuntimeKills returns the kills KillRuntime made, in order.
func (s *Stack) RuntimeKills() []RuntimeKill {
	s.crashMu.Lock()
	defer s.crashMu.Unlock()
	return slices.Clone(s.runtimeKills)
}

func (s *Stack) names() []string {
	var out []string
	for _, in := range s.all {
		out = append(out, in.name)
	}
	return out
}
