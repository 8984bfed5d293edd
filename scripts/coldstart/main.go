// Command coldstart measures each Lambda function's cold start: the size of
// its deployable bootstrap and the init duration of that bootstrap under the
// AWS Lambda Runtime Interface Emulator (aws-lambda-rie, pinned as a tool
// in go.mod).
//
//	go run ./scripts/coldstart [-runs 5] [-fn intake,processor] [-json out.json] [-timeout 5m]
//
// For every directory of functions/ it
//
//  1. builds the bootstrap as `make build` does (GOOS=linux GOARCH=arm64
//     CGO_ENABLED=0, -tags lambda.norpc -trimpath -ldflags "-s -w"; a warning
//     is printed if the Makefile's BUILD_FLAGS no longer say that) and
//     records its size: the bytes Lambda loads from the deployment package;
//  2. builds the same bootstrap, with the same flags, for this host (the
//     emulator runs native binaries only), and starts it under a fresh
//     aws-lambda-rie process -runs times, with the environment the local
//     stack gives it (package devstack): the sources and visibly fake
//     secrets of scripts/devstack.json, and AWS_ENDPOINT_URL_DYNAMODB and
//     AWS_ENDPOINT_URL_SQS pointing at DynamoDB (minidyn) and SQS (goaws)
//     emulators started in this process, with the ledger table and queues
//     created;
//  3. sends each fresh instance one invocation (the events/lambda fixtures:
//     an HTTP API request whose signature is a placeholder, so intake
//     refuses it with 401 and touches nothing; an SQS batch of one pointer
//     to an event the ledger does not hold and one malformed body; an empty
//     effects batch; a scheduled event), then a second one, and reports
//     the init duration, the wall time of the first invocation (init plus
//     the first handler run) and of the second (warm) one.
//
// The init duration is the emulator's own "INIT REPORT(durationMs: …)" log
// line (at --log-level info): from INIT START, when it starts the bootstrap
// process, to INIT RTDONE, when the runtime asks for its first event. That
// covers the Go runtime's start, reading config, and building the AWS SDK
// config and clients: what Lambda bills as Init Duration. The "Init
// Duration" of the emulator's REPORT line is printed too, but in this
// emulator (the classic handler of the pinned version) it times only the
// asynchronous hand-off of the init request to its sandbox, so it reads
// close to 0 ms whatever the bootstrap does. If no INIT REPORT line shows
// up, the first-response time stands in, and the table says so.
//
// What it does not measure: Lambda's own sandbox and package download
// before init, the arm64 CPU (the init runs on this host's architecture),
// or network latency to real AWS endpoints (the emulators are on loopback).
// Treat init durations as relative numbers between functions and commits.
//
// Everything listens on 127.0.0.1. The run is bounded by -timeout; every
// emulator process (and the bootstrap it runs) is stopped before exit, on
// Ctrl-C too, and the build directory is removed unless -keep is given.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/devstack"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "coldstart: "+err.Error())
		os.Exit(1)
	}
}

// buildFlags are the Makefile's BUILD_FLAGS, as arguments.
var buildFlags = []string{"-tags", "lambda.norpc", "-trimpath", "-ldflags", "-s -w"}

// makefileBuildFlags is how the Makefile spells them.
const makefileBuildFlags = `-tags lambda.norpc -trimpath -ldflags "-s -w"`

type options struct {
	root     string
	runs     int
	fns      []string
	jsonOut  string
	timeout  time.Duration
	keep     bool
	invokeTO time.Duration
}

// Result is one function's measurements (also the JSON shape).
type Result struct {
	Function     string    `json:"function"`
	Arm64Bytes   int64     `json:"arm64_bootstrap_bytes"`
	HostBytes    int64     `json:"host_bootstrap_bytes"`
	HostArch     string    `json:"host_arch"`
	InitSource   string    `json:"init_source"` // "rie-init-report" or "first-response"
	InitMs       []float64 `json:"init_ms"`     // INIT REPORT durationMs
	ReportInitMs []float64 `json:"report_init_duration_ms"`
	FirstMs      []float64 `json:"first_response_ms"`
	WarmMs       []float64 `json:"warm_response_ms"`
	InitMedianMs float64   `json:"init_median_ms"`
}

