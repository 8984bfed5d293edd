// Package devstack provides the local stack behind `make dev`: the real
// Lambda bootstrap binaries (intake, processor, dispatcher, reconciler)
// running under the AWS Lambda Runtime Interface Emulator, DynamoDB
// (minidyn) and SQS (goaws) over their wire protocols, a local HTTP API that speaks API
// Gateway HTTP API payload 2.0, two SQS event source mappings with partial
// batch responses (events queue → processor, effects queue → dispatcher), a
// fake downstream that performs the outbox effects (one
// downstream.Fake per effect kind, deduplicating by Idempotency-Key),
// a fake Stripe API (internal/harness/stripefake) the processor fetches the objects of
// Stripe thin events from, and a schedule that invokes the reconciler
// (DEV_SCHEDULE_SECONDS). No AWS account and no Docker.
//
// The functions get the same environment as in AWS plus
// AWS_ENDPOINT_URL_DYNAMODB and AWS_ENDPOINT_URL_SQS, so production code has
// no local branch. Queue visibility, maxReceiveCount and DLQs come from
// package queue, the same place the CDK stack takes them from. The effects
// the dispatcher performs come from scripts/devstack.json (effects_config,
// exactly the EFFECTS document the function gets in AWS); their URLs point
// at the fake downstream on loopback, and its bearer token is an env:
// reference to a visibly fake value. An effect may name an AWS target
// instead (a Lambda function, an SQS queue, an EventBridge bus, a Step
// Functions state machine, in region us-east-1 and account 000000000000):
// the stack runs local stand-ins of them (Targets), and the team's own
// effect functions (effect_functions) under aws-lambda-rie. Likewise the stripe source's api.url
// (and truth.url) name the fake Stripe API at DefaultStripeAddr, whose only
// key is the visibly fake LOCAL_STRIPE_API_KEY.
//
// The warehouse sink is on as `make dev` runs the stack (FromEnv;
// DEV_WAREHOUSE=off turns it off): an in-memory S3 (localaws.S3) on
// DEV_S3_ADDR (default DefaultS3Addr) holds the bucket
// DefaultWarehouseBucket, the processor, dispatcher and reconciler get
// WAREHOUSE_BUCKET and WAREHOUSE_PREFIX, and the dispatcher and reconciler
// AWS_ENDPOINT_URL_S3 (their S3 clients address the bucket by path when an
// endpoint is overridden: outbox.S3PathStyle). Every applied revision
// becomes one record object; GET /_dev/health names the bucket and the
// S3 endpoint, and `make warehouse` queries the records with DuckDB.
//
// Dev-only endpoints on the HTTP API: GET /_dev/health, POST /_dev/crash
// (kill a processor runtime in the middle of the next batch whose runtime
// claims an event; re-armed while batches hold no claimed work),
// GET /_dev/crash (what each kill held, the batches a crash passed over,
// and the timings recovery takes) and DELETE /_dev/crash (withdraw a crash
// that has not landed), GET /_dev/downstream
// (the fake downstream's requests, effective calls per idempotency key,
// scripted answers still pending, and per kind family and subject the
// versions it applied, in order), POST /_dev/downstream/script (script the
// next answers of one effect kind: hang after applying, 429 with
// Retry-After, …), DELETE /_dev/downstream/script[?kind=] (drop the
// scripted answers no call used) and
// POST /_dev/eventbridge/{source} (there is no EventBridge locally: the
// body becomes the detail of an event from the source's partner event
// source, given to the bridge function, which runs when some source's
// delivery includes eventbridge), GET /_dev/targets (what reached the local
// AWS targets: invocations per effect function, events per bus, executions
// per state machine; see Targets). For the fake Stripe API:
// PUT /_dev/stripe/objects/{type}/{id} (set Stripe's truth),
// GET /_dev/stripe/requests and POST /_dev/stripe/script (see
// StripeAPI.DevHandler).
//
// Every log line names its component and has its control characters
// escaped (Logs), so a request can neither split a line nor reach the
// terminal with one.
package devstack

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/effectively-once/webhooks/internal/harness/localaws"
	"github.com/effectively-once/webhooks/internal/outbox"
	"github.com/effectively-once/webhooks/internal/queue"
	"github.com/effectively-once/webhooks/internal/source"
)

// ErrConfig wraps configuration errors.
var ErrConfig = errors.New("devstack config")

