package capacity

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/effectively-once/webhooks/internal/config"
	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/intake"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
)

// CPUCommand asks a CPU worker for one measured block: n new signed
// deliveries of size bytes, and a CPU profile of the block written to
// Profile when it is not empty.
type CPUCommand struct {
	Size    int    `json:"size"`
	N       int    `json:"n"`
	Tag     string `json:"tag"`
	Profile string `json:"profile"`
}

// CPUReply is a worker's answer to one CPUCommand: what the block cost the
// worker process (getrusage RUSAGE_SELF and the Go allocator), its wall
// time and the wall time of each delivery's Invoke.
type CPUReply struct {
	Tag        string `json:"tag"`
	UserNS     int64  `json:"user_ns"`
	SysNS      int64  `json:"sys_ns"`
	WallNS     int64  `json:"wall_ns"`
	Mallocs    uint64 `json:"mallocs"`
	AllocBytes uint64 `json:"alloc_bytes"`
	P50NS      int64  `json:"p50_ns"`
	P99NS      int64  `json:"p99_ns"`
	Dups       int    `json:"dups"`
	Error      string `json:"error,omitempty"`
}

// The contenders a CPU worker can be.
const (
	ContenderOurs = "ours"
	ContenderBare = "bare"
	// ContenderBarePayload is the bare handler making our intake's three
	// requests for a body kept out of line: a conditional put of a small
	// event item, a put of the body in its own item, the send. It prices
	// the payload item's request apart from the rest of our code.
	ContenderBarePayload = "bare-payload"
	// ContenderOursInline is ours with the ledger keeping payloads up to
	// 64 KiB inside the event item: two requests, as the bare handler,
	// for more write units per event (the design we did not choose).
	ContenderOursInline = "ours-inline"
)

// CPUContenders are the contenders MeasureIntakeCPU runs, in the order
// of a CPURow's per-contender fields.
var CPUContenders = []string{ContenderOurs, ContenderBare, ContenderBarePayload, ContenderOursInline}

// InlineContenderMax is ours-inline's ledger InlinePayloadMax.
const InlineContenderMax = 64 << 10

// cpuReady is the tag of the line a worker writes once its handler is
// built (or failed to build), before it reads any command.
const cpuReady = "ready"

// ServeCPUWorker is one function process of one contender: it builds the
// contender's handler once, as a Lambda cold start does, from getenv (the
// local stack's function environment), writes a ready line to out, then
// answers each CPUCommand line read from in with one CPUReply line until
// in ends.
func ServeCPUWorker(ctx context.Context, contender string, getenv func(string) string, in io.Reader, out io.Writer) error {
	enc := json.NewEncoder(out)
	h, err := cpuHandler(ctx, contender, getenv)
	if err != nil {
		_ = enc.Encode(CPUReply{Tag: cpuReady, Error: err.Error()})
		return err
	}
	if err := enc.Encode(CPUReply{Tag: cpuReady}); err != nil {
		return err
	}
	invoke := lambda.NewHandler(h)
	sc := bufio.NewScanner(in)
	seq := 0
	for sc.Scan() {
		var c CPUCommand
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return fmt.Errorf("command %q: %w", sc.Text(), err)
		}
		r := runCPUBlock(ctx, invoke, contender, getenv("SIDE_SECRET"), c, &seq)
		r.Tag = c.Tag
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return sc.Err()
}