// Report is the JSON document -json writes.
type Report struct {
	Date      string   `json:"date"`
	GoVersion string   `json:"go_version"`
	Host      string   `json:"host"`
	CPUs      int      `json:"cpus"`
	Runs      int      `json:"runs"`
	Results   []Result `json:"results"`
}

func run() error {
	var o options
	var fns string
	flag.StringVar(&o.root, "root", ".", "repository root")
	flag.IntVar(&o.runs, "runs", 5, "cold starts per function (a fresh emulator process each)")
	flag.StringVar(&fns, "fn", "", "comma-separated functions (default: every directory of functions/)")
	flag.StringVar(&o.jsonOut, "json", "", "also write the results as JSON to this file")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "bound on the whole run, builds included")
	flag.DurationVar(&o.invokeTO, "invoke-timeout", 30*time.Second, "bound on one invocation")
	flag.BoolVar(&o.keep, "keep", false, "keep the build directory (its path is printed)")
	flag.Parse()
	if o.runs < 1 || o.runs > 50 {
		return errors.New("-runs must be between 1 and 50")
	}
	if fns != "" {
		o.fns = strings.Split(fns, ",")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	all, err := functionDirs(o.root)
	if err != nil {
		return err
	}
	if o.fns == nil {
		o.fns = all
	}
	for _, fn := range o.fns {
		if !slices.Contains(all, fn) {
			return fmt.Errorf("no function %q in %s (have %v)", fn, filepath.Join(o.root, "functions"), all)
		}
	}
	checkMakefile(o.root)

	dir, err := os.MkdirTemp("", "coldstart-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintln(os.Stderr, "build directory:", dir)
	} else {
		defer os.RemoveAll(dir)
	}

	fmt.Fprintf(os.Stderr, "building %d functions for linux/arm64 and linux/%s ...\n", len(o.fns), runtime.GOARCH)
	arm, err := build(ctx, o.root, filepath.Join(dir, "arm64"), "arm64", o.fns)
	if err != nil {
		return err
	}
	host, err := build(ctx, o.root, filepath.Join(dir, "host"), runtime.GOARCH, o.fns)
	if err != nil {
		return err
	}
	rie, err := rieBinary(ctx, o.root)
	if err != nil {
		return err
	}

	env, stopEmulators, err := startEmulators(ctx, o.root)
	if err != nil {
		return err
	}
	defer stopEmulators()

	var results []Result
	for _, fn := range o.fns {
		r := Result{Function: fn, HostArch: runtime.GOARCH, InitSource: "rie-init-report"}
		if r.Arm64Bytes, err = size(arm[fn]); err != nil {
			return err
		}
		if r.HostBytes, err = size(host[fn]); err != nil {
			return err
		}
		payload, err := invocation(o.root, fn)
		if err != nil {
			return err
		}
		for i := range o.runs {
			m, err := coldStart(ctx, rie, host[fn], env.forFunction(fn), payload, o.invokeTO)
			if err != nil {
				return fmt.Errorf("%s run %d: %w", fn, i+1, err)
			}
			if m.init < 0 {
				r.InitSource = "first-response"
				m.init = m.first
			}
			r.InitMs = append(r.InitMs, m.init)
			r.ReportInitMs = append(r.ReportInitMs, m.reportInit)
			r.FirstMs = append(r.FirstMs, m.first)
			r.WarmMs = append(r.WarmMs, m.warm)
			fmt.Fprintf(os.Stderr, "  %-11s run %d: init %.1f ms, first response %.1f ms, warm %.1f ms\n", fn, i+1, m.init, m.first, m.warm)
		}
		r.InitMedianMs = median(r.InitMs)
		results = append(results, r)
	}

	rep := Report{
		Date: time.Now().UTC().Format(time.RFC3339), GoVersion: runtime.Version(),
		Host: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(), Runs: o.runs, Results: results,
	}
	printTable(os.Stdout, rep)
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// functionDirs lists functions/<name> directories that hold a main.go.
func functionDirs(root string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(root, "functions"))
	if err != nil {
		return nil, fmt.Errorf("%v (run from the repository root or pass -root)", err)
	}
	var out []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(root, "functions", e.Name(), "main.go")); e.IsDir() && err == nil {
			out = append(out, e.Name())
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no functions found")
	}
	return out, nil
}