// File is the checked-in local configuration (scripts/devstack.json): the
// sources, exactly as deployed, and the visibly fake secrets their env:
// references resolve to on the local stack.
type File struct {
	Sources json.RawMessage `json:"sources_config"`
	// Effects is the dispatcher's EFFECTS document. Its URLs name the fake
	// downstream at DefaultDownstreamAddr; the stack points them at the
	// downstream's real address when that moves (DEV_DOWNSTREAM_ADDR,
	// AutoPorts).
	Effects json.RawMessage   `json:"effects_config"`
	Secrets map[string]string `json:"secrets"`
	// EffectFunctions are the team's own Lambda functions its effects
	// invoke (an effect whose target is
	// arn:aws:lambda:us-east-1:000000000000:function:<name>): each a main
	// in the module's functions/<name>, built and run by the stack like
	// the pipeline's functions, behind a local Lambda front (Targets).
	EffectFunctions []string `json:"effect_functions,omitempty"`
}

// TeamModule reports whether dir holds the go.mod of a module other than
// this repository's: a team's, which requires this one.
func TeamModule(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t' || rest[0] == '"') {
			if i := strings.Index(rest, "//"); i >= 0 {
				rest = rest[:i]
			}
			path := strings.Trim(strings.TrimSpace(rest), `"`+"`")
			return path != "" && path != ThisModule
		}
	}
	return false
}

// TeamConfigFile is a team module's local configuration file, in the
// File format, at the module's root (DEV_CONFIG names another).
const TeamConfigFile = "dev.json"

// DefaultDownstreamAddr is where the fake downstream listens unless
// DEV_DOWNSTREAM_ADDR or AutoPorts says otherwise.
const DefaultDownstreamAddr = "127.0.0.1:3002"

// effects parses the effects document. Every env: secret reference must
// resolve in Secrets, so the fake downstream can require the same token.
func (f File) effects() ([]outbox.EffectConfig, error) {
	if len(f.Effects) == 0 {
		return nil, nil
	}
	// The functions run in localaws.Region: a target must be in it, as
	// the dispatcher checks at its start.
	cfgs, err := outbox.ParseEffectsIn(f.Effects, localaws.Region)
	if err != nil {
		return nil, err
	}
	if err := checkTargets(cfgs, f.EffectFunctions); err != nil {
		return nil, err
	}
	for _, c := range cfgs {
		if name, ok := strings.CutPrefix(c.Secret, "env:"); ok && f.Secrets[name] == "" {
			return nil, fmt.Errorf("effect %s: secret %s has no value in secrets", c.Kind, c.Secret)
		}
	}
	return cfgs, nil
}

// LoadFile reads and validates the local configuration.
func LoadFile(path string) (File, *source.Set, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return File{}, nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return File{}, nil, fmt.Errorf("%w: %s: %v", ErrConfig, path, err)
	}
	set, err := source.Parse(f.Sources)
	if err != nil {
		return File{}, nil, fmt.Errorf("%w: %s: %w", ErrConfig, path, err)
	}
	if _, err := f.effects(); err != nil {
		return File{}, nil, fmt.Errorf("%w: %s: effects_config: %w", ErrConfig, path, err)
	}
	return f, set, nil
}