// cpuHandler builds the contender's HTTP API handler. Ours is built as
// the intake's composition root (pkg/app/intake) builds it: configuration
// from the environment, the shared runtime (JSON logger and EMF metrics on
// stdout, the ledger, the secret cache) and an SQS sender. The bare one
// loads the default AWS configuration and makes plain clients from it, as
// an engineer writing a minimal handler would.
func cpuHandler(ctx context.Context, contender string, getenv func(string) string) (func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error), error) {
	switch contender {
	case ContenderOurs, ContenderOursInline:
		cfg, err := config.LoadIntake(getenv)
		if err != nil {
			return nil, err
		}
		rt, err := cfg.Start(ctx, "intake", "intake")
		if err != nil {
			return nil, err
		}
		if contender == ContenderOursInline {
			rt.Ledger, err = ledger.New(dynamodb.NewFromConfig(rt.AWS), ledger.Options{Table: cfg.Table, Retention: cfg.Retention, Actor: "intake",
				DueShards: cfg.DueShards, DueShardsRead: cfg.DueShardsRead, InlinePayloadMax: InlineContenderMax})
			if err != nil {
				return nil, err
			}
		}
		h := intake.New(cfg, rt)
		return h.HandleHTTPAPI, nil
	case ContenderBare, ContenderBarePayload:
		cfg, err := awsconfig.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, err
		}
		b := &BareIntake{DB: dynamodb.NewFromConfig(cfg), Table: getenv("TABLE_NAME"),
			SQS: sqs.NewFromConfig(cfg), QueueURL: getenv("EVENTS_QUEUE_URL"), Secret: getenv("SIDE_SECRET"),
			PayloadItem: contender == ContenderBarePayload}
		return b.HandleHTTPAPI, nil
	}
	return nil, fmt.Errorf("unknown contender %q (want one of %v)", contender, CPUContenders)
}

// runCPUBlock prepares c.N signed deliveries, then measures their
// delivery. Everything outside the measured span (building and signing
// the requests, a full GC of that garbage) is paid before the first
// reading.
func runCPUBlock(ctx context.Context, h lambda.Handler, contender, secret string, c CPUCommand, seq *int) CPUReply {
	fail := func(err error) CPUReply { return CPUReply{Error: err.Error()} }
	payloads := make([][]byte, c.N)
	for i := range payloads {
		*seq++
		id := fmt.Sprintf("evt_cpu_%s_%s_%d_%06d", contender, c.Tag, c.Size, *seq)
		p, err := signedSideRequest(id, c.Size, secret, time.Now())
		if err != nil {
			return fail(err)
		}
		payloads[i] = p
	}
	runtime.GC()
	var ru0, ru1 syscall.Rusage
	var ms0, ms1 runtime.MemStats
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru0); err != nil {
		return fail(err)
	}
	runtime.ReadMemStats(&ms0)
	start := time.Now()
	var prof *os.File
	if c.Profile != "" {
		f, err := os.Create(c.Profile)
		if err != nil {
			return fail(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return fail(err)
		}
		prof = f
	}
	var dups int
	took, derr := deliverAll(ctx, h, payloads, &dups)
	if prof != nil {
		pprof.StopCPUProfile()
		if err := prof.Close(); err != nil && derr == nil {
			derr = err
		}
	}
	wall := time.Since(start)
	runtime.ReadMemStats(&ms1)
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru1); err != nil {
		return fail(err)
	}
	if derr != nil {
		return fail(derr)
	}
	r := CPUReply{
		UserNS: ru1.Utime.Nano() - ru0.Utime.Nano(), SysNS: ru1.Stime.Nano() - ru0.Stime.Nano(), WallNS: int64(wall),
		Mallocs: ms1.Mallocs - ms0.Mallocs, AllocBytes: ms1.TotalAlloc - ms0.TotalAlloc, Dups: dups,
	}
	if len(took) > 0 {
		p50, p99 := percentiles(took)
		r.P50NS, r.P99NS = int64(p50), int64(p99)
	}
	return r
}

// signedSideRequest is one delivery as API Gateway hands it to the
// function: an HTTP API 2.0 event carrying a realistic Stripe event of
// size bytes, signed at `at` (the same request shape the in-process
// comparison uses).
func signedSideRequest(id string, size int, secret string, at time.Time) ([]byte, error) {
	body := sideEvent(id, size, at)
	sig := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at}).Header
	req := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RawPath: "/webhooks/stripe", Body: string(body),
		Headers:        map[string]string{"content-type": "application/json", "stripe-signature": sig},
		PathParameters: map[string]string{"source": "stripe"},
		RequestContext: events.APIGatewayV2HTTPRequestContext{RequestID: "req-" + id,
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/webhooks/stripe"}},
	}
	return json.Marshal(req)
}

