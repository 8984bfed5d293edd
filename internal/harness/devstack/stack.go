package devstack

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/ledger"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/source"
	"github.com/effectively-once/webhooks/internal/warehouse"
)

// Functions the stack builds and runs, in start order. The list is
// explicit rather than every directory of functions/, so a function still
// being written does not stop the stack. The bridge runs only when a
// source's delivery includes eventbridge (see running).
var Functions = []string{"intake", "processor", "dispatcher", "reconciler", "bridge"}

// reconcilerTimeout is the reconciler Lambda's timeout as deployed (infra);
// its run budget (RECONCILE_BUDGET_SECONDS, default 90 s) stays below it.
const reconcilerTimeout = 2 * time.Minute

// Stack is a running local stack.
type Stack struct {
	cfg     Config
	file    File
	sources *source.Set
	logs    *Logs
	Queues  queue.URLs
	// BridgeDLQ is the bridge's dead-letter queue, when the bridge runs:
	// /_dev/eventbridge puts an event the bridge failed on here, as Lambda
	// does after its asynchronous retries (DeadLetter), and the reconciler
	// redelivers it.
	BridgeDLQ string
	// bridgeSQS signs as the bridge's role: Lambda writes the bridge DLQ
	// with the function's role, and the reconciler redelivers only what
	// that role wrote (BRIDGE_DLQ_SENDERS).
	bridgeSQS *sqs.Client
	// EffectsQueues is the outbox queue pair the processor announces to
	// and the dispatcher consumes.
	EffectsQueues queue.URLs
	DB            *dynamodb.Client
	SQS           *sqs.Client
	// Downstream is the fake downstream the dispatcher's effects call.
	Downstream *Downstream
	// Stripe is the fake Stripe API the processor fetches the objects of
	// thin events from.
	Stripe *StripeAPI
	// Targets are the local AWS targets the effects may name, and the
	// team's effect functions behind the local Lambda front.
	Targets *Targets
	// S3 is the local S3 holding the warehouse sink's bucket; nil when the
	// sink is off (Config.WarehouseBucket).
	S3 *localaws.S3

	pools   map[string]chan *instance
	all     []*instance
	httpSrv *http.Server
	httpURL string
	dynURL  string
	dynSrv  *http.Server
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	crashMu sync.Mutex
	crashes int // pending "kill the processor runtime mid-batch" requests
	// The processor batches in flight, the kills requested crashes made
	// and the batches they passed over, and the ledger they read (crash.go).
	inflight    map[*processorBatch]bool
	kills       []CrashKill
	rearms      []CrashRearm
	crashLedger *ledger.Ledger
	// runtimeKills are the runtimes KillRuntime killed (kill.go).
	runtimeKills []RuntimeKill
}

// Logs prefixes every line with its component's name.
type Logs struct {
	mu  sync.Mutex
	out io.Writer
}

// NewLogs writes prefixed lines to out.
func NewLogs(out io.Writer) *Logs { return &Logs{out: out} }

// Printf writes one line for a component, its control characters escaped
// (escapeControls): every line of the stack's log, Writer's included, goes
// through here.
func (l *Logs) Printf(component, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.out, "%-12s | %s\n", component, escapeControls(fmt.Sprintf(format, args...)))
}

// Writer returns an io.Writer that prefixes each line it is given.
func (l *Logs) Writer(component string) io.WriteCloser {
	pr, pw := io.Pipe()
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			l.Printf(component, "%s", sc.Text())
		}
	}()
	return pw
}