// Config is the stack's shape. Zero values take the documented defaults.
type Config struct {
	Root string // this repository's root; default "."
	// Module is the Go module whose function mains the stack builds and
	// runs: its functions/<fn>/ directories (intake, processor,
	// dispatcher, reconciler; bridge when a source's delivery includes
	// eventbridge), each one line over package app with the module's
	// rules. DEV_MODULE; default Root, our own functions. A team's module
	// requires this one, so its mains build as its Lambdas do.
	Module string
	// ConfigFile is the local sources, effects and fake secrets (File):
	// DEV_CONFIG; default <Root>/scripts/devstack.json for our module,
	// <Module>/dev.json for a team's.
	ConfigFile string
	BuildDir   string // host binaries; default <Module>/build/host

	DynamoAddr string // DEV_DYNAMODB_ADDR, default 127.0.0.1:8000
	// DynamoWrap, when set, wraps the DynamoDB emulator's HTTP handler:
	// every request of every function (and of the stack's own client)
	// passes through it on the wire, as a proxy in front of DynamoDB
	// would see it (capacity.WireMeter uses it to bill write units on
	// the running stack). Not settable from the environment.
	DynamoWrap func(http.Handler) http.Handler
	SQSAddr    string // DEV_SQS_ADDR, default 127.0.0.1:4100
	HTTPAddr   string // DEV_HTTP_ADDR, default 127.0.0.1:3000
	// DownstreamAddr is the fake downstream's address: DEV_DOWNSTREAM_ADDR,
	// default DefaultDownstreamAddr.
	DownstreamAddr string
	// StripeAddr is the fake Stripe API's address: DEV_STRIPE_ADDR,
	// default DefaultStripeAddr.
	StripeAddr string
	RIEPort    int // DEV_RIE_BASE_PORT, default 9001: function instances listen from here up
	// RIEAPIPort is the first port of the instances' runtime APIs (where
	// each bootstrap asks aws-lambda-rie for its next invocation), one per
	// instance from here up: DEV_RIE_API_BASE_PORT, default RIEPort + 1000.
	// Start refuses ports past 65535 and a range that meets the other, or
	// another component's port, before anything listens.
	RIEAPIPort int
	// S3Addr is the local S3's address (localaws.S3, the warehouse sink's
	// store): DEV_S3_ADDR, default DefaultS3Addr. It runs only with the sink.
	S3Addr string
	// WarehouseBucket turns the warehouse sink on: the local S3 runs with
	// this bucket, and the processor, dispatcher and reconciler get
	// WAREHOUSE_BUCKET and WAREHOUSE_PREFIX (WarehousePrefix, default
	// DefaultWarehousePrefix) and the local S3 as AWS_ENDPOINT_URL_S3.
	// "" leaves the sink off. FromEnv (`make dev`, `make demo`) sets
	// DefaultWarehouseBucket unless DEV_WAREHOUSE=off.
	WarehouseBucket string
	WarehousePrefix string
	// AutoPorts picks free ports for everything (tests): the addresses above
	// are ignored.
	AutoPorts bool

	// Instances per function: DEV_INTAKE_INSTANCES, DEV_PROCESSOR_INSTANCES
	// (default 2 each), DEV_DISPATCHER_INSTANCES (default 1); one reconciler.
	Instances map[string]int

	// Timing. The defaults are the deployed values (package queue); `make
	// demo` starts the stack with a faster profile so a crash recovers in
	// seconds rather than minutes.
	Visibility      time.Duration // DEV_VISIBILITY_SECONDS, default queue.Events().VisibilityTimeout
	MaxReceiveCount int           // the queue's maxReceiveCount, default queue.Events().MaxReceiveCount
	FunctionTimeout time.Duration // DEV_FUNCTION_TIMEOUT_SECONDS, default queue.ProcessorTimeout
	Lease           time.Duration // DEV_LEASE_SECONDS, default 2 × FunctionTimeout
	BatchWindow     time.Duration // DEV_BATCH_WINDOW_MS, default 500 ms
	ScheduleRate    time.Duration // DEV_SCHEDULE_SECONDS, default 60 s
	// ReconcileStuck is the reconciler's grace before it re-drives work
	// (RECONCILE_STUCK_SECONDS): 300 s as deployed, 30 s in the fast profile.
	ReconcileStuck time.Duration

	// The dispatcher's timings. Its effects' own HTTP timeouts come from the
	// effects document (2 s locally, so a hanging downstream is quick).
	DispatcherTimeout time.Duration // default queue.DispatcherTimeout
	DispatchLease     time.Duration // DISPATCH_LEASE_SECONDS; default 2 × DispatcherTimeout
	EffectsVisibility time.Duration // the effects queue's; default queue.Effects().VisibilityTimeout

	Table  string // default "local-ledger"
	Prefix string // queue name prefix, default "local-"
}

// The warehouse sink's defaults on the local stack: the local S3's
// address, its bucket and the records' key prefix.
const (
	DefaultS3Addr          = "127.0.0.1:4566"
	DefaultWarehouseBucket = "local-warehouse"
	DefaultWarehousePrefix = "records"
)