// CPUOptions shape MeasureIntakeCPU; the zero value is the bench's run.
type CPUOptions struct {
	Sizes    []int // payload sizes in bytes; default 1 KB and 4 KB
	Procs    []int // GOMAXPROCS of the workers; default 1 and 2
	Reps     int   // repetitions; default 5
	PerBlock int   // deliveries per contender per repetition and size; default 400
	Warmup   int   // deliveries per contender and size before the first repetition, not measured; default 50, negative: none
	ProfileN int   // deliveries of the profiled block of ours (4 KB, GOMAXPROCS 1); default 2000, negative: no profile
	// ProfileDir, when set, keeps the profile (intake.prof) and the worker
	// binary it was taken of (cpuworker) there, for go tool pprof.
	ProfileDir string
}

func (o CPUOptions) withDefaults() CPUOptions {
	blockDefaults(&o.Sizes, &o.Reps, &o.PerBlock, &o.Warmup)
	if len(o.Procs) == 0 {
		o.Procs = []int{1, 2}
	}
	if o.ProfileN == 0 {
		o.ProfileN = 2000
	}
	return o
}

// CPURow is one GOMAXPROCS and payload size of the CPU comparison.
//
// Its per-contender fields follow CPUContenders' order.
type CPURow struct {
	Procs        int
	Size         int // the payload size asked for (CPUOptions.Sizes)
	PayloadBytes int // the measured events' size
	Deliveries   int // per contender, over all repetitions
	// CPU (user+sys) per delivery in µs, one value per repetition.
	CPU [][]float64
	// Medians over the repetitions of each block's Invoke wall p50 and p99.
	P50, P99 []time.Duration
	// Go heap allocations and allocated bytes per delivery, over all
	// repetitions.
	Allocs, Bytes []float64
	// New events answered as duplicates (an SDK retry of a conditional
	// put whose first attempt had succeeded).
	Duplicates []int
}

func cpuIndex(contender string) int {
	i := slices.Index(CPUContenders, contender)
	if i < 0 {
		panic("unknown contender " + contender)
	}
	return i
}

// CPUOf is a contender's CPU per delivery over the repetitions.
func (r CPURow) CPUOf(contender string) Spread { return spreadOf(r.CPU[cpuIndex(contender)]) }

// Ratio is a's CPU per delivery over b's within each repetition (the
// contenders ran one after the other under the same load), summarised.
func (r CPURow) Ratio(a, b string) Spread {
	xs, ys := r.CPU[cpuIndex(a)], r.CPU[cpuIndex(b)]
	var rs []float64
	for i := range min(len(xs), len(ys)) {
		if ys[i] > 0 {
			rs = append(rs, xs[i]/ys[i])
		}
	}
	if len(rs) == 0 {
		return Spread{}
	}
	return spreadOf(rs)
}

// Of returns the value of a per-contender field for contender.
func Of[T any](vs []T, contender string) T { return vs[cpuIndex(contender)] }

// CPUReport is the result of MeasureIntakeCPU.
type CPUReport struct {
	Options CPUOptions // with the defaults filled in
	Rows    []CPURow
	// Profile is the top of the CPU profile of ours by own (flat) time
	// and ProfileCum by cumulative time, which names the handler's own
	// functions (their cost is mostly in what they call); ProfileCommand
	// is the command that printed the first (the second adds -cum after
	// -top).
	Profile, ProfileCum []string
	ProfileCommand      string
	ProfileBytes        int // payload size of the profiled block's events
	// Items is the profiled block's CPU per delivery by part of the work.
	Items        []CPUItem
	BuildCommand string
	GoVersion    string
}

// profileSize is the payload size of the profiled block.
const profileSize = 4 << 10