// Build compiles the function bootstraps of cfg.Module for this host and
// the Runtime Interface Emulator (pinned as a tool in this repository's
// go.mod) into cfg.BuildDir, in two go build runs (the go command builds
// the packages of one run in parallel). A team's module builds its own
// mains; the emulator is built in this module's directory as the team's
// module resolves it (the replace during development, else the module
// cache), since the team's go.mod does not require it.
func Build(ctx context.Context, cfg Config, logs *Logs) error {
	cfg.defaults()
	fns, err := moduleFunctions(cfg.Module)
	if err != nil {
		return err
	}
	extra, err := effectFunctions(cfg)
	if err != nil {
		return err
	}
	fns = append(fns, extra...)
	ours, err := ourModuleDir(ctx, cfg.Module)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(cfg.BuildDir+"/..", ".host-build-")
	if err != nil {
		if err := os.MkdirAll(cfg.BuildDir, 0o755); err != nil {
			return err
		}
		if tmp, err = os.MkdirTemp(cfg.BuildDir, ".tmp-"); err != nil {
			return err
		}
	}
	defer os.RemoveAll(tmp)
	var pkgs []string
	for _, fn := range fns {
		pkgs = append(pkgs, "./functions/"+fn)
	}
	runs := []struct {
		dir  string
		args []string
	}{
		{cfg.Module, append([]string{"build", "-trimpath", "-tags", "lambda.norpc", "-o", tmp + "/"}, pkgs...)},
		{ours, []string{"build", "-trimpath", "-o", filepath.Join(tmp, "aws-lambda-rie"), "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie"}},
	}
	for _, r := range runs {
		cmd := exec.CommandContext(ctx, "go", r.args...)
		cmd.Dir = r.dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go %s (in %s): %v\n%s", strings.Join(r.args, " "), r.dir, err, stderr.String())
		}
	}
	moves := map[string]string{"aws-lambda-rie": "aws-lambda-rie"}
	for _, fn := range fns {
		moves[fn] = filepath.Join(fn, "bootstrap")
	}
	for from, to := range moves {
		dst := filepath.Join(cfg.BuildDir, to)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.Rename(filepath.Join(tmp, from), dst); err != nil {
			return err
		}
		logs.Printf("build", "built %s", dst)
	}
	return nil
}

// moduleFunctions lists the functions module has a main for: every one of
// Functions but the bridge is required; the bridge is built when present
// (a module whose sources use no EventBridge delivery needs none).
func moduleFunctions(module string) ([]string, error) {
	var fns []string
	for _, fn := range Functions {
		_, err := os.Stat(filepath.Join(module, "functions", fn))
		switch {
		case err == nil:
			fns = append(fns, fn)
		case fn == "bridge" && errors.Is(err, os.ErrNotExist):
		default:
			return nil, fmt.Errorf("%w: %s has no functions/%s (each function is a main of one line over package app): %v", ErrConfig, module, fn, err)
		}
	}
	return fns, nil
}

// effectFunctions lists the effect functions the configuration file
// names (File.EffectFunctions), each of which must have its main in the
// module's functions/<name>. A file that cannot be read names none here:
// Start reports it.
func effectFunctions(cfg Config) ([]string, error) {
	b, err := os.ReadFile(cfg.ConfigFile)
	if err != nil {
		return nil, nil
	}
	var f struct {
		EffectFunctions []string `json:"effect_functions"`
	}
	if json.Unmarshal(b, &f) != nil {
		return nil, nil
	}
	for _, fn := range f.EffectFunctions {
		if slices.Contains(Functions, fn) || strings.ContainsAny(fn, `/\.`) || fn == "" {
			return nil, fmt.Errorf("%w: %s: effect_functions: %q is not an effect function's name", ErrConfig, cfg.ConfigFile, fn)
		}
		if _, err := os.Stat(filepath.Join(cfg.Module, "functions", fn)); err != nil {
			return nil, fmt.Errorf("%w: %s names effect function %s, and %s has no functions/%s: %v", ErrConfig, cfg.ConfigFile, fn, cfg.Module, fn, err)
		}
	}
	return f.EffectFunctions, nil
}

// ThisModule is this repository's module path: a team's module requires it.
const ThisModule = "github.com/effectively-once/webhooks"