// FromEnv builds a Config from DEV_* environment variables. The warehouse
// sink is on (DefaultWarehouseBucket) unless DEV_WAREHOUSE is off (or 0,
// false).
func FromEnv(getenv func(string) string) (Config, error) {
	c := Config{
		S3Addr:         getenv("DEV_S3_ADDR"),
		DynamoAddr:     getenv("DEV_DYNAMODB_ADDR"),
		DownstreamAddr: getenv("DEV_DOWNSTREAM_ADDR"),
		StripeAddr:     getenv("DEV_STRIPE_ADDR"),
		SQSAddr:        getenv("DEV_SQS_ADDR"),
		HTTPAddr:       getenv("DEV_HTTP_ADDR"),
		ConfigFile:     getenv("DEV_CONFIG"),
		Module:         getenv("DEV_MODULE"),
		Instances:      map[string]int{},
	}
	ints := []struct {
		name string
		dst  *int
		unit time.Duration
		dur  *time.Duration
	}{
		{"DEV_RIE_BASE_PORT", &c.RIEPort, 0, nil},
		{"DEV_RIE_API_BASE_PORT", &c.RIEAPIPort, 0, nil},
		{"DEV_VISIBILITY_SECONDS", nil, time.Second, &c.Visibility},
		{"DEV_FUNCTION_TIMEOUT_SECONDS", nil, time.Second, &c.FunctionTimeout},
		{"DEV_LEASE_SECONDS", nil, time.Second, &c.Lease},
		{"DEV_BATCH_WINDOW_MS", nil, time.Millisecond, &c.BatchWindow},
		{"DEV_SCHEDULE_SECONDS", nil, time.Second, &c.ScheduleRate},
	}
	for _, v := range ints {
		s := getenv(v.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return c, fmt.Errorf("%w: %s must be a positive integer, got %q", ErrConfig, v.name, s)
		}
		if v.dst != nil && n > maxPort {
			return c, fmt.Errorf("%w: %s must be a port, at most %d, got %q", ErrConfig, v.name, maxPort, s)
		}
		if v.dst != nil {
			*v.dst = n
		} else {
			*v.dur = time.Duration(n) * v.unit
		}
	}
	switch w := strings.ToLower(getenv("DEV_WAREHOUSE")); w {
	case "", "on", "1", "true":
		c.WarehouseBucket = DefaultWarehouseBucket
	case "off", "0", "false":
	default:
		return c, fmt.Errorf("%w: DEV_WAREHOUSE must be on or off, got %q", ErrConfig, getenv("DEV_WAREHOUSE"))
	}
	for fn, name := range map[string]string{"intake": "DEV_INTAKE_INSTANCES", "processor": "DEV_PROCESSOR_INSTANCES", "dispatcher": "DEV_DISPATCHER_INSTANCES"} {
		if s := getenv(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 || n > 16 {
				return c, fmt.Errorf("%w: %s must be between 1 and 16, got %q", ErrConfig, name, s)
			}
			c.Instances[fn] = n
		}
	}
	return c, nil
}

func (c *Config) defaults() {
	events := queue.Events("")
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.Root, ".")
	def(&c.Module, c.Root)
	for _, p := range []*string{&c.Root, &c.Module} {
		if abs, err := filepath.Abs(*p); err == nil {
			*p = abs
		}
	}
	if TeamModule(c.Module) {
		def(&c.ConfigFile, filepath.Join(c.Module, TeamConfigFile))
	}
	def(&c.ConfigFile, filepath.Join(c.Module, "scripts", "devstack.json"))
	def(&c.BuildDir, filepath.Join(c.Module, "build", "host"))
	if abs, err := filepath.Abs(c.BuildDir); err == nil {
		c.BuildDir = abs
	}
	def(&c.DynamoAddr, "127.0.0.1:8000")
	def(&c.SQSAddr, "127.0.0.1:4100")
	def(&c.HTTPAddr, "127.0.0.1:3000")
	def(&c.DownstreamAddr, DefaultDownstreamAddr)
	def(&c.StripeAddr, DefaultStripeAddr)
	def(&c.S3Addr, DefaultS3Addr)
	if c.WarehouseBucket != "" {
		def(&c.WarehousePrefix, DefaultWarehousePrefix)
	}
	def(&c.Table, "local-ledger")
	if c.AutoPorts && c.Prefix == "" {
		// The SQS emulator is one per process (goaws keeps its queues in
		// package state): a second stack of a process with the same prefix
		// would silently reuse the first one's queues, their timeouts and
		// leftover messages (the bench starts several).
		c.Prefix = localaws.UniqueName("local") + "-"
	}
	def(&c.Prefix, "local-")
	if c.RIEPort == 0 {
		c.RIEPort = 9001
	}
	if c.RIEAPIPort == 0 {
		c.RIEAPIPort = c.RIEPort + 1000
	}
	if c.AutoPorts {
		c.DynamoAddr, c.SQSAddr, c.HTTPAddr, c.DownstreamAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
		c.StripeAddr, c.S3Addr = "127.0.0.1:0", "127.0.0.1:0"
	}
	if c.Instances == nil {
		c.Instances = map[string]int{}
	}
	for fn, n := range map[string]int{"intake": 2, "processor": 2, "dispatcher": 1, "reconciler": 1, "bridge": 1} {
		if c.Instances[fn] == 0 {
			c.Instances[fn] = n
		}
	}
	if c.Visibility == 0 {
		c.Visibility = events.VisibilityTimeout
	}
	if c.MaxReceiveCount == 0 {
		c.MaxReceiveCount = events.MaxReceiveCount
	}
	if c.FunctionTimeout == 0 {
		c.FunctionTimeout = queue.ProcessorTimeout
	}
	if c.Lease == 0 {
		c.Lease = 2 * c.FunctionTimeout
	}
	if c.BatchWindow == 0 {
		c.BatchWindow = 500 * time.Millisecond
	}
	if c.ReconcileStuck == 0 {
		c.ReconcileStuck = 5 * time.Minute
	}
	if c.ScheduleRate == 0 {
		c.ScheduleRate = time.Minute
	}
	if c.DispatcherTimeout == 0 {
		c.DispatcherTimeout = queue.DispatcherTimeout
	}
	if c.DispatchLease == 0 {
		c.DispatchLease = 2 * c.DispatcherTimeout
	}
	if c.EffectsVisibility == 0 {
		c.EffectsVisibility = queue.Effects("").VisibilityTimeout
	}
}