// MeasureIntakeCPU measures the CPU a function process spends per
// delivery, ours (intake.Handler as the composition root builds it) against
// the bare handler (BareIntake), with the emulators outside the measured
// process. It builds the worker (cpuworker) as a Lambda bootstrap is
// built, starts minidyn and goaws in this process, and for each GOMAXPROCS
// runs one worker per contender: a warm-up, then Reps repetitions of one
// block of PerBlock deliveries per contender and size, the order of the
// contenders swapped every repetition. Each worker reports its own
// user+sys CPU (getrusage RUSAGE_SELF) over the block. At GOMAXPROCS 1 (or
// the first one measured) a final block of ours is profiled.
func MeasureIntakeCPU(ctx context.Context, o CPUOptions) (CPUReport, error) {
	o = o.withDefaults()
	rep := CPUReport{Options: o, ProfileBytes: len(sideEvent("evt_size", profileSize, time.Now()))}
	tmp, err := os.MkdirTemp("", "intake-cpu-")
	if err != nil {
		return rep, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	bin, build, err := buildCPUWorker(ctx, tmp)
	if err != nil {
		return rep, err
	}
	rep.BuildCommand = build
	if out, err := exec.CommandContext(ctx, "go", "env", "GOVERSION").Output(); err == nil {
		rep.GoVersion = strings.TrimSpace(string(out))
	}

	d := localaws.NewDynamo()
	defer d.Close()
	if err := ledger.CreateTable(ctx, d.Client(), "ledger"); err != nil {
		return rep, err
	}
	for _, c := range CPUContenders {
		if c == ContenderBare || c == ContenderBarePayload {
			if err := CreateBareTable(ctx, d.Client(), c); err != nil {
				return rep, err
			}
		}
	}
	sq, err := localaws.StartSQS("")
	if err != nil {
		return rep, err
	}
	spec := func(name string) queue.Spec {
		return queue.Spec{Name: localaws.UniqueName(name), VisibilityTimeout: time.Minute, MaxReceiveCount: 3, DLQRetention: time.Hour}
	}
	// Each contender its own queue; ours and ours-inline share the ledger
	// table (every event id is unique), each bare one its own table.
	envs := make([][]string, len(CPUContenders))
	for i, c := range CPUContenders {
		q, err := queue.Create(ctx, sq.Client(), spec("cpu-"+c))
		if err != nil {
			return rep, err
		}
		table := "ledger"
		if c == ContenderBare || c == ContenderBarePayload {
			table = c
		}
		envs[i] = cpuWorkerEnv(c, d.URL, sq.URL, table, q.Queue)
	}
	names := CPUContenders
	profileAt := o.Procs[0]
	if slices.Contains(o.Procs, 1) {
		profileAt = 1
	}
	for _, procs := range o.Procs {
		rows, prof, err := measureCPUAt(ctx, o, bin, names, envs, procs, procs == profileAt && o.ProfileN > 0, tmp)
		if err != nil {
			return rep, fmt.Errorf("GOMAXPROCS=%d: %w", procs, err)
		}
		rep.Rows = append(rep.Rows, rows...)
		if prof != "" {
			rep.ProfileCommand = "go tool pprof -top -nodecount=25 cpuworker intake.prof"
			if o.ProfileDir != "" {
				if err := keepProfile(o.ProfileDir, bin, prof); err != nil {
					return rep, err
				}
				rep.ProfileCommand = "go tool pprof -top -nodecount=25 " + filepath.Join(o.ProfileDir, "cpuworker") + " " + filepath.Join(o.ProfileDir, "intake.prof")
			}
			if rep.Profile, err = pprofTop(ctx, bin, prof); err != nil {
				return rep, err
			}
			if rep.ProfileCum, err = pprofTop(ctx, bin, prof, "-cum"); err != nil {
				return rep, err
			}
			if rep.Items, err = profileItems(ctx, bin, prof, o.ProfileN); err != nil {
				return rep, err
			}
		}
	}
	return rep, nil
}

// measureCPUAt runs every contender's worker at GOMAXPROCS procs and
// returns one row per size, and the path of the profile of ours when
// profile is set.
func measureCPUAt(ctx context.Context, o CPUOptions, bin string, names []string, envs [][]string, procs int, profile bool, tmp string) ([]CPURow, string, error) {
	nc := len(names)
	ws := make([]*cpuWorker, nc)
	defer func() {
		for _, w := range ws {
			if w != nil {
				w.stop()
			}
		}
	}()
	for ci := range ws {
		w, err := startCPUWorker(ctx, bin, append(slices.Clone(envs[ci]), "CPU_CONTENDER="+names[ci], "GOMAXPROCS="+strconv.Itoa(procs)))
		if err != nil {
			return nil, "", fmt.Errorf("start %s: %w", names[ci], err)
		}
		ws[ci] = w
	}
	p := "p" + strconv.Itoa(procs)
	if o.Warmup > 0 {
		for _, size := range o.Sizes {
			for ci, w := range ws {
				if _, err := w.do(CPUCommand{Size: size, N: o.Warmup, Tag: p + "warm"}); err != nil {
					return nil, "", fmt.Errorf("warm-up %s %d B: %w", names[ci], size, err)
				}
			}
		}
	}
	n := o.Reps * o.PerBlock
	rows := make([]CPURow, len(o.Sizes))
	p50s, p99s := make([][][]float64, len(o.Sizes)), make([][][]float64, len(o.Sizes))
	allocs, bytes := make([][]uint64, len(o.Sizes)), make([][]uint64, len(o.Sizes))
	for si, size := range o.Sizes {
		rows[si] = CPURow{Procs: procs, Size: size, PayloadBytes: len(sideEvent("evt_size", size, time.Now())), Deliveries: n,
			CPU: make([][]float64, nc), P50: make([]time.Duration, nc), P99: make([]time.Duration, nc),
			Allocs: make([]float64, nc), Bytes: make([]float64, nc), Duplicates: make([]int, nc)}
		p50s[si], p99s[si] = make([][]float64, nc), make([][]float64, nc)
		allocs[si], bytes[si] = make([]uint64, nc), make([]uint64, nc)
	}
	for r := range o.Reps {
		for si, size := range o.Sizes {
			// Each contender leads in turn, so the noise of a shared
			// machine falls on all of them.
			for k := range nc {
				ci := (r + k) % nc
				rp, err := ws[ci].do(CPUCommand{Size: size, N: o.PerBlock, Tag: p + "r" + strconv.Itoa(r)})
				if err != nil {
					return nil, "", fmt.Errorf("%s %d B repetition %d: %w", names[ci], size, r, err)
				}
				row := &rows[si]
				row.CPU[ci] = append(row.CPU[ci], float64(rp.UserNS+rp.SysNS)/float64(o.PerBlock)/1e3)
				p50s[si][ci] = append(p50s[si][ci], float64(rp.P50NS))
				p99s[si][ci] = append(p99s[si][ci], float64(rp.P99NS))
				allocs[si][ci] += rp.Mallocs
				bytes[si][ci] += rp.AllocBytes
				row.Duplicates[ci] += rp.Dups
			}
		}
	}
	for si := range rows {
		for ci := range nc {
			rows[si].P50[ci] = time.Duration(spreadOf(p50s[si][ci]).Median)
			rows[si].P99[ci] = time.Duration(spreadOf(p99s[si][ci]).Median)
			rows[si].Allocs[ci] = float64(allocs[si][ci]) / float64(n)
			rows[si].Bytes[ci] = float64(bytes[si][ci]) / float64(n)
		}
	}
	if !profile {
		return rows, "", nil
	}
	path := filepath.Join(tmp, "intake-"+p+".prof")
	if _, err := ws[cpuIndex(ContenderOurs)].do(CPUCommand{Size: profileSize, N: o.ProfileN, Tag: p + "prof", Profile: path}); err != nil {
		return nil, "", fmt.Errorf("profiled block: %w", err)
	}
	return rows, path, nil
}

// cpuWorkerEnv is the environment of one worker: what the local stack
// gives an intake function (region, emulator endpoints, table, queue, one
// Stripe source whose secret is the env: reference SIDE_SECRET, the
// function's fake role credentials, the Lambda variables), with the
// contender's own table and queue.
func cpuWorkerEnv(contender, dynURL, sqsURL, table, queueURL string) []string {
	fn := "intake"
	if contender != ContenderOurs {
		fn = contender + "-intake"
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"AWS_REGION=" + localaws.Region, "AWS_DEFAULT_REGION=" + localaws.Region,
		"AWS_ENDPOINT_URL_DYNAMODB=" + dynURL, "AWS_ENDPOINT_URL_SQS=" + sqsURL,
		"AWS_LAMBDA_FUNCTION_NAME=local-" + fn,
		"AWS_LAMBDA_FUNCTION_TIMEOUT=30",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256",
		"TABLE_NAME=" + table,
		"EVENTS_QUEUE_URL=" + queueURL,
		`SOURCES={"sources":[{"name":"stripe","kind":"stripe","secrets":["env:SIDE_SECRET"]}]}`,
		"ALLOW_ENV_SECRETS=true",
		"LOG_LEVEL=info",
		"SIDE_SECRET=" + sideSecret,
		// The SDK's middleware nests deeper than the profiler's default
		// 128 frames; a truncated stack loses its outer frames, and with
		// them the part of the handler it belongs to.
		"GODEBUG=profstackdepth=1024",
	}
	return append(env, localaws.FunctionRole(fn, "local-"+fn).Env()...)
}

// buildCPUWorker builds cpuworker into dir with the flags of the Lambda
// build (for the host's GOOS and GOARCH) and returns its path and the
// command.
func buildCPUWorker(ctx context.Context, dir string) (string, string, error) {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if root == "." || strings.TrimSpace(string(gomod)) == os.DevNull {
		return "", "", errors.New("not inside the module (go env GOMOD is empty)")
	}
	bin := filepath.Join(dir, "cpuworker")
	args := []string{"build", "-trimpath", "-ldflags", "-s -w", "-tags", "lambda.norpc", "-o", bin, "./internal/harness/capacity/cpuworker"}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("build the worker: %w\n%s", err, out)
	}
	return bin, `CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -tags lambda.norpc -o cpuworker ./internal/harness/capacity/cpuworker`, nil
}