// ourModuleDir is the directory of this module as the module in dir
// resolves it: dir itself when it is ours, the replace target of a team
// module during development, else its copy in the module cache.
func ourModuleDir(ctx context.Context, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", ThisModule)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%w: the module in %s does not require %s: %v\n%s", ErrConfig, dir, ThisModule, err, stderr.String())
	}
	ours := strings.TrimSpace(string(out))
	if ours == "" {
		return "", fmt.Errorf("%w: %s: no directory for %s (go mod download)", ErrConfig, dir, ThisModule)
	}
	return ours, nil
}

// Start brings the stack up: emulators, table and queues, function
// instances, HTTP API, event source mapping and schedule. It returns once
// every component answers. Cancel ctx or call Close to stop it.
func Start(ctx context.Context, cfg Config, logs *Logs) (*Stack, error) {
	cfg.defaults()
	file, set, err := LoadFile(cfg.ConfigFile)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Stack{cfg: cfg, file: file, sources: set, logs: logs, cancel: cancel, pools: map[string]chan *instance{}}
	if err := s.start(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Stack) start(ctx context.Context) error {
	cfg := s.cfg
	instances := len(s.file.EffectFunctions)
	for _, fn := range s.running() {
		instances += cfg.Instances[fn]
	}
	if err := cfg.checkPorts(instances); err != nil {
		return err
	}
	s.logs.Printf("stack", "functions of %s, configuration %s", cfg.Module, cfg.ConfigFile)
	// DynamoDB.
	l, err := net.Listen("tcp", cfg.DynamoAddr)
	if err != nil {
		return fmt.Errorf("DynamoDB emulator on %s: %w (set DEV_DYNAMODB_ADDR)", cfg.DynamoAddr, err)
	}
	dynHandler := localaws.DynamoHandler()
	if cfg.DynamoWrap != nil {
		dynHandler = cfg.DynamoWrap(dynHandler)
	}
	s.dynSrv = &http.Server{Handler: dynHandler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.dynSrv.Serve(l) }()
	dynURL := "http://" + l.Addr().String()
	s.dynURL = dynURL
	s.logs.Printf("dynamodb", "minidyn listening on %s", dynURL)

	// SQS.
	sq, err := localaws.StartSQS(cfg.SQSAddr)
	if err != nil {
		return fmt.Errorf("SQS emulator: %w (set DEV_SQS_ADDR)", err)
	}
	s.logs.Printf("sqs", "goaws listening on %s", sq.URL)

	// S3, for the warehouse sink.
	if cfg.WarehouseBucket != "" {
		if _, err := warehouse.Load(func(k string) string {
			return map[string]string{"WAREHOUSE_BUCKET": cfg.WarehouseBucket, "WAREHOUSE_PREFIX": cfg.WarehousePrefix}[k]
		}); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		if s.S3, err = localaws.StartS3(cfg.S3Addr, cfg.WarehouseBucket); err != nil {
			return fmt.Errorf("S3 emulator: %w (set DEV_S3_ADDR, or DEV_WAREHOUSE=off)", err)
		}
		s.logs.Printf("s3", "local S3 (gofakes3, in memory) listening on %s, bucket %s", s.S3.URL, cfg.WarehouseBucket)
		// The query links DuckDB, which the tool line keeps out of a team's
		// module: a team opts in with -mod=mod, for its own platform only.
		query := "make warehouse"
		if TeamModule(cfg.Module) {
			query = "go run -mod=mod " + ThisModule + "/scripts/warehouse"
		}
		s.logs.Printf("s3", "warehouse sink on: every applied revision becomes s3://%s/%s/…/v=<version>.json (query it: %s; DEV_WAREHOUSE=off turns the sink off)",
			cfg.WarehouseBucket, cfg.WarehousePrefix, query)
	}

	s.DB = localaws.DynamoAt(dynURL)
	s.SQS = sq.Client()
	if err := ledger.CreateTable(ctx, s.DB, cfg.Table); err != nil {
		return err
	}
	s.logs.Printf("dynamodb", "created table %s (keys pk/sk, sparse GSI %q)", cfg.Table, ledger.DueIndex)
	spec := queue.Events(cfg.Prefix)
	spec.VisibilityTimeout, spec.MaxReceiveCount = cfg.Visibility, cfg.MaxReceiveCount
	if s.Queues, err = queue.Create(ctx, s.SQS, spec); err != nil {
		return err
	}
	s.logs.Printf("sqs", "created %s (visibility %s, maxReceiveCount %d) and %s", spec.Name, spec.VisibilityTimeout, spec.MaxReceiveCount, spec.DLQName())
	effects := queue.Effects(cfg.Prefix)
	effects.VisibilityTimeout = cfg.EffectsVisibility
	if s.EffectsQueues, err = queue.Create(ctx, s.SQS, effects); err != nil {
		return err
	}
	s.logs.Printf("sqs", "created %s (visibility %s, maxReceiveCount %d) and %s", effects.Name, effects.VisibilityTimeout, effects.MaxReceiveCount, effects.DLQName())
	if slices.Contains(s.running(), "bridge") {
		out, err := s.SQS.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(cfg.Prefix + "bridge-dlq")})
		if err != nil {
			return fmt.Errorf("create queue %sbridge-dlq: %w", cfg.Prefix, err)
		}
		s.BridgeDLQ = aws.ToString(out.QueueUrl)
		s.bridgeSQS = sq.ClientAs(FunctionRole("bridge"))
		s.logs.Printf("sqs", "created %sbridge-dlq (the bridge's dead letters; the reconciler redelivers them)", cfg.Prefix)
	}

	// The fake downstream the effects call.
	cfgs, err := s.file.effects()
	if err != nil {
		return fmt.Errorf("%w: effects_config: %w", ErrConfig, err)
	}
	if s.Downstream, err = NewDownstream(cfg.DownstreamAddr, cfgs, s.secretValue); err != nil {
		return err
	}
	for _, e := range s.Downstream.State("").Effects {
		status := ""
		if e.StatusURL != "" {
			status = ", status GET " + e.StatusURL + "?key="
		}
		s.logs.Printf("downstream", "%s: POST %s%s (idempotency window %s)", e.Kind, e.URL, status, e.Window)
	}

	// The fake Stripe API; the sources' api and truth URLs follow it.
	if s.Stripe, err = NewStripeAPI(cfg.StripeAddr, s.file.Secrets[StripeKeyEnv], s.logs); err != nil {
		return err
	}
	if s.file.Sources, err = s.Stripe.Sources(s.file.Sources); err != nil {
		return fmt.Errorf("%w: sources_config: %w", ErrConfig, err)
	}
	for _, w := range stripeKeyWarnings(s.sources, s.file.Secrets) {
		s.logs.Printf("stripe-api", "%s", w)
	}
	s.logs.Printf("stripe-api", "fake Stripe API on http://%s (its key is the local secret %s); the HTTP API sets its objects: PUT /_dev/stripe/objects/{type}/{id}",
		s.Stripe.Addr(), StripeKeyEnv)

	// Functions under the Runtime Interface Emulator.
	port := cfg.RIEPort
	var auto []int
	if cfg.AutoPorts {
		total := 2 * len(s.file.EffectFunctions)
		for _, fn := range s.running() {
			total += 2 * cfg.Instances[fn]
		}
		if auto, err = FreePorts(total); err != nil {
			return err
		}
	}
	// The local AWS targets and the team's effect functions, before the
	// dispatcher that calls them.
	if err := s.startTargets(ctx, cfgs, dynURL, sq.URL, &port, &auto); err != nil {
		return err
	}
	for _, fn := range s.running() {
		n := cfg.Instances[fn]
		s.pools[fn] = make(chan *instance, n)
		for i := 1; i <= n; i++ {
			in := &instance{name: fmt.Sprintf("%s-%d", fn, i), fn: fn, port: port, apiPort: port - cfg.RIEPort + cfg.RIEAPIPort}
			port++
			if cfg.AutoPorts {
				in.port, in.apiPort, auto = auto[0], auto[1], auto[2:]
			}
			if err := s.startInstance(ctx, in, dynURL, sq.URL); err != nil {
				return err
			}
			s.all = append(s.all, in)
			s.pools[fn] <- in
		}
	}
	for _, in := range s.all {
		if err := WaitPort(ctx, in.addr(), nil, 15*time.Second); err != nil {
			return fmt.Errorf("%s did not start: %w", in.name, err)
		}
	}

	// HTTP API.
	hl, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("HTTP API on %s: %w (set DEV_HTTP_ADDR)", cfg.HTTPAddr, err)
	}
	s.httpSrv = &http.Server{Handler: s.crashAPI(s.httpAPI()), ReadHeaderTimeout: 10 * time.Second}
	s.httpURL = "http://" + hl.Addr().String()
	go func() { _ = s.httpSrv.Serve(hl) }()
	s.logs.Printf("http-api", "POST %s/webhooks/{source}", s.httpURL)

	// Event source mappings: one poller per function instance, like Lambda
	// scaling its pollers with concurrency.
	for i := 0; i < cfg.Instances["processor"]; i++ {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.poll(ctx, fmt.Sprintf("esm-%d", i+1), mapping{queue: s.Queues.Queue, fn: "processor", crash: true})
		}()
	}
	for i := 0; i < cfg.Instances["dispatcher"]; i++ {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.poll(ctx, fmt.Sprintf("esm-effects-%d", i+1), mapping{queue: s.EffectsQueues.Queue, fn: "dispatcher"})
		}()
	}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.schedule(ctx) }()
	s.logs.Printf("stack", "ready: table %s, queues %s and %s, fake downstream http://%s (GET %s/_dev/downstream)",
		cfg.Table, s.Queues.Queue, s.EffectsQueues.Queue, s.Downstream.Addr(), s.httpURL)
	return nil
}