// checkMakefile warns when the Makefile builds with other flags than ours.
func checkMakefile(root string) {
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		return
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "BUILD_FLAGS :="); ok && strings.TrimSpace(v) != makefileBuildFlags {
			fmt.Fprintf(os.Stderr, "warning: the Makefile's BUILD_FLAGS are %q; this program builds with %q\n", strings.TrimSpace(v), makefileBuildFlags)
		}
	}
}

// build compiles every function for linux/arch into out/<fn>, in one go
// build run, and returns the binaries' paths.
func build(ctx context.Context, root, out, arch string, fns []string) (map[string]string, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	args := append([]string{"build"}, buildFlags...)
	args = append(args, "-o", out+string(filepath.Separator))
	for _, fn := range fns {
		args = append(args, "./functions/"+fn)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("GOARCH=%s go %s: %v\n%s", arch, strings.Join(args, " "), err, b)
	}
	paths := map[string]string{}
	for _, fn := range fns {
		paths[fn] = filepath.Join(out, fn)
	}
	return paths, nil
}

// rieBinary returns the pinned emulator's executable, built by the go
// command's tool cache (`go tool -n` builds it if needed and prints its
// path), so the emulator runs directly with no go process in between.
func rieBinary(ctx context.Context, root string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "tool", "-n", "aws-lambda-rie")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go tool -n aws-lambda-rie: %v\n%s", err, stderr.String())
	}
	path := strings.TrimSpace(string(out))
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("aws-lambda-rie: %w", err)
	}
	return path, nil
}

func size(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// stackEnv is what every function's environment is made from.
type stackEnv struct {
	common  []string
	effects string // the dispatcher's EFFECTS document
}

func (e stackEnv) forFunction(fn string) []string {
	env := append(slices.Clone(e.common), "AWS_LAMBDA_FUNCTION_NAME=coldstart-"+fn)
	if fn == "dispatcher" {
		env = append(env, "EFFECTS="+e.effects)
	}
	return env
}

// devstackFile is the part of scripts/devstack.json the functions need:
// the sources and effects as deployed, and the visibly fake secrets their
// env: references resolve to.
type devstackFile struct {
	Sources json.RawMessage   `json:"sources_config"`
	Effects json.RawMessage   `json:"effects_config"`
	Secrets map[string]string `json:"secrets"`
}

// startEmulators starts DynamoDB and SQS on loopback, creates the ledger
// table and the queue pairs, and returns the functions' environment.
func startEmulators(ctx context.Context, root string) (stackEnv, func(), error) {
	raw, err := os.ReadFile(filepath.Join(root, "scripts", "devstack.json"))
	if err != nil {
		return stackEnv{}, nil, err
	}
	var f devstackFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return stackEnv{}, nil, fmt.Errorf("scripts/devstack.json: %w", err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return stackEnv{}, nil, err
	}
	dyn := &http.Server{Handler: localaws.DynamoHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = dyn.Serve(l) }()
	stop := func() { _ = dyn.Close() }
	dynURL := "http://" + l.Addr().String()
	sq, err := localaws.StartSQS("")
	if err != nil {
		stop()
		return stackEnv{}, nil, err
	}

	const table = "coldstart-ledger"
	if err := ledger.CreateTable(ctx, localaws.DynamoAt(dynURL), table); err != nil {
		stop()
		return stackEnv{}, nil, err
	}
	sqsClient := sq.Client()
	events, err := queue.Create(ctx, sqsClient, queue.Events("coldstart-"))
	if err != nil {
		stop()
		return stackEnv{}, nil, err
	}
	effects, err := queue.Create(ctx, sqsClient, queue.Effects("coldstart-"))
	if err != nil {
		stop()
		return stackEnv{}, nil, err
	}

	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"AWS_REGION=" + localaws.Region, "AWS_DEFAULT_REGION=" + localaws.Region,
		"AWS_ACCESS_KEY_ID=" + localaws.FakeAccessKey, "AWS_SECRET_ACCESS_KEY=" + localaws.FakeSecretKey,
		"AWS_ENDPOINT_URL_DYNAMODB=" + dynURL, "AWS_ENDPOINT_URL_SQS=" + sq.URL,
		"AWS_LAMBDA_FUNCTION_TIMEOUT=30",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256",
		"TABLE_NAME=" + table,
		"EVENTS_QUEUE_URL=" + events.Queue, "EVENTS_DLQ_URL=" + events.DLQ,
		"EFFECTS_QUEUE_URL=" + effects.Queue, "EFFECTS_DLQ_URL=" + effects.DLQ,
		"SOURCES=" + string(f.Sources),
		"ALLOW_ENV_SECRETS=true",
		"LOG_LEVEL=warn",
	}
	for k, v := range f.Secrets {
		env = append(env, k+"="+v)
	}
	return stackEnv{common: env, effects: string(f.Effects)}, stop, nil
}

