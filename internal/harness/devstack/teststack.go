package devstack

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestLog is an in-memory stack log that several components write at once.
type TestLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *TestLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns the whole log.
func (l *TestLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Tail returns the last n lines, for a failure message.
func (l *TestLog) Tail(n int) string {
	lines := strings.Split(l.String(), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// StartForTest builds the real bootstraps and starts a stack for an
// end-to-end test: the module's own functions and scripts/devstack.json,
// free ports, the fast profile, a clean table and queues, and the
// warehouse sink on, as `make dev` runs it. The stack stops
// when the test ends. It returns the stack, the checked-in file (for its
// visibly fake secrets) and the stack's log.
func StartForTest(t testing.TB, ctx context.Context) (*Stack, File, *TestLog) {
	t.Helper()
	return StartModuleForTest(t, ctx, "")
}

// StartModuleForTest is StartForTest for a team's module: the function
// mains of the module at path module (relative to this repository's root)
// and its dev.json. "" is this repository's own.
func StartModuleForTest(t testing.TB, ctx context.Context, module string) (*Stack, File, *TestLog) {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Root: root, BuildDir: t.TempDir(), AutoPorts: true, WarehouseBucket: DefaultWarehouseBucket}
	if module != "" {
		cfg.Module = filepath.Join(root, module)
	}
	cfg.FastProfile()
	log := &TestLog{}
	logs := NewLogs(log)
	if err := Build(ctx, cfg, logs); err != nil {
		t.Fatal(err)
	}
	stack, err := Start(ctx, cfg, logs)
	if err != nil {
		t.Fatalf("start: %v\n%s", err, log.String())
	}
	t.Cleanup(stack.Close)
	file, _, err := LoadFile(stack.cfg.ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	return stack, file, log
}

// moduleRoot is the nearest directory above the working directory (a
// test's package directory) that holds go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("devstack: no go.mod above the working directory")
		}
		dir = parent
	}
}