// running lists the functions this stack starts: every one of Functions,
// except the bridge when no source's delivery includes eventbridge.
func (s *Stack) running() []string {
	var out []string
	for _, fn := range Functions {
		if fn == "bridge" && len(s.sources.EventBridgeSources()) == 0 {
			continue
		}
		out = append(out, fn)
	}
	return out
}

// FunctionRole is the role a function of the local stack runs with (its
// session is named after the function, local-<fn>, as Lambda names it).
func FunctionRole(fn string) localaws.Role { return localaws.FunctionRole(fn, "local-"+fn) }

// DeadLetter puts body in the bridge DLQ as Lambda does with an event whose
// asynchronous invocations all failed: signed as the bridge's role.
func (s *Stack) DeadLetter(ctx context.Context, body string) error {
	if s.bridgeSQS == nil {
		return errors.New("the bridge does not run: no source's delivery includes eventbridge")
	}
	_, err := s.bridgeSQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(s.BridgeDLQ), MessageBody: aws.String(body)})
	return err
}

// HTTPURL is the base URL of the local HTTP API.
func (s *Stack) HTTPURL() string { return s.httpURL }

// DynamoURL is the DynamoDB emulator's endpoint.
func (s *Stack) DynamoURL() string { return s.dynURL }

// Table is the ledger table's name.
func (s *Stack) Table() string { return s.cfg.Table }