// invocation is the first event each function is sent.
func invocation(root, fn string) ([]byte, error) {
	switch fn {
	case "intake":
		return os.ReadFile(filepath.Join(root, "events", "lambda", "http-api-webhook.json"))
	case "processor":
		return os.ReadFile(filepath.Join(root, "events", "lambda", "sqs-pointer-batch.json"))
	case "dispatcher":
		return []byte(`{"Records":[]}`), nil
	case "bridge":
		// From the local stack's Stripe partner event source (scripts/devstack.json).
		return os.ReadFile(filepath.Join(root, "events", "eventbridge", "stripe-customer.subscription.updated.json"))
	case "reconciler":
		return []byte(`{"version":"0","id":"coldstart-0000","detail-type":"Scheduled Event","source":"aws.events",` +
			`"account":"123456789012","time":"2026-11-30T12:00:00Z","region":"us-east-1","resources":[],"detail":{}}`), nil
	default:
		return []byte(`{}`), nil
	}
}

// measurement is one cold start, in milliseconds; init is -1 when the
// emulator printed no INIT REPORT, reportInit -1 when its REPORT line had
// no Init Duration.
type measurement struct{ init, reportInit, first, warm float64 }

var (
	initReport   = regexp.MustCompile(`INIT REPORT\(durationMs: ([0-9.]+)\)`)
	initDuration = regexp.MustCompile(`Init Duration: ([0-9.]+) ms`)
)