// keepProfile copies the worker binary and the profile into dir.
func keepProfile(dir, bin, prof string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for src, name := range map[string]string{bin: "cpuworker", prof: "intake.prof"} {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// CPUItem is one part of our intake's work in the profiled block: the CPU
// of the profile's samples that part (Rule) claims, per delivery.
type CPUItem struct {
	Part   string
	Rule   string
	Micros float64 // per delivery
}

// cpuParts claim a profile's samples, each sample for the first part whose
// test it passes (root is the stack's outermost frame, frames all of
// them). Go's CPU profiler keeps only the innermost 64 frames of a stack,
// and the SDK's middleware nests deeper than that, so a request's samples
// often lose the handler's frames above the SDK: parts are therefore told
// apart by the frames a sample keeps (a service client's package for the
// requests), and the parts add up to the whole profile.
var cpuParts = []struct {
	part, rule string
	test       func(root string, frames []string) bool
}{
	{"HTTP connection goroutines (writing requests, reading responses; both services)", "root net/http.(*persistConn).writeLoop or readLoop",
		func(root string, _ []string) bool { return strings.HasPrefix(root, "net/http.(*persistConn).") }},
	{"the Go runtime's own goroutines (garbage collector, scheduler)", "root runtime.*, other than runtime.main",
		func(root string, _ []string) bool {
			return strings.HasPrefix(root, "runtime.") && root != "runtime.main"
		}},
	{"DynamoDB requests: the event item's UpdateItem and the payload item's PutItem (SDK: serialization, signing, response)", "a frame of service/dynamodb",
		anyFrame("/aws-sdk-go-v2/service/dynamodb.")},
	{"the pointer's SQS SendMessage (SDK)", "a frame of service/sqs", anyFrame("/aws-sdk-go-v2/service/sqs.")},
	{"the Lambda JSON path: decoding the API Gateway event (every contender pays it)", "encoding/json.(*Decoder).Decode under aws-lambda-go",
		func(_ string, fs []string) bool {
			return slices.Contains(fs, "encoding/json.(*Decoder).Decode") && slices.ContainsFunc(fs, hasPart("/aws-lambda-go/"))
		}},
	{"signature and identity (HMAC, the event's id, type and subject)", "intake.(*Handler).verifyRequest", anyFrame("/internal/intake.(*Handler).verifyRequest")},
	{"the payload's stored form (compression, hash)", "ledger.storePayload", anyFrame("/internal/ledger.storePayload")},
	{"logs (JSON lines to stdout)", "a frame of log/slog", anyFrame("log/slog.")},
	{"the metrics record (EMF to stdout)", "a frame of internal/metrics", anyFrame("/internal/metrics.")},
	{"the rest of the handler (ledger plan and decision, reply, adapters)", "any other sample", func(string, []string) bool { return true }},
}

func hasPart(part string) func(string) bool {
	return func(f string) bool { return strings.Contains(f, part) }
}

func anyFrame(part string) func(string, []string) bool {
	return func(_ string, fs []string) bool { return slices.ContainsFunc(fs, hasPart(part)) }
}

// profileItems splits the profile of n deliveries into cpuParts, per
// delivery, from pprof's list of sampled stacks.
func profileItems(ctx context.Context, bin, prof string, n int) ([]CPUItem, error) {
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-traces", bin, prof).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof: %w\n%s", err, out)
	}
	sums := make([]time.Duration, len(cpuParts))
	claim := func(d time.Duration, frames []string) {
		if d == 0 || len(frames) == 0 {
			return
		}
		for i, p := range cpuParts {
			if p.test(frames[len(frames)-1], frames) {
				sums[i] += d
				return
			}
		}
	}
	// A stack: a separator line, then "<time> <innermost frame>", then one
	// frame per line out to the root; "(inline)" marks an inlined frame.
	var d time.Duration
	var frames []string
	for l := range strings.Lines(string(out)) {
		t := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(t, "-----------+"):
			claim(d, frames)
			d, frames = 0, frames[:0]
		case t == "" || strings.Contains(t, ": "):
			// the header (File:, Type:, Duration:, …) and blank lines
		default:
			f := strings.Fields(strings.TrimSuffix(t, " (inline)"))
			if len(frames) == 0 && len(f) >= 2 {
				if v, err := time.ParseDuration(f[0]); err == nil {
					d, f = v, f[1:]
				}
			}
			frames = append(frames, strings.Join(f, " "))
		}
	}
	claim(d, frames)
	items := make([]CPUItem, len(cpuParts))
	var total time.Duration
	for i, p := range cpuParts {
		items[i] = CPUItem{Part: p.part, Rule: p.rule, Micros: float64(sums[i]) / float64(time.Microsecond) / float64(n)}
		total += sums[i]
	}
	return append(items, CPUItem{Part: "all of the process's CPU in the profile", Micros: float64(total) / float64(time.Microsecond) / float64(n)}), nil
}