// Warehouse is the warehouse sink's bucket and key prefix ("" and "" when
// the sink is off); the records are in S3.
func (s *Stack) Warehouse() (bucket, prefix string) {
	if s.S3 == nil {
		return "", ""
	}
	return s.cfg.WarehouseBucket, s.cfg.WarehousePrefix
}

// FreePorts finds n distinct free loopback ports: all are held open until
// every one is found, so no two instances get the same port.
func FreePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Close stops every component and leaves no process behind.
func (s *Stack) Close() {
	s.cancel()
	if s.httpSrv != nil {
		_ = s.httpSrv.Close()
	}
	for _, in := range s.all {
		in.stop()
	}
	s.wg.Wait()
	if s.Downstream != nil {
		s.Downstream.Close()
	}
	if s.Stripe != nil {
		s.Stripe.Close()
	}
	s.Targets.Close()
	if s.S3 != nil {
		s.S3.Close()
	}
	if s.dynSrv != nil {
		_ = s.dynSrv.Close()
	}
}

// instance is one function instance: an aws-lambda-rie process running the
// real bootstrap.
type instance struct {
	name, fn      string
	port, apiPort int
	cmd           *exec.Cmd
	// stream is the instance's log stream name, shaped as Lambda names an
	// execution environment's (logStreamName): its runtime derives its
	// owner from it as in AWS, and keeps it across restarts after a kill,
	// as a Lambda environment does.
	stream string
	// invokedSince is when the invocation in flight started (UnixNano), 0
	// while idle (the pool hands an instance to one invocation at a time).
	invokedSince atomic.Int64
	// pendingKill is the RuntimeKill (1-based index; 0: none) whose effect
	// the instance's invocations have not settled yet (kill.go).
	pendingKill int
}

