// Command dynalite runs a command against dynalite, the second, stricter
// DynamoDB implementation the ledger's contract tests use: it starts
// dynalite (pinned in this folder's package.json, installed by `npm ci`
// here) on a free loopback port, runs the command with the URL in
// LEDGER_TEST_DYNAMODB_URL (-mode full: the whole ledger suite runs on
// dynalite; tests that need a transaction skip) or LEDGER_TEST_STRICT_URL
// (-mode strict: the suite runs on minidyn, and every part of every
// transaction is first validated on dynalite as a single write that cannot
// succeed), and stops dynalite.
//
//	go run ./scripts/dynalite -mode full -- go test -count=1 ./internal/ledger/
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	mode := flag.String("mode", "full", "full (LEDGER_TEST_DYNAMODB_URL) or strict (LEDGER_TEST_STRICT_URL)")
	bin := flag.String("bin", filepath.Join("scripts", "dynalite", "node_modules", ".bin", "dynalite"), "the dynalite executable")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: dynalite [-mode full|strict] -- command args...")
		os.Exit(2)
	}
	env := map[string]string{"full": "LEDGER_TEST_DYNAMODB_URL", "strict": "LEDGER_TEST_STRICT_URL"}[*mode]
	if env == "" {
		fmt.Fprintf(os.Stderr, "dynalite: -mode %q: want full or strict\n", *mode)
		os.Exit(2)
	}
	code, err := run(*bin, env, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "dynalite:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run(bin, env string, args []string) (int, error) {
	if _, err := os.Stat(bin); err != nil {
		return 1, fmt.Errorf("%s not found: run `npm ci` in scripts/dynalite (make does): %w", bin, err)
	}
	port, err := freePort()
	if err != nil {
		return 1, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// Tables ready at once: the tests create one per test.
	d := exec.Command(bin, "--host", "127.0.0.1", "--port", fmt.Sprint(port), "--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0")
	d.Stdout, d.Stderr = os.Stderr, os.Stderr
	d.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group: stopped with everything it started
	if err := d.Start(); err != nil {
		return 1, fmt.Errorf("start %s: %w", bin, err)
	}
	stop := func() {
		_ = syscall.Kill(-d.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = d.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-d.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	defer stop()
	if err := waitListening(addr, 15*time.Second); err != nil {
		return 1, err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), env+"=http://"+addr)
	fmt.Fprintf(os.Stderr, "dynalite on %s: %s=http://%s %v\n", addr, env, addr, args)
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	return 0, err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitListening(addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dynalite did not listen on %s within %s: %w", addr, limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