// pprofTop runs `go tool pprof -top -nodecount=25` (and flags) on a
// profile of bin and returns the lines from the summary on.
func pprofTop(ctx context.Context, bin, prof string, flags ...string) ([]string, error) {
	args := append([]string{"tool", "pprof", "-top", "-nodecount=25"}, flags...)
	out, err := exec.CommandContext(ctx, "go", append(args, bin, prof)...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof: %w\n%s", err, out)
	}
	var lines []string
	keep := false
	for l := range strings.Lines(string(out)) {
		l = strings.TrimRight(l, "\n")
		if strings.Contains(l, "flat%") || strings.HasPrefix(l, "Showing") || strings.HasPrefix(l, "Duration:") {
			keep = true
		}
		if keep && l != "" {
			lines = append(lines, l)
		}
	}
	return lines, nil
}

// cpuWorker is one running worker process and its two control pipes.
type cpuWorker struct {
	cmd     *exec.Cmd
	cmds    *os.File // write end of the worker's fd 3
	replies *bufio.Scanner
	done    chan error
}

// startCPUWorker starts bin with env, stdout and stderr to /dev/null, and
// waits for its ready line.
func startCPUWorker(ctx context.Context, bin string, env []string) (*cpuWorker, error) {
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		_ = cmdR.Close()
		_ = cmdW.Close()
		return nil, err
	}
	cmd := exec.Command(bin)
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{cmdR, repW} // fd 3, fd 4
	if err := cmd.Start(); err != nil {
		for _, f := range []*os.File{cmdR, cmdW, repR, repW} {
			_ = f.Close()
		}
		return nil, err
	}
	// The child holds its own copies; closing ours lets each side see the
	// other's end of file.
	_ = cmdR.Close()
	_ = repW.Close()
	w := &cpuWorker{cmd: cmd, cmds: cmdW, replies: bufio.NewScanner(repR), done: make(chan error, 1)}
	w.replies.Buffer(nil, 1<<20)
	go func() { w.done <- cmd.Wait(); _ = repR.Close() }()
	stop := context.AfterFunc(ctx, w.kill)
	defer stop()
	r, err := w.read()
	if err != nil {
		w.stop()
		return nil, err
	}
	if r.Tag != cpuReady || r.Error != "" {
		w.stop()
		return nil, fmt.Errorf("worker did not start: %s", r.Error)
	}
	return w, nil
}