func (in *instance) addr() string { return "127.0.0.1:" + strconv.Itoa(in.port) }

// secretValue resolves an env: reference to its visibly fake local value.
func (s *Stack) secretValue(ref string) string {
	if name, ok := strings.CutPrefix(ref, "env:"); ok {
		return s.file.Secrets[name]
	}
	return ""
}

func (s *Stack) functionEnv(fn, dynURL, sqsURL string) []string {
	timeout := s.cfg.FunctionTimeout
	switch fn {
	case "dispatcher":
		timeout = s.cfg.DispatcherTimeout
	case "reconciler":
		timeout = reconcilerTimeout
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"AWS_REGION=" + localaws.Region, "AWS_DEFAULT_REGION=" + localaws.Region,
		"AWS_ENDPOINT_URL_DYNAMODB=" + dynURL, "AWS_ENDPOINT_URL_SQS=" + sqsURL,
		"AWS_LAMBDA_FUNCTION_NAME=local-" + fn,
		"AWS_LAMBDA_FUNCTION_TIMEOUT=" + strconv.Itoa(int(timeout.Seconds())),
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256",
		"TABLE_NAME=" + s.cfg.Table,
		"EVENTS_QUEUE_URL=" + s.Queues.Queue,
		"EFFECTS_QUEUE_URL=" + s.EffectsQueues.Queue,
		"EVENTS_DLQ_URL=" + s.Queues.DLQ,
		"EFFECTS_DLQ_URL=" + s.EffectsQueues.DLQ,
		"BRIDGE_DLQ_URL=" + s.BridgeDLQ,
		"SOURCES=" + string(s.file.Sources),
		"ALLOW_ENV_SECRETS=true",
		"MAX_ATTEMPTS=" + strconv.Itoa(s.cfg.MaxReceiveCount),
		"LEASE_SECONDS=" + strconv.Itoa(int(s.cfg.Lease.Seconds())),
		"QUEUE_VISIBILITY_SECONDS=" + strconv.Itoa(int(s.cfg.Visibility.Seconds())),
		"LOG_LEVEL=info",
		"RECONCILE_STUCK_SECONDS=" + strconv.Itoa(int(s.cfg.ReconcileStuck.Seconds())),
	}
	// Each function signs with its own role's session, as on AWS, so the
	// local SQS names its messages' sender as SQS does.
	env = append(env, FunctionRole(fn).Env()...)
	// The warehouse sink: the processor commits a record intent with each
	// applied revision, the dispatcher writes the record to the local S3,
	// the reconciler checks that it is there.
	if s.S3 != nil && (fn == "processor" || fn == "dispatcher" || fn == "reconciler") {
		env = append(env, "WAREHOUSE_BUCKET="+s.cfg.WarehouseBucket, "WAREHOUSE_PREFIX="+s.cfg.WarehousePrefix)
		if fn != "processor" {
			env = append(env, "AWS_ENDPOINT_URL_S3="+s.S3.URL)
		}
	}
	switch fn {
	case "dispatcher":
		env = append(env, "EFFECTS="+string(s.Downstream.Effects()),
			"DISPATCH_LEASE_SECONDS="+strconv.Itoa(int(s.cfg.DispatchLease.Seconds())))
		env = append(env, s.Targets.Env()...)
	case "reconciler":
		// Its downstream drift check asks the effects' status routes (it
		// builds the AWS targets' clients too, and calls none).
		env = append(env, "EFFECTS="+string(s.Downstream.Effects()))
		env = append(env, s.Targets.Env()...)
		if s.BridgeDLQ != "" {
			// It redelivers the bridge DLQ's letters the bridge's role wrote.
			env = append(env, "BRIDGE_DLQ_SENDERS="+FunctionRole("bridge").ID)
		}
	}
	for k, v := range s.file.Secrets {
		env = append(env, k+"="+v)
	}
	return env
}