// FastProfile shortens the timings for demos and tests: a crashed batch is
// visible again after 4 s, a lease lasts 3 s; the dispatcher may run 5 s
// (its effects time out after 2 s), holds an intent for 8 s, and a
// dispatcher batch that died comes back after 10 s, and the reconciler
// re-drives work stuck for 30 s.
func (c *Config) FastProfile() {
	c.Visibility = 4 * time.Second
	c.FunctionTimeout = 2 * time.Second
	c.Lease = 3 * time.Second
	c.BatchWindow = 200 * time.Millisecond
	c.DispatcherTimeout = 5 * time.Second
	c.DispatchLease = 8 * time.Second
	c.EffectsVisibility = 10 * time.Second
	c.ReconcileStuck = 30 * time.Second
}

const maxPort = 65535

// checkPorts refuses function ports that cannot all be bound: n instances
// listen on RIEPort… and their runtime APIs on RIEAPIPort…, each range
// within 1–65535, apart from each other and from the port of every other
// component the stack binds on this host. Automatic ports are free by
// construction.
func (c *Config) checkPorts(n int) error {
	if c.AutoPorts || n == 0 {
		return nil
	}
	ranges := []struct {
		name        string
		first, last int
	}{
		{"DEV_RIE_BASE_PORT", c.RIEPort, c.RIEPort + n - 1},
		{"DEV_RIE_API_BASE_PORT", c.RIEAPIPort, c.RIEAPIPort + n - 1},
	}
	for _, r := range ranges {
		if r.first < 1 || r.last > maxPort {
			return fmt.Errorf("%w: %s: the %d function instances need ports %d–%d, past 1–%d", ErrConfig, r.name, n, r.first, r.last, maxPort)
		}
	}
	if a, b := ranges[0], ranges[1]; a.first <= b.last && b.first <= a.last {
		return fmt.Errorf("%w: the %d function instances' ports %d–%d (DEV_RIE_BASE_PORT) and their runtime APIs' %d–%d (DEV_RIE_API_BASE_PORT) overlap",
			ErrConfig, n, a.first, a.last, b.first, b.last)
	}
	others := []struct{ name, addr string }{
		{"DEV_DYNAMODB_ADDR", c.DynamoAddr}, {"DEV_SQS_ADDR", c.SQSAddr}, {"DEV_HTTP_ADDR", c.HTTPAddr},
		{"DEV_DOWNSTREAM_ADDR", c.DownstreamAddr}, {"DEV_STRIPE_ADDR", c.StripeAddr},
	}
	if c.WarehouseBucket != "" {
		others = append(others, struct{ name, addr string }{"DEV_S3_ADDR", c.S3Addr})
	}
	for _, o := range others {
		port, ok := localPort(o.addr)
		if !ok {
			continue
		}
		for _, r := range ranges {
			if r.first <= port && port <= r.last {
				return fmt.Errorf("%w: %s is %s, and its port %d is one of the function instances' %d–%d (%s): move one of them",
					ErrConfig, o.name, o.addr, port, r.first, r.last, r.name)
			}
		}
	}
	return nil
}

// localPort is addr's port when addr listens where the function instances
// do (127.0.0.1, or every interface); 0 ("pick one") is never a clash.
func localPort(addr string) (int, bool) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, false
	}
	port, err := strconv.Atoi(p)
	if err != nil || port == 0 {
		return 0, false
	}
	if host == "" || host == "localhost" {
		return port, true
	}
	ip := net.ParseIP(host)
	return port, ip != nil && (ip.IsUnspecified() || ip.Equal(net.IPv4(127, 0, 0, 1)))
}