// do sends one command and returns its reply.
func (w *cpuWorker) do(c CPUCommand) (CPUReply, error) {
	line, err := json.Marshal(c)
	if err != nil {
		return CPUReply{}, err
	}
	if _, err := w.cmds.Write(append(line, '\n')); err != nil {
		return CPUReply{}, fmt.Errorf("send to worker: %w", err)
	}
	r, err := w.read()
	if err != nil {
		return r, err
	}
	if r.Error != "" {
		return r, errors.New(r.Error)
	}
	if r.Tag != c.Tag {
		return r, fmt.Errorf("worker answered %q to %q", r.Tag, c.Tag)
	}
	return r, nil
}

func (w *cpuWorker) read() (CPUReply, error) {
	if !w.replies.Scan() {
		if err := w.replies.Err(); err != nil {
			return CPUReply{}, fmt.Errorf("read from worker: %w", err)
		}
		return CPUReply{}, errors.New("worker exited without answering")
	}
	var r CPUReply
	if err := json.Unmarshal(w.replies.Bytes(), &r); err != nil {
		return CPUReply{}, fmt.Errorf("worker reply %q: %w", w.replies.Text(), err)
	}
	return r, nil
}

// stop closes the worker's command pipe, which ends it, and waits; a
// worker still running after 10 s is killed.
func (w *cpuWorker) stop() {
	_ = w.cmds.Close()
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		w.kill()
		<-w.done
	}
}