func (s *Stack) startInstance(ctx context.Context, in *instance, dynURL, sqsURL string) error {
	bootstrap := filepath.Join(s.cfg.BuildDir, in.fn, "bootstrap")
	rie := filepath.Join(s.cfg.BuildDir, "aws-lambda-rie")
	for _, p := range []string{bootstrap, rie} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s missing: run `make dev` (it builds the host binaries first; a team's module needs functions/%s/main.go)", p, in.fn)
		}
	}
	cmd := exec.Command(rie,
		"--runtime-interface-emulator-address", in.addr(),
		"--runtime-api-address", "127.0.0.1:"+strconv.Itoa(in.apiPort),
		"--log-level", "warn",
		bootstrap)
	if in.stream == "" {
		in.stream = logStreamName(time.Now())
	}
	env := s.functionEnv(in.fn, dynURL, sqsURL)
	if s.isEffectFunction(in.fn) {
		env = s.effectFunctionEnv(in.fn)
	}
	cmd.Env = append(env,
		// RIE passes it to the runtime (its default is "$LATEST").
		"AWS_LAMBDA_LOG_STREAM_NAME="+in.stream,
		// The SDK adds "app/<function>" to its User-Agent, so a proxy in
		// front of the emulators (DynamoWrap) can tell the functions apart.
		"AWS_SDK_UA_APP_ID="+in.fn)
	cmd.Dir = filepath.Dir(bootstrap)
	out := s.logs.Writer(in.name)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so stopping it also stops the bootstrap it runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", in.name, err)
	}
	in.cmd = cmd
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := cmd.Wait()
		if ctx.Err() == nil {
			s.logs.Printf(in.name, "runtime interface emulator exited: %v", err)
		}
		_ = out.Close()
	}()
	s.logs.Printf(in.name, "aws-lambda-rie on %s running %s", in.addr(), bootstrap)
	return nil
}

func (in *instance) stop() {
	if in.cmd == nil || in.cmd.Process == nil {
		return
	}
	pgid := -in.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		for i := 0; i < 20; i++ {
			if syscall.Kill(pgid, 0) != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		close(done)
	}()
	<-done
	_ = syscall.Kill(pgid, syscall.SIGKILL)
}

// killRuntime kills the bootstrap process the emulator runs (not the
// emulator): the in-flight invocation fails and the next one re-inits the
// runtime, as Lambda does after a crash.
func (in *instance) killRuntime() bool {
	if in.cmd == nil || in.cmd.Process == nil {
		return false
	}
	killed := false
	for _, pid := range childrenOf(in.cmd.Process.Pid) {
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed = true
		}
	}
	return killed
}