// coldStart starts one emulator process running bootstrap, invokes it
// twice and stops it (and the bootstrap) again.
func coldStart(ctx context.Context, rie, bootstrap string, env []string, payload []byte, invokeTO time.Duration) (measurement, error) {
	ports, err := devstack.FreePorts(2)
	if err != nil {
		return measurement{}, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	cmd := exec.Command(rie,
		"--runtime-interface-emulator-address", addr,
		"--runtime-api-address", "127.0.0.1:"+strconv.Itoa(ports[1]),
		"--log-level", "info", // for its INIT REPORT line
		bootstrap)
	cmd.Env = env
	cmd.Dir = filepath.Dir(bootstrap)
	// Its own process group, so stopping it also stops the bootstrap, and
	// killed with this program if this program dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out := newLogTail()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return measurement{}, fmt.Errorf("start aws-lambda-rie: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer stopGroup(cmd.Process.Pid, exited)

	if err := devstack.WaitPort(ctx, addr, exited, 15*time.Second); err != nil {
		return measurement{}, fmt.Errorf("emulator did not listen on %s: %w\n%s", addr, err, out)
	}
	first, err := invoke(ctx, addr, payload, invokeTO)
	if err != nil {
		return measurement{}, fmt.Errorf("first invocation: %w\n%s", err, out)
	}
	warm, err := invoke(ctx, addr, payload, invokeTO)
	if err != nil {
		return measurement{}, fmt.Errorf("second invocation: %w\n%s", err, out)
	}
	m := measurement{init: -1, reportInit: -1, first: ms(first), warm: ms(warm)}
	// The lines are printed as the invocation ends; allow the output pipe
	// a moment to deliver them. The first match of each is the cold one.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && (m.init < 0 || m.reportInit < 0) {
		logs := out.String()
		if sub := initReport.FindStringSubmatch(logs); sub != nil {
			m.init, _ = strconv.ParseFloat(sub[1], 64)
		}
		if sub := initDuration.FindStringSubmatch(logs); sub != nil {
			m.reportInit, _ = strconv.ParseFloat(sub[1], 64)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return m, nil
}

// invoke posts one event to the emulator and returns the wall time to the
// whole response. A function error fails the measurement: the number would
// not describe a working function.
func invoke(ctx context.Context, addr string, payload []byte, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/2015-03-31/functions/function/invocations", bytes.NewReader(payload))
	if err != nil {
		return 0, err
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	took := time.Since(start)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(body))
	}
	var fnErr struct {
		ErrorType    string `json:"errorType"`
		ErrorMessage string `json:"errorMessage"`
	}
	if json.Unmarshal(body, &fnErr) == nil && fnErr.ErrorType != "" {
		return 0, fmt.Errorf("function error %s: %s", fnErr.ErrorType, fnErr.ErrorMessage)
	}
	return took, nil
}

// stopGroup stops a process group: SIGTERM, then SIGKILL after 2 s.
func stopGroup(pid int, exited <-chan struct{}) {
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(2 * time.Second):
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	select {
	case <-exited:
	case <-time.After(2 * time.Second):
	}
}

// logTail keeps a process's output (bounded) for parsing and for errors.
type logTail struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func newLogTail() *logTail { return &logTail{} }

func (t *logTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.buf.Len() < 256<<10 {
		t.buf.Write(p)
	}
	return len(p), nil
}

func (t *logTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func printTable(w io.Writer, rep Report) {
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	fmt.Fprintf(bw, "Cold start, %s, %d CPUs, %s, %d runs per function (median, min–max)\n\n", rep.Host, rep.CPUs, rep.GoVersion, rep.Runs)
	fmt.Fprintf(bw, "| function | bootstrap linux/arm64 (stripped) | bootstrap linux/%s | init duration (RIE INIT REPORT) | RIE REPORT \"Init Duration\" | first response | warm response |\n", runtime.GOARCH)
	fmt.Fprintln(bw, "|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range rep.Results {
		initCol := spread(r.InitMs)
		if r.InitSource != "rie-init-report" {
			initCol += " (first response; RIE printed no INIT REPORT)"
		}
		fmt.Fprintf(bw, "| %s | %s | %s | %s | %s | %s | %s |\n", r.Function, mib(r.Arm64Bytes), mib(r.HostBytes), initCol, spread(r.ReportInitMs), spread(r.FirstMs), spread(r.WarmMs))
	}
	fmt.Fprintln(bw, "\nInit duration: the emulator's INIT REPORT, from starting the bootstrap to its first request for an event.")
	fmt.Fprintln(bw, "The REPORT line's \"Init Duration\" times only the emulator's asynchronous init hand-off (near 0 by construction).")
	fmt.Fprintln(bw, "First response: wall time of the first invocation (init + first handler run); warm: the second one.")
}

func spread(xs []float64) string {
	if len(xs) == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f ms (%.1f–%.1f)", median(xs), slices.Min(xs), slices.Max(xs))
}

func mib(n int64) string { return fmt.Sprintf("%.2f MiB (%d B)", float64(n)/(1<<20), n) }