// kill ends the worker process (this process started it).
func (w *cpuWorker) kill() { _ = w.cmd.Process.Kill() }

// WriteCPUTable renders the CPU comparison as Markdown.
func WriteCPUTable(w io.Writer, rep CPUReport) {
	fmt.Fprintln(w, "| GOMAXPROCS | payload | deliveries each | CPU µs/delivery (median, range): ours | bare | bare-payload | ours-inline | ours/bare (median, range) | ours/bare-payload | ours-inline/bare | wall p50 ours, bare | wall p99 ours, bare | allocs/delivery ours, bare, bare-payload, ours-inline | KB allocated/delivery ours, bare | new events answered 200: ours, bare |")
	fmt.Fprintln(w, "|---:|---:|---:|---|---|---|---|---|---|---|---|---|---|---|---|")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
	us := func(s Spread) string { return fmt.Sprintf("%.0f (%.0f–%.0f)", s.Median, s.Min, s.Max) }
	x := func(s Spread) string { return fmt.Sprintf("%.2f× (%.2f–%.2f)", s.Median, s.Min, s.Max) }
	const o, b, bp, oi = ContenderOurs, ContenderBare, ContenderBarePayload, ContenderOursInline
	for _, r := range rep.Rows {
		fmt.Fprintf(w, "| %d | %d B | %d | %s | %s | %s | %s | **%s** | %s | %s | %s, %s | %s, %s | %.0f, %.0f, %.0f, %.0f | %.1f, %.1f | %d, %d |\n",
			r.Procs, r.PayloadBytes, r.Deliveries, us(r.CPUOf(o)), us(r.CPUOf(b)), us(r.CPUOf(bp)), us(r.CPUOf(oi)),
			x(r.Ratio(o, b)), x(r.Ratio(o, bp)), x(r.Ratio(oi, b)),
			ms(Of(r.P50, o)), ms(Of(r.P50, b)), ms(Of(r.P99, o)), ms(Of(r.P99, b)),
			Of(r.Allocs, o), Of(r.Allocs, b), Of(r.Allocs, bp), Of(r.Allocs, oi), Of(r.Bytes, o)/1024, Of(r.Bytes, b)/1024,
			Of(r.Duplicates, o), Of(r.Duplicates, b))
	}
}