// childrenOf lists the direct children of pid (Linux /proc).
func childrenOf(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Field 4 is the parent pid; the command (field 2) may hold spaces
		// but ends with the last ')'.
		rest := string(stat[bytes.LastIndexByte(stat, ')')+1:])
		f := strings.Fields(rest)
		// Field 3 is the state: a killed runtime stays a zombie (Z) until
		// its emulator reaps it, and is no runtime any more.
		if len(f) > 1 && f[0] != "Z" && f[0] != "X" {
			if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
				out = append(out, child)
			}
		}
	}
	return out
}

// ErrInvoke is a failed invocation (a function error or a crashed runtime).
var ErrInvoke = errors.New("invocation failed")

// Invoke runs one invocation of fn on a free instance and returns its
// response payload.
func (s *Stack) Invoke(ctx context.Context, fn string, payload []byte, during func(*instance)) (_ []byte, err error) {
	pool, ok := s.pools[fn]
	if !ok {
		return nil, fmt.Errorf("no function %q", fn)
	}
	var in *instance
	select {
	case in = <-pool:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { pool <- in }()
	start := time.Now()
	in.invokedSince.Store(start.UnixNano())
	defer in.invokedSince.Store(0)
	defer func() { s.invoked(in, start, err) }()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+in.addr()+"/2015-03-31/functions/function/invocations", bytes.NewReader(payload))
	if during != nil {
		go during(in)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvoke, in.name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s: HTTP %d: %s", ErrInvoke, in.name, resp.StatusCode, bytes.TrimSpace(body))
	}
	var fnErr struct {
		ErrorType    string `json:"errorType"`
		ErrorMessage string `json:"errorMessage"`
	}
	if json.Unmarshal(body, &fnErr) == nil && fnErr.ErrorType != "" {
		return nil, fmt.Errorf("%w: %s: %s: %s", ErrInvoke, in.name, fnErr.ErrorType, fnErr.ErrorMessage)
	}
	return body, nil
}

// WaitPort waits until addr accepts TCP connections, the timeout passes,
// ctx ends, or exited (optional: the listening process died) is closed.
func WaitPort(ctx context.Context, addr string, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return errors.New("the process exited before " + addr + " accepted connections")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// logStreamName is a log stream name as Lambda gives an execution
// environment: the date, the version in brackets and 32 hex digits.
func logStreamName(now time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return now.UTC().Format("2006/01/02") + "/[$LATEST]" + hex.EncodeToString(b[:])
}

// stripeKeyWarnings names each Stripe source that calls the Stripe API
// (api: thin events' objects; a truth of kind stripe: the reconciler's
// check) with a key the fake Stripe API will refuse: a reference the local
// secrets do not hold, or a value other than StripeKeyEnv's, the fake's
// only key. A source that never calls the API needs no key, and gets no
// warning.
func stripeKeyWarnings(set *source.Set, secrets map[string]string) []string {
	var out []string
	names := set.Names()
	slices.Sort(names)
	for _, name := range names {
		src, _ := set.Lookup(name)
		var uses []struct{ field, ref string }
		if src.API != nil && src.Kind == "stripe" {
			uses = append(uses, struct{ field, ref string }{"api", src.API.Secret})
		}
		if src.Truth != nil && src.Truth.Kind == "stripe" {
			uses = append(uses, struct{ field, ref string }{"truth", src.Truth.Secret})
		}
		for _, u := range uses {
			env, ok := strings.CutPrefix(u.ref, "env:")
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("source %s: %s.secret %q is not an env: reference, which is all the local stack resolves: its Stripe API requests will be refused", name, u.field, u.ref))
			case secrets[env] == "":
				out = append(out, fmt.Sprintf("source %s: %s.secret is env:%s, which the local secrets do not hold: its Stripe API requests will be refused (401)", name, u.field, env))
			case secrets[env] != secrets[StripeKeyEnv]:
				out = append(out, fmt.Sprintf("source %s: %s.secret is env:%s, whose value is not %s's, the fake Stripe API's only key: its requests will be refused (401)", name, u.field, env, StripeKeyEnv))
			}
		}
	}
	return out
}
